"""AutoDDL across nodes: the examples' GPT and VGG on 2 emulated nodes x 2 ranks, measured.

    python -m benchmarks.multinode [--rates 200mbit,1gbit] [--rounds 8] [--json multinode.json]
    python -m benchmarks.multinode --calibrate        # first measure the emulated clusters again

Needs root (benchmarks.netcluster). For each inter-node rate, an emulated cluster of 2 nodes
(network namespaces, a token bucket on each node's link) runs the models on a 1-D mesh of 4 over
both nodes and on 2 x 2 with axis 0 across nodes, under four plans built in one run and taking
turns round by round as compare_plans does: data parallel; Megatron-style (tensor parallel on
the last mesh axis, data parallel on the other: on 2 x 2 the expert's layout, model parallel
inside a node and data parallel across; on the 1-D mesh, which cannot express it, tensor
parallel over all 4 ranks, across nodes); OneFlow's native pass (through our write-back where
0.9.0 would abort on its plan); and AutoDDL planning with the emulated cluster's two-level
calibration (`emulated-2x2-RATE`, written by `calibrate` through the emulated nodes, which
--calibrate redoes). Per plan: measured step time (the slowest rank's, median over rounds), bytes
per rank per step inside and across nodes (across: the TCP payload of each node's link, from
its counters, divided among its ranks; inside: the rest of wchar), and the predictions. Then the
issue's checks: AutoDDL measured fastest on every row, its cut against the expert layout, the
predicted bytes across nodes against the measured, and the order of the plans by predicted step
time on every pair the sign test separates.
"""

import argparse
import os
import statistics
import sys

from benchmarks import netcluster
from benchmarks.bench import show, write_json
from benchmarks.compare_plans import GPT, PLANS, VGG, combine, order_kept
from oneflow_autoddl.cost.cluster import PRESET_DIR

RATES = ("200mbit", "1gbit")
MESHES = ("4", "2x2")
NODES, PER_NODE = 2, 2
EXPERT = "megatron"


def preset(rate: str) -> str:
    """The emulated cluster's calibration at `rate`, as a preset name."""
    return f"emulated-{NODES}x{PER_NODE}-{rate}"


def calibrate(net: netcluster.NetCluster, rate: str, repeats: int) -> None:
    """`python -m oneflow_autoddl calibrate` on every emulated node, into the preset."""
    out = os.path.join(PRESET_DIR, preset(rate) + ".json")
    command = [sys.executable, "-m", "oneflow_autoddl", "calibrate", "--nproc", str(PER_NODE)]
    command += ["--nnodes", "{nodes}", "--node-rank", "{node}", "--master-addr", "{master_addr}"]
    command += ["--master-port", "{master_port}", "--out", out, "--repeats", str(repeats)]
    port = netcluster.free_port()
    commands = [netcluster.fill(command, net, k, port) for k in range(net.nodes)]
    netcluster.check(net, "calibrate", netcluster.run_per_node(net, commands, 1800), 1800)


def measure(net, rate: str, model: str, mesh: str, steps: int, rounds: int):
    sizes, batch = (GPT, 8) if model == "gpt" else (VGG, 16)
    per_rank = netcluster.run_on_nodes(
        net,
        "benchmarks.rank_bench:measure",
        PER_NODE,
        timeout=3600,
        model=model,
        mesh=mesh,
        plans=PLANS,
        steps=steps,
        batch=batch,
        sizes=sizes,
        warmup=2,
        rounds=rounds,
        cluster=preset(rate),
        across_nodes=True,
    )
    rows = combine(per_rank)
    for i, r in enumerate(rows):
        r["rate"] = rate
        r["measured_inter_node_bytes"] = statistics.mean(
            p[i]["measured_inter_node_bytes"] for p in per_rank
        )
        r["measured_intra_node_bytes"] = r["measured_bytes"] - r["measured_inter_node_bytes"]
        r["predicted_intra_node_bytes"] = r["predicted_bytes"] - r["predicted_inter_node_bytes"]
    return rows


