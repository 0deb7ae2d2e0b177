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
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

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


@dataclass(frozen=True)
class Held:
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
        delta = np.zeros(self.steps + 1)
        for h in self.held:
            delta[h.start] += h.bytes
            delta[h.end] -= h.bytes
        return np.cumsum(delta)[: self.steps]

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

    def whole(self) -> Tuple[int, int]:
        return 0, self.count

    def op(self, name: str) -> Tuple[int, int]:
        if not self.reuse:
            return self.whole()
        return self.steps[name], self.steps[name] + 1

    def tensor(self, lbn: str, readers: Optional[Sequence[str]] = None) -> Tuple[int, int]:
        """From the producer to the last of `readers` (default: every consumer)."""
        t = self.graph.tensor(lbn)
        if not self.reuse or self.graph.op(t.producer).role == "variable":
            return self.whole()
        names = [c for c, _ in t.consumers] if readers is None else list(readers)
        start = self.steps[t.producer]
        return start, max([start] + [self.steps[c] for c in names]) + 1


def _boxed(graph: Graph, lbn: str, signature_of: SignatureOf) -> Dict[tuple, List[str]]:
    """Target SBP -> the consumers on the producer's placement that read the tensor in it."""
    t = graph.tensor(lbn)
    producer = graph.op(t.producer)
    src = signature_of(producer.name)[t.obn]
    out: Dict[tuple, List[str]] = {}
    for c, ibn in t.consumers:
        if graph.op(c).placement != producer.placement:
            continue
        dst = signature_of(c)[ibn]
        if dst != src:
            out.setdefault(dst, []).append(c)
    return out


def tensor_blocks(
    graph: Graph, lbn: str, signature_of: SignatureOf, model: CostModel, spans: Spans
) -> List[Held]:
    """The tensor on its producer's device, its boxings' blobs, and the write-back's local copy
    of a split variable that is boxed."""
    t = graph.tensor(lbn)
    producer = graph.op(t.producer)
    sig = signature_of(producer.name)
    out = [
        Held(
            lbn,
            output_kind(graph, producer),
            output_bytes(graph, producer, t.obn, sig),
            *spans.tensor(lbn),
        )
    ]
    if producer.placement.size == 1:
        return out
    targets = _boxed(graph, lbn, signature_of)
    src = sig[t.obn]
    if targets and producer.role == "variable" and any(s.is_split for s in src):
        out.append(Held(f"{lbn}->copy", "buffers", out[0].bytes, *spans.whole()))
    hierarchy = producer.placement.hierarchy
    for dst, readers in targets.items():
        span = spans.tensor(lbn, readers)
        name = f"{lbn}->{format_nd(dst)}"
        blobs = list(model.boxing_blobs(src, dst, t.shape, t.dtype))
        if len(readers) > 1:  # grouped into one boxing, into an identity op's output
            blobs.append(state_bytes(t.shape, dst, hierarchy, DTYPE_BYTES.get(t.dtype, 4)))
        out += [Held(name, "buffers", allocated(b), *span) for b in blobs]
    return out


def timeline(
    graph: Graph,
    signature_of: SignatureOf,
    model: CostModel,
    order: Optional[Sequence[str]] = None,
) -> Timeline:
    """Every blob the main placement's most loaded device holds over a step under these
    signatures (ops on other placements, e.g. the train-step counter, are left out)."""
    steps = step_order(graph, order)
    spans = Spans(graph, steps, model.cluster.reuses_memory)
    mesh = graph.main_placement()
    names = sorted(steps, key=steps.__getitem__)
    signatures = {name: signature_of(name) for name in names}
    line = Timeline(len(names), names)
    for name in names:
        op = graph.op(name)
        if op.placement != mesh or op.role == "system":
            continue
        for lbn in op.outputs.values():
            line.held += tensor_blocks(graph, lbn, signatures.__getitem__, model, spans)
        work = workspace_bytes(graph, op, signatures[name])
        if work:
            line.held.append(Held(f"{name}/workspace", "buffers", work, *spans.op(name)))
    return line
