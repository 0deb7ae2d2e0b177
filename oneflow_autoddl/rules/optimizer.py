"""Optimizer updates (model_update_ops.cpp at v0.9.0). `model` and the state inputs are
mutable: the variables feeding them must hold the signature's SBP (see search.units)."""

from ..sbp import B, S
from .registry import rule

_SPLIT = ("model_0", "model_diff_0", "model_copy_0", "m_0", "v_0", "max_v_0", "momentum_0")


def _update(v):
    return [{bn: (S(k) if bn in _SPLIT else B) for bn in v.bns} for k in range(v.ndim("model_0"))]


# Each update is its own kernel kind (cost.cluster.KERNEL_KINDS): on CPU OneFlow 0.9.0 runs them
# as scalar loops, Adam's ~10x below a plain pass over the same bytes (calibrate measures them).
rule("sgd_update", same_sbp=("model_0", "model_copy_0"), kernel="sgd_update")(_update)
rule("momentum_update", same_sbp=("model_0", "momentum_0"), kernel="momentum_update")(_update)
rule(
    "adam_update",
    same_sbp=("model_0", "m_0", "v_0", "max_v_0", "model_copy_0"),
    kernel="adam_update",
)(_update)


@rule("adam_bias_correction_factor")
def adam_bias_correction_factor(v):
    return []


@rule("assign", same_sbp=("ref_0",))
def assign(v):
    return [v.all(S(k)) for k in range(v.ndim("ref_0"))]
