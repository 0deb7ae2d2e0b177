"""reshape, reshape_like, expand_dims and transpose (reshape_op, reshape_like_op,
reshape_user_op_util, expand_dims_op, transpose_ops at v0.9.0)."""

import math
from typing import Dict, List, Tuple

from ..sbp import B, P, S
from .registry import rule


def _squeeze(shape) -> Tuple[List[int], List[int]]:
    kept = [i for i, d in enumerate(shape) if d != 1]
    return [shape[i] for i in kept], kept


def reshape_split_pairs(in_shape, out_shape, axis_size: int) -> List[Tuple[int, int]]:
    """(in axis, out axis) pairs a split can pass through unchanged, as GetGroupStartInAxis2OutAxis
    finds them.

    Walks both squeezed shapes from the last axis with suffix products; a pair is kept
    where the products agree and the two dims are equal or both divisible by the mesh axis.
    """
    sq_in, in_axes = _squeeze(in_shape)
    sq_out, out_axes = _squeeze(out_shape)
    if not sq_in or not sq_out:
        return []
    pairs: Dict[int, int] = {}
    i, o = len(sq_in) - 1, len(sq_out) - 1
    ci, co = sq_in[i], sq_out[o]
    while i >= 0 and o >= 0:
        if ci == co:
            if sq_in[i] == sq_out[o] or (sq_in[i] % axis_size == 0 and sq_out[o] % axis_size == 0):
                pairs[i] = o
            i, o = i - 1, o - 1
            if i >= 0:
                ci *= sq_in[i]
            if o >= 0:
                co *= sq_out[o]
        elif ci < co:
            i -= 1
            if i >= 0:
                ci *= sq_in[i]
        else:
            o -= 1
            if o >= 0:
                co *= sq_out[o]
    return [(in_axes[a], out_axes[pairs[a]]) for a in sorted(pairs)]


def _reshape_sigs(v, out_shape, outs) -> List[Dict]:
    """GetReshapeUserOpSbpSignatures: the split pairs, then partial-sum; 0-D or empty input: none
    (all-broadcast only)."""
    in_shape = v.shape("in_0")
    if not in_shape or math.prod(in_shape) == 0:
        return []
    sigs = [
        {"in_0": S(p), **v.all(S(q), outs)}
        for p, q in reshape_split_pairs(in_shape, out_shape, v.h)
    ]
    return sigs + [{"in_0": P, **v.all(P, outs)}]


@rule("reshape")
def reshape(v):
    return _reshape_sigs(v, v.shape("out_0"), ["out_0"])


@rule("reshape_like")
def reshape_like(v):
    """reshape to `like`'s shape; `like` is read for its shape only, so it may be partial while
    the data is whole, or whole while the data is partial."""
    return [
        {"like_0": P, "in_0": B, "out_0": B},
        {"like_0": B, "in_0": P, "out_0": P},
    ] + _reshape_sigs(v, v.shape("like_0"), ["like_0", "out_0"])


@rule("expand_dims")
def expand_dims(v):
    """Every input axis keeps its split, moved past the inserted one."""
    n = v.ndim("in_0")
    axis = v.attr("axis", 0)
    axis = axis + n + 1 if axis < 0 else axis
    sigs = [{"in_0": S(i), "out_0": S(i if i < axis else i + 1)} for i in range(n)]
    return sigs + [v.all(P)]


@rule("transpose")
def transpose(v):
    perm = v.attr("perm")
    n = len(perm)
    sigs = [{"input_0": S(p + n if p < 0 else p), "output_0": S(i)} for i, p in enumerate(perm)]
    return sigs + [{"input_0": P, "output_0": P}]
