"""Predicted vs measured bytes sent per rank per step, on real CPU ranks.

    python -m benchmarks.bytes_check [--meshes 2,2x2] [--models gpt,vgg] [--json rows.json]

For the examples' GPT and VGG models (their default sizes), under data parallel,
Megatron-style and AutoDDL plans (on 2x2 the last two are 2-D plans): what each rank
sent per step (the change of `wchar` in /proc/self/io across steps, which on CPU ranks
is exactly OneFlow's CommNet traffic) beside what the cost model predicted for the plan.
"""

import argparse
import statistics

from benchmarks.bench import on_ranks, show, write_json

GPT = {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 32, "vocab": 256}
VGG = {"depth": 16, "width_mult": 0.125, "image_size": 32, "num_classes": 10}
PLANS = ["dp", "megatron", "autoddl"]


def check(meshes, models, plans=PLANS, steps=4):
    rows = []
    for mesh in meshes:
        for model in models:
            sizes, batch = (GPT, 8) if model == "gpt" else (VGG, 16)
            per_rank = on_ranks(
                "benchmarks.rank_bench:measure",
                mesh,
                model=model,
                plans=plans,
                steps=steps,
                batch=batch,
                sizes=sizes,
            )
            for i in range(len(plans)):
                measured = [r[i]["measured_bytes"] for r in per_rank]
                row = dict(
                    per_rank[0][i],
                    measured_bytes=statistics.mean(measured),
                    measured_max=max(measured),
                )
                row["error"] = row["predicted_bytes"] / row["measured_bytes"] - 1
                rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--meshes", default="2,2x2")
    parser.add_argument("--models", default="gpt,vgg")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = check(args.meshes.split(","), args.models.split(","))
    for r in rows:
        r["predicted_mib"], r["measured_mib"] = (
            r["predicted_bytes"] / 2**20,
            r["measured_bytes"] / 2**20,
        )
        r["error_pct"] = 100 * r["error"]
    print(
        show(
            rows,
            ["model", "mesh", "plan", "predicted_mib", "measured_mib", "error_pct"],
            [
                "model",
                "mesh",
                "plan",
                "predicted MiB/rank/step",
                "measured MiB/rank/step",
                "error %",
            ],
        )
    )
    write_json(
        args.json,
        [
            {k: r[k] for k in ("model", "mesh", "plan", "predicted_bytes", "measured_bytes")}
            for r in rows
        ],
    )


if __name__ == "__main__":
    main()
