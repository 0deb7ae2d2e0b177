"""AutoDDL beside data parallel, Megatron-style and OneFlow's native auto-parallel, measured in one
run.

    python -m benchmarks.compare_plans [--meshes 4,2x2] [--rounds 12] [--json compare.json]

On 4 CPU ranks of this machine, for the examples' GPT and VGG models at sizes where
communication is a large part of a step: step time and bytes sent per rank per step (wchar),
measured side by side in one run, the predicted ones, and each as a ratio to data parallel.
The plans take turns: every round runs each plan for a block of `--steps` steps (rank_bench
.measure), so a plan's block in round k and another's in round k ran seconds apart and their
ratio is free of the machine's slow drifts in load, which move step times here by tens of
percent. Then, per model and mesh, the plans' order by predicted and by measured step time
(the cpu-local cluster file is this machine's calibration), and each pair of different plans
the measurement tells apart: one faster in so many rounds that a fair coin would do it with
probability below ALPHA (a two-sided sign test), with whether the prediction orders it the
same way. Plans that compile to one program (the same SBP on every op) rank as one ("a = b"):
what separates their measurements is the machine.
"""

import argparse
import itertools
import math
import statistics

from benchmarks.bench import on_ranks, show, write_json

GPT = {"layers": 2, "hidden": 512, "heads": 8, "seq_len": 32, "vocab": 512}
VGG = {"depth": 16, "width_mult": 0.25, "image_size": 32, "num_classes": 10}
PLANS = ["dp", "megatron", "native", "autoddl"]
ALPHA = 0.01  # a pair is measured apart when the sign test's p-value is below this


def run(meshes, models, steps=2, rounds=12, plans=PLANS, cluster="cpu-local", also_cost=()):
    """Rows of rank_bench.measure for every mesh and model, the plans planned and predicted on
    `cluster` (data parallel first), each also predicted on the clusters `also_cost`."""
    rows = []
    for mesh in meshes:
        for model in models:
            sizes, batch = (GPT, 8) if model == "gpt" else (VGG, 16)
            per_rank = on_ranks(
                "benchmarks.rank_bench:measure",
                mesh,
                model=model,
                plans=list(plans),
                steps=steps,
                batch=batch,
                sizes=sizes,
                warmup=3,
                rounds=rounds,
                cluster=cluster,
                costed_on=list(also_cost),
            )
            rows += combine(per_rank)
    return rows


def combine(per_rank):
    """One row per plan from every rank's rows (rank_bench.measure, data parallel first): bytes
    averaged over ranks, step times the slowest rank's, and each figure over data parallel's."""
    group = []
    for i in range(len(per_rank[0])):
        r = dict(per_rank[0][i])
        r["measured_bytes"] = statistics.mean(p[i]["measured_bytes"] for p in per_rank)
        r["measured_step_s"] = max(p[i]["measured_step_s"] for p in per_rank)
        r["block_step_s"] = [
            max(b) for b in zip(*(p[i]["block_step_s"] for p in per_rank))
        ]  # slowest rank
        group.append(r)
    dp = group[0]
    for r in group:
        r["measured_step_s/dp"] = paired_ratio(r["block_step_s"], dp["block_step_s"])
        for key in ("measured_bytes", "predicted_step_s", "predicted_bytes"):
            r[key + "/dp"] = r[key] / dp[key] if dp[key] else float("nan")
    return group


def paired_ratio(a, b) -> float:
    """The median over rounds of a's block time over b's in the same round."""
    return statistics.median(x / y for x, y in zip(a, b))


def sign_test(wins: int, n: int) -> float:
    """Two-sided p-value of `wins` of `n` rounds under a fair coin (exact binomial)."""
    tail = sum(math.comb(n, k) for k in range(max(wins, n - wins), n + 1)) / 2**n
    return min(1.0, 2 * tail)


def separated(a, b) -> bool:
    """Plan a was faster than plan b in so many of the rounds that chance is ruled out (ALPHA)."""
    rounds = list(zip(a["block_step_s"], b["block_step_s"]))
    wins = sum(x < y for x, y in rounds)
    return wins > len(rounds) / 2 and sign_test(wins, len(rounds)) < ALPHA


def programs_of(group):
    """The plans of one model and mesh as programs: those with the same SBP on every op are one
    (named "a = b"), with the mean of their blocks in each round and of their measured times."""
    by_program = {}
    for r in group:
        by_program.setdefault(r["program"], []).append(r)
    return [
        {
            "plan": " = ".join(r["plan"] for r in rs),
            "predicted_step_s": rs[0]["predicted_step_s"],
            "measured_step_s": statistics.mean(r["measured_step_s"] for r in rs),
            "block_step_s": [statistics.mean(b) for b in zip(*(r["block_step_s"] for r in rs))],
        }
        for rs in by_program.values()
    ]


