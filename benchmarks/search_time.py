"""How long planning takes: beside OneFlow's native pass, and against graph and mesh size.

    python -m benchmarks.search_time [--json times.json]
    python -m benchmarks.search_time --zoo alexnet,vgg11_bn [--zoo-meshes 2,2x2] [--json F]
    python -m benchmarks.search_time --logged [--zoo alexnet,vgg11_bn] [--zoo-meshes 2]

1. The examples' GPT and VGG at their default sizes, traced on 2, 4 and 2 x 2 CPU ranks: the
   native pass's time (what it adds to a trace: rank_bench.native_pass_seconds) beside AutoDDL's
   plan of the same Job with rank 0 planning alone and with every rank planning together
   (and whether the two plans are the same).
   With --zoo, instead the same for flowvision models as benchmarks.zoo builds them, and no 2.
2. The built-in GPT-3 (hidden 12288, 96 heads, sequence 2048, batch 128) on dgx-a100:
   search time for 12, 24, 48 and 96 layers on 128x8 (1,024 devices), and for 96 layers on
   meshes of 8, 8x8, 16x8 and 128x8 (no memory limit, so every mesh has a plan). One core,
   one process, in the order printed.

With --logged, instead of 1: the native pass's time as OneFlow itself logs it (the ranks run
with glog verbosity 1: rank_bench.traced_with_pass_log), beside rank 0's AutoDDL search of the
same model, taken in turns over --traces traces: the examples' GPT and VGG on 2 and 2 x 2, or
the --zoo models on --zoo-meshes.
"""

import argparse
import math
import os
import time
from typing import Sequence

from benchmarks.bench import PASS_LOG_ENV, on_ranks, show, write_json
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.planner import plan

GPT3 = dict(hidden=12288, heads=96, seq_len=2048, vocab=50257, batch=128)
# examples/gpt.py's and examples/vgg.py's defaults
EXAMPLE_SIZES = {
    "gpt": {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 32, "vocab": 256},
    "vgg": {"depth": 16, "width_mult": 0.125, "image_size": 32, "num_classes": 10},
}


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


def traced_rows(meshes=("2", "4", "2x2")):
    """The examples' GPT and VGG at their default sizes, traced on the ranks of each mesh."""
    rows = []
    for mesh in meshes:
        for model, batch in (("gpt", 8), ("vgg", 16)):
            sizes = EXAMPLE_SIZES[model]
            rows.append(
                on_ranks(
                    "benchmarks.rank_bench:planning_time",
                    mesh,
                    model=model,
                    sizes=sizes,
                    batch=batch,
                )[0]
            )
    return rows


def zoo_rows(models: Sequence[str], meshes: Sequence[str]):
    """flowvision models as benchmarks.zoo builds them (their own image size and batch), traced
    on the ranks of each mesh."""
    return [
        on_ranks(
            "benchmarks.rank_bench:planning_time",
            mesh,
            model=model,
            batch=None,
            builder="examples.zoo",
        )[0]
        for mesh in meshes
        for model in models
    ]


def logged_rows(cases, builder: str, traces: int):
    """rank_bench.pass_and_planning for each (model, mesh, batch, sizes) of `cases`, the ranks
    launched with benchmarks.bench.PASS_LOG_ENV."""
    os.environ.update(PASS_LOG_ENV)
    return [
        on_ranks(
            "benchmarks.rank_bench:pass_and_planning",
            mesh,
            model=model,
            traces=traces,
            batch=batch,
            sizes=sizes,
            builder=builder,
        )[0]
        for model, mesh, batch, sizes in cases
    ]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--skip-traced", action="store_true", help="only the built-in GPT-3 part (no ranks)"
    )
    parser.add_argument(
        "--zoo",
        default=None,
        help="instead: these zoo models (comma-separated, examples/zoo.py names) on --zoo-meshes",
    )
    parser.add_argument("--zoo-meshes", default="2")
    parser.add_argument(
        "--logged", action="store_true", help="the native pass's own logged time (see above)"
    )
    parser.add_argument("--traces", type=int, default=4, help="with --logged: traces a model")
    args = parser.parse_args()
    if args.logged:
        if args.zoo:
            meshes = args.zoo_meshes.split(",")
            cases = [(m, mesh, None, None) for mesh in meshes for m in args.zoo.split(",")]
        else:
            cases = [
                (model, mesh, batch, EXAMPLE_SIZES[model])
                for mesh in ("2", "2x2")
                for model, batch in (("gpt", 8), ("vgg", 16))
            ]
        builder = "examples.zoo" if args.zoo else "examples.models"
        rows = logged_rows(cases, builder, args.traces)
        columns = ["model", "mesh", "ops", "pass_s", "search_s", "passes_s", "searches_s"]
        heads = ["model", "mesh", "ops", "native pass s (logged)", "AutoDDL search s"]
        print(show(rows, columns, heads + ["each pass s", "each search s"]))
        write_json(args.json, {"logged": rows})
        return
    if args.zoo:
        traced = zoo_rows(args.zoo.split(","), args.zoo_meshes.split(","))
    else:
        traced = [] if args.skip_traced else traced_rows()
    if traced:
        print(
            show(
                traced,
                ["model", "mesh", "ops", "native_s", "alone_s", "together_s", "same_plan"],
                [
                    "model",
                    "mesh",
                    "ops",
                    "native pass s",
                    "AutoDDL, rank 0 alone s",
                    "AutoDDL, every rank s",
                    "same plan",
                ],
            )
        )
        print()
    if args.zoo:
        write_json(args.json, {"traced": traced})
        return
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
