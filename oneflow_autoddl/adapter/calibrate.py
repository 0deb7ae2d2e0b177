"""Measure a `cpu-local` cluster: CPU ranks of this machine talking through OneFlow's CommNet.

Run on N ranks (`python -m oneflow_autoddl calibrate --nproc N --out FILE` launches them).
Everything is measured the way a training step runs: inside compiled nn.Graphs, on all
ranks at once (they share the cores), as the median over many steps of chains of STAGES
identical stages. Every figure read from two or more graphs (a difference, a ratio) is taken
with those graphs taking turns step by step (step_times), so that a drift in the machine's
load does not land on one of them: on this shared machine that moved comm_overlap from 0 to
0.4 between runs, and now reads 0 to 0.11.
  - compute: each stage a float32 matmul, FLOP/s from the step time;
  - the cost of any op: each stage an add of 16 floats;
  - memory bandwidth: each stage an elementwise add over arrays far larger than the caches;
  - kernel bandwidths (cost.cluster.KERNEL_KINDS): stages of the kernels OneFlow's CPU
    build runs far below that (an inner broadcast, a reduction, GELU), at a LayerNorm's size,
    in turns with the four above; and each optimizer's update, from train steps over
    parameters of two sizes;
  - links: each collective (cost.cluster.COLLECTIVES) as stages of a boxing there and a
    move back (local, but for the all-to-all: a second one), at two sizes, against the
    chain of the same stages without the boxing; bytes per rank are exact (cost.boxing),
    so the two points give the bandwidth and the latency per message, stalls included.
    OneFlow's CPU boxing runs them at rates far apart (2026-12-03, 4 ranks, `--repeats 15`:
    a reduce-scatter at 232 MB/s per rank, an all-gather at 637);
  - overlap: the matmul chain beside an independent all-gather chain in one graph, against
    each alone: the fraction of the gather's moving time (its latency and copies taken
    out) that the pair hides.
Rank 0 writes the cluster JSON, with the date, machine and command in its `source`.
"""

import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import oneflow as flow

from ..cost.boxing import oneflow_cpu_axis_cost
from ..cost.cluster import Link, cluster_from_json
from ..sbp import B, P, S

STAGES = 16
REPEATS = (
    9  # steps timed per chain, the median taken (`calibrate --repeats` for a quicker, noisier run)
)
_repeats = REPEATS  # this run's (one calibration per process)


class _Holder(flow.nn.Module):
    def __init__(self, **tensors):
        super().__init__()
        for name, t in tensors.items():
            setattr(self, name, flow.nn.Parameter(t, requires_grad=False))


class _Chain(flow.nn.Graph):
    """STAGES stages of `stage(holder, x)` from holder.x; the output is summed so nothing is
    pruned. With `beside`, a second chain of its stages from holder.z, independent of the first."""

    def __init__(self, holder, stage: Callable, beside: Optional[Callable] = None):
        super().__init__()
        self.holder, self.stage, self.beside = holder, stage, beside

    def build(self):
        x = self.holder.x
        for _ in range(STAGES):
            x = self.stage(self.holder, x)
        if self.beside is None:
            return x.sum()
        z = self.holder.z
        for _ in range(STAGES):
            z = self.beside(self.holder, z)
        return x.sum() + z.sum()


def step_times(*graphs) -> List[float]:
    """The median step time of each graph, the graphs taking turns (an untimed step, then a timed
    one) so that the machine's drifts in load weigh on each alike and a figure formed from their
    difference is not one graph's luck. The untimed step takes in what the other graph left
    running: a train step's loss is out before its update ends."""
    for graph in graphs:
        graph().numpy()
    flow.comm.barrier()
    times: List[List[float]] = [[] for _ in graphs]
    for _ in range(_repeats):
        for graph, taken in zip(graphs, times):
            graph().numpy()
            start = time.perf_counter()
            graph().numpy()
            taken.append(time.perf_counter() - start)
    return [statistics.median(taken) for taken in times]


