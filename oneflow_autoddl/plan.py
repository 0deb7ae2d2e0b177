"""A Plan: the SBP signature chosen for every op, what it is predicted to cost, and its baselines.

This is what `oneflow_autoddl.plan_of(graph)` returns, what the CLI prints and what
`--json` writes. Its JSON round-trips (`Plan.from_json(plan.to_json())`), so a saved plan
can be given back to a graph to skip the search; `check_matches` refuses one made for
another graph and names the first difference.
"""

import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence

from .errors import PlanMismatch
from .ir import Graph
from .mesh import format_mesh, parse_mesh
from .sbp import NdSbp, Signature, format_nd, parse_nd


@dataclass
class Predicted:
    step_time_s: float
    compute_time_s: float
    comm_time_s: float
    exposed_comm_s: float  # of comm_time_s, what compute waits for (the rest overlaps it)
    bytes_per_device: float
    memory_per_device: (
        float  # what stays alive across the step (parameters, state, kept activations)
    )
    inter_node_bytes_per_device: float = 0.0  # of bytes_per_device, sent to other nodes
    # The most one device holds at once over the step (cost.memory): what the memory limit holds,
    # what that is made of (by cost.memory.KINDS) and the op running then.
    peak_memory_per_device: float = 0.0
    peak_memory_by_kind: Dict[str, float] = field(default_factory=dict)
    peak_memory_op: str = ""
    # The ZeRO stage each parameter's SBP amounts to (oneflow_autoddl.zero): stage -> share of
    # the parameters' bytes.
    zero_stages: Dict[str, float] = field(default_factory=dict)

    @property
    def intra_node_bytes_per_device(self) -> float:
        return self.bytes_per_device - self.inter_node_bytes_per_device

    @classmethod
    def of(cls, breakdown, peak=None, zero_stages=None) -> "Predicted":
        """From a search.problem.Breakdown and, where known, a cost.memory.Peak and the
        parameters' ZeRO stages."""
        return cls(
            breakdown.step_time,
            breakdown.compute_time,
            breakdown.comm_time,
            breakdown.exposed_comm_time,
            breakdown.bytes_per_device,
            breakdown.memory_per_device,
            breakdown.inter_node_bytes_per_device,
            peak.bytes if peak else 0.0,
            dict(peak.by_kind) if peak else {},
            peak.op if peak else "",
            dict(zero_stages or {}),
        )


@dataclass
class OpEntry:
    type: str
    signature: Dict[str, str]  # blob name -> n-D SBP as OneFlow prints it
    shapes: Dict[str, List[int]]
    inputs: List[str] = field(default_factory=list)  # which blob names are inputs
    compute_time_s: float = 0.0
    comm_time_s: float = 0.0


