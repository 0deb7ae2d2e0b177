"""Elementwise ops, casts, softmax and add_n (oneflow/user/ops: math_unary_elementwise_op,
scalar_math_op, scalar_logical_op, relu_op, gelu_op, tanh_op, silu_op, hardtanh_op, hardswish_op,
hardsigmoid_op, dropout_op, cast_op, softmax_op, log_softmax_op, add_n_op at v0.9.0)."""

from ..sbp import B, P
from .registry import rule, split_each_axis

# Kernels that evaluate exp, log, sqrt, tanh or pow per element (ep/common/primitive's unary
# and binary functors): like GELU's, far below a plain elementwise pass on CPU.
_TRANSCENDENTAL = (
    "gelu",
    "exp",
    "exp_grad",
    "log",
    "sqrt",
    "sqrt_grad",
    "tanh",
    "tanh_grad",
    "sigmoid",
    "silu",
    "silu_grad",
    "scalar_pow",
    "scalar_pow_grad",
)


@rule("relu", "rsqrt", "scalar_add", "dropout", "relu_grad", "rsqrt_grad", "dropout_grad")
@rule("hardtanh", "hardswish", "hardsigmoid", "hardtanh_grad", "hardswish_grad")
@rule("hardsigmoid_grad", "sigmoid_grad", "log_grad", "scalar_logical_greater_equal")
@rule(*_TRANSCENDENTAL, kernel="transcendental")
def unary_split_each_axis(v):
    """SplitForEachAxis over the first input's rank; no partial-sum."""
    return split_each_axis(v, v.ndim(v.ins[0]))


_FLOATS = ("float16", "bfloat16", "float32", "float64")


@rule("cast")
def cast(v):
    """Every axis, and partial-sum through a cast to a floating type. OneFlow 0.9.0 lists P -> P
    for every cast, but to an integer or bool type the cast of a sum is not the sum of the casts
    (2 x 0.6 -> 1, not 0): a plan keeps those casts' inputs whole."""
    sigs = split_each_axis(v, v.ndim("in_0"))
    return sigs + ([v.all(P)] if v.dtype("out_0") in _FLOATS else [])


@rule("scalar_mul", "scalar_div")
def scalar_mul(v):
    return split_each_axis(v, v.ndim(v.ins[0])) + [v.all(P)]


@rule("gelu_grad", kernel="transcendental")
def gelu_grad(v):
    return split_each_axis(v, v.ndim("x_0")) + [{"x_0": B, "dy_0": P, "dx_0": P}]


@rule("softmax", "softmax_grad", "log_softmax", "log_softmax_grad")
def softmax_family(v):
    """Never the softmax (last) axis."""
    return split_each_axis(v, v.ndim(v.ins[0]) - 1)


@rule("add_n")
def add_n(v):
    return split_each_axis(v, v.ndim("in_0")) + [v.all(P)]
