"""Pieces of tensors along an axis: concat and its gradient split_like, slice, slice_update,
narrow and roll (concat_op, split_like_op, slice_op, narrow_op, roll_op at v0.9.0). The axis
cut or joined is never split, but where a piece is the whole axis (slice_update, which writes
each device's part of the region into its shard, also splits the axes it cuts)."""

from ..sbp import B, P, S
from .registry import rule


@rule("concat")
def concat(v):
    """Every input and the output S(i) on each axis but the joined one; partial sums join."""
    axis = v.attr("axis", 0)
    sigs = [v.all(S(i)) for i in range(v.ndim("in_0")) if i != axis]
    return sigs + [v.all(P)]


@rule("split_like")
def split_like(v):
    """concat's gradient: `in` cut along `axis` into pieces shaped as the `like` inputs (read
    for their shapes only, so they may be partial)."""
    axis, likes, outs = v.attr("axis", 0), v.arg("like"), v.arg("out")
    n_like, n_in = v.ndim("like_0"), v.ndim("in_0")
    sigs = [v.all(S(i)) for i in range(n_like) if i != axis]
    for i in range(n_like, n_in):
        for like in (B, P):
            sigs.append({"in_0": S(i), **v.all(like, likes), **v.all(S(i), outs)})
    return sigs + [
        {"in_0": P, **v.all(P, likes), **v.all(P, outs)},
        {"in_0": P, **v.all(B, likes), **v.all(P, outs)},
        {"in_0": B, **v.all(P, likes), **v.all(B, outs)},
    ]


def _whole(start: int, stop: int, step: int, size: int) -> bool:
    """A slice that keeps the whole axis (OneFlow's IsFullSlice)."""
    return step == 1 and start == 0 and stop == size


def _whole_axes(v, shape):
    start, stop, step = v.attr("start"), v.attr("stop"), v.attr("step")
    return [_whole(start[i], stop[i], step[i], d) for i, d in enumerate(shape)]


@rule("slice")
def slice_(v):
    """An axis kept whole splits x and y alike; x split on a cut axis gives each device the part
    of the slice it holds, zeros elsewhere: a partial y."""
    sigs = []
    for i, whole in enumerate(_whole_axes(v, v.shape("x_0"))):
        sigs.append({"x_0": S(i), "y_0": S(i) if whole else P})
    return sigs + [v.all(P)]


def _one_way_per_axis(v, sig) -> bool:
    """slice_update_op's kernel at v0.9.0 takes a mesh axis over which ref and value are split
    alike as whole, and cuts the region by the other mesh axes: a tensor axis split that way on
    one mesh axis and with value whole on another is cut at the wrong offsets (a failed check in
    WriteSlice, seen on 2 x 2 CPU ranks)."""
    pairs = list(zip(sig["ref_0"], sig["value_0"]))
    alike = {r.axis for r, val in pairs if r.is_split and val.is_split}
    alone = {r.axis for r, val in pairs if r.is_split and not val.is_split}
    return not alike & alone


@rule("slice_update", nd_computes=_one_way_per_axis)
def slice_update(v):
    """`value` written into the region of `ref` the slice names, giving y: ref and y split on any
    axis with value whole (each device writes the part of the region its shard holds); value
    split too where the axis is kept whole; partial sums update into partial sums."""
    sigs = []
    for i, whole in enumerate(_whole_axes(v, v.shape("ref_0"))):
        sigs.append({"ref_0": S(i), "value_0": B, "y_0": S(i)})
        if whole:
            sigs.append(v.all(S(i)))
    return sigs + [v.all(P)]


@rule("slice_grad")
def slice_grad(v):
    """dy scattered into zeros of `like_shape`: split where the axis is kept whole."""
    whole = _whole_axes(v, v.attr("like_shape"))
    return [v.all(S(i)) for i, w in enumerate(whole) if w] + [v.all(P), v.all(B)]


def _narrow_axes(v, shape):
    """Every axis but `dim`, and `dim` too when the narrow keeps all of it."""
    dim, length = v.attr("dim", 0), v.attr("length", 0)
    return [i for i, d in enumerate(shape) if i != dim or length == d]


@rule("narrow")
def narrow(v):
    return [v.all(S(i)) for i in _narrow_axes(v, v.shape("in_0"))] + [v.all(P)]


@rule("narrow_grad")
def narrow_grad(v):
    """dy padded to `like`'s shape; `like` is read for its shape only."""
    sigs = [v.all(S(i)) for i in _narrow_axes(v, v.shape("like_0"))] + [v.all(P)]
    return sigs + [
        {"dy_0": P, "like_0": B, "dx_0": P},
        {"dy_0": B, "like_0": P, "dx_0": B},
    ]


@rule("roll")
def roll(v):
    """Split any axis not rolled; a roll of the flattened tensor (dims [-1]) splits none.

    OneFlow 0.9.0 compares the axes with `dims` as given, so a negative dim (roll(x, 1, -2))
    would leave its axis splittable and the roll local to each shard; dims are read modulo
    the rank here.
    """
    dims, n = v.attr("dims", [-1]), v.ndim("in_0")
    if not dims or dims[0] == -1:
        return [v.all(P)]
    rolled = {d % n for d in dims}
    return [v.all(S(i)) for i in range(n) if i not in rolled] + [v.all(P)]