def stage_time(stage: Callable, **tensors) -> float:
    """Seconds a stage of `stage(holder, x)` takes in a chain of STAGES from tensors["x"], on all
    ranks at once (benchmarks time their own stages with it)."""
    return step_times(_Chain(_Holder(**tensors), stage))[0] / STAGES


def split_ones(place, *shape):
    """Ones of `shape` (logical) split on axis 0 over `place`."""
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))


def broadcast_ones(place, *shape):
    """0.01s of `shape` on every rank of `place`."""
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast) * 0.01


# Per kernel kind (cost.cluster.KERNEL_KINDS): a stage as the GPT and VGG graphs run it on
# rows x KERNEL_WIDTH floats per rank, and the bytes it reads and writes in units of that array.
KERNEL_WIDTH, KERNEL_ROWS = 512, 256
ADD_ELEMS = (
    1 << 22
)  # floats per rank of the add that gives the memory bandwidth: far larger than the caches
KERNEL_STAGES = {
    "inner_broadcast": (lambda h, x: x * h.col, 2.0),  # a LayerNorm's x * rstd, (n, d) by (n, 1)
    "reduce": (
        lambda h, x: x - x.sum(dim=0, keepdim=True),
        1.0,
    ),  # a bias gradient; the row subtract costs `plain`
    "transcendental": (lambda h, x: flow.nn.functional.gelu(x), 2.0),
}


def _add_chain(place, elems: int) -> _Chain:
    return _Chain(
        _Holder(x=split_ones(place, elems), y=split_ones(place, elems)), lambda h, x: x + h.y
    )


def _device(place, rows: int, width: int) -> Tuple[float, float, float, Dict[str, float]]:
    """(FLOP/s, seconds per op, memory bandwidth, bytes/s per kernel kind) of one rank, all ranks
    at once, the chains taking turns: the kinds' figures are read against one another (a kind's
    bandwidth is net of the cost per op, the reduction's also of its row subtract), so they must
    not be taken at different loads. Matmuls of rows x width by width x width per rank, adds of 16
    and of ADD_ELEMS floats, the kinds on KERNEL_ROWS x KERNEL_WIDTH."""
    n = flow.env.get_world_size()
    holder = _Holder(
        x=split_ones(place, KERNEL_ROWS * n, KERNEL_WIDTH),
        col=split_ones(place, KERNEL_ROWS * n, 1),
        row=broadcast_ones(place, 1, KERNEL_WIDTH),
    )
    matmul = _Chain(
        _Holder(x=split_ones(place, rows * n, width), w=broadcast_ones(place, width, width)),
        lambda h, x: flow.matmul(x, h.w),
    )
    kinds = list(KERNEL_STAGES)
    chains = [
        matmul,
        _add_chain(place, 16 * n),
        _add_chain(place, ADD_ELEMS * n),
        _Chain(holder, lambda h, x: x - h.row),
    ]
    matmul_s, overhead, add, plain, *timed = (
        t / STAGES
        for t in step_times(*chains, *(_Chain(holder, KERNEL_STAGES[k][0]) for k in kinds))
    )
    array = 4 * KERNEL_ROWS * KERNEL_WIDTH
    kernels = {
        kind: KERNEL_STAGES[kind][1]
        * array
        / max(t - (plain if kind == "reduce" else overhead), 1e-9)
        for kind, t in zip(kinds, timed)
    }
    return (
        2 * rows * width * width / matmul_s,
        overhead,
        3 * 4 * ADD_ELEMS / max(add - overhead, 1e-9),
        kernels,
    )


class _Params(flow.nn.Module):
    """STAGES parameters of `elems` floats per rank, split; the loss sums them all."""

    def __init__(self, place, elems: int):
        super().__init__()
        n = flow.env.get_world_size()
        for i in range(STAGES):
            setattr(self, f"w{i}", flow.nn.Parameter(split_ones(place, elems * n) * 0.01))

    def forward(self):
        return sum(getattr(self, f"w{i}").sum() for i in range(STAGES))


