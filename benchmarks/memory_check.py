"""Predicted against measured memory per rank, on real CPU ranks.

    python -m benchmarks.memory_check [--meshes 2x2] [--models gpt,vgg] [--json rows.json]

The examples' GPT and VGG at the tests' sizes (examples.models) under data parallel,
Megatron-style and AutoDDL plans: the peak a device holds over a step as cost.memory predicts
it for the plan, beside what OneFlow allocates on each rank for the compiled graph (its Plan's
memory blocks, adapter.plan_memory: on CPU ranks every blob is allocated and zero-filled once,
so this is what a rank holds), without OneFlow's control registers. OneFlow reuses no memory
on CPU, so the peak there is the sum of every blob of the step.
"""

import argparse

from benchmarks.bench import on_ranks, show, write_json

PLANS = ["dp", "megatron", "autoddl"]


def check(meshes, models, plans=PLANS, batch=8):
    rows = []
    for mesh in meshes:
        rows += on_ranks(
            "benchmarks.rank_memory:measure", mesh, models=models, plans=plans, batch=batch
        )[0]
    return rows


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--meshes", default="2x2")
    parser.add_argument("--models", default="gpt,vgg")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = check(args.meshes.split(","), args.models.split(","))
    for r in rows:
        r["predicted_mib"] = r["predicted_bytes"] / 2**20
        r["measured_mib"] = r["measured_bytes"] / 2**20
        r["error_pct"] = 100 * r["error"]
    print(
        show(
            rows,
            ["model", "mesh", "plan", "predicted_mib", "measured_mib", "error_pct"],
            ["model", "mesh", "plan", "predicted MiB", "measured MiB", "error %"],
        )
    )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
