"""Measure a `cpu-local` cluster: CPU ranks of this machine talking through OneFlow's CommNet.

Run on N ranks (`python -m oneflow_autoddl calibrate --nproc N --out FILE` launches them).
Everything is measured the way a training step runs: inside compiled nn.Graphs, on all
ranks at once (they share the cores), as the median over many steps of chains of STAGES
identical stages:
  - compute: each stage a float32 matmul, FLOP/s from the step time;
  - the cost of any op: each stage an add of 16 floats;
  - memory bandwidth: each stage an elementwise add over arrays far larger than the caches;
  - kernel bandwidths (cost.cluster.KERNEL_KINDS): stages of the kernels OneFlow's CPU
    build runs far below that (an inner broadcast, a reduction, GELU), at a LayerNorm's size;
  - links: each collective (cost.cluster.COLLECTIVES) as stages of a boxing there and a
    move back (local, but for the all-to-all: a second one), at two sizes, against the
    chain of the same stages without the boxing; bytes per rank are exact (cost.boxing),
    so the two points give the bandwidth and the latency per message, stalls included.
    OneFlow's CPU boxing runs them at rates far apart (2026-12-02, 4 ranks, `--repeats 15`:
    a reduce-scatter at 187 MB/s per rank, an all-gather at 377);
  - overlap: the matmul chain beside an independent all-gather chain in one graph, against
    each alone (0 when the pair takes their sum, 1 when it takes the longer one).
Rank 0 writes the cluster JSON, with the date, machine and command in its `source`.
"""
import json
import os
import platform
import statistics
import sys
import time
import math
from typing import Callable, Dict, Optional, Tuple

import oneflow as flow

from ..cost.boxing import oneflow_cpu_axis_cost
from ..cost.cluster import Link, cluster_from_json
from ..sbp import B, P, S

STAGES = 16
REPEATS = 9  # steps timed per chain, the median taken (`calibrate --repeats` for a quicker, noisier run)
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


def _step_time(graph) -> float:
    graph().numpy()
    flow.comm.barrier()
    times = []
    for _ in range(_repeats):
        start = time.perf_counter()
        graph().numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _split(place, *shape):
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))


def _bcast(place, *shape):
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast) * 0.01


def _matmul_chain(place, rows: int, width: int) -> float:
    holder = _Holder(x=_split(place, rows, width), w=_bcast(place, width, width))
    return _step_time(_Chain(holder, lambda h, x: flow.matmul(x, h.w)))


def _add_chain(place, elems: int) -> float:
    holder = _Holder(x=_split(place, elems), y=_split(place, elems))
    return _step_time(_Chain(holder, lambda h, x: x + h.y))


# Per kernel kind (cost.cluster.KERNEL_KINDS): a stage as the GPT and VGG graphs run it on
# rows x KERNEL_WIDTH floats per rank, and the bytes it reads and writes in units of that array.
KERNEL_WIDTH = 512
KERNEL_STAGES = {
    "inner_broadcast": (lambda h, x: x * h.col, 2.0),  # a LayerNorm's x * rstd, (n, d) by (n, 1)
    "reduce": (lambda h, x: x - x.sum(dim=0, keepdim=True), 1.0),  # a bias gradient; the row subtract costs `plain`
    "transcendental": (lambda h, x: flow.nn.functional.gelu(x), 2.0),
}


def _kernel_bandwidths(place, rows: int, overhead: float) -> dict:
    """Bytes/s of each kernel kind, net of the fixed cost per op and (reduce) of its row subtract."""
    n = flow.env.get_world_size()
    holder = _Holder(x=_split(place, rows * n, KERNEL_WIDTH), col=_split(place, rows * n, 1),
                     row=_bcast(place, 1, KERNEL_WIDTH))
    array = 4 * rows * KERNEL_WIDTH
    plain = _step_time(_Chain(holder, lambda h, x: x - h.row)) / STAGES
    out = {}
    for kind, (stage, arrays) in KERNEL_STAGES.items():
        t = _step_time(_Chain(holder, stage)) / STAGES - (plain if kind == "reduce" else overhead)
        out[kind] = arrays * array / max(t, 1e-9)
    return out


_SBP = {"S0": flow.sbp.split(0), "S1": flow.sbp.split(1), "B": flow.sbp.broadcast, "P": flow.sbp.partial_sum}
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


