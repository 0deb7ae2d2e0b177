"""SBP rules of OneFlow 0.9.0 ops: one registry (registry.py), one module per op family."""

from . import broadcast, elementwise, loss, matmul, nn, optimizer, reduce, shape, system  # noqa: F401
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
