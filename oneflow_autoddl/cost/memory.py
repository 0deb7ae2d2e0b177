"""Memory a device holds over one training step, and its peak.

A step runs its ops in an order (the graph's topological order by default: the schedule of
cost.schedule runs ops in that order whenever no boxing delays one, see `step_order`); time step
i is the i-th op. What a device holds, each with the span [start, end) of time steps it is held:
  - parameters and optimizer state (variables): the whole step;
  - every tensor an op outputs, on this device's share under the op's signature: from its
    producer to its last consumer (activations kept for backward until the backward op that
    reads them, gradients until their update), both included;
  - what a boxing allocates (cost.buffers): from the producer to the last consumer that reads
    the tensor in that SBP;
  - a kernel's scratch buffer (its rule's `workspace`): while the op runs;
  - the local copy the write-back reads a split variable through when its readers box it
    (adapter.writeback): the whole step.
A boxing that two or more inputs read in one SBP is done once, into an identity op's output
(GroupBoxingByDstParallel): one more blob of the tensor in that SBP. Every blob takes what
OneFlow 0.9.0 allocates for it: its bytes rounded up to 512, plus a header of its shape rounded
up to 64 bytes (kBlobBodyAlignSize, kBlobHeaderAlignSize in oneflow/core/common/util.h).

Where the cluster does not reuse memory (OneFlow on CPU ranks: cost.cluster.reuses_memory) every
blob is allocated once and held for the whole step, so the peak is the sum of everything.
"""

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np
from numpy.typing import ArrayLike

from ..ir import DTYPE_BYTES, Graph, Op, Tensor
from ..rules import update_of, workspace_of
from ..sbp import NdSbp, Signature, format_nd
from .buffers import state_bytes
from .compute import local_numel, local_shapes
from .model import CostModel

KINDS = ("parameters", "optimizer_state", "gradients", "activations", "buffers")
BODY_ALIGN = 512  # kBlobBodyAlignSize
HEADER_ALIGN = 64  # kBlobHeaderAlignSize: a blob's header holds its shape, 8 bytes an axis

SignatureOf = Callable[[str], Signature]


def allocated(nbytes: float, ndim: int = 1) -> float:
    """Bytes OneFlow allocates for a blob of `nbytes` and `ndim` axes (none for an empty one)."""
    if nbytes <= 0:
        return 0.0
    header = math.ceil(8 * ndim / HEADER_ALIGN) * HEADER_ALIGN
    return float(math.ceil(nbytes / BODY_ALIGN) * BODY_ALIGN + header)


class Held(NamedTuple):
    """A blob a device holds for the time steps [start, end)."""

    name: str  # the tensor's lbn; `op/workspace`; `lbn->SBP` for a boxing's blobs
    kind: str  # one of KINDS
    bytes: float
    start: int
    end: int


@dataclass(frozen=True)
class Peak:
    bytes: float
    step: int  # the first time step the device holds that much
    op: str  # the op that runs then
    by_kind: Dict[str, float]  # what the bytes held then are

    def describe(self) -> str:
        parts = ", ".join(
            f"{kind.replace('_', ' ')} {self.by_kind.get(kind, 0.0) / 2**20:.2f} MiB"
            for kind in KINDS
        )
        return f"{self.bytes / 2**20:.2f} MiB ({parts})"


@dataclass
class Timeline:
    """Every blob one device holds over a step of `steps` time steps, and who runs when."""

    steps: int
    ops: List[str]  # the op at each time step
    held: List[Held] = field(default_factory=list)

    def usage(self) -> np.ndarray:
        """Bytes held at each time step."""
        held = self.held
        return step_usage(
            [h.start for h in held], [h.end for h in held], [h.bytes for h in held], self.steps
        )

    def peak(self) -> Peak:
        usage = self.usage()
        step = int(np.argmax(usage)) if self.steps else 0
        by_kind = {kind: 0.0 for kind in KINDS}
        for h in self.held:
            if h.start <= step < h.end:
                by_kind[h.kind] += h.bytes
        return Peak(float(usage[step]) if self.steps else 0.0, step, self.ops[step], by_kind)

    def total(self) -> float:
        """Everything the step allocates: the peak where nothing is reused."""
        return float(sum(h.bytes for h in self.held))


