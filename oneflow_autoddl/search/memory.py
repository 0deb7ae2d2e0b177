"""Peak memory as the search can price it: memory items over the problem's variables.

An item is (variables, bytes per device for each joint choice of their candidates, live span
[start, end) of time steps). A device's memory at a time step is the sum of the items live
then, each at the choice of its variables; the peak is the largest such sum over the step's
time steps. Most items hang on one variable: every output of every op (a tied variable owns one
item per op it decides, each with that op's span), every kernel's scratch buffer. A tensor's
boxing blobs depend on the SBPs at both ends, so they are one item over the variables of the
tensor's producer and consumers (the same variables as its boxing factor in search.problem):
an item there can take the same price per byte as the factor's time.

The items reproduce cost.memory's timeline of an assignment: the same blobs, sizes and spans,
but for two bounds taken where the exact value depends on choices: a boxing's blobs live until
the last consumer on the placement (the timeline: the last one reading that SBP), and a tensor
whose consumers would make one variable's table too large is costed in runs of consumers (as
its boxing factor is), which can count a boxing that consumers in two runs share twice. Both
only add bytes.
"""

from functools import partial
from typing import Dict, Hashable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..cost.buffers import state_bytes
from ..cost.memory import (
    KINDS,
    Held,
    Peak,
    Spans,
    TimelineIndex,
    allocated,
    output_bytes,
    output_kind,
    step_order,
    step_usage,
    tensor_bytes,
    workspace_bytes,
)
from ..ir import DTYPE_BYTES
from ..sbp import NdSbp
from .eliminate import filled
from .problem import Endpoint, Gather, Problem, TensorEnds


class MemoryItem(NamedTuple):
    vars: Tuple[int, ...]  # the variables the bytes depend on (distinct)
    usage: np.ndarray  # bytes per device, one axis per variable in `vars`, over its candidates
    start: int  # first time step it is held
    end: int  # first time step it is free again
    kind: str  # one of cost.memory.KINDS
    name: str  # the tensor, `op/workspace`, or `lbn->boxing`

    def at(self, x: Sequence[int]) -> float:
        return float(self.usage[tuple(x[v] for v in self.vars)])


def memory_items(problem: Problem) -> List[MemoryItem]:
    """Every item of the problem's main placement: op outputs, scratch buffers, boxings. Tied
    units have the same shapes, so their usage is computed once per variable."""
    index = peak_index(problem)
    spans, items = index.timeline.spans, list(index.own)
    tables: Dict[tuple, List[Tuple[Tuple[int, ...], np.ndarray]]] = {}
    for ends in problem.ends:
        if ends.consumers:
            items += _boxing_items(problem, ends, spans, tables)
    return items


def _own_items(problem: Problem, spans: Spans) -> List[MemoryItem]:
    """The items of one variable each: every op's outputs and scratch buffer, exact. Tied units
    share their tables."""
    graph = problem.graph
    items: List[MemoryItem] = []
    usage: Dict[tuple, np.ndarray] = {}
    for u, unit in enumerate(problem.units):
        v = problem.var_of_unit[u]
        for pos, name in enumerate(unit.ops):
            op = graph.op(name)
            if op.placement != problem.mesh or op.role == "system":
                continue
            sigs = [joint[pos] for joint in unit.candidates]
            kind = output_kind(graph, op)
            for obn, lbn in op.outputs.items():
                key = (v, pos, obn)
                if key not in usage:
                    usage[key] = np.array([output_bytes(graph, op, obn, sig) for sig in sigs])
                items.append(MemoryItem((v,), usage[key], *spans.tensor(lbn), kind, lbn))
            key = (v, pos, "workspace")
            if key not in usage:
                usage[key] = np.array([workspace_bytes(graph, op, sig) for sig in sigs])
            if usage[key].any():
                span = spans.op(name)
                items.append(MemoryItem((v,), usage[key], *span, "buffers", f"{name}/workspace"))
    return items


