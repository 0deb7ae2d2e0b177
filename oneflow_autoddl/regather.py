"""Tensors boxed in the phase that uses them, as ZeRO stage 3 and recomputation do, on the IR.

OneFlow 0.9.0 boxes a tensor once for all the readers that take it in one SBP
(GroupBoxingByDstParallel), and a tensor's own blob lives until its last consumer, so a tensor
boxed for readers far apart is held, boxed or as made, from its producer to its last reader: a
parameter split over the data-parallel axis and gathered for its products is held gathered over
the whole step (every layer's weights at once at the end of the forward pass), a recomputed
block's input boxed for its first op until that block is recomputed, and a weight gradient, made
whole and reduced for a sharded update, until the update at the end of the step. ZeRO stage 3
gathers a parameter where it is used and frees it after, and reduces a gradient as it is made;
Megatron-LM gathers a recomputed block's input again when it recomputes the block.

`regather_graph` gives the readers of each phase their own identity op reading the tensor: for
every parameter, a copy per phase (forward; backward, with the recomputed forward), right before
the phase's first reader; for a tensor recomputed ops read in backward and other ops in forward
(a recomputed block's input), a copy for the backward readers, right before the first; for a
gradient, a copy for the updates reading it, right after its producer. The copies are ordinary
ops the search gives signatures to: a copy taking the tensor as made boxes it for its phase
alone (held over that phase, sent once more for a parameter); a gradient's copy taking it in the
update's SBP reduces it at once (its own blob freed there, the same bytes); a copy taking what
its readers take changes nothing but a blob. The write-back inserts the same identity ops into
the Job (adapter.writeback).
"""

from dataclasses import replace
from typing import Dict, Iterable, List, Mapping, Set, Tuple

from .ir import CHECKPOINT_COPY_PREFIX, Graph, Op, Tensor
from .recompute import forward_pass
from .sbp import Signature

PHASES = ("forward", "backward")
UPDATE = "update"  # a gradient's copy for the updates reading it
PHASE_COPY_INFIX = "-autoddl-phase-"

Readers = List[Tuple[str, str]]  # (op, input) pairs


def phase_copy_name(lbn: str, phase: str, readers: Readers) -> str:
    """The copy of tensor `lbn` for `phase`: named after its producer (and its output, where the
    producer is not a variable); a gradient's copy for its update after the update and its
    input, which keep their names when the graph is traced again (adapter.recompute matches ops
    by name)."""
    if phase == UPDATE:
        reader, ibn = readers[0]
        return f"{reader}-{ibn}{PHASE_COPY_INFIX}{phase}"
    producer, obn = lbn.split("/")
    base = producer if obn == "out" else f"{producer}-{obn}"
    return f"{base}{PHASE_COPY_INFIX}{phase}"


def is_phase_copy(name: str) -> bool:
    return PHASE_COPY_INFIX in name


def has_phase_copies(names: Iterable[str]) -> bool:
    """Whether a plan of these ops was made on a graph with phase copies."""
    return any(is_phase_copy(name) for name in names)


def as_planned(graph: Graph, names: Iterable[str]) -> Graph:
    """`graph` as a plan of ops `names` was made on it: with its phase copies where it has some."""
    return regather_graph(graph) if has_phase_copies(names) else graph


def regather_graph(graph: Graph) -> Graph:
    """`graph` with the copies of the module doc; each goes right before its first reader, but a
    gradient's copy for its update, which goes right after the gradient's producer."""
    forward = forward_pass(graph)
    position = {name: i for i, name in enumerate(graph.ops)}
    ops = dict(graph.ops)
    tensors = {lbn: replace(t, consumers=[]) for lbn, t in graph.tensors.items()}
    before: Dict[str, List[str]] = {}  # an op -> the copies that go right before it
    after: Dict[str, List[str]] = {}  # an op -> the copies that go right after it
    for op in graph.ops.values():
        for lbn in op.outputs.values():
            for phase, readers in _copied(graph, op, lbn, forward, position).items():
                copy = _phase_copy(op, lbn, phase, readers, tensors)
                for name, ibn in readers:
                    inputs = {**ops[name].inputs, ibn: copy.outputs["out_0"]}
                    ops[name] = replace(ops[name], inputs=inputs)
                ops[copy.name] = copy
                if phase == UPDATE:
                    after.setdefault(op.name, []).append(copy.name)
                else:
                    before.setdefault(readers[0][0], []).append(copy.name)
    order = [m for n in graph.ops for m in before.get(n, []) + [n] + after.get(n, [])]
    return Graph(graph.name, [ops[n] for n in order], tensors.values())


def _copied(
    graph: Graph, producer: Op, lbn: str, forward: Set[str], position: Mapping[str, int]
) -> Dict[str, Readers]:
    """phase -> the readers of tensor `lbn` that read it through that phase's copy, in the
    graph's order: every phase of a parameter's readers; the backward readers of a tensor that
    recomputed ops and forward ops both read; the updates reading a gradient."""
    if producer.role == "backward":
        updates = [
            (name, ibn)
            for name, ibn in graph.tensor(lbn).consumers
            if graph.op(name).role == "optimizer" and graph.op(name).placement == producer.placement
        ]
        return {UPDATE: updates} if updates else {}
    phases = _readers_by_phase(graph, producer, lbn, forward, position)
    if producer.role == "variable":
        return phases
    backward = phases.get(PHASES[1], [])
    recomputed = any(name.startswith(CHECKPOINT_COPY_PREFIX) for name, _ in backward)
    if recomputed and PHASES[0] in phases:
        return {PHASES[1]: backward}
    return {}


def _readers_by_phase(
    graph: Graph, producer: Op, lbn: str, forward: Set[str], position: Mapping[str, int]
) -> Dict[str, Readers]:
    """phase -> the (op, input) pairs of that phase reading `lbn` on its producer's placement,
    in the graph's order; updates (optimizer state and parameters as updated) are not readers."""
    phases: Dict[str, Readers] = {}
    for name, ibn in graph.tensor(lbn).consumers:
        reader = graph.op(name)
        if reader.role not in PHASES or reader.placement != producer.placement:
            continue
        in_forward = name in forward and not name.startswith(CHECKPOINT_COPY_PREFIX)
        phases.setdefault(PHASES[0] if in_forward else PHASES[1], []).append((name, ibn))
    return {p: sorted(r, key=lambda c: position[c[0]]) for p, r in phases.items()}


def _phase_copy(
    producer: Op, lbn: str, phase: str, readers: Readers, tensors: Dict[str, Tensor]
) -> Op:
    name = phase_copy_name(lbn, phase, readers)
    source = tensors[lbn]
    out = f"{name}/out_0"
    tensors[out] = Tensor(out, source.shape, source.dtype, name, "out_0")
    native = None
    if producer.native is not None:
        stored = producer.native[source.obn]
        native = Signature({"in_0": stored, "out_0": stored})
    return Op(
        name,
        "identity",
        {"in_0": lbn},
        {"out_0": out},
        producer.placement,
        {},
        PHASES[1] if phase == UPDATE else phase,
        producer.scope,
        native,
    )