def step_usage(starts: ArrayLike, ends: ArrayLike, amounts: ArrayLike, steps: int) -> np.ndarray:
    """Bytes held at each of `steps` time steps, where amount i is held over [starts[i], ends[i]):
    added up blob by blob in their order (the sums a loop over them makes)."""
    n = np.size(amounts)
    where: np.ndarray = np.empty(2 * n, dtype=np.int64)
    weights: np.ndarray = np.empty(2 * n)
    where[0::2], where[1::2] = starts, ends
    weights[0::2] = amounts
    weights[1::2] = -weights[0::2]
    return np.cumsum(np.bincount(where, weights, minlength=steps + 1))[:steps]


def step_order(graph: Graph, order: Optional[Sequence[str]] = None) -> Dict[str, int]:
    """op -> its time step: its position in `order` (default: the graph's topological order).

    The list schedule of cost.schedule runs, among the ops whose inputs are there, the one first
    in the graph's order: with no boxing delaying an input it runs ops in exactly that order (by
    induction, the next op's producers have all run). Boxings can hold a consumer back and let a
    later op run first; `order` takes the schedule's order then."""
    names = list(order) if order is not None else list(graph.ops)
    if sorted(names) != sorted(graph.ops):
        raise ValueError("a step order must list every op of the graph once")
    return {name: i for i, name in enumerate(names)}


def variable_kind(graph: Graph, op: Op) -> str:
    """parameters, or optimizer_state for a variable an update op updates as its state."""
    for consumer, ibn in graph.consumers(op, "out"):
        update = update_of(consumer)
        if update is not None and ibn in update.state:
            return "optimizer_state"
    return "parameters"


_KIND_OF_ROLE = {"forward": "activations", "io": "activations", "backward": "gradients"}


def output_kind(graph: Graph, op: Op) -> str:
    if op.role == "variable":
        return variable_kind(graph, op)
    return _KIND_OF_ROLE.get(op.role, "buffers")


def tensor_bytes(t: Tensor, nd: NdSbp, hierarchy: Sequence[int]) -> float:
    """What OneFlow allocates for the most loaded device's share of tensor t in `nd`."""
    return _share_bytes(tuple(t.shape), t.dtype, tuple(nd), tuple(hierarchy))


@functools.lru_cache(maxsize=1 << 16)
def _share_bytes(
    shape: Tuple[int, ...], dtype: str, nd: NdSbp, hierarchy: Tuple[int, ...]
) -> float:
    """tensor_bytes by what it depends on (a timeline asks it for every tensor of every plan)."""
    nbytes = local_numel(shape, nd, hierarchy) * DTYPE_BYTES.get(dtype, 4)
    return allocated(nbytes, len(shape))


def output_bytes(graph: Graph, op: Op, obn: str, sig: Signature) -> float:
    """What OneFlow allocates for one output of `op` under `sig`."""
    return tensor_bytes(graph.tensor(op.outputs[obn]), sig[obn], op.placement.hierarchy)


def workspace_bytes(graph: Graph, op: Op, sig: Signature) -> float:
    """The op's kernel scratch buffer on one device (its rule's workspace), allocated."""
    fn = workspace_of(op)
    if fn is None or not op.inputs:
        return 0.0
    elements = fn(op.attrs, local_shapes(graph, op, sig, op.placement.hierarchy))
    dtype = graph.tensor(next(iter(op.inputs.values()))).dtype
    return allocated(elements * DTYPE_BYTES.get(dtype, 4))