def _boxing_items(
    problem: Problem, ends: TensorEnds, spans: Spans, tables: Dict[tuple, list]
) -> List[MemoryItem]:
    """The blobs boxing one tensor holds, over its producer's and consumers' variables (in the
    runs of consumers its boxing factors take, so that a price per step can charge them to
    those factors); `tables` memoises them for tensors alike (tied layers: same variables,
    positions, blobs, shape and dtype)."""
    t = ends.tensor
    readers = [c for c in ends.consumers if not c.strict]
    if not readers:
        return []
    key = (
        tuple((e.var, e.pos, e.bn, e.strict) for e in [ends.producer] + ends.consumers),
        t.shape,
        t.dtype,
    )
    if key not in tables:
        runs = [
            [ends.consumers[i] for i in chunk if not ends.consumers[i].strict]
            for chunk in problem.chunks(ends.producer, ends.consumers)
        ]
        tables[key] = [_boxing_table(problem, ends, run) for run in runs if run]
    span = spans.tensor(t.lbn, [problem.units[c.unit].ops[c.pos] for c in readers])
    return [
        MemoryItem(vars_, table, *span, "buffers", f"{t.lbn}->boxing")
        for vars_, table in tables[key]
        if table.any()
    ]


def _boxing_table(
    problem: Problem, ends: TensorEnds, consumers: List[Endpoint]
) -> Tuple[Tuple[int, ...], np.ndarray]:
    """Bytes of the boxings of one tensor for every joint choice: for each distinct target SBP
    some consumer reads it in, the transition's blobs, and an identity op's output where two or
    more of them read it so; and the write-back's local copy of a split variable whose readers
    box it (cost.memory)."""
    t, p = ends.tensor, ends.producer
    vocab: Dict[tuple, int] = {}
    src = _sbp_ids(problem, p, vocab)
    dsts = [_sbp_ids(problem, c, vocab) for c in consumers]
    sbps = sorted(vocab, key=vocab.__getitem__)
    blobs = _blob_bytes(problem, tuple(sbps), t.shape, t.dtype)  # [src, dst]
    elem = DTYPE_BYTES.get(t.dtype, 4)
    hierarchy = problem.mesh.hierarchy
    grouped = np.array([allocated(state_bytes(t.shape, nd, hierarchy, elem)) for nd in sbps])
    variable = problem.graph.op(t.producer).role == "variable"
    copy = np.array(
        [
            tensor_bytes(t, nd, hierarchy) if variable and any(s.is_split for s in nd) else 0.0
            for nd in sbps
        ]
    )
    vars_ = tuple(sorted({p.var, *(c.var for c in consumers)}))
    axis = {v: i for i, v in enumerate(vars_)}
    shape = tuple(int(problem.domain[v]) for v in vars_)

    def grid(e: Endpoint, ids: np.ndarray) -> np.ndarray:
        view = [1] * len(shape)
        view[axis[e.var]] = shape[axis[e.var]]
        return ids.reshape(view)

    s = grid(p, src)
    d = [grid(c, ids) for c, ids in zip(consumers, dsts)]
    table = np.zeros(shape)
    boxed: np.ndarray = np.zeros(shape, dtype=bool)
    for i, di in enumerate(d):
        first: np.ndarray = np.ones(np.broadcast_shapes(s.shape, di.shape), dtype=bool)
        for dj in d[:i]:
            first = first & (di != dj)
        twice = sum((di == dj).astype(int) for dj in d) >= 2
        table = table + (blobs[s, di] + twice * grouped[di] * (di != s)) * first
        boxed = boxed | (di != s)
    return vars_, filled(table + copy[s] * boxed, shape)


