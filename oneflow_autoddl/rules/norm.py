"""Normalizations (layer_norm_op, normalization_op at v0.9.0): LayerNorm, and BatchNorm as the
`normalization` op."""

from ..sbp import B, P, S
from .registry import rule

# BatchNorm's running statistics: inputs its training kernel updates in place.
_MOVING = ("moving_mean_0", "moving_variance_0")


def _axis(a, ndim):
    return a + ndim if a < 0 else a


@rule("layer_norm")
def layer_norm(v):
    n = v.ndim("x_0")
    upto = min(_axis(v.attr("begin_norm_axis", 1), n), _axis(v.attr("begin_params_axis", 1), n))
    sigs = []
    for i in range(upto):
        sig = v.all(S(i))
        sig.update({bn: B for bn in ("gamma_0", "beta_0") if v.has(bn)})
        sigs.append(sig)
    return sigs


@rule("layer_norm_grad")
def layer_norm_grad(v):
    sigs = []
    for i in range(v.attr("begin_norm_axis", 1)):
        sig = v.all(S(i))
        if v.has("gamma_0"):
            sig["gamma_0"] = B
        sigs.append(sig)
    return sigs


@rule("layer_norm_param_grad")
def layer_norm_param_grad(v):
    return [
        {**v.all(S(i), v.ins), **v.all(P, v.outs)} for i in range(v.attr("begin_params_axis", 1))
    ]


def _training(v) -> bool:
    return bool(v.attr("training", True))


@rule("normalization", same_sbp=_MOVING, replicated=lambda v: not _training(v))
def normalization(v):
    """x, y (and addend) S(0); statistics, running statistics, gamma and beta B.

    Under S(0) each device normalises its shard of the batch by that shard's own mean and
    variance (what data parallel computes); replicated, every device would use the whole
    batch's. So in training the all-broadcast signature OneFlow appends is left out: a plan
    splits the batch of every training BatchNorm on every mesh axis, as data parallel does.
    In inference the running statistics are read, not computed, and both agree.
    """
    return [{bn: (S(0) if bn in ("x_0", "y_0", "addend_0") else B) for bn in v.bns}]


@rule("normalization_grad", replicated=False)
def normalization_grad(v):
    """x, dy, dx S(0); mean, inv_variance, gamma B; gamma_diff, beta_diff P. Only in training,
    and on the same shards as its forward (whose per-shard statistics it reads)."""
    part = {"gamma_diff_0": P, "beta_diff_0": P}
    return [{bn: part.get(bn, S(0) if bn in ("x_0", "dy_0", "dx_0", "y_0") else B) for bn in v.bns}]