class _TrainStep(flow.nn.Graph):
    def __init__(self, params: _Params, optimizer):
        super().__init__()
        self.params = params
        self.add_optimizer(optimizer)

    def build(self):
        loss = self.params()
        loss.backward()
        return loss


# Per optimizer update kind (cost.cluster.KERNEL_KINDS): the optimizer, and the bytes its update op
# reads and writes an element as cost.compute counts them (parameter, gradient, state).
UPDATE_KINDS = {
    "sgd_update": (lambda params: flow.optim.SGD(params, lr=0.01), 8.0),
    "momentum_update": (lambda params: flow.optim.SGD(params, lr=0.01, momentum=0.9), 12.0),
    "adam_update": (lambda params: flow.optim.Adam(params, lr=1e-3), 16.0),
}
UPDATE_SIZES = (1024, 1 << 18)  # floats per rank of each parameter, in the two train steps


def _update_bandwidths(place, membw: float) -> dict:
    """Bytes/s of each optimizer update: train steps over STAGES parameters at two sizes, the
    time an element takes, net of the forward sum and the backward fill (a plain pass each)."""
    out = {}
    for kind, (make, nbytes) in UPDATE_KINDS.items():
        steps = []
        for elems in UPDATE_SIZES:
            params = _Params(place, elems)
            steps.append(_TrainStep(params, make(params.parameters())))
        times = step_times(*steps)
        small, big = UPDATE_SIZES
        per_element = (times[1] - times[0]) / (STAGES * (big - small)) - 2 * 4 / membw
        out[kind] = nbytes / max(per_element, 1e-12)
    return out


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


def _boxing_stage(moves):
    def stage(h, x):
        x = x * 1.0
        for sbp in moves:
            x = x.to_global(sbp=_SBP[sbp])
        return x

    return stage


def _collective(
    place, kind: str, sizes: Tuple[int, ...], width: int
) -> List[Tuple[float, float, float]]:
    """(seconds, bytes sent, messages) per rank of one `kind` on a rows x width float tensor, for
    rows in `sizes`: each boxed chain against the same chain without the boxing, all in turns."""
    start, moves, (src, dst), times = COLLECTIVE_STAGES[kind]
    n = flow.env.get_world_size()
    chains = []
    for rows in sizes:
        holder = _Holder(
            x=flow.ones(rows, width).to_global(place, flow.sbp.broadcast).to_global(sbp=_SBP[start])
        )
        chains += [_Chain(holder, _boxing_stage(moves)), _Chain(holder, _boxing_stage(()))]
    measured = step_times(*chains)
    out = []
    for rows, boxed, plain in zip(sizes, measured[0::2], measured[1::2]):
        nbytes = 4.0 * rows * width
        sent = oneflow_cpu_axis_cost(src, dst, nbytes, rows * width, n, Link(1.0, 0.0)).bytes
        messages = oneflow_cpu_axis_cost(
            src, dst, nbytes, rows * width, n, Link(math.inf, 1.0)
        ).time
        out.append((max(boxed - plain, 1e-9) / (STAGES * times), sent, messages))
    return out


def _collectives(place, width: int, small: int, big: int) -> Dict[str, Dict[str, float]]:
    """Bandwidth per device and latency per message of each collective, from two sizes."""
    out = {}
    for kind in COLLECTIVE_STAGES:
        (t0, b0, m), (t1, b1, _) = _collective(place, kind, (small, big), width)
        bandwidth = (b1 - b0) / max(t1 - t0, 1e-9)
        out[kind] = {
            "bandwidth_per_device": bandwidth,
            "latency": max(t0 - b0 / bandwidth, 0.0) / m,
        }
    return out


