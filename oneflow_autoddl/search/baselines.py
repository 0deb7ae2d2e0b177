"""Expert plans on the same problem: data parallel, Megatron-style, ZeRO-style, OneFlow's own.

Each baseline pins the parameters' SBP the way its experts do and lets every other op
take, in topological order, its cheapest signature given what is already decided (what
OneFlow's greedy inference does once parameter SBPs are set). They are the seeds of the
search and the yardsticks of the report.
"""

import functools
import weakref
from typing import Callable, Dict, List, Optional, Set

import numpy as np

from ..ir import Op
from ..regather import is_phase_copy
from ..rules import contraction_of
from ..sbp import B, NdSbp, S
from .problem import Problem

Pins = Dict[int, Set[int]]  # variable -> allowed candidate indices


def _order(problem: Problem) -> List[int]:
    position = {name: i for i, name in enumerate(problem.graph.ops)}
    firsts = [
        min(position[n] for u in members for n in problem.units[u].ops[:1])
        for members in problem.var_units
    ]
    return sorted(range(len(problem.var_units)), key=lambda v: firsts[v])


_INPUTS: "weakref.WeakKeyDictionary[Problem, Dict[int, list]]" = weakref.WeakKeyDictionary()


def _inputs(problem: Problem) -> Dict[int, list]:
    """variable -> (its SBP ids, the producer's variable, the producer's SBP ids) per input it
    reads from another variable: the same for every baseline, found once a problem."""
    if problem not in _INPUTS:
        inputs: Dict[int, list] = {}
        for ends in problem.ends:
            for c in ends.consumers:
                if c.var != ends.producer.var:
                    inputs.setdefault(c.var, []).append(
                        (problem.sbp_ids(c), ends.producer.var, problem.sbp_ids(ends.producer))
                    )
        _INPUTS[problem] = inputs
    return _INPUTS[problem]


def greedy_complete(problem: Problem, pins: Pins) -> List[int]:
    """Assign variables in topological order, each its cheapest allowed candidate given earlier
    ones.

    Like OneFlow's own inference (which orders candidates by how many inputs they take
    exactly as produced, then by copy cost), a choice first keeps the most inputs as they
    are, then weighs the boxing of what is already decided (producers, pinned parameters),
    assuming later ops take whatever suits it. Pinned variables (and casts of them) come first
    among the inputs kept: the experts' layouts compute with the parameters as they store them,
    even where gathering them costs less (Megatron-style's column product reads its weight
    split, where gathering the weight and splitting the sequence is cheaper at scale).
    """
    inputs = _inputs(problem)
    assigned: Dict[int, int] = {v: next(iter(ks)) for v, ks in pins.items() if len(ks) == 1}
    held = set(pins)  # pinned variables, and casts of them
    for v in _order(problem):
        if v in assigned and len(pins.get(v, ())) == 1:
            continue
        allowed = sorted(pins.get(v, range(problem.domain[v])))
        score = problem.compute[v][allowed].copy()
        for fid in problem.factors_of[v]:
            f = problem.factors[fid]
            fixed = [u != v and u in assigned for u in f.vars]
            local = f.table[tuple(assigned[u] if h else slice(None) for u, h in zip(f.vars, fixed))]
            free = [u for u, h in zip(f.vars, fixed) if not h]  # v and those not yet assigned
            others = tuple(i for i, u in enumerate(free) if u != v)
            score = score + (local.min(axis=others) if others else local)[allowed]
        kept, kept_held = np.zeros(len(allowed)), np.zeros(len(allowed))
        for mine, pv, theirs in inputs.get(v, []):
            if pv in assigned:
                same = mine[allowed] == theirs[assigned[pv]]
                kept += same
                kept_held += same if pv in held else 0
        if _passes_on_unit(problem, v) and any(pv in held for _, pv, _ in inputs.get(v, [])):
            held.add(v)
        best = min(range(len(allowed)), key=lambda i: (-kept_held[i], -kept[i], score[i], i))
        assigned[v] = allowed[best]
    return [assigned[v] for v in range(len(problem.var_units))]


def _passes_on_unit(problem: Problem, v: int) -> bool:
    unit = problem.units[problem.var_units[v][0]]
    return all(_passes_on(problem.graph.op(n)) for n in unit.ops)


def _param_vars(problem: Problem) -> List[int]:
    return [
        v
        for v, members in enumerate(problem.var_units)
        if problem.is_free(v)
        and any(problem.graph.op(n).role == "variable" for n in problem.units[members[0]].ops)
    ]


def _var_sbp(problem: Problem, v: int, k: int) -> NdSbp:
    """The SBP candidate k gives the parameter (the first variable op) of parameter unit v."""
    unit = problem.units[problem.var_units[v][0]]
    for name, sig in zip(unit.ops, unit.candidates[k]):
        if problem.graph.op(name).role == "variable":
            return sig["out"]
    raise ValueError(f"unit {unit.name} holds no variable")