class Spans:
    """When each tensor is held, given the time steps of the ops and whether memory is reused."""

    def __init__(self, graph: Graph, steps: Mapping[str, int], reuse: bool):
        self.graph, self.steps, self.reuse = graph, steps, reuse
        self.count = len(steps)
        self._tensors: Dict[str, Tuple[int, int]] = {}  # `tensor`'s over every consumer

    def whole(self) -> Tuple[int, int]:
        return 0, self.count

    def op(self, name: str) -> Tuple[int, int]:
        if not self.reuse:
            return self.whole()
        return self.steps[name], self.steps[name] + 1

    def tensor(self, lbn: str, readers: Optional[Sequence[str]] = None) -> Tuple[int, int]:
        """From the producer to the last of `readers` (default: every consumer)."""
        if readers is None:
            if lbn not in self._tensors:
                self._tensors[lbn] = self._tensor(lbn, None)
            return self._tensors[lbn]
        return self._tensor(lbn, readers)

    def _tensor(self, lbn: str, readers: Optional[Sequence[str]]) -> Tuple[int, int]:
        t = self.graph.tensor(lbn)
        if not self.reuse or self.graph.op(t.producer).role == "variable":
            return self.whole()
        names = [c for c, _ in t.consumers] if readers is None else list(readers)
        start = self.steps[t.producer]
        return start, max([start] + [self.steps[c] for c in names]) + 1


class _Tensor(NamedTuple):
    """What a timeline needs of one output of the main placement that no signature changes."""

    lbn: str
    obn: str
    kind: str  # output_kind of its producer
    span: Tuple[int, int]  # Spans.tensor: producer to last consumer (the whole step: fixed)
    fixed: bool  # held the whole step (a variable's, or nothing is reused), its boxings too
    tensor: Tensor
    variable: bool
    readers: Tuple[Tuple[str, str, int], ...]  # (consumer, input, its time step), same placement
    boxable: bool  # its placement has more than one device


class TimelineIndex:
    """A graph's ops of the main placement in time order, with what a timeline needs of their
    outputs that no signature changes (spans, kinds, readers), gathered once: a search asks for
    the timelines of many assignments of one graph (`timeline`)."""

    def __init__(self, graph: Graph, reuse: bool, order: Optional[Sequence[str]] = None):
        steps = step_order(graph, order)
        self.spans = spans = Spans(graph, steps, reuse)
        self.graph, self.whole = graph, spans.whole()
        self.names = sorted(steps, key=steps.__getitem__)
        mesh = graph.main_placement()
        self.ops: List[Tuple[Op, List[_Tensor], bool, Tuple[int, int]]] = []
        self.boxable: Dict[str, Tuple[Op, _Tensor]] = {}  # lbn -> its producer and itself
        for name in self.names:
            op = graph.op(name)
            if op.placement == mesh and op.role != "system":
                outputs = [self._tensor(op, lbn, spans, steps) for lbn in op.outputs.values()]
                work = workspace_of(op) is not None and bool(op.inputs)
                self.ops.append((op, outputs, work, spans.op(name)))
                self.boxable.update((out.lbn, (op, out)) for out in outputs if out.boxable)

    def _tensor(self, op: Op, lbn: str, spans: Spans, steps: Mapping[str, int]) -> _Tensor:
        g = self.graph
        t = g.tensor(lbn)
        span = spans.tensor(lbn)
        readers = tuple(
            (c, ibn, steps[c]) for c, ibn in t.consumers if g.op(c).placement == op.placement
        )
        kind = output_kind(g, op)
        variable = op.role == "variable"
        fixed = variable or not spans.reuse
        return _Tensor(lbn, t.obn, kind, span, fixed, t, variable, readers, op.placement.size > 1)

    def timeline(
        self, signature_of: SignatureOf, model: CostModel, boxed: Optional[Set[str]] = None
    ) -> Timeline:
        """Every blob the main placement's most loaded device holds over a step under these
        signatures: each output, its boxings' blobs (grouped by the SBP their readers take it
        in), the write-back's local copy of a split variable that is boxed, kernel scratch.
        `boxed`, where given, holds every tensor some reader takes in another SBP (more do no
        harm): the others' readers are not looked at."""
        signatures = {name: signature_of(name) for name in self.names}
        line = Timeline(len(self.names), self.names)
        held = line.held
        for op, outputs, work, op_span in self.ops:
            sig = signatures[op.name]
            hierarchy = op.placement.hierarchy
            for out in outputs:
                nbytes = tensor_bytes(out.tensor, sig[out.obn], hierarchy)
                held.append(Held(out.lbn, out.kind, nbytes, *out.span))
            if work:
                scratch = workspace_bytes(self.graph, op, sig)
                if scratch:
                    held.append(Held(f"{op.name}/workspace", "buffers", scratch, *op_span))
        held += self.boxing_held(signatures.__getitem__, model, boxed)
        return line

    def boxing_held(
        self, signature_of: SignatureOf, model: CostModel, boxed: Optional[Set[str]] = None
    ) -> List[Held]:
        """The blobs the boxings of the `boxed` tensors hold (default: of every tensor): what
        `timeline` holds besides the outputs and scratch buffers."""
        held: List[Held] = []
        lbns = self.boxable if boxed is None else sorted(boxed)
        for lbn in lbns:
            if lbn in self.boxable:
                op, out = self.boxable[lbn]
                self._boxings(held, op, out, signature_of, model)
        return held

    def _boxings(
        self, held: List[Held], op: Op, out: _Tensor, signature_of: SignatureOf, model: CostModel
    ) -> None:
        src = signature_of(op.name)[out.obn]
        hierarchy = op.placement.hierarchy
        targets: Dict[NdSbp, List[int]] = {}  # SBP -> the time steps of the readers taking it
        for consumer, ibn, step in out.readers:
            dst = signature_of(consumer)[ibn]
            if dst != src:
                targets.setdefault(dst, []).append(step)
        if targets and out.variable and any(s.is_split for s in src):
            nbytes = tensor_bytes(out.tensor, src, hierarchy)
            held.append(Held(f"{out.lbn}->copy", "buffers", nbytes, *self.whole))
        t = out.tensor
        for dst, steps in targets.items():
            span = self.whole if out.fixed else (out.span[0], max([out.span[0]] + steps) + 1)
            name = f"{out.lbn}->{format_nd(dst)}"
            blobs = list(model.boxing_blobs(src, dst, t.shape, t.dtype))
            if len(steps) > 1:  # grouped into one boxing, into an identity op's output
                blobs.append(state_bytes(t.shape, dst, hierarchy, DTYPE_BYTES.get(t.dtype, 4)))
            held += [Held(name, "buffers", allocated(b), *span) for b in blobs]


