"""Symbolic training-graph templates (models/templates/*.json) and their instantiation as ir.Graph.

A template is one OneFlow 0.9.0 trace of an example's training graph (forward, backward,
optimizer), written by `python -m tools.make_templates`, with every dimension
a monomial of the model's sizes (see symbols.py). Repeated Transformer blocks are traced
three times: block 0 stands for the first block, block 1 for every middle one, block 2
for the last, so a template of 3 blocks instantiates any depth L >= 2.

Each op of the JSON `ops` list holds:
  name     OneFlow's op name, `{b}` for the block index and `{g}` for the graph's name; with
           `step`, OneFlow's global op counter follows as `-<n>`, `step` past the previous one
  type, role, scope   as read_job gives them (`{b}` again in the scope)
  block, sweep        the block (0/1/2) and the run of blocks it belongs to, or absent
  single   the op sits on the 1-device placement of the train step, not on the mesh
  inputs   bn -> [producer's position in `ops`, producer's bn(, producer block - own block)]
  outputs  bn -> [shape as monomials, dtype]
  attrs    as read_job gives them, except `sym_attrs`: those that depend on the sizes (shapes,
           and ints such as conv2d's `filters`) as [kind, monomials], kind shape / ints / int
The op order is a sequence of runs of blocks (0,1,2 forward and in the optimizer part,
2,1,0 backward); instantiating L blocks widens each run to 0..L-1 (or L-1..0).
"""

import json
import os
from functools import lru_cache
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..ir import Graph, Op, Placement, Tensor
from ..remesh import batch_split
from .symbols import Evaluator

TEMPLATE_DIR = os.path.join(os.path.dirname(__file__), "templates")
TEMPLATE_BLOCKS = 3  # first, middle and last block


class TemplateOp:
    __slots__ = (
        "name",
        "step",
        "type",
        "role",
        "scope",
        "block",
        "sweep",
        "single",
        "inputs",
        "outputs",
        "attrs",
        "sym_attrs",
        "slot",
    )

    def __init__(self, d: Mapping[str, Any]):
        self.name: str = d["name"]
        self.step: Optional[int] = d.get("step")
        self.type: str = d["type"]
        self.role: str = d["role"]
        self.scope: str = d["scope"]
        self.block: Optional[int] = d.get("block")
        self.sweep: Optional[int] = d.get("sweep")
        self.single: bool = d.get("single", False)
        self.inputs: List[Tuple[str, int, str, int]] = [
            (ibn, ref[0], ref[1], ref[2] if len(ref) > 2 else 0) for ibn, ref in d["inputs"].items()
        ]
        self.outputs: List[Tuple[str, List[str], str]] = [
            (obn, dims, dtype) for obn, (dims, dtype) in d["outputs"].items()
        ]
        self.attrs: Dict[str, Any] = d.get("attrs", {})
        self.sym_attrs: Dict[str, Any] = d.get("sym_attrs", {})
        self.slot = -1  # index among its block's ops, set by Template


