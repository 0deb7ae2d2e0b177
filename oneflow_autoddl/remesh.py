"""Move a traced graph onto another mesh: plan for the cluster you are about to rent.

A Job traced on one rank (or on a small mesh) has every logical shape the planner needs;
only the placement changes. The ops that ran on the traced mesh move to the new one, the
train-step ops keep their single device, and OneFlow's choices are dropped (they were made
for the old mesh) except the inputs', which arrive data parallel: the batch split over each
mesh axis it divides, as the examples feed them.
"""

from typing import Optional, Sequence

from .ir import Graph, GraphError, Op, Placement
from .mesh import format_mesh, mesh_size
from .sbp import B, S, Signature


def batch_split(shape: Sequence[int], hierarchy: Sequence[int]) -> Signature:
    """The input SBP of data parallel: S(0) on every mesh axis that (still) divides the batch."""
    nd, rows = [], shape[0] if shape else 0
    for h in hierarchy:
        if rows and rows % h == 0:
            nd.append(S(0))
            rows //= h
        else:
            nd.append(B)
    return Signature({"out": tuple(nd)})


def remesh(graph: Graph, mesh: Sequence[int], ranks: Optional[Sequence[int]] = None) -> Graph:
    """`graph` with its main placement replaced by `mesh` (ranks 0..n-1 by default)."""
    old = graph.main_placement()
    new = Placement(old.device, tuple(ranks or range(mesh_size(tuple(mesh)))), tuple(mesh))
    ops = []
    for op in graph.ops.values():
        moved = op.placement == old
        native = (
            batch_split(graph.shape(op, "out"), new.hierarchy)
            if op.type == "input_conf" and moved
            else (None if moved else op.native)
        )
        ops.append(
            Op(
                op.name,
                op.type,
                dict(op.inputs),
                dict(op.outputs),
                new if moved else op.placement,
                dict(op.attrs),
                op.role,
                op.scope,
                native,
            )
        )
    out = Graph(graph.name, ops, graph.tensors.values())
    check_batch(out)
    return out


def check_batch(graph: Graph) -> None:
    """Refuse a mesh whose first axis does not divide the batch of every input: no data
    parallelism."""
    mesh = graph.main_placement()
    for op in graph.by_role("io"):
        if op.type == "input_conf" and op.placement == mesh and op.native is not None:
            shape = graph.shape(op, "out")
            if shape and not op.native["out"][0].is_split and mesh.hierarchy[0] > 1:
                raise GraphError(
                    f"input {op.name} has batch {shape[0]}, which mesh axis 0 of "
                    f"{format_mesh(mesh.hierarchy)} ({mesh.hierarchy[0]} devices) does not divide: "
                    f"choose a batch divisible by {mesh.hierarchy[0]} or another mesh"
                )
