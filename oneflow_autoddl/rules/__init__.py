"""SBP rules of OneFlow 0.9.0 ops: one registry (registry.py), one module per op family."""

from . import (  # noqa: F401
    broadcast,
    elementwise,
    loss,
    matmul,
    nn,
    norm,
    optimizer,
    pool,
    reduce,
    shape,
    slicing,
    system,
)
from .registry import (
    OpView,
    Rule,
    all_broadcast,
    candidates,
    get_rule,
    has_rule,
    known_op_types,
    one_d_candidates,
    rule,
    same_sbp_inputs,
)

__all__ = [
    "OpView",
    "Rule",
    "all_broadcast",
    "candidates",
    "get_rule",
    "has_rule",
    "known_op_types",
    "one_d_candidates",
    "rule",
    "same_sbp_inputs",
]
