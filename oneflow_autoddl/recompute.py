"""Activation recomputation as OneFlow 0.9.0 does it, on the planner's IR, and what it costs.

With `activation_checkpointing` set on a module (nn.Graph), OneFlow's CheckpointingPass
(oneflow/core/job_rewriter/checkpointing_pass.cpp at v0.9.0) copies the module's forward ops
(but normalization, repeat, unpack) into `Sys-Checkpointing-Fake-Fw-Op_<op>`, which read the
module's inputs and each other, and makes the backward ops read the copies instead of the
originals; the copies start right before the module's first backward op (a control edge). So
the forward's activations inside the module live only until their last forward reader, the
copies from the start of the module's backward to their last backward reader: less memory
where the device reuses it, at the price of the module's forward compute, and of boxing its
tensors again, in backward. `recompute_graph` is that rewrite of an ir.Graph, and
`recompute_delta` what it changes in a plan's compute, boxing and memory, for the signatures an
assignment gives the module's ops (each copy takes its original's).

When tracing a checkpointed module, OneFlow also passes the module's input through an identity
op (and its gradient through another in backward); the rewrite leaves those out: one activation
of the module's input size each, held all step on CPU ranks, freed at once elsewhere.
"""

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .cost.memory import Peak, timeline
from .errors import PlanningError
from .ir import CHECKPOINT_COPY_PREFIX as PREFIX
from .ir import Graph, Op, Tensor

# Forward op types the pass never recomputes (CollectAllCheckpointingOpsInForwardPass).
NOT_RECOMPUTED = (
    "normalization",
    "normalization_add_relu",
    "cudnn_fused_normalization_add_relu",
    "repeat",
    "unpack",
)


def original(name: str) -> str:
    """The op a recomputed copy copies (the name itself for any other op)."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else name


def _in_scope(op: Op, scope: str) -> bool:
    return op.scope == scope or op.scope.startswith(scope + ".")


def forward_pass(graph: Graph) -> Set[str]:
    """The ops the graph's outputs (the loss) depend on: OneFlow's forward pass. (Some ops of the
    backward read only forward tensors, a decomposed LayerNorm's gradient recomputing its
    statistics: ir.assign_roles calls them forward, since no gradient flows into them.)"""
    stack = [op.name for op in graph.ops.values() if op.type == "output_conf"]
    seen: Set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack += [graph.tensor(lbn).producer for lbn in graph.op(name).inputs.values()]
    return seen


def recomputed_ops(graph: Graph, scope: str, forward: Optional[Set[str]] = None) -> List[str]:
    """The forward ops of module `scope` the pass copies, in the graph's order: user ops of the
    forward pass whose module path is `scope` or below it (none of the variables, interface ops
    or ops of the types it skips)."""
    forward = forward_pass(graph) if forward is None else forward
    return [
        op.name
        for op in graph.ops.values()
        if op.name in forward
        and op.role == "forward"
        and _in_scope(op, scope)
        and op.type not in NOT_RECOMPUTED
        and not op.type.endswith("_conf")
    ]


def recomputable(graph: Graph, scopes: Sequence[str]) -> List[str]:
    """The modules of `scopes` that have forward ops the pass copies (a module of normalization
    ops alone, e.g. a BatchNorm, has none: recompute_graph refuses it)."""
    members = _members(graph, scopes, forward_pass(graph))
    return [scope for scope in scopes if members[scope]]


def recompute_graph(graph: Graph, scopes: Sequence[str]) -> Graph:
    """`graph` with the modules at `scopes` recomputed in backward, as OneFlow's pass rewrites the
    Job (see the module doc); a scope with no backward reader is left as it is. The copies of a
    module go right before its first backward reader, after any other module's put there."""
    ops = dict(graph.ops)
    tensors = {lbn: replace(t, consumers=[]) for lbn, t in graph.tensors.items()}
    position = {name: i for i, name in enumerate(graph.ops)}
    forward = forward_pass(graph)
    members = _members(graph, scopes, forward)
    before: Dict[str, List[str]] = {}  # first backward reader -> the copies that go before it
    for scope in scopes:
        names = set(members[scope])
        if not names:
            raise PlanningError(
                f"no forward op of module {scope!r} to recompute: name a module of the graph "
                f"(e.g. {_example_scope(graph)})"
            )
        readers = backward_readers(graph, names, forward, position)
        if not readers:
            continue
        copies = [_copy(ops[n], names, tensors) for n in members[scope]]
        for name in readers:
            ops[name] = _rewired(ops[name], names, tensors)
        first = readers[0]
        before.setdefault(first, []).extend(c.name for c in copies)
        ops.update({c.name: c for c in copies})
    order = [m for n in graph.ops for m in before.get(n, []) + [n]]
    return Graph(graph.name, [ops[n] for n in order], tensors.values())


