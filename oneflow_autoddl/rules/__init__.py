"""SBP rules of OneFlow 0.9.0 ops: one registry (registry.py), one module per op family."""

from . import broadcast, elementwise, loss, matmul, nn, optimizer, reduce, shape, system  # noqa: F401
from .registry import (
    Contraction,
    OpView,
    Rule,
    Update,
    all_broadcast,
    candidates,
    contraction_of,
    get_rule,
    has_rule,
    is_optimizer_op,
    known_op_types,
    one_d_candidates,
    rule,
    same_sbp_inputs,
    update_of,
    workspace_of,
)

__all__ = [
    "Contraction",
    "OpView",
    "Rule",
    "Update",
    "all_broadcast",
    "candidates",
    "contraction_of",
    "get_rule",
    "has_rule",
    "is_optimizer_op",
    "known_op_types",
    "one_d_candidates",
    "rule",
    "same_sbp_inputs",
    "update_of",
    "workspace_of",
]
