"""Measure one link level: OneFlow's CPU boxing collectives along one axis of a mesh of ranks.

A level is the groups of ranks along a mesh axis: on one machine, all ranks (a 1-D mesh); across
nodes, a nodes x ranks-per-node mesh whose axis 1 stays inside each node and whose axis 0 joins
one rank of every node. Every collective of cost.cluster.COLLECTIVES runs as chains of stages of
a boxing there and a move back (local, but for the all-to-all: a second one), at two sizes,
against the chain of the same stages without the boxing, all taking turns (chains.step_times).
Bytes per rank are exact (cost.boxing), so the two sizes give the bandwidth per device and the
latency per message, stalls included. All groups along the axis run at once, as in a training
step: across nodes, a node's ranks share its link.
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import oneflow as flow

from ..cost.boxing import oneflow_cpu_axis_cost
from ..cost.cluster import Link
from ..sbp import B, P, S
from .chains import STAGES, Chain, Holder, step_times

_SBP = {
    "S0": flow.sbp.split(0),
    "S1": flow.sbp.split(1),
    "B": flow.sbp.broadcast,
    "P": flow.sbp.partial_sum,
}
# Per collective: the SBP a stage starts from, its moves, the move that is the collective, and how
# many times it is in them. A stage first copies its input (x * 1.0): boxing a variable's own
# buffer across ranks aborts 0.9.0.
COLLECTIVE_STAGES = {
    "all_gather": ("S0", ("B", "S0"), (S(0), B), 1),
    "reduce_scatter": ("S0", ("P", "S0"), (P, S(0)), 1),
    "all_reduce": ("B", ("P", "B"), (P, B), 1),
    "all_to_all": ("S0", ("S1", "S0"), (S(0), S(1)), 2),
}


@dataclass(frozen=True)
class MeshAxis:
    """The groups of ranks a link level is measured on: axis `axis` of `place`."""

    place: Any  # flow.placement, 1-D or 2-D
    axis: int
    size: int
    ndim: int

    def sbp(self, name: str):
        """`name` (S0, S1, B, P) along this axis, broadcast along the other."""
        if self.ndim == 1:
            return _SBP[name]
        return [_SBP[name] if d == self.axis else flow.sbp.broadcast for d in range(self.ndim)]

    def tensor(self, rows: int, width: int, start: str, scale: float = 1.0):
        everywhere = [flow.sbp.broadcast] * self.ndim
        x = flow.ones(rows, width).to_global(self.place, everywhere) * scale
        return x.to_global(sbp=self.sbp(start))


def flat(n: int) -> MeshAxis:
    """All n ranks of one machine as one group."""
    return MeshAxis(flow.placement("cpu", ranks=list(range(n))), 0, n, 1)


def node_mesh(nodes: int, per_node: int) -> Tuple[MeshAxis, MeshAxis]:
    """(inside a node, across nodes) on the nodes x per_node mesh of a multi-node launch, whose
    ranks are node-major (OneFlow's launcher numbers node k's ranks k * per_node onwards)."""
    place = flow.placement(
        "cpu", ranks=[[k * per_node + j for j in range(per_node)] for k in range(nodes)]
    )
    return MeshAxis(place, 1, per_node, 2), MeshAxis(place, 0, nodes, 2)


def boxing_stage(axis: MeshAxis, moves):
    def stage(h, x):
        x = x * 1.0
        for name in moves:
            x = x.to_global(sbp=axis.sbp(name))
        return x

    return stage


def messages(src, dst, rows: int, width: int, p: int) -> float:
    """Messages one rank sends in a move of a rows x width float tensor in a group of p."""
    return oneflow_cpu_axis_cost(
        src, dst, 4.0 * rows * width, rows * width, p, Link(math.inf, 1.0)
    ).time


def collective_times(
    axis: MeshAxis, kind: str, sizes: Tuple[int, ...], width: int
) -> List[Tuple[float, float, float]]:
    """(seconds, bytes sent, messages) per rank of one `kind` on a rows x width float tensor, for
    rows in `sizes`: each boxed chain against the same chain without the boxing, all in turns."""
    start, moves, (src, dst), times = COLLECTIVE_STAGES[kind]
    chains = []
    for rows in sizes:
        holder = Holder(x=axis.tensor(rows, width, start))
        chains += [Chain(holder, boxing_stage(axis, moves)), Chain(holder, boxing_stage(axis, ()))]
    measured = step_times(*chains)
    out = []
    for rows, boxed, plain in zip(sizes, measured[0::2], measured[1::2]):
        nbytes = 4.0 * rows * width
        sent = oneflow_cpu_axis_cost(
            src, dst, nbytes, rows * width, axis.size, Link(1.0, 0.0)
        ).bytes
        out.append(
            (
                max(boxed - plain, 1e-9) / (STAGES * times),
                sent,
                messages(src, dst, rows, width, axis.size),
            )
        )
    return out


def collectives(axis: MeshAxis, width: int, small: int, big: int) -> Dict[str, Dict[str, float]]:
    """Bandwidth per device and latency per message of each collective along `axis`, from chains
    on small x width and big x width floats."""
    out = {}
    for kind in COLLECTIVE_STAGES:
        (t0, b0, m), (t1, b1, _) = collective_times(axis, kind, (small, big), width)
        bandwidth = (b1 - b0) / max(t1 - t0, 1e-9)
        out[kind] = {
            "bandwidth_per_device": bandwidth,
            "latency": max(t0 - b0 / bandwidth, 0.0) / m,
        }
    return out


def overlap(axis: MeshAxis, rows: int, width: int, latency: float) -> float:
    """The fraction of an all-gather chain's moving time along `axis` that runs hidden behind an
    independent matmul chain, as cost.schedule uses it: the fraction of the moving time the
    compute is free for, the waits on peers being charged apart, so the chain's latency
    (`latency` a message, from the all-gather's calibration) and its local copies are taken out
    before the fraction is formed."""
    holder = Holder(
        x=axis.tensor(rows, width, "S0"),
        w=axis.tensor(width, width, "B", 0.01),
        z=axis.tensor(rows, width, "S0"),
    )
    matmul, gather, copies = (
        (lambda h, x: flow.matmul(x, h.w)),
        boxing_stage(axis, ("B", "S0")),
        boxing_stage(axis, ()),
    )
    alone, gathered, copied, both = step_times(
        *(Chain(holder, stage) for stage in (matmul, gather, copies)),
        Chain(holder, matmul, beside=gather),
    )
    waits = STAGES * messages(S(0), B, rows, width, axis.size) * latency
    moving = gathered - copied - waits
    if moving <= 0:
        return 0.0
    return min(max((alone + gathered - waits - both) / moving, 0.0), 1.0)