def _collective(place, kind: str, rows: int, width: int) -> Tuple[float, float, float]:
    """(seconds, bytes sent, messages) per rank of one `kind` on a rows x width float tensor."""
    start, moves, (src, dst), times = COLLECTIVE_STAGES[kind]
    n = flow.env.get_world_size()
    holder = _Holder(x=flow.ones(rows, width).to_global(place, flow.sbp.broadcast).to_global(sbp=_SBP[start]))
    boxed = _step_time(_Chain(holder, _boxing_stage(moves)))
    plain = _step_time(_Chain(holder, _boxing_stage(())))
    nbytes = 4.0 * rows * width
    sent = oneflow_cpu_axis_cost(src, dst, nbytes, rows * width, n, Link(1.0, 0.0)).bytes
    messages = oneflow_cpu_axis_cost(src, dst, nbytes, rows * width, n, Link(math.inf, 1.0)).time
    return max(boxed - plain, 1e-9) / (STAGES * times), sent, messages


def _collectives(place, width: int, small: int, big: int) -> Dict[str, Dict[str, float]]:
    """Bandwidth per device and latency per message of each collective, from two sizes."""
    out = {}
    for kind in COLLECTIVE_STAGES:
        (t0, b0, m), (t1, b1, _) = _collective(place, kind, small, width), _collective(place, kind, big, width)
        bandwidth = (b1 - b0) / max(t1 - t0, 1e-9)
        out[kind] = {"bandwidth_per_device": bandwidth, "latency": max(t0 - b0 / bandwidth, 0.0) / m}
    return out


def _overlap(place, rows: int, width: int) -> float:
    """The fraction of an all-gather chain that runs hidden behind an independent matmul chain."""
    holder = _Holder(x=_split(place, rows, width), w=_bcast(place, width, width), z=_split(place, rows, width))
    matmul, gather = (lambda h, x: flow.matmul(x, h.w)), _boxing_stage(("B", "S0"))
    alone = _step_time(_Chain(holder, matmul)), _step_time(_Chain(holder, gather))
    both = _step_time(_Chain(holder, matmul, beside=gather))
    return min(max((sum(alone) - both) / min(alone), 0.0), 1.0)


def measure(out: str, command: str, repeats: int = REPEATS) -> dict:
    global _repeats
    _repeats = repeats
    n = flow.env.get_world_size()
    if n < 2:
        raise SystemExit("calibrate needs at least 2 ranks")
    place = flow.placement("cpu", ranks=list(range(n)))
    width, big, small = 256, 1024 * n, 16 * n
    compute_s = _matmul_chain(place, big, width) / STAGES
    flops = 2 * (big // n) * width * width / compute_s
    overhead = _add_chain(place, 16 * n) / STAGES
    elems = (1 << 22) * n
    membw = 3 * 4 * (elems // n) / max(_add_chain(place, elems) / STAGES - overhead, 1e-9)
    kernels = _kernel_bandwidths(place, 256, overhead)
    collectives = _collectives(place, width, small, big)
    overlap = _overlap(place, big, width)
    gather = collectives["all_gather"]
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    data = {
        "name": "cpu-local", "backend": "oneflow-cpu", "nodes": 1, "devices_per_node": n,
        "device": {"name": f"CPU rank ({platform.machine()}, {os.cpu_count()} cores shared by {n} ranks)",
                   "memory_bytes": float(mem_total // n), "flops": {"float32": flops}, "memory_bandwidth": membw,
                   "kernel_bandwidth": kernels, "op_overhead": overhead, "comm_overlap": overlap},
        "links": {"intra_node": dict(gather, collectives=collectives),
                  "inter_node": {"bandwidth_per_node": gather["bandwidth_per_device"] * n, "latency": gather["latency"],
                                 "collectives": {k: {"bandwidth_per_node": c["bandwidth_per_device"] * n,
                                                     "latency": c["latency"]} for k, c in collectives.items()}}},
        "source": f"measured {time.strftime('%Y-%m-%d')} on {platform.node()} by `{command}`: {n} OneFlow "
                  f"{flow.__version__} CPU ranks at once, in nn.Graphs of {STAGES} stages (median of {repeats} "
                  f"steps): float32 matmuls ({big // n}x{width} by {width}x{width} per rank), elementwise adds "
                  f"of {elems // n} floats (and of 16, the cost per op), on 256x{KERNEL_WIDTH} floats x * (256, 1), "
                  f"x - x.sum(0) and gelu(x) (kernel_bandwidth), chains of each collective on {small}x{width} and "
                  f"{big}x{width} floats against the chains without it (links; the base figures are the "
                  f"all-gather's), and the matmul chain beside an all-gather chain (comm_overlap). One machine, so "
                  f"inter-node = intra-node.",
    }
    cluster_from_json(data)
    if flow.env.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return data


if __name__ == "__main__":
    measure(sys.argv[1], " ".join(sys.argv[3:]), int(sys.argv[2]) if sys.argv[2] else REPEATS)