def order_kept(rows, by=("model", "mesh")):
    """Per model and mesh (the row fields `by`): do predicted and measured step times rank the
    programs alike, in all and over the pairs the measurement separates?"""
    out = []
    for key in sorted({tuple(r[k] for k in by) for r in rows}):
        programs = programs_of([r for r in rows if tuple(r[k] for k in by) == key])
        by_pred = [p["plan"] for p in sorted(programs, key=lambda p: p["predicted_step_s"])]
        by_meas = [p["plan"] for p in sorted(programs, key=lambda p: p["measured_step_s"])]
        pairs = [
            (a, b) if separated(a, b) else (b, a)
            for a, b in itertools.combinations(programs, 2)
            if separated(a, b) or separated(b, a)
        ]
        wrong = [
            f"{a['plan']} < {b['plan']}"
            for a, b in pairs
            if a["predicted_step_s"] >= b["predicted_step_s"]
        ]
        out.append(
            {
                **dict(zip(by, key)),
                "predicted order": " < ".join(by_pred),
                "measured order": " < ".join(by_meas),
                "same": by_pred == by_meas,
                "programs": len(programs),
                "separated pairs": len(pairs),
                "predicted alike": len(pairs) - len(wrong),
                "mispredicted": ", ".join(wrong) or "-",
            }
        )
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--meshes", default="4,2x2")
    parser.add_argument("--models", default="gpt,vgg")
    parser.add_argument("--steps", type=int, default=2, help="timed steps of a plan in each round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=12,
        help="turns every plan takes (sign test: 11 of 12 to separate)",
    )
    parser.add_argument("--plans", default=",".join(PLANS), help="data parallel (dp) first")
    parser.add_argument("--cluster", default="cpu-local", help="what AutoDDL plans for")
    parser.add_argument(
        "--also-cost", default="", help="clusters to predict every plan's step on as well"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    also = [c for c in args.also_cost.split(",") if c]
    rows = run(
        args.meshes.split(","),
        args.models.split(","),
        args.steps,
        args.rounds,
        args.plans.split(","),
        args.cluster,
        also,
    )
    for r in rows:
        r["measured_ms"], r["predicted_ms"] = (
            1e3 * r["measured_step_s"],
            1e3 * r["predicted_step_s"],
        )
        r["predicted/measured"] = r["predicted_step_s"] / r["measured_step_s"]
        for k, c in enumerate(also):
            on = r["predicted_step_s_on"][c]
            r[f"also{k}"] = on / r["measured_step_s"] if on else float("nan")
        q = statistics.quantiles(r["block_step_s"], n=4)
        r["blocks_ms"] = f"{1e3 * q[0]:.0f}-{1e3 * q[2]:.0f}"
        r["measured_mib"], r["predicted_mib"] = (
            r["measured_bytes"] / 2**20,
            r["predicted_bytes"] / 2**20,
        )
    print(
        show(
            rows,
            [
                "model",
                "mesh",
                "plan",
                "measured_ms",
                "blocks_ms",
                "measured_step_s/dp",
                "measured_mib",
                "measured_bytes/dp",
                "predicted_ms",
                "predicted/measured",
                *(f"also{k}" for k in range(len(also))),
                "predicted_step_s/dp",
                "predicted_mib",
                "predicted_bytes/dp",
            ],
            [
                "model",
                "mesh",
                "plan",
                "step ms",
                "rounds ms (q1-q3)",
                "step / DP (paired)",
                "MiB sent",
                "sent / DP",
                "pred. step ms",
                "pred. / measured",
                *(f"pred. on {c} / measured" for c in also),
                "pred. / DP",
                "pred. MiB",
                "pred. sent / DP",
            ],
        )
    )
    orders = order_kept(rows)
    print()
    print(
        show(
            orders,
            [
                "model",
                "mesh",
                "predicted order",
                "measured order",
                "same",
                "programs",
                "separated pairs",
                "predicted alike",
                "mispredicted",
            ],
            [
                "model",
                "mesh",
                "by predicted step time (a = b: one program)",
                "by measured step time",
                "same order",
                "programs",
                "pairs measured apart",
                "of them predicted alike",
                "measured faster, predicted not",
            ],
        )
    )
    write_json(args.json, {"rows": rows, "orders": orders})


if __name__ == "__main__":
    main()
