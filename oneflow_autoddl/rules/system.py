"""System ops and ops OneFlow infers by itself (variable_op, identity_op,
learning_rate_schedule_op, ones_like_op, hierarchical_parallel_cast_op, constant_op at v0.9.0)."""

from ..sbp import B, P, S
from .registry import rule


@rule("variable_conf")
def variable(v):
    """S(k) for every axis of the variable; the SBP is read from variable_conf.nd_sbp."""
    return [{bn: (S(k) if bn == "out" else B) for bn in v.bns} for k in range(v.ndim("out"))]


@rule("identity_conf")
def identity(v):
    return [v.all(P)] + [v.all(S(k)) for k in range(v.ndim("in"))]


@rule("identity")
def identity_user_op(v):
    """identity_op.cpp: every axis split alike, or partial-sum in and out."""
    return [v.all(S(k)) for k in range(v.ndim("in_0"))] + [v.all(P)]


@rule("learning_rate_schedule_conf")
def learning_rate_schedule(v):
    return []


@rule("ones_like", same_sbp=("like_0",))
def ones_like(v):
    """Its n-D infer fn copies `like` from the producer and turns P into B for `out`."""
    return [v.all(S(k)) for k in range(v.ndim("like_0"))] + [{"like_0": P, "out_0": B}]


@rule("input_conf", "output_conf", fixed=True)
def interface(v):
    """Interface ops take their SBP from their blob conf (the user's input and output tensors)."""
    return []


@rule("hierarchical_parallel_cast", fixed=True)
def parallel_cast(v):
    """What `to_global(sbp=...)` leaves in a graph (forward and backward): its n-D inference
    takes the SBP from its `nd_sbp` attribute, whatever a conf says."""
    return []


@rule("constant", fixed=True)
def constant(v):
    """A tensor filled with one value, made where it is used: a source op whose n-D inference
    (InferNdSbp4SrcOp) takes the SBP from its `nd_sbp` attribute, B where that is empty."""
    return []
