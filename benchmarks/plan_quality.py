"""AutoDDL's plans beside the expert plans, predicted for clusters we do not have.

    python -m benchmarks.plan_quality [--quick] [--json quality.json]

GPT 2.7B, 13B and 175B and VGG16 on meshes of 8, 2x4, 8x8, 16x64 and 128x8 devices of the
dgx-a100 preset, and on 8 and 16x64 nodes of piz-daint (one P100 per node): predicted step
time of AutoDDL, data parallel, Megatron-style and ZeRO-style, whether each fits the
device memory, and bytes sent per device over the sum of the matmuls' communication lower
bounds. A row's global batch is the largest of 8 per device, 1 per device and 1 per
device of mesh axis 0 that some plan fits in memory. AutoDDL must be no slower than the
fastest baseline that fits, in every row.
"""

import argparse
import math

from benchmarks.bench import show, write_json
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.errors import PlanningError
from oneflow_autoddl.models import build_gpt, build_vgg
from oneflow_autoddl.planner import plan
from oneflow_autoddl.search.fit import Memory
from oneflow_autoddl.search.problem import build_problem

GPTS = {
    "gpt-2.7b": dict(layers=32, hidden=2560, heads=32, seq_len=2048, vocab=50257),
    "gpt-13b": dict(layers=40, hidden=5120, heads=40, seq_len=2048, vocab=50257),
    "gpt-175b": dict(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257),
}
MESHES = {"dgx-a100": [(8,), (2, 4), (8, 8), (16, 64), (128, 8)], "piz-daint": [(8,), (16, 64)]}
QUICK = [
    ("gpt-2.7b", (2, 4), "dgx-a100"),
    ("vgg16", (8,), "dgx-a100"),
    ("vgg16", (8,), "piz-daint"),
]
BASELINES = ("data_parallel", "megatron", "zero")


def graph_of(model, mesh, batch):
    if model == "vgg16":
        return build_vgg(16, 1.0, 224, 1000, batch, mesh)
    return build_gpt(mesh=mesh, batch=batch, **GPTS[model])


def least_peak(model, mesh, batch, cluster) -> float:
    """The least memory any plan holds at its peak (search.fit.Memory's lower bound)."""
    return float(Memory(build_problem(graph_of(model, mesh, batch), cluster)).least().max())


def batch_for(model, mesh, cluster):
    """The largest candidate batch where some plan could fit the device memory (None if none)."""
    devices = math.prod(mesh)
    for batch in (8 * devices, devices, mesh[0]):
        if least_peak(model, mesh, batch, cluster) <= cluster.memory_bytes:
            return batch
    return None


def row(model, mesh, cluster_name):
    cluster = load_cluster(cluster_name)
    r = {"model": model, "mesh": "x".join(map(str, mesh)), "cluster": cluster_name}
    batch = batch_for(model, mesh, cluster)
    if batch is None:
        need = least_peak(model, mesh, mesh[0], cluster)
        return dict(r, batch="-", note=f"no plan fits: needs {need / 2**30:.0f} GiB/device")
    try:
        p = plan(graph_of(model, mesh, batch), cluster)
    except PlanningError as e:  # the least peak fits, but the search found no plan that does
        return dict(r, batch=batch, autoddl_no_worse=False, note=f"AutoDDL: {e}")
    r.update(
        batch=batch,
        autoddl_s=p.predicted.step_time_s,
        search_s=p.search_time_s,
        bytes_over_bound=p.predicted.bytes_per_device / p.lower_bound_bytes
        if p.lower_bound_bytes
        else None,
    )
    fitting = []
    for name in BASELINES:
        b = p.baselines[name]
        fits = b.peak_memory_per_device <= p.memory_limit_bytes
        r[name + "_s"] = b.step_time_s
        r[name + "_fits"] = fits
        if fits:
            fitting.append(b.step_time_s)
    r["best_fitting_baseline_s"] = min(fitting) if fitting else None
    r["autoddl_no_worse"] = not fitting or p.predicted.step_time_s <= min(fitting) * (1 + 1e-9)
    r["note"] = "" if fitting else "no baseline fits"
    return r


def _cell(r, name):
    if name + "_s" not in r:
        return "-"
    return f"{r[name + '_s']:.4g}" + ("" if r[name + "_fits"] else " (no fit)")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="three rows that run in seconds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cases = (
        QUICK
        if args.quick
        else [
            (m, mesh, c)
            for c, meshes in MESHES.items()
            for mesh in meshes
            for m in list(GPTS) + ["vgg16"]
        ]
    )
    rows = [row(*case) for case in cases]
    table = [dict(r, **{n: _cell(r, n) for n in BASELINES}) for r in rows]
    print(
        show(
            [
                dict(
                    t,
                    autoddl=f"{t.get('autoddl_s', float('nan')):.4g}",
                    ratio=f"{t['bytes_over_bound']:.2f}" if t.get("bytes_over_bound") else "-",
                    search=f"{t.get('search_s', 0):.1f}",
                )
                for t in table
            ],
            [
                "model",
                "mesh",
                "cluster",
                "batch",
                "autoddl",
                "data_parallel",
                "megatron",
                "zero",
                "ratio",
                "search",
                "note",
            ],
            [
                "model",
                "mesh",
                "cluster",
                "batch",
                "AutoDDL s/step",
                "DP s/step",
                "Megatron s/step",
                "ZeRO s/step",
                "bytes / bound",
                "search s",
                "note",
            ],
        )
    )
    worse = [r for r in rows if not r.get("autoddl_no_worse", True)]
    print(
        f"\nAutoDDL no slower than the fastest fitting baseline in "
        f"{len(rows) - len(worse)} of {len(rows)} rows"
    )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
