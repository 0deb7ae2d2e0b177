"""Optimizer updates (model_update_ops.cpp at v0.9.0). `model` and the state inputs are
mutable: the variables feeding them must hold the signature's SBP (see search.units)."""

from functools import partial

from ..sbp import B, S
from .registry import OpView, Update, rule

SGD = Update("model_0", "model_diff_0", ("model_copy_0",))
MOMENTUM = Update("model_0", "model_diff_0", ("momentum_0",))
ADAM = Update("model_0", "model_diff_0", ("m_0", "v_0", "max_v_0", "model_copy_0"))


def _update(blobs: Update, v: OpView):
    """For each axis of the parameter: it, its gradient and its state split there, the rest
    (learning rate, step, scales) broadcast."""
    split = (blobs.model, blobs.grad) + blobs.state
    return [{bn: (S(k) if bn in split else B) for bn in v.bns} for k in range(v.ndim(blobs.model))]


# Each update is its own kernel kind (cost.cluster.KERNEL_KINDS): OneFlow 0.9.0's CPU kernels run
# them as scalar loops far below a plain pass over the same bytes (calibrate measures them).
rule("sgd_update", update=SGD, kernel="sgd_update")(partial(_update, SGD))
rule("momentum_update", update=MOMENTUM, kernel="momentum_update")(partial(_update, MOMENTUM))
rule("adam_update", update=ADAM, kernel="adam_update")(partial(_update, ADAM))


@rule("adam_bias_correction_factor", optimizer=True)
def adam_bias_correction_factor(v):
    return []


@rule("assign", same_sbp=("ref_0",))
def assign(v):
    return [v.all(S(k)) for k in range(v.ndim("ref_0"))]