class Template:
    """A parsed template: its ops, and their layout as plain ops and runs of blocks."""

    def __init__(self, data: Mapping[str, Any]):
        self.model: str = data["model"]
        self.graph_name: str = data["graph"]
        self.ops = [TemplateOp(d) for d in data["ops"]]
        self.blocks: int = data.get("blocks", 0)
        # layout: a position in `ops`, or a sweep: (ascending?, template block -> its positions)
        self.layout: List[Any] = []
        sweeps: Dict[Optional[int], Dict[int, List[int]]] = {}  # block ops all have a sweep
        per_block: Dict[int, int] = {}
        for pos, op in enumerate(self.ops):
            if op.block is None:
                self.layout.append(pos)
                continue
            op.slot = per_block.get(op.block, 0)
            per_block[op.block] = op.slot + 1
            if op.sweep not in sweeps:
                sweeps[op.sweep] = {}
                self.layout.append((op.block == 0, sweeps[op.sweep]))
            sweeps[op.sweep].setdefault(op.block, []).append(pos)
        if self.blocks and sorted(per_block) != list(range(self.blocks)):
            raise ValueError(
                f"template {self.model}: blocks {sorted(per_block)}, expected 0..{self.blocks - 1}"
            )

    def expand(self, layers: int) -> List[Tuple[int, Optional[int]]]:
        """(template position, block index or None) of every op of an L-block graph, in order."""
        last = self.blocks - 1
        order: List[Tuple[int, Optional[int]]] = []
        for item in self.layout:
            if isinstance(item, int):
                order.append((item, None))
                continue
            ascending, by_block = item
            for i in range(layers) if ascending else reversed(range(layers)):
                t = 0 if i == 0 else (last if i == layers - 1 else 1)
                order.extend((pos, i) for pos in by_block[t])
        return order

    def instantiate(
        self,
        sizes: Mapping[str, int],
        mesh: Sequence[int],
        device: str,
        ranks: Sequence[int],
        layers: Optional[int] = None,
        graph_name: Optional[str] = None,
    ) -> Graph:
        """The graph OneFlow would trace at `sizes` with `layers` blocks on `mesh`."""
        if self.blocks and (layers is None or layers < 2):
            raise ValueError(
                f"{self.model} needs layers >= 2 (a first and a last block), not {layers}"
            )
        graph_name = graph_name or self.graph_name
        ev = Evaluator(sizes)
        main = Placement(device, tuple(ranks), tuple(mesh))
        single = Placement(device, (ranks[0],), (1,))
        # Shapes and attrs are the same for every copy of a template op: evaluate each once.
        outs = [
            [(obn, ev.shape(dims), dtype) for obn, dims, dtype in op.outputs] for op in self.ops
        ]
        attrs = [self._attrs(op, ev, len(main.hierarchy)) for op in self.ops]
        outer: Dict[int, str] = {}
        by_block: List[List[str]] = [[] for _ in range(layers or 0)]
        ops: List[Op] = []
        tensors: List[Tensor] = []
        counter = -1
        for pos, i in self.expand(layers or 0):
            t = self.ops[pos]
            name = t.name.replace("{g}", graph_name)
            scope = t.scope.replace("{g}", graph_name)
            if i is not None:
                name, scope = name.replace("{b}", str(i)), scope.replace("{b}", str(i))
            if t.step is not None:
                counter += t.step
                name = f"{name}-{counter}"
            inputs = {}
            for ibn, ppos, obn, offset in t.inputs:
                p = self.ops[ppos]
                if p.block is None:
                    producer = outer[ppos]
                elif i is None:  # a plain op reads the first or the last block
                    producer = by_block[0 if p.block == 0 else len(by_block) - 1][p.slot]
                else:
                    producer = by_block[i + offset][p.slot]
                inputs[ibn] = f"{producer}/{obn}"
            outputs = {}
            for obn, shape, dtype in outs[pos]:
                lbn = f"{name}/{obn}"
                outputs[obn] = lbn
                tensors.append(Tensor(lbn, shape, dtype, name, obn))
            # fresh lists, as read_job gives every op its own
            own = {k: list(v) if isinstance(v, list) else v for k, v in attrs[pos].items()}
            ops.append(
                Op(
                    name,
                    t.type,
                    inputs,
                    outputs,
                    single if t.single else main,
                    own,
                    role=t.role,
                    scope=scope,
                    native=batch_split(tensors[-1].shape, main.hierarchy)
                    if t.type == "input_conf"
                    else None,
                )
            )
            if i is None:
                outer[pos] = name
            else:
                by_block[i].append(name)
        return Graph(graph_name, ops, tensors)

    @staticmethod
    def _attrs(op: TemplateOp, ev: Evaluator, ndim: int) -> Dict[str, Any]:
        attrs = dict(op.attrs)
        for key, (kind, value) in op.sym_attrs.items():
            attrs[key] = (
                ev.shape(value)
                if kind == "shape"
                else [ev.dim(v) for v in value]
                if kind == "ints"
                else ev.dim(value)
            )
        if op.type == "variable_conf" and not op.single and len(attrs.get("nd_sbp", ())) == 1:
            attrs["nd_sbp"] = attrs["nd_sbp"] * ndim  # traced on one device: one SBP per mesh axis
        return attrs


@lru_cache(maxsize=None)
def load(name: str) -> Template:
    """models/templates/<name>.json, parsed once per process."""
    path = os.path.join(TEMPLATE_DIR, f"{name}.json")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no template {path}: make it with `python -m tools.make_templates`"
        )
    with open(path) as f:
        return Template(json.load(f))