def _blob_bytes(
    problem: Problem, sbps: Tuple[NdSbp, ...], shape: Sequence[int], dtype: str
) -> np.ndarray:
    """Bytes allocated for the blobs of the boxing from each of `sbps` to each, for tensors of
    one shape and dtype (memoised on the problem: tensors alike in shape and in the SBPs their
    ends take share it)."""
    key = (sbps, tuple(shape), dtype)
    if key not in problem.blob_tables:
        model = problem.model
        problem.blob_tables[key] = np.array(
            [
                [sum(allocated(b) for b in model.boxing_blobs(a, b, shape, dtype)) for b in sbps]
                for a in sbps
            ]
        )
    return problem.blob_tables[key]


def _sbp_ids(problem: Problem, e: Endpoint, vocab: Dict[tuple, int]) -> np.ndarray:
    return np.array(
        [vocab.setdefault(problem.sbp_at(e, k), len(vocab)) for k in range(problem.domain[e.var])]
    )


class ItemTable:
    """Memory items laid out to be read at many assignments: each one's bytes at x in one numpy
    gather (search.problem.Gather), with their spans."""

    def __init__(self, items: Sequence[MemoryItem]):
        self.gather = Gather([i.vars for i in items], [i.usage for i in items])
        self.starts: np.ndarray = np.array([i.start for i in items], dtype=int)
        self.ends: np.ndarray = np.array([i.end for i in items], dtype=int)

    def amounts(self, x: Sequence[int]) -> np.ndarray:
        return self.gather.entries(np.asarray(x, dtype=int))

    def usage(self, x: Sequence[int], steps: int) -> np.ndarray:
        return step_usage(self.starts, self.ends, self.amounts(x), steps)


class PeakIndex:
    """A problem's timelines in its order, gathered once for `peak_memory`: the outputs' and
    scratch buffers' bytes for every candidate (the single-variable items, exact) in one flat
    array with their spans and kinds, so that a plan's take one numpy gather; its boxings'
    blobs are the timeline's own (cost.memory.TimelineIndex.boxing_held). Bytes are whole
    numbers, so the sums, in any order, are the timeline's."""

    def __init__(self, problem: Problem):
        self.timeline = TimelineIndex(problem.graph, problem.model.cluster.reuses_memory)
        self.own = own = _own_items(problem, self.timeline.spans)
        self.boxings: Dict[Tuple[int, Hashable], List[Held]] = {}  # see `_boxings`
        self.table = ItemTable(own)
        self.kinds: np.ndarray = np.array([KINDS.index(item.kind) for item in own], dtype=int)

    def peak(self, problem: Problem, x: Sequence[int]) -> Peak:
        """The peak of x's timeline: what cost.memory.timeline(...).peak() finds."""
        index, table = self.timeline, self.table
        amounts = table.amounts(x)
        boxings = self._boxings(problem, x)
        usage = step_usage(
            np.concatenate([table.starts, [h.start for h in boxings]]).astype(int),
            np.concatenate([table.ends, [h.end for h in boxings]]).astype(int),
            np.concatenate([amounts, [h.bytes for h in boxings]]),
            len(index.names),
        )
        step = int(np.argmax(usage))
        live = (table.starts <= step) & (step < table.ends)
        sums = np.bincount(self.kinds[live], amounts[live], minlength=len(KINDS))
        by_kind = dict(zip(KINDS, sums.tolist()))
        for h in boxings:
            if h.start <= step < h.end:
                by_kind[h.kind] += h.bytes
        return Peak(float(usage[step]), step, index.names[step], by_kind)

    def _boxings(self, problem: Problem, x: Sequence[int]) -> List[Held]:
        """The blobs of x's boxings, each tensor's memoised on the choices at its ends (the
        search asks for the peaks of plans a few variables apart)."""
        signature = partial(problem.signature, x=x)
        out: List[Held] = []
        for i in problem.boxed_tensors(x):
            key = (i, problem.choices_at(i, x))
            if key not in self.boxings:
                lbn = problem.ends[i].tensor.lbn
                self.boxings[key] = self.timeline.boxing_held(signature, problem.model, {lbn})
            out += self.boxings[key]
        return out


