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
  - link: the same matmul chain with an S(0) -> B all-gather after each matmul, at two
    sizes, against the chain without it; bytes per rank are exact (cost.boxing), so the
    two points give the bandwidth and the latency per message, stalls included.
Rank 0 writes the cluster JSON, with the date, machine and command in its `source`.
"""
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable

import oneflow as flow

from ..cost.boxing import MESSAGE_OVERHEAD
from ..cost.cluster import cluster_from_json

STAGES = 16
REPEATS = 9


class _Holder(flow.nn.Module):
    def __init__(self, **tensors):
        super().__init__()
        for name, t in tensors.items():
            setattr(self, name, flow.nn.Parameter(t, requires_grad=False))


class _Chain(flow.nn.Graph):
    """STAGES stages of `stage(holder, x)`; the output is summed so nothing is pruned."""

    def __init__(self, holder, stage: Callable):
        super().__init__()
        self.holder, self.stage = holder, stage

    def build(self):
        x = self.holder.x
        for _ in range(STAGES):
            x = self.stage(self.holder, x)
        return x.sum()


def _step_time(graph) -> float:
    graph().numpy()
    flow.comm.barrier()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        graph().numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _split(place, *shape):
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))


def _bcast(place, *shape):
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast) * 0.01


def _matmul_chain(place, rows: int, width: int, gather: bool) -> float:
    holder = _Holder(x=_split(place, rows, width), w=_bcast(place, width, width))

    def stage(h, x):
        y = flow.matmul(x, h.w)
        if gather:
            y = y.to_global(sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
        return y
    return _step_time(_Chain(holder, stage))


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


def measure(out: str, command: str) -> dict:
    n = flow.env.get_world_size()
    if n < 2:
        raise SystemExit("calibrate needs at least 2 ranks")
    place = flow.placement("cpu", ranks=list(range(n)))
    width, big, small = 256, 1024 * n, 16 * n
    compute_s = _matmul_chain(place, big, width, gather=False) / STAGES
    flops = 2 * (big // n) * width * width / compute_s
    overhead = _add_chain(place, 16 * n) / STAGES
    elems = (1 << 22) * n
    membw = 3 * 4 * (elems // n) / max(_add_chain(place, elems) / STAGES - overhead, 1e-9)
    kernels = _kernel_bandwidths(place, 256, overhead)
    stage = {}
    for rows in (small, big):
        plain = _matmul_chain(place, rows, width, gather=False)
        stage[rows] = max((_matmul_chain(place, rows, width, gather=True) - plain) / STAGES, 1e-9)
    sent = {rows: (n - 1) * (4 * rows * width / n + MESSAGE_OVERHEAD) for rows in (small, big)}
    bandwidth = (sent[big] - sent[small]) / max(stage[big] - stage[small], 1e-9)
    latency = max(stage[small] - sent[small] / bandwidth, 0.0) / (n - 1)
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    data = {
        "name": "cpu-local", "backend": "oneflow-cpu", "nodes": 1, "devices_per_node": n,
        "device": {"name": f"CPU rank ({platform.machine()}, {os.cpu_count()} cores shared by {n} ranks)",
                   "memory_bytes": float(mem_total // n), "flops": {"float32": flops}, "memory_bandwidth": membw,
                   "kernel_bandwidth": kernels, "op_overhead": overhead},
        "links": {"intra_node": {"bandwidth_per_device": bandwidth, "latency": latency},
                  "inter_node": {"bandwidth_per_node": bandwidth * n, "latency": latency}},
        "source": f"measured {time.strftime('%Y-%m-%d')} on {platform.node()} by `{command}`: {n} OneFlow "
                  f"{flow.__version__} CPU ranks at once, in nn.Graphs of {STAGES} stages (median of {REPEATS} "
                  f"steps): float32 matmuls ({big // n}x{width} by {width}x{width} per rank), elementwise adds "
                  f"of {elems // n} floats (and of 16, the cost per op), on 256x{KERNEL_WIDTH} floats x * (256, 1), "
                  f"x - x.sum(0) and gelu(x) (kernel_bandwidth), and the matmul chain with an S(0)->B all-gather after each matmul "
                  f"({small}x{width} and {big}x{width} floats) against it without. One machine, so "
                  f"inter-node = intra-node.",
    }
    cluster_from_json(data)
    if flow.env.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return data


if __name__ == "__main__":
    measure(sys.argv[1], " ".join(sys.argv[2:]) or "python -m oneflow_autoddl calibrate")
