"""Elementwise ops, softmax and add_n (oneflow/user/ops: math_unary_elementwise_op, scalar_math_op,
relu_op, gelu_op, dropout_op, softmax_op, log_softmax_op, add_n_op at v0.9.0)."""

from ..sbp import B, P
from .registry import rule, split_each_axis


@rule("relu", "rsqrt", "scalar_add", "dropout", "relu_grad", "rsqrt_grad", "dropout_grad")
@rule("gelu", kernel="transcendental")
def unary_split_each_axis(v):
    """SplitForEachAxis over the first input's rank; no partial-sum."""
    return split_each_axis(v, v.ndim(v.ins[0]))


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