def _members(graph: Graph, scopes: Sequence[str], forward: Set[str]) -> Dict[str, List[str]]:
    """recomputed_ops of every scope, in one pass over the graph."""
    wanted = {scope: [] for scope in scopes}  # type: Dict[str, List[str]]
    for op in graph.ops.values():
        if not (op.name in forward and op.role == "forward" and op.scope):
            continue
        if op.type in NOT_RECOMPUTED or op.type.endswith("_conf"):
            continue
        parts = op.scope.split(".")
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            if prefix in wanted:
                wanted[prefix].append(op.name)
    return wanted


def _example_scope(graph: Graph) -> str:
    scopes = sorted({op.scope for op in graph.ops.values() if op.role == "forward" and op.scope})
    return ", ".join(repr(s) for s in scopes[:3])


def backward_readers(
    graph: Graph, names: Set[str], forward: Set[str], position: Mapping[str, int]
) -> List[str]:
    """The ops of the backward pass that read an output of the ops `names` (recomputed), in the
    order of `position` (op -> its place in the graph's order)."""
    found = {
        consumer
        for name in names
        for lbn in graph.op(name).outputs.values()
        for consumer, _ in graph.tensor(lbn).consumers
    }
    kept = [
        name
        for name in found
        if name not in forward
        and graph.op(name).role in ("forward", "backward")
        and not name.startswith(PREFIX)
    ]
    return sorted(kept, key=position.__getitem__)


def _fake_lbn(lbn: str) -> str:
    return PREFIX + lbn


def _copy(op: Op, names: Set[str], tensors: Dict[str, Tensor]) -> Op:
    inputs = {
        bn: _fake_lbn(lbn) if lbn.split("/")[0] in names else lbn for bn, lbn in op.inputs.items()
    }
    outputs = {}
    for obn, lbn in op.outputs.items():
        t = tensors[lbn]
        outputs[obn] = _fake_lbn(lbn)
        tensors[outputs[obn]] = Tensor(outputs[obn], t.shape, t.dtype, PREFIX + op.name, obn)
    return Op(
        PREFIX + op.name,
        op.type,
        inputs,
        outputs,
        op.placement,
        dict(op.attrs),
        op.role,
        op.scope,
        op.native,
    )


def _rewired(op: Op, names: Set[str], tensors: Dict[str, Tensor]) -> Op:
    inputs = {
        bn: _fake_lbn(lbn) if tensors[lbn].producer in names else lbn
        for bn, lbn in op.inputs.items()
    }
    return replace(op, inputs=inputs, outputs=dict(op.outputs))


@dataclass(frozen=True)
class RecomputeDelta:
    """What recomputing some modules adds to a plan, per device and step."""

    compute_s: float  # the copies' compute
    comm_s: float  # boxing the copies' inputs and outputs again (serial time)
    bytes_sent: float
    peak_before: Peak
    peak_after: Peak

    @property
    def memory_saved(self) -> float:
        return self.peak_before.bytes - self.peak_after.bytes


def recompute_delta(problem, scopes: Sequence[str], x: Sequence[int]) -> RecomputeDelta:
    """Recomputing the modules at `scopes` under assignment x of `problem`
    (search.problem.Problem): every copy takes its original's signature."""
    graph = problem.graph
    redone = recompute_graph(graph, scopes)

    def signature(name: str):
        return problem.signature(original(name), x)

    copies = [name for name in redone.ops if name.startswith(PREFIX)]
    compute = 0.0
    for name in copies:
        u, pos = problem.unit_of[original(name)]
        compute += float(
            problem.unit_compute[problem.var_of_unit[u]][x[problem.var_of_unit[u]], pos]
        )
    comm, sent = _boxing_delta(problem, graph, redone, signature)
    before = timeline(graph, signature, problem.model).peak()
    after = timeline(redone, signature, problem.model).peak()
    return RecomputeDelta(compute, comm, sent, before, after)


def _boxing(problem, graph: Graph, lbn: str, signature) -> Tuple[float, float]:
    """(time, bytes) of boxing one tensor to every distinct SBP its same-placement readers take."""
    t = graph.tensor(lbn)
    producer = graph.op(t.producer)
    src = signature(producer.name)[t.obn]
    targets = {
        signature(c)[ibn]
        for c, ibn in t.consumers
        if graph.op(c).placement == producer.placement and signature(c)[ibn] != src
    }
    time = sent = 0.0
    for dst in targets:
        tr = problem.model.transfer(src, dst, t.shape, t.dtype)
        time, sent = time + tr.time, sent + tr.bytes
    return time, sent


def _boxing_delta(problem, graph: Graph, redone: Graph, signature) -> Tuple[float, float]:
    """Boxing the recomputed graph does that the original does not: the copies' outputs, and
    new targets of the tensors the copies read."""
    time = sent = 0.0
    touched = {
        lbn
        for name, op in redone.ops.items()
        if name.startswith(PREFIX)
        for lbn in list(op.inputs.values()) + list(op.outputs.values())
    }
    for lbn in touched:
        t_new, b_new = _boxing(problem, redone, lbn, signature)
        t_old, b_old = _boxing(problem, graph, lbn, signature) if lbn in graph.tensors else (0, 0)
        time, sent = time + t_new - t_old, sent + b_new - b_old
    return time, sent
