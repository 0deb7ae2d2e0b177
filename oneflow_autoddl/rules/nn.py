"""Convolution, embedding and gather (conv_op, embedding_op, gather_op, unsorted_segment_sum_op
at v0.9.0). In 0.9.0 convolutions split only the batch: no channel or filter splits."""

from ..sbp import B, P, S
from .registry import rule


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _kernel(attrs):
    return _numel(attrs.get("kernel_size", [1]))


def conv_flops(attrs, local):
    """2 * out elements * in-channels per group * kernel area."""
    in_ch = local["in_0"][1]
    return 2.0 * _numel(local["out_0"]) * in_ch / attrs.get("groups", 1) * _kernel(attrs)


def conv_data_grad_flops(attrs, local):
    return 2.0 * _numel(local["dx_0"]) * local["dy_0"][1] / attrs.get("groups", 1) * _kernel(attrs)


def conv_filter_grad_flops(attrs, local):
    dy = local["dy_0"]
    return 2.0 * _numel(local["filter_diff_0"]) * dy[0] * _numel(dy[2:])


def _col_buffer(out_bn: str, weight_bn: str):
    """The CPU kernels' im2col buffer (conv_kernels.cpp CalcElemNumOfColBuf at v0.9.0, NCHW): one
    sample's columns, the weight's elements per output channel times the output's spatial size."""

    def elements(attrs, local):
        return _numel(local[weight_bn][1:]) * _numel(local[out_bn][2:])

    return elements


def _columns(in_bn: str, out_bn: str, weight_bn: str):
    """Elements the CPU kernel's im2col (or col2im) pass writes over the local batch: each
    sample's columns for every group, the input channels times the kernel area times the output's
    spatial size (conv_kernels.cpp at v0.9.0 loops over samples and groups; 1 x 1 and depthwise
    kernels lower to columns too)."""
    buffer = _col_buffer(out_bn, weight_bn)

    def elements(attrs, local):
        return local[in_bn][0] * attrs.get("groups", 1) * buffer(attrs, local)

    return elements


def _filter_passes(batch_bn: str, filter_bn: str):
    """Elements of the filter the CPU kernel passes over: once a sample of the local batch, and
    once more for the op. conv_kernels.cpp at v0.9.0 runs one matrix product per sample and
    group, each over its group's slice of the filter, so the whole filter is read (or, for its
    gradient, accumulated) once a sample. Where the image is small and the filter large (deep
    layers of a CNN) that pass, not the FLOPs or the columns, bounds the kernel: 4 samples of 128
    channels at 4 x 4 took 1.5 times what their FLOPs and columns give on 4 CPU ranks. Timed at 4
    and 8 samples on 2 ranks (512 channels at 2 x 2, 256 at 4 x 4), a conv's time grew by what a
    sample's pass predicts and held about one pass more at any batch: 8 samples took 1.8 times
    4 samples' time, not 2."""

    def elements(attrs, local):
        return (local[batch_bn][0] + 1) * _numel(local[filter_bn])

    return elements


def _conv_passes(columns_kind: str, filter_kind: str, in_bn: str, out_bn: str, weight_bn: str):
    """The CPU kernels' passes below their roofline: columns at `columns_kind`'s rate, the filter
    once a sample at `filter_kind`'s. Each of the three kernels has its own pair of kinds, which
    calibrate measures apart: they run their matrix products in different layouts (the filter as
    read, transposed, or accumulated into), so their passes run at rates of their own."""
    return {
        columns_kind: _columns(in_bn, out_bn, weight_bn),
        filter_kind: _filter_passes(in_bn, weight_bn),
    }


def _bias_buffer(attrs, local):
    """conv_bias_grad's CPU buffer: a row of ones over one sample's spatial positions."""
    return _numel(local["dy_0"][2:])


@rule(
    "conv1d",
    "conv2d",
    "conv3d",
    flops=conv_flops,
    workspace=_col_buffer("out_0", "weight_0"),
    passes=_conv_passes("im2col", "conv_filter", "in_0", "out_0", "weight_0"),
)
def conv(v):
    sig = v.all(S(0))
    sig.update({bn: B for bn in v.bns if bn.startswith(("weight", "bias"))})
    return [sig]


