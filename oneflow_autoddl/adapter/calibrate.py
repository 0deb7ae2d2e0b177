"""Measure a `cpu-local` cluster: CPU ranks of this machine talking through OneFlow's CommNet.

Run on N ranks (`python -m oneflow_autoddl calibrate --nproc N --out FILE` launches them).
Each rank measures, all at once as in training (they share the cores):
  - compute: a float32 matmul, FLOP/s;
  - memory bandwidth: an elementwise add over arrays far larger than the caches;
  - link: the step time of an nn.Graph whose only traffic is an S(0) -> B all-gather, at
    two sizes, against the same graph without the transfer; bytes per rank are exact
    (cost.boxing), so the slope is the bandwidth and the intercept per message the latency.
Rank 0 writes the cluster JSON, with the date, machine and command in its `source`.
"""
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable, List

import oneflow as flow

from ..cost.boxing import MESSAGE_OVERHEAD
from ..cost.cluster import cluster_from_json

REPEATS = 7


def _median_time(fn: Callable[[], None], repeats: int = REPEATS) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _matmul_flops(n: int = 512) -> float:
    a, b = flow.randn(n, n), flow.randn(n, n)
    return 2 * n ** 3 / _median_time(lambda: flow.matmul(a, b).numpy())


def _memory_bandwidth(n: int = 1 << 23) -> float:
    a, b = flow.randn(n), flow.randn(n)
    return 3 * 4 * n / _median_time(lambda: (a + b).numpy())


class _Holder(flow.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w


class _Gather(flow.nn.Graph):
    """w (S(0) over all ranks) -> all-gather to B -> sum; or the same without the gather."""

    def __init__(self, w, gather: bool):
        super().__init__()
        self.holder, self.gather = _Holder(w), gather

    def build(self):
        x = self.holder.w * 1.0
        if self.gather:
            x = x.to_global(sbp=flow.sbp.broadcast)
        return x.sum()


def _step_time(elems: int, gather: bool, place) -> float:
    w = flow.nn.Parameter(flow.ones(elems).to_global(place, flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0)))
    g = _Gather(w, gather)
    g().numpy()
    flow.comm.barrier()
    return _median_time(lambda: g().numpy(), REPEATS * 2)


def _link(place, n: int):
    """(bandwidth bytes/s, latency s per message) from two all-gathers against no transfer."""
    small, big = 1 << 10, 1 << 22
    t = {}
    for elems in (small, big):
        t[elems] = _step_time(elems, True, place) - _step_time(elems, False, place)
    sent = {e: (n - 1) * (4 * e / n + MESSAGE_OVERHEAD) for e in (small, big)}
    bandwidth = (sent[big] - sent[small]) / max(t[big] - t[small], 1e-9)
    latency = max(t[small] - sent[small] / bandwidth, 0.0) / (n - 1)
    return bandwidth, latency


def _gather_floats(x: float) -> List[float]:
    t = flow.tensor([x], dtype=flow.float64).to_global(
        flow.placement("cpu", ranks=list(range(flow.env.get_world_size()))), flow.sbp.split(0))
    return t.to_global(sbp=flow.sbp.broadcast).numpy().tolist()


def measure(out: str, command: str) -> dict:
    n = flow.env.get_world_size()
    if n < 2:
        raise SystemExit("calibrate needs at least 2 ranks")
    place = flow.placement("cpu", ranks=list(range(n)))
    flops = min(_gather_floats(_matmul_flops()))
    membw = min(_gather_floats(_memory_bandwidth()))
    bandwidth, latency = _link(place, n)
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    data = {
        "name": "cpu-local", "backend": "oneflow-cpu", "nodes": 1, "devices_per_node": n,
        "device": {"name": f"CPU rank ({platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                           f"shared by {n} ranks)",
                   "memory_bytes": float(mem_total // n), "flops": {"float32": flops}, "memory_bandwidth": membw},
        "links": {"intra_node": {"bandwidth_per_device": bandwidth, "latency": latency},
                  "inter_node": {"bandwidth_per_node": bandwidth * n, "latency": latency}},
        "source": f"measured {time.strftime('%Y-%m-%d')} on {platform.node()} by `{command}`: {n} OneFlow "
                  f"{flow.__version__} CPU ranks at once; float32 matmul 512^3, elementwise add of 2^23 floats, "
                  f"and S(0)->B all-gathers of 4 KiB and 16 MiB in an nn.Graph against no transfer "
                  f"(median of {REPEATS * 2} steps). One machine, so inter-node = intra-node.",
    }
    cluster_from_json(data)
    if flow.env.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return data


if __name__ == "__main__":
    measure(sys.argv[1], " ".join(sys.argv[2:]) or "python -m oneflow_autoddl calibrate")