@dataclass
class Plan:
    graph: str
    mesh: str
    cluster: str
    device: str
    ops: Dict[str, OpEntry]
    variables: Dict[str, str]
    variable_shapes: Dict[str, List[int]]
    variable_bytes: Dict[str, float]  # per device under the plan
    unplanned_ops: Dict[str, Dict[str, str]]  # op -> {"type", "reason"}
    predicted: Predicted
    baselines: Dict[str, Predicted] = field(default_factory=dict)
    lower_bound_bytes: Optional[float] = None
    memory_limit_bytes: Optional[float] = None
    transfers: List[Dict[str, Any]] = field(default_factory=list)  # the largest boxings, by time
    search_time_s: float = 0.0
    notes: List[str] = field(default_factory=list)
    # Modules (paths as op names carry them, e.g. `model.h.0`) whose activations are recomputed
    # in backward (oneflow_autoddl.recompute): the hook traces the graph with OneFlow's
    # activation checkpointing on them (adapter.recompute).
    recompute: List[str] = field(default_factory=list)
    # float32, or `mixed <half dtype>` for a graph in mixed precision (oneflow_autoddl.amp)
    precision: str = "float32"

    # -- signatures ----------------------------------------------------------------------------
    def signature(self, op: str) -> Signature:
        return Signature({bn: parse_nd(text) for bn, text in self.ops[op].signature.items()})

    def signatures(self) -> Dict[str, Signature]:
        return {name: self.signature(name) for name in self.ops}

    def variable_sbp(self, name: str) -> NdSbp:
        return parse_nd(self.variables[name])

    def digest(self) -> str:
        """A hash of every planned op's signature: plans with the same digest give every op the
        same SBP (tests and benchmarks compare plans by it)."""
        items = sorted((name, sorted(e.signature.items())) for name, e in self.ops.items())
        return hashlib.sha1(repr(items).encode()).hexdigest()

    @property
    def mesh_shape(self):
        return parse_mesh(self.mesh)

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """The plan as plain data (what `to_json` writes), sharing nothing with the plan."""
        return json.loads(self.to_json())

    def to_json(self) -> str:
        """The plan as a JSON string that `Plan.from_json` reads back unchanged; compact, so that
        the json module's C encoder writes it (an indent makes it use the pure-Python one)."""
        return json.dumps(self, default=_fields)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """A plan from `to_json`'s string; PlanMismatch if it is not one of this version."""
        return cls.from_dict(_decoded(text))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Plan":
        """A plan from `to_dict`'s data; PlanMismatch if it is not one of this version."""
        try:
            values = dict(data)
            values["ops"] = {k: OpEntry(**v) for k, v in data["ops"].items()}
            values["predicted"] = Predicted(**data["predicted"])
            values["baselines"] = {k: Predicted(**v) for k, v in data.get("baselines", {}).items()}
            return cls(**values)
        except (KeyError, TypeError) as e:
            raise PlanMismatch(f"not a plan JSON of this version of oneflow_autoddl: {e}") from None

    @classmethod
    def load(cls, path: str) -> "Plan":
        """The plan in the JSON file `path`: a Plan's own (`save`, the CLI's --json), or a run's
        record holding one under "plan" (the examples' --json, beside losses and step times),
        so that what a run wrote is what the next run loads."""
        with open(path) as f:
            data = _decoded(f.read(), f"{path} is ")
        if isinstance(data, dict) and "ops" not in data and isinstance(data.get("plan"), dict):
            data = data["plan"]
        return cls.from_dict(data)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.to_json())

    def table(self, ops: bool = False, op_limit: Optional[int] = None) -> str:
        """The SBP of every parameter and the costliest boxings; with `ops`, every op's SBP too
        (the first `op_limit`)."""
        from .report import op_table, parameter_table, transfer_table

        parts = [parameter_table(self), transfer_table(self)]
        if ops:
            parts.insert(1, op_table(self, op_limit))
        return "\n\n".join(parts)

    # -- reuse -----------------------------------------------------------------------------------
    def check_matches(self, graph: Graph, mesh: Sequence[int]) -> None:
        """Refuse a plan made for another graph or mesh; name the first difference."""
        if tuple(mesh) != self.mesh_shape:
            raise PlanMismatch(
                f"the plan is for mesh {self.mesh}, the graph runs on {format_mesh(tuple(mesh))}"
            )
        for name, entry in self.ops.items():
            op = graph.ops.get(name)
            if op is None:
                raise PlanMismatch(
                    f"the plan has op {name!r} ({entry.type}), which the graph does not"
                )
            if op.type != entry.type:
                raise PlanMismatch(
                    f"op {name!r} is {op.type} in the graph but {entry.type} in the plan"
                )
            for bn, shape in entry.shapes.items():
                if bn not in op.inputs and bn not in op.outputs:
                    raise PlanMismatch(f"op {name!r} has no blob {bn!r} in the graph")
                if list(graph.shape(op, bn)) != list(shape):
                    raise PlanMismatch(
                        f"op {name!r} blob {bn} has shape {list(graph.shape(op, bn))} in the "
                        f"graph but {shape} in the plan"
                    )
        planned = set(self.ops) | set(self.unplanned_ops)
        for name, op in graph.ops.items():
            # interface and train-step ops carry the graph's name and a process-wide counter;
            # they are never planned, so another instance of the same graph still matches
            if name not in planned and op.role not in ("io", "system"):
                raise PlanMismatch(
                    f"the graph has op {name!r} ({op.type}), which the plan does not"
                )


def signature_texts(sig: Signature) -> Dict[str, str]:
    return {bn: format_nd(nd) for bn, nd in sig.items()}


def _decoded(text: str, source: str = "") -> Any:
    """The JSON in `text`; PlanMismatch where it is not JSON, its message led by `source` (where
    the text came from, e.g. "FILE is ")."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanMismatch(f"{source}not a plan JSON: {e}") from None


def _fields(obj: Any) -> Dict[str, Any]:
    """A dataclass of the plan (Plan, OpEntry, Predicted) as its fields, for json.dumps."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