def _pin_params(problem: Problem, want: Callable[[int, NdSbp], bool]) -> Pins:
    pins: Pins = {}
    for v in _param_vars(problem):
        allowed = {k for k in range(problem.domain[v]) if want(v, _var_sbp(problem, v, k))}
        if allowed:
            pins[v] = allowed
    return pins


def once_per_problem(find: Callable[[Problem], List[int]]) -> Callable[[Problem], List[int]]:
    """`find` run once per problem (other seeds start from its plan); each call returns its own
    copy, which the caller may change."""
    found: weakref.WeakKeyDictionary[Problem, List[int]] = weakref.WeakKeyDictionary()

    @functools.wraps(find)
    def cached(problem: Problem) -> List[int]:
        if problem not in found:
            found[problem] = find(problem)
        return list(found[problem])

    return cached


@once_per_problem
def data_parallel(problem: Problem) -> List[int]:
    """Parameters replicated on every mesh axis; activations follow the (batch-split) inputs.
    ZeRO-style starts from it."""
    return greedy_complete(problem, _pin_params(problem, lambda v, nd: all(s == B for s in nd)))


def zero(problem: Problem) -> List[int]:
    """Data parallel's compute with parameters, gradients and optimizer state sharded on every
    mesh axis (ZeRO stage 3): parameters are all-gathered where used, gradients reduce-scattered."""
    x = data_parallel(problem)
    for v in _param_vars(problem):
        sharded = [
            k for k in range(problem.domain[v]) if all(s.is_split for s in _var_sbp(problem, v, k))
        ]
        if not sharded:
            sharded = [
                k
                for k in range(problem.domain[v])
                if any(s.is_split for s in _var_sbp(problem, v, k))
            ]
        if sharded:
            x[v] = _leanest(problem, x, v, sharded)
    return _copies_follow(problem, x)


def _copies_follow(problem: Problem, x: List[int]) -> List[int]:
    """x with every phase copy (oneflow_autoddl.regather) taking its tensor in the SBP it is
    stored in, so that each phase gathers it for itself, as ZeRO stage 3 does; but a gradient's
    copy for its update in the SBP the update takes it in, so that it is reduced as it is made."""
    graph = problem.graph
    for v, members in enumerate(problem.var_units):
        unit = problem.units[members[0]]
        if not problem.is_free(v) or not all(is_phase_copy(n) for n in unit.ops):
            continue
        wanted = [_copy_wants(problem, graph.op(name), x) for name in unit.ops]
        same = [
            k
            for k, joint in enumerate(unit.candidates)
            if all(sig["in_0"] == nd for sig, nd in zip(joint, wanted))
        ]
        if same:
            x[v] = same[0]
    return x


def _copy_wants(problem: Problem, copy: Op, x: List[int]) -> NdSbp:
    graph = problem.graph
    readers = graph.tensor(copy.outputs["out_0"]).consumers
    if readers and all(graph.op(c).role == "optimizer" for c, _ in readers):
        reader, ibn = readers[0]
        return problem.signature(reader, x)[ibn]
    t = graph.tensor(copy.inputs["in_0"])
    return problem.signature(t.producer, x)[t.obn]


def _leanest(problem: Problem, x: List[int], v: int, ks: List[int]) -> int:
    """Of candidates `ks` of parameter unit v, one storing the fewest bytes, and of those the one
    that costs least beside x's other choices (its readers' boxing, its update): shards of one
    size stored on different axes differ in what gathering them costs (a shard of the axis the
    readers split already gathers over one mesh axis; one nested on it must be shuffled)."""
    least = min(problem.memory[v][k] for k in ks)
    cost = problem.changes(x, v)
    return min((k for k in ks if problem.memory[v][k] <= least), key=lambda k: (cost[k], k))


def _passes_on(op: Op) -> bool:
    """A cast (mixed precision reads a parameter through its cast to half, oneflow_autoddl.amp)
    or a phase copy (oneflow_autoddl.regather): what it reads is what its readers read."""
    return op.type == "cast" or is_phase_copy(op.name)


def _source(problem: Problem, lbn: str) -> Op:
    """The op a tensor comes from, seen through casts and phase copies (`_passes_on`)."""
    producer = problem.graph.op(problem.graph.tensor(lbn).producer)
    while _passes_on(producer):
        producer = problem.graph.op(problem.graph.tensor(producer.inputs["in_0"]).producer)
    return producer


def _weight_of(problem: Problem, op: Op) -> Optional[str]:
    """The parameter a forward matrix product multiplies by: its b, a 2-D variable's output."""
    if op.role != "forward" or "b_0" not in op.inputs:
        return None
    c = contraction_of(problem.graph, op)
    if c is None or c.b_axes is None or len(problem.graph.shape(op, "b_0")) != 2:
        return None
    producer = _source(problem, op.inputs["b_0"])
    return producer.name if producer.role == "variable" else None


