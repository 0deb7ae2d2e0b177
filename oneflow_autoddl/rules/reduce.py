"""Reductions (reduce_ops, reduce_like_ops, two_stage_reduce_ops, variance_op at v0.9.0)."""

import math

from ..sbp import B, P, S
from .registry import rule, split_each_axis


def _axes(v, name, ndim):
    return {a + ndim if a < 0 else a for a in v.attr(name, [])}


def _kind(attr: str, ibn: str):
    """The kernel kind of a reduction of `ibn` over the axes in `attr`: "reduce" where a kept
    axis lies inside the reduced ones (a bias gradient, (b, s, h) -> (h,)), which OneFlow 0.9.0's
    CPU kernel strides through ~10x below a plain pass; a reduction of the innermost axes (a
    LayerNorm's row mean, (b, s, h) -> (b, s, 1)) runs at the plain rate."""

    def kind(v):
        shape = v.shape(ibn)
        reduced = {a for a in _axes(v, attr, len(shape)) if shape[a] > 1}
        kept = [i for i, d in enumerate(shape) if d > 1 and i not in reduced]
        return "reduce" if reduced and kept and max(kept) > min(reduced) else None

    return kind


def _whole(ibn: str):
    """A scratch copy of the whole (local) input: reduce_kernel.cpp and reduce_like_kernels.cpp's
    tmp buffer at v0.9.0 (reduce_sum_like has none when it reduces no axis)."""

    def elements(attrs, local):
        if "axis" in attrs and not attrs["axis"]:
            return 0
        return math.prod(local[ibn])

    return elements


@rule("reduce_sum", kernel=_kind("axis", "input_tensor_0"), workspace=_whole("input_tensor_0"))
def reduce_sum(v):
    n = v.ndim("input_tensor_0")
    axes, keep = _axes(v, "axis", n), v.attr("keepdims", False)
    sigs, r = [], 0
    for i in range(n):
        if i in axes:
            sigs += [
                {"input_tensor_0": S(i), "output_tensor_0": P},
                {"input_tensor_0": P, "output_tensor_0": P},
            ]
            r += 1
        else:
            sigs.append({"input_tensor_0": S(i), "output_tensor_0": S(i if keep else i - r)})
    if n == 0:
        sigs.append({"input_tensor_0": P, "output_tensor_0": P})
    return sigs


@rule("reduce_sum_like", kernel=_kind("axis", "x_0"), workspace=_whole("x_0"))
def reduce_sum_like(v):
    x = v.shape("x_0")
    axes = _axes(v, "axis", len(x))
    keep = len(x) == v.ndim("like_0")
    sigs, r = [], 0
    for i, d in enumerate(x):
        if d == 1:
            r += 1
        elif i in axes:
            sigs += [{"x_0": S(i), "like_0": B, "y_0": P}, {"x_0": S(i), "like_0": P, "y_0": P}]
            r += 1
        else:
            o = i if keep else i - r
            sigs.append({"x_0": S(i), "like_0": S(o), "y_0": S(o)})
    return sigs + [{"x_0": B, "like_0": P, "y_0": B}]


@rule("var", kernel=_kind("dim", "input_0"))
def variance(v):
    dims = set(v.attr("dim", []))
    keep = v.attr("keepdim", False)
    sigs, off = [{"input_0": B, "output_0": B}], 0
    for i in range(v.ndim("input_0")):
        if i in dims:
            off += 1
        else:
            sigs.append({"input_0": S(i), "output_0": S(i if keep else i - off)})
    return sigs


@rule("reduce_max_device_stage")
def reduce_max_device_stage(v):
    """Every axis, the reduced one included: each device reduces its own shard, and `out` and
    `count` have one entry per device along a split reduced axis (their logical shape follows
    the input's SBP)."""
    return split_each_axis(v, v.ndim("in_0"))


@rule("reduce_max_device_stage_grad")
def reduce_max_device_stage_grad(v):
    """The reduced axes and axis 0."""
    axes = _axes(v, "axis", v.ndim("out_diff_0"))
    return [v.all(S(i)) for i in range(v.ndim("out_diff_0")) if i in axes or i == 0]


@rule("reduce_max_global_stage", "reduce_max_global_stage_grad")
def reduce_max_global_stage(v):
    """Axis 0 only: the per-device maxima are reduced whole."""
    return [v.all(S(0))]