def run(rates, models, meshes, steps=1, rounds=8, recalibrate=False, repeats=9):
    rows = []
    for rate in rates:
        with netcluster.emulated(NODES, rate) as net:
            if recalibrate or not os.path.exists(os.path.join(PRESET_DIR, preset(rate) + ".json")):
                calibrate(net, rate, repeats)
            for mesh in meshes:
                for model in models:
                    rows += measure(net, rate, model, mesh, steps, rounds)
    return rows


def checks(rows):
    """The issue's checks, per model, mesh and rate."""
    out = []
    for key in sorted({(r["rate"], r["model"], r["mesh"]) for r in rows}):
        group = {r["plan"]: r for r in rows if (r["rate"], r["model"], r["mesh"]) == key}
        ours, expert = group["autoddl"], group[EXPERT]
        fastest = min(group.values(), key=lambda r: r["measured_step_s"])
        worst = max(
            abs(r["predicted_inter_node_bytes"] / r["measured_inter_node_bytes"] - 1)
            for r in group.values()
            if r["measured_inter_node_bytes"]
        )
        out.append(
            {
                "rate": key[0],
                "model": key[1],
                "mesh": key[2],
                "fastest measured": fastest["plan"],
                "autoddl / expert": ours["measured_step_s"] / expert["measured_step_s"],
                "cut": 1 - ours["measured_step_s"] / expert["measured_step_s"],
                "worst bytes-across error": worst,
            }
        )
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default=",".join(RATES), help="tc rates, e.g. 200mbit,1gbit")
    parser.add_argument("--models", default="gpt,vgg")
    parser.add_argument("--meshes", default=",".join(MESHES))
    parser.add_argument("--steps", type=int, default=1, help="timed steps of a plan in a round")
    parser.add_argument(
        "--rounds", type=int, default=8, help="turns every plan takes (sign test: 8 of 8)"
    )
    parser.add_argument(
        "--calibrate", action="store_true", help="measure each emulated cluster again first"
    )
    parser.add_argument("--repeats", type=int, default=9, help="calibrate's --repeats")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    reason = netcluster.unavailable()
    if reason:
        raise SystemExit(f"benchmarks.multinode: {reason}")
    rows = run(
        args.rates.split(","),
        args.models.split(","),
        args.meshes.split(","),
        args.steps,
        args.rounds,
        args.calibrate,
        args.repeats,
    )
    for r in rows:
        r["measured_ms"], r["predicted_ms"] = (
            1e3 * r["measured_step_s"],
            1e3 * r["predicted_step_s"],
        )
        for key in ("intra_node", "inter_node"):
            for side in ("measured", "predicted"):
                r[f"{side}_{key}_mib"] = r[f"{side}_{key}_bytes"] / 2**20
    print(
        show(
            rows,
            [
                "rate",
                "model",
                "mesh",
                "plan",
                "measured_ms",
                "measured_step_s/dp",
                "predicted_ms",
                "measured_intra_node_mib",
                "predicted_intra_node_mib",
                "measured_inter_node_mib",
                "predicted_inter_node_mib",
            ],
            [
                "rate",
                "model",
                "mesh",
                "plan",
                "step ms",
                "step / DP (paired)",
                "pred. step ms",
                "MiB inside nodes",
                "pred.",
                "MiB across nodes",
                "pred.",
            ],
        )  # fmt: skip
    )
    orders = order_kept(rows, by=("rate", "model", "mesh"))
    print()
    print(
        show(
            orders,
            [
                "rate",
                "model",
                "mesh",
                "predicted order",
                "measured order",
                "separated pairs",
                "predicted alike",
                "mispredicted",
            ],
            [
                "rate",
                "model",
                "mesh",
                "by predicted step",
                "by measured step",
                "pairs measured apart",
                "of them predicted alike",
                "measured faster, predicted not",
            ],
        )  # fmt: skip
    )
    verdicts = checks(rows)
    print()
    print(show(verdicts, list(verdicts[0]), list(verdicts[0])))
    write_json(args.json, {"rows": rows, "orders": orders, "checks": verdicts})


if __name__ == "__main__":
    main()
