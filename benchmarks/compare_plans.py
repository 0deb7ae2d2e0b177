"""AutoDDL beside data parallel, Megatron-style and OneFlow's native auto-parallel, measured in one run.

    python benchmarks/compare_plans.py [--meshes 4,2x2] [--rounds 1] [--json compare.json]

On 4 CPU ranks of this machine, for the examples' GPT and VGG models at sizes where
communication is a large part of a step: median step time and bytes sent per rank per
step (wchar), measured side by side in one run (each plan timed in blocks, in the order
given and in reverse, `--rounds` times), the predicted ones, and each as a ratio to data
parallel. Then, per model and mesh, the plans' order by predicted and by measured step
time (the cpu-local cluster file is this machine's calibration), and for each pair of
different plans the measurement tells apart (every block of one faster than every block of
the other: this machine's load moves step times by tens of percent) whether the prediction
orders it the same way. Plans that compile to one program (the same SBP on every op) rank
as one ("a = b"): what separates their measurements is the machine.
"""
import itertools
import argparse
import statistics

from bench import on_ranks, show, write_json

GPT = {"layers": 2, "hidden": 512, "heads": 8, "seq_len": 32, "vocab": 512}
VGG = {"depth": 16, "width_mult": 0.25, "image_size": 32, "num_classes": 10}
PLANS = ["dp", "megatron", "native", "autoddl"]


def run(meshes, models, steps=8, rounds=1):
    rows = []
    for mesh in meshes:
        for model in models:
            sizes, batch = (GPT, 8) if model == "gpt" else (VGG, 16)
            per_rank = on_ranks("rank_bench:measure", mesh, model=model, plans=PLANS, steps=steps, batch=batch,
                                sizes=sizes, warmup=3, rounds=rounds)
            group = []
            for i in range(len(PLANS)):
                r = dict(per_rank[0][i])
                r["measured_bytes"] = statistics.mean(p[i]["measured_bytes"] for p in per_rank)
                r["measured_step_s"] = max(p[i]["measured_step_s"] for p in per_rank)
                r["block_step_s"] = [max(b) for b in zip(*(p[i]["block_step_s"] for p in per_rank))]  # slowest rank
                group.append(r)
            dp = group[0]
            for r in group:
                for key in ("measured_step_s", "measured_bytes", "predicted_step_s", "predicted_bytes"):
                    r[key + "/dp"] = r[key] / dp[key] if dp[key] else float("nan")
            rows += group
    return rows


def separated(a, b) -> bool:
    """Every block of plan a was faster than every block of plan b."""
    return max(a["block_step_s"]) < min(b["block_step_s"])


def programs_of(group):
    """The plans of one model and mesh as programs: those with the same SBP on every op are one
    (named "a = b"), with the blocks of all of them and the mean of their measured times."""
    by_program = {}
    for r in group:
        by_program.setdefault(r["program"], []).append(r)
    return [{"plan": " = ".join(r["plan"] for r in rs), "predicted_step_s": rs[0]["predicted_step_s"],
             "measured_step_s": statistics.mean(r["measured_step_s"] for r in rs),
             "block_step_s": [b for r in rs for b in r["block_step_s"]]} for rs in by_program.values()]


def order_kept(rows):
    """Per (model, mesh): do predicted and measured step times rank the programs alike, in all
    and over the pairs the measurement separates?"""
    out = []
    for key in sorted({(r["model"], r["mesh"]) for r in rows}):
        programs = programs_of([r for r in rows if (r["model"], r["mesh"]) == key])
        by_pred = [p["plan"] for p in sorted(programs, key=lambda p: p["predicted_step_s"])]
        by_meas = [p["plan"] for p in sorted(programs, key=lambda p: p["measured_step_s"])]
        pairs = [(a, b) if separated(a, b) else (b, a) for a, b in itertools.combinations(programs, 2)
                 if separated(a, b) or separated(b, a)]
        wrong = [f"{a['plan']} < {b['plan']}" for a, b in pairs if a["predicted_step_s"] >= b["predicted_step_s"]]
        out.append({"model": key[0], "mesh": key[1], "predicted order": " < ".join(by_pred),
                    "measured order": " < ".join(by_meas), "same": by_pred == by_meas,
                    "programs": len(programs), "separated pairs": len(pairs),
                    "predicted alike": len(pairs) - len(wrong), "mispredicted": ", ".join(wrong) or "-"})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--meshes", default="4,2x2")
    parser.add_argument("--models", default="gpt,vgg")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="passes in order and in reverse (each adds ~4 min)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = run(args.meshes.split(","), args.models.split(","), args.steps, args.rounds)
    for r in rows:
        r["measured_ms"], r["predicted_ms"] = 1e3 * r["measured_step_s"], 1e3 * r["predicted_step_s"]
        r["blocks_ms"] = f"{1e3 * min(r['block_step_s']):.0f}-{1e3 * max(r['block_step_s']):.0f}"
        r["measured_mib"], r["predicted_mib"] = r["measured_bytes"] / 2 ** 20, r["predicted_bytes"] / 2 ** 20
    print(show(rows, ["model", "mesh", "plan", "measured_ms", "blocks_ms", "measured_step_s/dp", "measured_mib", "measured_bytes/dp",
                      "predicted_ms", "predicted_step_s/dp", "predicted_mib", "predicted_bytes/dp"],
               ["model", "mesh", "plan", "step ms", "blocks ms", "step / DP", "MiB sent", "sent / DP",
                "pred. step ms", "pred. / DP", "pred. MiB", "pred. sent / DP"]))
    orders = order_kept(rows)
    print()
    print(show(orders, ["model", "mesh", "predicted order", "measured order", "same", "programs",
                        "separated pairs", "predicted alike", "mispredicted"],
               ["model", "mesh", "by predicted step time (a = b: one program)", "by measured step time",
                "same order", "programs", "pairs measured apart", "of them predicted alike",
                "measured faster, predicted not"]))
    write_json(args.json, {"rows": rows, "orders": orders})


if __name__ == "__main__":
    main()
