"""How long planning takes: beside OneFlow's native pass, and against graph and mesh size.

    python -m benchmarks.search_time [--json times.json]

1. On the Jobs of benchmarks/compare_plans.py (traced on 4 CPU ranks, 1-D and 2x2): the
   native pass's time (build_graph with enable_auto_parallel on, minus off) beside
   AutoDDL's plan of the same Job, on rank 0.
2. The built-in GPT-3 (hidden 12288, 96 heads, sequence 2048, batch 128) on dgx-a100:
   search time for 12, 24, 48 and 96 layers on 128x8 (1,024 devices), and for 96 layers on
   meshes of 8, 8x8, 16x8 and 128x8 (no memory limit, so every mesh has a plan). One core,
   one process, in the order printed.
"""

import argparse
import math
import time

from benchmarks.bench import on_ranks, show, write_json
from benchmarks.compare_plans import GPT, VGG
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.planner import plan

GPT3 = dict(hidden=12288, heads=96, seq_len=2048, vocab=50257, batch=128)


def builtin_rows(layers_list=(12, 24, 48, 96), meshes=((8,), (8, 8), (16, 8), (128, 8))):
    rows = []
    for layers, mesh in [(n, (128, 8)) for n in layers_list] + [
        (96, m) for m in meshes if m != (128, 8)
    ]:
        start = time.perf_counter()
        graph = build_gpt(layers, mesh=mesh, **GPT3)
        built = time.perf_counter() - start
        result = plan(graph, "dgx-a100", memory_limit=math.inf)
        rows.append(
            {
                "layers": layers,
                "mesh": "x".join(map(str, mesh)),
                "devices": math.prod(mesh),
                "ops": len(graph.ops),
                "build_s": built,
                "search_s": result.search_time_s,
                "total_s": time.perf_counter() - start,
            }
        )
    return rows


def traced_rows(meshes=("4", "2x2")):
    rows = []
    for mesh in meshes:
        rows += on_ranks(
            "benchmarks.rank_bench:native_pass_time",
            mesh,
            models=["gpt", "vgg"],
            sizes_by_model={"gpt": GPT, "vgg": VGG},
            batch_by_model={"gpt": 8, "vgg": 16},
        )[0]
    return rows


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--skip-traced", action="store_true", help="only the built-in GPT-3 part (no ranks)"
    )
    args = parser.parse_args()
    traced = [] if args.skip_traced else traced_rows()
    if traced:
        print(
            show(
                traced,
                ["model", "mesh", "ops", "native_s", "ours_s", "ours_search_s"],
                ["model", "mesh", "ops", "native pass s", "AutoDDL plan s", "of which search s"],
            )
        )
        print()
    builtin = builtin_rows()
    print(
        show(
            builtin,
            ["layers", "mesh", "devices", "ops", "build_s", "search_s", "total_s"],
            ["GPT-3 layers", "mesh", "devices", "ops", "build s", "search s", "total s"],
        )
    )
    write_json(args.json, {"traced": traced, "builtin": builtin})


if __name__ == "__main__":
    main()