def _overlap(place, rows: int, width: int, latency: float) -> float:
    """The fraction of an all-gather chain's moving time that runs hidden behind an independent
    matmul chain, as cost.schedule uses it: there a boxing's latency holds no stream on CPU
    (boxings wait on their peers at once) and only the moving time (less this fraction) holds
    the compute, so the chain's latency (`latency` a message, from the all-gather's calibration)
    and its local copies are taken out before the fraction is formed. Counted in, the hidden
    waits alone read as overlap (0.28 and 0.40 in two calibrations on 4 ranks of 2 cores; this
    reads 0 to 0.11)."""
    holder = _Holder(
        x=split_ones(place, rows, width),
        w=broadcast_ones(place, width, width),
        z=split_ones(place, rows, width),
    )
    matmul, gather, copies = (
        (lambda h, x: flow.matmul(x, h.w)),
        _boxing_stage(("B", "S0")),
        _boxing_stage(()),
    )
    alone, gathered, copied, both = step_times(
        *(_Chain(holder, stage) for stage in (matmul, gather, copies)),
        _Chain(holder, matmul, beside=gather),
    )
    n = flow.env.get_world_size()
    messages = oneflow_cpu_axis_cost(
        S(0), B, 4.0 * rows * width, rows * width, n, Link(math.inf, 1.0)
    ).time
    moving = gathered - copied - STAGES * messages * latency
    if moving <= 0:
        return 0.0
    return min(max((alone + gathered - STAGES * messages * latency - both) / moving, 0.0), 1.0)


def measure(out: str, command: str, repeats: int = REPEATS) -> dict:
    global _repeats
    _repeats = repeats
    n = flow.env.get_world_size()
    if n < 2:
        raise SystemExit("calibrate needs at least 2 ranks")
    place = flow.placement("cpu", ranks=list(range(n)))
    width, big, small = 256, 1024 * n, 16 * n
    flops, overhead, membw, kernels = _device(place, big // n, width)
    kernels.update(_update_bandwidths(place, membw))
    collectives = _collectives(place, width, small, big)
    gather = collectives["all_gather"]
    overlap = _overlap(place, big, width, gather["latency"])
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    data = {
        "name": "cpu-local",
        "backend": "oneflow-cpu",
        "nodes": 1,
        "devices_per_node": n,
        "device": {
            "name": f"CPU rank ({platform.machine()}, {os.cpu_count()} cores shared by {n} ranks)",
            "memory_bytes": float(mem_total // n),
            "flops": {"float32": flops},
            "memory_bandwidth": membw,
            "kernel_bandwidth": kernels,
            "op_overhead": overhead,
            "comm_overlap": overlap,
        },
        "links": {
            "intra_node": dict(gather, collectives=collectives),
            "inter_node": {
                "bandwidth_per_node": gather["bandwidth_per_device"] * n,
                "latency": gather["latency"],
                "collectives": {
                    k: {
                        "bandwidth_per_node": c["bandwidth_per_device"] * n,
                        "latency": c["latency"],
                    }
                    for k, c in collectives.items()
                },
            },
        },
        "source": f"measured {time.strftime('%Y-%m-%d')} on {platform.node()} by `{command}`: "
        f"{n} OneFlow {flow.__version__} CPU ranks at once, in nn.Graphs of {STAGES} stages "
        f"(median of {repeats} steps, the graphs a figure is read from taking turns): float32 "
        f"matmuls ({big // n}x{width} by {width}x{width} per rank), elementwise adds of "
        f"{ADD_ELEMS} floats (and of 16, the cost per op), on {KERNEL_ROWS}x{KERNEL_WIDTH} floats "
        f"x * ({KERNEL_ROWS}, 1), x - x.sum(0) and gelu(x), train steps of SGD, momentum and Adam "
        f"over {STAGES} parameters of {UPDATE_SIZES[0]} and {UPDATE_SIZES[1]} floats per rank "
        f"(kernel_bandwidth), chains of each collective on "
        f"{small}x{width} and {big}x{width} floats against the chains without it (links; the base "
        f"figures are the all-gather's), and the matmul chain beside an all-gather chain "
        f"(comm_overlap). One machine, so inter-node = intra-node.",
    }
    cluster_from_json(data)
    if flow.env.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return data


if __name__ == "__main__":
    measure(sys.argv[1], " ".join(sys.argv[3:]), int(sys.argv[2]) if sys.argv[2] else REPEATS)
