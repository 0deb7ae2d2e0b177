"""Units of decision: ops that must take their SBP together, and their joint candidates.

OneFlow refuses to box a mutable input (an optimizer's `model`, `m`, `v`, `momentum`):
the variable must already hold the SBP its update op writes. So a variable, its
optimizer state variables and the update op are one unit whose candidates are the
update op's signatures. Every other op is a unit of its own. Ops the planner must not
change (interface ops, the train-step ops, op types with no rule, user SBP held fixed)
get a single candidate: the signature OneFlow chose.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..errors import PlanningError
from ..ir import Graph, Op, Placement
from ..rules import candidates as rule_candidates
from ..rules import get_rule, has_rule, same_sbp_inputs
from ..sbp import Signature, broadcast

NO_RULE = "no SBP rule"  # the reason an op type without a rule is left to OneFlow


@dataclass
class Unit:
    ops: Tuple[str, ...]  # the deciding op first (the update op of a parameter unit)
    candidates: List[Tuple[Signature, ...]] = field(default_factory=list)
    fixed: Optional[str] = None  # why the unit has one candidate, or None when it is searched

    @property
    def name(self) -> str:
        return self.ops[0]


def native_signature(op: Op) -> Signature:
    """What OneFlow chose for the op (all-B for IR built without a Job)."""
    if op.native is not None:
        return op.native
    return Signature({bn: broadcast(op.placement.ndim) for bn in op.bns})


def fixed_reason(op: Op, mesh: Placement, hold: Dict[str, str]) -> Optional[str]:
    if op.name in hold:
        return hold[op.name]
    if op.role in ("io", "system"):
        return f"{op.role} op"
    if op.placement != mesh:
        return f"placed on {op.placement}, not on the planned mesh {mesh}"
    if not has_rule(op.type):
        return f"{NO_RULE} for op type {op.type!r}"
    if get_rule(op.type).fixed:
        return f"op type {op.type!r} takes its SBP from its attributes"
    return None


def build_units(graph: Graph) -> List[Unit]:
    """Group ops into units (see module doc); candidates are filled by `fill_candidates`."""
    owned_by: Dict[str, str] = {}
    for op in graph.ops.values():
        for ibn in same_sbp_inputs(op):
            producer, _ = graph.producer(op, ibn)
            if producer.role != "variable":
                continue  # kept equal by an infinite boxing cost instead (search.problem)
            if producer.name in owned_by:
                raise PlanningError(
                    f"{producer.name} is a mutable input of both {owned_by[producer.name]} "
                    f"and {op.name}; OneFlow cannot give it two SBPs"
                )
            owned_by[producer.name] = op.name
    members: Dict[str, List[str]] = {}
    for var, update in owned_by.items():
        members.setdefault(update, []).append(var)
    return [
        Unit((op.name, *members.get(op.name, ())))
        for op in graph.ops.values()
        if op.name not in owned_by
    ]


def _derived(graph: Graph, update: Op, var: Op, sig: Signature) -> Optional[Signature]:
    """The variable's signature implied by the update op's: its `out` takes the mutable input's
    SBP."""
    for ibn, lbn in update.inputs.items():
        if graph.tensor(lbn).producer == var.name:
            return Signature({bn: sig[ibn] for bn in var.outputs})
    return None


def fill_candidates(graph: Graph, unit: Unit, mesh: Placement, hold: Dict[str, str]) -> None:
    """`hold`: op name -> why it must keep the signature OneFlow gave it."""
    ops = [graph.op(name) for name in unit.ops]
    reasons = [r for r in (fixed_reason(op, mesh, hold) for op in ops) if r]
    if reasons:
        unit.fixed = reasons[0]
        unit.candidates = [tuple(native_signature(op) for op in ops)]
        return
    head, rest = ops[0], ops[1:]
    var_candidates = [set(rule_candidates(graph, v)) for v in rest]
    for sig in rule_candidates(graph, head):
        joint = [sig]
        for var, allowed in zip(rest, var_candidates):
            derived = _derived(graph, head, var, sig)
            if derived is None or derived not in allowed:
                break
            joint.append(derived)
        else:
            unit.candidates.append(tuple(joint))
    if not unit.candidates:
        raise PlanningError(
            f"no signature of {head.name} ({head.type}) is valid for "
            f"{', '.join(v.name for v in rest) or 'its shapes'} on mesh {mesh}"
        )
