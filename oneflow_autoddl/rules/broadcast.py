"""Broadcasting binary ops, broadcast_like, expand and bias_add (math_binary_broadcast_ops,
broadcast_div_grad_op, broadcast_like_op, expand_op, bias_add_op at v0.9.0)."""

import math

from ..sbp import B, P, S
from .registry import inner_broadcast, rule

_PARTIAL = {
    "broadcast_add": [("P", "P")],
    "broadcast_sub": [("P", "P")],
    "broadcast_mul": [("B", "P"), ("P", "B")],
    "broadcast_div": [("P", "B")],
}
_SBP = {"P": P, "B": B}


@rule(*_PARTIAL, kernel=inner_broadcast)
def broadcast_binary(v):
    x, y = v.shape("x_0"), v.shape("y_0")
    nx, ny = len(x), len(y)
    sigs = []
    if nx < ny:
        sigs += [{"x_0": B, "y_0": S(i), "z_0": S(i)} for i in range(ny - nx)]
        sigs += [
            {"x_0": S(nx - 1 - i), "y_0": S(ny - 1 - i), "z_0": S(ny - 1 - i)} for i in range(nx)
        ]
    elif nx > ny:
        sigs += [{"x_0": S(i), "y_0": B, "z_0": S(i)} for i in range(nx - ny)]
        sigs += [
            {"x_0": S(nx - 1 - i), "y_0": S(ny - 1 - i), "z_0": S(nx - 1 - i)} for i in range(ny)
        ]
    else:
        for i in range(nx):
            if x[i] == 1 and y[i] == 1:
                continue
            if x[i] == y[i]:
                sigs.append({"x_0": S(i), "y_0": S(i), "z_0": S(i)})
            elif x[i] == 1:
                sigs.append({"x_0": B, "y_0": S(i), "z_0": S(i)})
            else:
                sigs.append({"x_0": S(i), "y_0": B, "z_0": S(i)})
    for px, py in _PARTIAL.get(v.op.type, []):
        sigs.append({"x_0": _SBP[px], "y_0": _SBP[py], "z_0": P})
    return sigs


def _z_copy(attrs, local):
    """broadcast_div_grad_kernel.cpp's tmp buffer at v0.9.0: one z."""
    return math.prod(local["z_0"])


@rule("broadcast_div_grad", workspace=_z_copy)
def broadcast_div_grad(v):
    y, z = v.shape("y_0"), v.shape("z_0")
    sigs = []
    for i in range(len(y)):
        ay, az = len(y) - 1 - i, len(z) - 1 - i
        if y[ay] == z[az]:
            sigs.append({"y_0": S(ay), "z_0": S(az), "dz_0": S(az), "dy_0": S(ay)})
        else:
            sigs.append({"y_0": B, "z_0": S(az), "dz_0": S(az), "dy_0": P})
    sigs.append({"y_0": B, "z_0": P, "dz_0": B, "dy_0": P})
    sigs.append({"y_0": B, "z_0": B, "dz_0": P, "dy_0": P})
    return sigs


def _regular_axes(axes, ndim):
    return {a + ndim if a < 0 else a for a in axes}


@rule("broadcast_like", kernel=inner_broadcast)
def broadcast_like(v):
    nlike, nx = v.ndim("like_0"), v.ndim("x_0")
    axes = _regular_axes(v.attr("broadcast_axes", []), nlike)
    sigs, r = [], 0
    for i in range(nlike):
        if i in axes:
            sigs.append({"x_0": B, "like_0": S(i), "y_0": S(i)})
            if nx < nlike:
                r += 1
        else:
            sigs.append({"x_0": S(i - r), "like_0": S(i), "y_0": S(i)})
    sigs += [
        {"x_0": P, "like_0": P, "y_0": P},
        {"x_0": P, "like_0": B, "y_0": P},
        {"x_0": B, "like_0": P, "y_0": B},
    ]
    return sigs


@rule("expand")
def expand(v):
    """An input axis not expanded keeps its split (new leading axes are never split); partial
    sums expand to partial sums."""
    in_shape, out_shape = v.shape("in_0"), v.attr("expand_shape")
    pad = len(out_shape) - len(in_shape)
    sigs = [
        {"in_0": S(i), "out_0": S(i + pad)}
        for i, d in enumerate(in_shape)
        if d == out_shape[i + pad]
    ]
    return sigs + [v.all(P)]


def _bias_kernel(v):
    """The bias repeated along the innermost axis unless it is the bias axis (NCHW: over H x W)."""
    return (
        "inner_broadcast"
        if v.attr("axis", 0) != v.ndim("a_0") - 1 and v.shape("a_0")[-1] > 1
        else None
    )


@rule("bias_add", kernel=_bias_kernel)
def bias_add(v):
    axis = v.attr("axis", 0)
    sigs = [{"a_0": S(i), "b_0": B, "out_0": S(i)} for i in range(v.ndim("a_0")) if i != axis]
    return sigs + [{"a_0": S(axis), "b_0": S(0), "out_0": S(axis)}]