def least_peak(graph: Graph, reuse: bool) -> float:
    """Bytes below the peak of every plan of `graph`: each output of the main placement held over
    its span (as a timeline holds it) at its bytes over the placement's devices, less than any
    SBP leaves a device; no boxing, no scratch. Cheap (no candidates), so a graph that cannot
    fit a limit is known before it is planned."""
    steps = step_order(graph)
    spans, mesh = Spans(graph, steps, reuse), graph.main_placement()
    outputs = [
        graph.tensor(lbn)
        for op in graph.ops.values()
        if op.placement == mesh and op.role != "system"
        for lbn in op.outputs.values()
    ]
    held = [spans.tensor(t.lbn) for t in outputs]
    least = [math.prod(t.shape) * DTYPE_BYTES.get(t.dtype, 4) / mesh.size for t in outputs]
    starts, ends = [s for s, _ in held], [e for _, e in held]
    return float(step_usage(starts, ends, least, len(steps)).max(initial=0.0))


def timeline(
    graph: Graph,
    signature_of: SignatureOf,
    model: CostModel,
    order: Optional[Sequence[str]] = None,
    index: Optional[TimelineIndex] = None,
    boxed: Optional[Set[str]] = None,
) -> Timeline:
    """Every blob the main placement's most loaded device holds over a step under these
    signatures (ops on other placements, e.g. the train-step counter, are left out); `index`,
    the graph's TimelineIndex in this order for this model's reuse, spares gathering it;
    `boxed`: see TimelineIndex.timeline."""
    index = index or TimelineIndex(graph, model.cluster.reuses_memory, order)
    return index.timeline(signature_of, model, boxed)
