"""Pooling and resizing (max_pool_op, avg_pool_op, adaptive_pool_op, upsample_op at v0.9.0):
pools split batch and channel only, whatever the data format (OneFlow does not read it);
upsampling splits the batch only."""

from ..sbp import S
from .registry import rule, split_each_axis


@rule("max_pool_1d", "max_pool_2d", "max_pool_3d", "avg_pool_1d", "avg_pool_2d", "avg_pool_3d")
def pool(v):
    """Axes below min(2, ndim - 2): a 1-D pool of (N, L) input splits only the batch."""
    return split_each_axis(v, min(2, v.ndim("x_0") - 2))


@rule("max_pool_1d_grad", "max_pool_2d_grad", "max_pool_3d_grad")
def max_pool_grad(v):
    return split_each_axis(v, min(2, v.ndim("x_0")))


@rule("avg_pool_1d_grad", "avg_pool_2d_grad", "avg_pool_3d_grad")
def avg_pool_grad(v):
    """Batch and channel, without the forward's rank check."""
    return [v.all(S(k)) for k in range(2)]


@rule(
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_avg_pool1d_grad",
    "adaptive_avg_pool2d_grad",
    "adaptive_avg_pool3d_grad",
)
def adaptive_avg_pool(v):
    """Axes below min(2, ndim): batch and channel of NC... input."""
    return split_each_axis(v, min(2, v.ndim("x_0")))


UPSAMPLES = (
    "upsample_linear_1d",
    "upsample_nearest_1d",
    "upsample_nearest_2d",
    "upsample_bilinear_2d",
    "upsample_bicubic_2d",
    "upsample_nearest_3d",
    "upsample_trilinear_3d",
)


@rule(*UPSAMPLES, *(f"{op}_grad" for op in UPSAMPLES))
def upsample(v):
    """Every blob split on the batch (the gradient's x is read for its shape)."""
    return [v.all(S(0))]