def peak_index(problem: Problem) -> PeakIndex:
    """The problem's PeakIndex, made on first use."""
    if problem.peak_index is None:
        problem.peak_index = PeakIndex(problem)
    return problem.peak_index


def peak_memory(problem: Problem, x: Sequence[int]) -> Peak:
    """The peak of assignment x's timeline (cost.memory) in the graph's order, exact where the
    items bound; computed once per assignment (the search, the planner and the report ask for
    the same plans' peaks) through the problem's PeakIndex."""
    key = tuple(x)
    if key not in problem.peaks:
        problem.peaks[key] = peak_index(problem).peak(problem, x)
    return problem.peaks[key]


def held_by_kind(problem: Problem, x: Sequence[int]) -> Dict[str, float]:
    """What problem.memory_of(x) counts (cost.compute.op_memory: what stays alive across the
    step), by kind: variables' own, the gradients the updates read, activations kept for
    backward."""
    graph, out = problem.graph, {kind: 0.0 for kind in KINDS}
    for name, op in graph.ops.items():
        held = problem.model.op_memory(graph, op, problem.signature(name, x))
        if held:
            kind = output_kind(graph, op) if op.role in ("variable", "forward") else "gradients"
            out[kind] += held
    return out


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB"


def lean_memory_report(problem: Problem) -> str:
    """What the leanest plan (each variable its least memory) holds per device, by kind, for an
    error that says what to change."""
    kinds = held_by_kind(problem, [int(np.argmin(m)) for m in problem.memory])
    parts = ", ".join(
        f"{kind.replace('_', ' ')} {_gib(kinds[kind])}" for kind in KINDS if kinds[kind]
    )
    return (
        f"per device ({parts}: what stays alive across the step, split as far as the rules allow)"
    )


def recompute_items(
    problem: Problem,
    items: Sequence[MemoryItem],
    scope: str,
    order: Optional[Sequence[str]] = None,
) -> Tuple[List[MemoryItem], List[MemoryItem]]:
    """(items to take out, items to put in) when module `scope` is recomputed in backward
    (oneflow_autoddl.recompute), in the time steps of the graph as it is, so that the search can
    decide each module apart. Where memory is reused the originals live only until their last
    forward reader, and the copies the backward reads from the step of the module's first
    backward reader (the pass starts them all there) until their last reader; a copy only other
    copies read lives while they run, and is left out (the items can miss the largest such one at
    the module's first backward step). A copy takes its original's usage (it takes its
    signature). Without reuse nothing is freed and every copy is one more blob all step."""
    from ..recompute import PREFIX, backward_readers, forward_pass, recomputed_ops

    graph = problem.graph
    steps = step_order(graph, order)
    reuse = problem.model.cluster.reuses_memory
    forward = forward_pass(graph)
    names = set(recomputed_ops(graph, scope, forward))
    readers = backward_readers(graph, names, forward, steps)
    if not readers:
        return [], []
    start = min(steps[r] for r in readers)
    removed: List[MemoryItem] = []
    added: List[MemoryItem] = []
    for item in items:
        if item.name.endswith("/workspace"):
            if item.name[: -len("/workspace")] in names:
                span = (start, start + 1) if reuse else (item.start, item.end)
                added.append(item._replace(start=span[0], end=span[1], name=PREFIX + item.name))
            continue
        t = graph.tensors.get(item.name.split("->")[0])
        if t is None or t.producer not in names:
            continue
        if not reuse:
            added.append(item._replace(name=PREFIX + item.name))
            continue
        late = [steps[c] for c, _ in t.consumers if c not in forward and c not in names]
        early = [steps[c] for c, _ in t.consumers if c in forward]
        end = max([steps[t.producer]] + early) + 1
        if end < item.end:
            removed.append(item)
            added.append(item._replace(end=end))
        if late:
            added.append(item._replace(start=start, end=max(late) + 1, name=PREFIX + item.name))
    return removed, added