def megatron_roles(problem: Problem) -> Dict[str, str]:
    """Parameter name -> "column" / "row" / "bias-column" for Megatron-style tensor parallelism.

    A weight matmul is row-parallel when the nearest weight matmul upstream of its input
    is column-parallel (its output is split on the features it contracts), and
    column-parallel otherwise: q/k/v and fc are columns, attention and MLP projections rows.
    A bias added straight after a column matmul is split with it.
    """
    graph = problem.graph
    nearest: Dict[str, Set[str]] = {}
    roles: Dict[str, str] = {}
    weights: Dict[str, str] = {}  # weight matmul -> its weight
    for op in graph.ops.values():
        if op.role != "forward":
            continue
        weight = _weight_of(problem, op)
        ups = set()
        for ibn, lbn in op.inputs.items():
            if ibn == "b_0" and weight:
                continue
            ups |= nearest.get(graph.tensor(lbn).producer, set())
        if weight is None:
            nearest[op.name] = ups
            continue
        weights[op.name] = weight
        roles[weight] = "row" if any(roles.get(weights[u]) == "column" for u in ups) else "column"
        nearest[op.name] = {op.name}
        if roles[weight] == "column":
            for consumer, _ in graph.consumers(op, "out_0"):
                for lbn in consumer.inputs.values():
                    p = _source(problem, lbn)
                    if (
                        consumer.type in ("broadcast_add", "bias_add")
                        and p.role == "variable"
                        and p.name != weight
                    ):
                        roles.setdefault(p.name, "bias-column")
    return roles


def _megatron_sbp(problem: Problem, v: int, nd: NdSbp, roles: Dict[str, str], tp_axis: int) -> bool:
    unit = problem.units[problem.var_units[v][0]]
    var = next(n for n in unit.ops if problem.graph.op(n).role == "variable")
    role = roles.get(var)
    for axis, s in enumerate(nd):
        if axis != tp_axis:
            if s != B:
                return False
            continue
        consumer = _column_axes(problem, var)
        if role == "column":
            if s != S(consumer[0]):
                return False
        elif role == "row":
            if s != S(consumer[1]):
                return False
        elif role == "bias-column":
            if s != S(0):
                return False
        elif s != B:
            return False
    return True


def _column_axes(problem: Problem, var: str):
    """(output-feature axis, input-feature axis) of a weight, from the product that uses it."""
    graph = problem.graph
    readers = [c for c, _ in graph.consumers(graph.op(var), "out")]
    readers += [r for c in readers if _passes_on(c) for r, _ in graph.consumers(c, "out_0")]
    for consumer in readers:
        c = contraction_of(graph, consumer)
        if _weight_of(problem, consumer) == var and c is not None and c.b_axes is not None:
            contracted, columns = c.b_axes
            return columns, contracted
    return (0, 1)


@once_per_problem
def megatron(problem: Problem) -> List[int]:
    """Column-then-row tensor parallelism on the last mesh axis, data parallel on the others.
    Megatron+ZeRO starts from it."""
    roles = megatron_roles(problem)
    tp = problem.mesh.ndim - 1
    return greedy_complete(
        problem, _pin_params(problem, lambda v, nd: _megatron_sbp(problem, v, nd, roles, tp))
    )


def megatron_zero(problem: Problem) -> List[int]:
    """Megatron-style tensor parallelism on the last mesh axis, with parameters, gradients and
    optimizer state sharded over the other axes (ZeRO stage 3 across the data-parallel axes, as
    Megatron-LM's distributed optimizer does): where neither alone fits, this often does. On a
    1-D mesh, Megatron-style."""
    x = megatron(problem)
    tp = problem.mesh.ndim - 1
    if tp == 0:
        return x
    for v in _param_vars(problem):
        tensor_parallel = _var_sbp(problem, v, x[v])[tp]
        sharded = [
            k
            for k in range(problem.domain[v])
            if _var_sbp(problem, v, k)[tp] == tensor_parallel
            and all(s.is_split for a, s in enumerate(_var_sbp(problem, v, k)) if a != tp)
        ]
        if sharded:
            x[v] = _leanest(problem, x, v, sharded)
    return _copies_follow(problem, x)


def replicated(problem: Problem) -> List[int]:
    """Every op on every device with whole tensors: no communication but the inputs'."""
    pins: Pins = {}
    for v, members in enumerate(problem.var_units):
        unit = problem.units[members[0]]
        ks = {
            k
            for k, joint in enumerate(unit.candidates)
            if all(s == B for sig in joint for nd in sig.values() for s in nd)
        }
        if ks:
            pins[v] = ks
    return greedy_complete(problem, pins)


def native(problem: Problem) -> Optional[List[int]]:
    """OneFlow's own choice as read from the Job (None for graphs not read from a Job, or if it
    is not one of our candidates)."""
    ops = problem.graph.ops.values()
    if any(op.native is None for op in ops if op.role != "io"):
        return None
    return problem.assignment_of({op.name: op.native for op in ops if op.native is not None})


BASELINES = {"data_parallel": data_parallel, "megatron": megatron, "zero": zero}