@rule(
    "conv_data_grad",
    flops=conv_data_grad_flops,
    workspace=_col_buffer("dy_0", "filter_0"),
    passes=_conv_passes(
        "conv_data_grad_columns", "conv_data_grad_filter", "dx_0", "dy_0", "filter_0"
    ),
)
def conv_data_grad(v):
    sig = v.all(S(0))
    sig["filter_0"] = B
    return [sig]


@rule(
    "conv_filter_grad",
    flops=conv_filter_grad_flops,
    workspace=_col_buffer("dy_0", "filter_diff_0"),
    passes=_conv_passes(
        "conv_filter_grad_columns", "conv_filter_grad_filter", "x_0", "dy_0", "filter_diff_0"
    ),
)
def conv_filter_grad(v):
    return [{"dy_0": S(0), "x_0": S(0), "filter_diff_0": P}]


@rule("conv_bias_grad", workspace=_bias_buffer)
def conv_bias_grad(v):
    return [{"dy_0": S(0), "bias_diff_0": P}]


@rule("embedding")
def embedding(v):
    if v.attr("scale_grad_by_freq", False):
        return []
    return [{"indices_0": S(i), "weight_0": B, "out_0": S(i)} for i in range(v.ndim("indices_0"))]


@rule("embedding_grad")
def embedding_grad(v):
    if v.attr("scale_grad_by_freq", False):
        return []
    return [
        {"dy_0": S(i), "weight_0": B, "indices_0": S(i), "dx_0": P}
        for i in range(v.ndim("indices_0"))
    ]


@rule("gather")
def gather(v):
    g, ni = v.attr("axis", 0), v.ndim("indices_0")
    sigs = [{"indices_0": S(i), "in_0": B, "out_0": S(g + i)} for i in range(ni)]
    for i in range(v.ndim("in_0")):
        out = P if i == g else S(i if i < g else i + ni - 1)
        sigs.append({"indices_0": B, "in_0": S(i), "out_0": out})
    return sigs


@rule("unsorted_segment_sum_like")
def unsorted_segment_sum_like(v):
    a, d, s = v.attr("axis", 0), v.ndim("data_0"), v.ndim("segment_ids_0")
    sigs = []
    for i in range(s):
        for like in (B, P):
            sigs.append({"segment_ids_0": S(i), "data_0": S(i + a), "like_0": like, "out_0": P})
    for i in range(d):
        if a <= i < a + s:
            continue
        o = i if i < a else i - s + 1
        sigs.append({"segment_ids_0": B, "data_0": S(i), "like_0": S(o), "out_0": S(o)})
    for like in (B, P):
        sigs.append({"segment_ids_0": B, "data_0": P, "like_0": like, "out_0": P})
    sigs.append({"segment_ids_0": B, "data_0": B, "like_0": S(a), "out_0": S(a)})
    return sigs


@rule("gather_nd")
def gather_nd(v):
    """Split the indices' leading (batch) axes, or the params' sliced axes (past the ones the
    index addresses); partial params give partial out."""
    ni, depth = v.ndim("indices_0"), v.shape("indices_0")[-1]
    sigs = [{"params_0": B, "indices_0": S(i), "out_0": S(i)} for i in range(ni - 1)]
    sigs += [
        {"params_0": S(i), "indices_0": B, "out_0": S(i - depth + ni - 1)}
        for i in range(depth, v.ndim("params_0"))
    ]
    return sigs + [{"params_0": P, "indices_0": B, "out_0": P}]


@rule("scatter_nd_like")
def scatter_nd_like(v):
    """Split the updates' sliced axes with `like` and out, or scatter partial updates into a
    partial out.

    OneFlow 0.9.0 also lists indices and updates split on a leading axis with `like` and out
    B, but each device's kernel scatters only its own updates: out is not the same on every
    device (seen on 2 ranks: rank 0 held rows 0-1, rank 1 rows 2-3 of a 4-row "B" out), so
    that signature is left out.
    """
    ni, depth = v.ndim("indices_0"), v.shape("indices_0")[-1]
    sigs = [
        {"like_0": S(i + depth), "indices_0": B, "updates_0": S(i + ni - 1), "out_0": S(i + depth)}
        for i in range(v.ndim("like_0") - depth)
    ]
    return sigs + [{"like_0": P, "updates_0": P, "indices_0": B, "out_0": P}]
