"""Loss ops (nll_op, sparse_softmax_cross_entropy_op at v0.9.0)."""

from ..sbp import B, P, S
from .registry import rule


@rule("nll")
def nll(v):
    c = v.ndim("input_0") - 1
    batch = {"input_0": S(0), "target_0": S(0), "output_0": S(0), "out_weight_0": S(0)}
    classes = {"input_0": S(c), "target_0": B, "output_0": P, "out_weight_0": P}
    if v.has("weight_0"):
        batch["weight_0"], classes["weight_0"] = B, S(0)
    return [batch, classes]


@rule("nll_grad")
def nll_grad(v):
    c = v.ndim("input_0") - 1
    batch = {"input_0": S(0), "target_0": S(0), "out_grad_0": S(0), "in_grad_0": S(0)}
    classes = {"input_0": S(c), "target_0": B, "out_grad_0": B, "in_grad_0": S(c)}
    if v.has("weight_0"):
        batch["weight_0"], classes["weight_0"] = B, S(0)
    return [batch, classes]


@rule("sparse_softmax_cross_entropy")
def sparse_softmax_cross_entropy(v):
    return [v.all(S(0))]


@rule("sparse_softmax_cross_entropy_grad")
def sparse_softmax_cross_entropy_grad(v):
    return [v.all(S(0))]


@rule("sparse_softmax_cross_entropy_ms")
def sparse_softmax_cross_entropy_ms(v):
    """The batch, or the classes (the logits split over classes, as a Megatron-style head gives
    them): then each device's share of the loss is a partial sum."""
    c = v.ndim("prediction_0") - 1
    return [
        v.all(S(0)),
        {"prediction_0": S(c), "prob_0": S(c), "label_0": B, "out_0": P},
    ]


@rule("sparse_softmax_cross_entropy_ms_grad")
def sparse_softmax_cross_entropy_ms_grad(v):
    c = v.ndim("prob_0") - 1
    return [
        v.all(S(0)),
        {"prob_0": S(c), "label_0": B, "dy_0": B, "prediction_diff_0": S(c)},
    ]
