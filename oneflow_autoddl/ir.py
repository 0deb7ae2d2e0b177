"""The planner's view of a traced OneFlow Job: ops, tensors, placements, roles, scopes.

Plain data in the spirit of torch.fx: any pass can read it without OneFlow. The adapter
fills it from a Job proto; `oneflow_autoddl.models` builds the same thing for models too
large to trace here. Blob names (`a_0`, `out_0`, `in`, `out`) are OneFlow's own, so a
signature found on this graph can be written back into the Job unchanged.
"""

import heapq
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import GraphError
from .sbp import Signature

ROLES = ("forward", "backward", "optimizer", "variable", "io", "system")

DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "int64": 8,
    "bool": 1,
    "char": 1,
}


@dataclass(frozen=True)
class Placement:
    """Devices an op runs on: `ranks` in row-major order over the mesh `hierarchy`."""

    device: str
    ranks: Tuple[int, ...]
    hierarchy: Tuple[int, ...]

    def __post_init__(self):
        size = 1
        for h in self.hierarchy:
            size *= h
        if size != len(self.ranks):
            raise GraphError(
                f"placement hierarchy {self.hierarchy} does not hold {len(self.ranks)} ranks"
            )

    def __reduce__(self):
        """Pickled by its fields: the hash is this process's (str hashes are salted)."""
        return (Placement, (self.device, self.ranks, self.hierarchy))

    def __hash__(self) -> int:
        """Hashed once: a placement of a thousand ranks keys dicts of every op."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.device, self.ranks, self.hierarchy))
            object.__setattr__(self, "_hash", found)
        return found

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Placement):
            return NotImplemented
        return hash(self) == hash(other) and (
            (self.device, self.hierarchy, self.ranks)
            == (other.device, other.hierarchy, other.ranks)
        )

    @property
    def ndim(self) -> int:
        return len(self.hierarchy)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def __str__(self) -> str:
        return f"{self.device}:{'x'.join(map(str, self.hierarchy))}"


@dataclass
class Tensor:
    lbn: str
    shape: Tuple[int, ...]
    dtype: str
    producer: str
    obn: str
    consumers: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


@dataclass
class Op:
    name: str
    type: str
    inputs: Dict[str, str]
    outputs: Dict[str, str]
    placement: Placement
    attrs: Dict[str, Any] = field(default_factory=dict)
    role: str = "forward"
    scope: str = ""
    native: Optional[Signature] = None

    @property
    def bns(self) -> List[str]:
        return list(self.inputs) + list(self.outputs)


class Graph:
    """Ops in topological order and the tensors between them."""

    def __init__(self, name: str, ops: Iterable[Op], tensors: Iterable[Tensor]):
        self.name = name
        self.tensors: Dict[str, Tensor] = {t.lbn: t for t in tensors}
        self.ops: Dict[str, Op] = {}
        for op in ops:
            if op.name in self.ops:
                raise GraphError(f"op name {op.name!r} appears twice")
            if op.role not in ROLES:
                raise GraphError(f"op {op.name!r} has unknown role {op.role!r}")
            self.ops[op.name] = op
        self._link()
        self.ops = {name: self.ops[name] for name in self._topological_order()}

    def _link(self) -> None:
        for t in self.tensors.values():
            t.consumers = []
        for op in self.ops.values():
            for obn, lbn in op.outputs.items():
                if lbn not in self.tensors:
                    raise GraphError(f"op {op.name!r} output {obn} -> {lbn!r} has no logical shape")
            for ibn, lbn in op.inputs.items():
                read = self.tensors.get(lbn)
                if read is None or read.producer not in self.ops:
                    raise GraphError(
                        f"op {op.name!r} input {ibn} reads {lbn!r}, which no op produces"
                    )
                read.consumers.append((op.name, ibn))

    def _topological_order(self) -> List[str]:
        """Kahn's order, taking the earliest op (in the Job's order) among those ready: a Job
        already in topological order comes out unchanged."""
        position = {name: i for i, name in enumerate(self.ops)}
        names = list(self.ops)
        indegree = [0] * len(names)
        successors: List[List[int]] = [[] for _ in names]
        for i, op in enumerate(self.ops.values()):
            producers = {position[self.tensors[lbn].producer] for lbn in op.inputs.values()}
            indegree[i] = len(producers)
            for p in producers:
                successors[p].append(i)
        ready = [i for i, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        order: List[str] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(names[i])
            for j in successors[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(self.ops):
            stuck = sorted(set(self.ops) - set(order))[:5]
            raise GraphError(f"the graph has a cycle through {stuck}")
        return order

    def op(self, name: str) -> Op:
        return self.ops[name]

    def tensor(self, lbn: str) -> Tensor:
        return self.tensors[lbn]

    def shape(self, op: Op, bn: str) -> Tuple[int, ...]:
        lbn = op.inputs.get(bn) or op.outputs[bn]
        return self.tensors[lbn].shape

    def producer(self, op: Op, ibn: str) -> Tuple[Op, str]:
        t = self.tensors[op.inputs[ibn]]
        return self.ops[t.producer], t.obn

    def consumers(self, op: Op, obn: str) -> List[Tuple[Op, str]]:
        return [(self.ops[c], ibn) for c, ibn in self.tensors[op.outputs[obn]].consumers]

    def by_role(self, *roles: str) -> List[Op]:
        return [op for op in self.ops.values() if op.role in roles]

    def op_types(self) -> Dict[str, int]:
        counts: Dict[str, int] = {}
        for op in self.ops.values():
            counts[op.type] = counts.get(op.type, 0) + 1
        return counts

    def main_placement(self) -> Placement:
        """The placement most ops run on: the mesh the plan is made for."""
        counts: Dict[Placement, int] = {}
        for op in self.ops.values():
            counts[op.placement] = counts.get(op.placement, 0) + 1
        return max(counts, key=lambda p: (counts[p], p.size))

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, {len(self.tensors)} tensors)"


# OneFlow's CheckpointingPass names the copy of a forward op it recomputes in backward after it.
CHECKPOINT_COPY_PREFIX = "Sys-Checkpointing-Fake-Fw-Op_"


def module_scope(op_name: str) -> str:
    """Module path of an op from OneFlow's naming: `m.h.3.attn.q-broadcast_matmul-58` ->
    `m.h.3.attn.q`.

    Backward ops carry their forward module's prefix, so the scope groups a layer's
    forward and backward ops. Variables (`m.h.3.attn.q.weight`) map to their module; a
    recomputed copy (CHECKPOINT_COPY_PREFIX + op) to its original's.
    """
    if op_name.startswith(CHECKPOINT_COPY_PREFIX):
        op_name = op_name[len(CHECKPOINT_COPY_PREFIX) :]
    if "-" in op_name:
        return op_name.split("-", 1)[0]
    return op_name.rsplit(".", 1)[0] if "." in op_name else ""


def assign_roles(
    ops: Sequence[Op], tensors: Dict[str, Tensor], loss_grad_lbn: Optional[str]
) -> None:
    """Mark every op forward / backward / optimizer / variable / io / system.

    Backward = everything downstream of the loss gradient's producer (OneFlow seeds the
    backward pass with `ones_like(loss)`), minus optimizer and system ops.
    """
    by_name = {op.name: op for op in ops}
    consumers: Dict[str, List[str]] = {}
    for op in ops:
        for lbn in op.inputs.values():
            consumers.setdefault(tensors[lbn].producer, []).append(op.name)
    backward = set()
    if loss_grad_lbn and loss_grad_lbn in tensors:
        stack = [tensors[loss_grad_lbn].producer]
        while stack:
            name = stack.pop()
            if name in backward or name not in by_name:
                continue
            backward.add(name)
            stack.extend(consumers.get(name, []))
    for op in ops:
        if op.role != "forward":
            continue  # set by the reader (variable, io, system, optimizer)
        if op.name in backward:
            op.role = "backward"
