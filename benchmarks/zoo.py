"""AutoDDL beside data parallel and OneFlow's native pass on the zoo's models (issue 16, part 3).

    python -m benchmarks.zoo [--models resnet18,vit_tiny_patch16_224] [--meshes 2,2x2]
                             [--rounds 12] [--image-size N] [--json zoo.json]

--models takes the zoo's models and any other flowvision 0.2.1 constructor by name (a held-out
model, examples/zoo.held_out: 224 px unless --image-size says otherwise).

For each model of examples/zoo.py (its image size and benchmark batch) and mesh, one launch
builds data parallel, OneFlow's native pass (through AutoDDL's write-back where 0.9.0 would
abort on its plan) and AutoDDL's plan, and the three take turns over `--rounds` rounds
(benchmarks.rank_bench.measure with examples.zoo as the builder, compare_plans.combine: step
times are the slowest rank's, bytes the mean over ranks). Per plan: the median step time, MiB
each rank sends a step, the first call (trace, pass, compile, one step), AutoDDL's planning
(search) time, the time the native pass took in a trace as OneFlow logs it, the ops left with no
rule, the sign test against data parallel and against native (compare_plans.separated: a plan
faster in so many rounds that a fair coin would do it with probability below ALPHA; 'n.s.'
otherwise, as with any count under 8 rounds), and whether its losses equal data parallel's (rtol
1e-4) over the first LOSS_STEPS steps. Where float32 summation order alone moves a model's
losses off that tolerance sooner, no plan that sums in another order can meet it: data parallel
on the batch reordered within each shard (rank_bench.reordered_losses, REORDER_STEPS steps)
shows when that happens, and a plan's losses are off data parallel's only where they leave them
before the reordered run does (BatchNorm over a few values per channel amplifies rounding: on
MobileNetV2 at 64 px, reversing a batch of 4 in one process moves float32 weight gradients by up
to 1.3%, float64 ones by 2e-13; OneFlow 0.9.0 cannot train a float64 nn.Graph, it casts the
gradients to float32: docs/oneflow-0.9.md). The JSON also holds the largest relative difference
over all steps. The AutoDDL row also says which of issue 16's checks it misses. The 2 x 2 mesh
runs the models of --models-2x2 only (one launch per model and mesh: a process keeps every graph
it built). Memory: CPU ranks reuse none (every blob of a step is held for the run), and the
plans' graphs are all built before the rounds: Swin-tiny at 224 px, batch 4, had grown to 10.5
GB per rank on 2 ranks (21 of this machine's 24 GB) while building them, and was stopped; give
it a machine with that room or a smaller --batch."""

import argparse
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from benchmarks.bench import PASS_LOG_ENV, on_ranks, show, write_json
from benchmarks.compare_plans import ALPHA, combine, separated, sign_test
from examples.zoo_names import MODELS
from oneflow_autoddl.launch import RankFailure

PLANS = ["dp", "native", "autoddl"]  # data parallel first (compare_plans.combine)
MODELS_2X2 = ["resnet18", "vit_tiny_patch16_224", "mobilenet_v2"]
RTOL = 1e-4
LOSS_STEPS = 4
REORDER_STEPS = 8


def measure(
    model: str,
    mesh: str,
    rounds: int,
    steps: int,
    cluster: str,
    batch: Optional[int] = None,
    image_size: Optional[int] = None,
) -> List[dict]:
    """The three plans of `model` on `mesh`, combined over ranks (data parallel first); batch and
    image_size None: the model's own (examples/zoo.py). The ranks run with PASS_LOG_ENV, so that
    OneFlow logs its native pass's time."""
    os.environ.update(PASS_LOG_ENV)
    per_rank = on_ranks(
        "benchmarks.rank_bench:measure",
        mesh,
        model=model,
        plans=PLANS,
        steps=steps,
        warmup=2,
        rounds=rounds,
        cluster=cluster,
        builder="examples.zoo",
        batch=batch,
        sizes={"image_size": image_size} if image_size else None,
        pass_time=True,
        reorder_steps=REORDER_STEPS,
    )
    return combine(per_rank)


def verdict(a: dict, b: dict) -> str:
    """Plan a against plan b over their rounds: 'faster' or 'slower' where the sign test
    separates them (compare_plans.separated), 'n.s.' where it does not, 'same program' where
    both compiled to one; with a's wins over the rounds."""
    if a["program"] == b["program"]:
        return "same program"
    rounds = list(zip(a["block_step_s"], b["block_step_s"]))
    wins = sum(x < y for x, y in rounds)
    tally = f"{wins}/{len(rounds)}"
    if separated(a, b):
        return f"faster {tally}"
    if separated(b, a):
        return f"slower {tally}"
    return f"n.s. {tally}"


def largest_relative_difference(a: Sequence[float], b: Sequence[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def equal_steps(a: Sequence[float], b: Sequence[float]) -> int:
    """How many of the first steps' losses of a equal b's within RTOL."""
    k = 0
    while k < min(len(a), len(b)) and np.isclose(a[k], b[k], rtol=RTOL, atol=0):
        k += 1
    return k


def losses_equal(a: Sequence[float], b: Sequence[float], steps: int = LOSS_STEPS) -> bool:
    """The first `steps` losses of a equal b's within RTOL (both have that many)."""
    return equal_steps(a, b) >= steps


def steps_equal(a: Sequence[float], b: Sequence[float]) -> str:
    """'k/n': the first k of the n steps' losses of a equal b's within RTOL."""
    return f"{equal_steps(a, b)}/{len(b)}"


def losses_off(plan: dict, dp: dict) -> bool:
    """The plan's losses leave data parallel's within the first LOSS_STEPS steps, and before
    data parallel's own on a reordered batch do (where the row has them)."""
    within = LOSS_STEPS
    if dp.get("reordered_losses"):
        within = min(within, equal_steps(dp["reordered_losses"], dp["losses"]))
    return equal_steps(plan["losses"], dp["losses"]) < within


def misses(autoddl: dict, dp: dict, native: dict) -> List[str]:
    """Issue 16's checks the AutoDDL row fails: measured slower than data parallel or the native
    pass (sign test), more bytes than native without a measured win over it, planning slower
    than the native pass, losses off data parallel's."""
    out = []
    for other in (dp, native):
        if autoddl["program"] != other["program"] and separated(other, autoddl):
            out.append(f"slower than {other['plan']}")
    if autoddl["measured_bytes"] > native["measured_bytes"] and not separated(autoddl, native):
        out.append("more bytes than native, not faster")
    pass_s = native.get("native_pass_s")
    if pass_s is not None and autoddl["search_time_s"] >= pass_s:
        out.append("plans slower than the native pass")
    if losses_off(autoddl, dp):
        out.append("losses off data parallel's")
    return out


def _no_rule_text(counts: Dict[str, int]) -> str:
    return ", ".join(f"{t} ({n})" for t, n in sorted(counts.items())) or "-"


def rows_of(group: List[dict]) -> List[dict]:
    """The table's rows for one model and mesh from compare_plans.combine's (dp, native,
    autoddl)."""
    by_plan = {r["plan"]: r for r in group}
    dp, native, autoddl = by_plan["dp"], by_plan["native"], by_plan["autoddl"]
    out = []
    for r in group:
        out.append(
            {
                "model": r["model"],
                "mesh": r["mesh"],
                "plan": r["plan"],
                "step_s": r["measured_step_s"],
                "predicted_step_s": r["predicted_step_s"],
                "mib_sent": r["measured_bytes"] / 2**20,
                "predicted_mib": r["predicted_bytes"] / 2**20,
                "first_call_s": r["first_call_s"],
                "planning_s": r["search_time_s"] if r["plan"] == "autoddl" else None,
                "native_pass_s": native["native_pass_s"],
                "no_rule": _no_rule_text(r["no_rule"]),
                "vs_dp": "-" if r is dp else verdict(r, dp),
                "vs_native": "-" if r is native else verdict(r, native),
                "losses_equal_dp": losses_equal(r["losses"], dp["losses"]),
                "steps_equal_dp": steps_equal(r["losses"], dp["losses"]),
                "reordered_steps_equal_dp": (
                    steps_equal(dp["reordered_losses"], dp["losses"])
                    if r is dp and dp.get("reordered_losses")
                    else ""
                ),
                "loss_rel_diff_all_steps": largest_relative_difference(r["losses"], dp["losses"]),
                "misses": (", ".join(misses(r, dp, native)) or "none") if r is autoddl else "",
                "note": r["note"],
                "block_step_s": r["block_step_s"],
                "losses": r["losses"],
            }
        )
    return out


def run(
    models: Sequence[str],
    meshes: Sequence[str],
    rounds: int,
    steps: int = 2,
    cluster: str = "cpu-local",
    models_2x2: Optional[Sequence[str]] = None,
    batch: Optional[int] = None,
    image_size: Optional[int] = None,
) -> Tuple[List[dict], List[str]]:
    """(the rows of every model and mesh measured, 'model on mesh: why' for each launch that
    failed): a model whose ranks fail (Swin-tiny at 224 px outgrows this machine's memory)
    costs its own rows, not the run's."""
    rows, failed = [], []
    for mesh in meshes:
        for model in models:
            if mesh == "2x2" and models_2x2 is not None and model not in models_2x2:
                continue
            try:
                rows += rows_of(measure(model, mesh, rounds, steps, cluster, batch, image_size))
            except RankFailure as e:
                failed.append(f"{model} on {mesh}: {_why(e)}")
                print(f"{failed[-1]}; going on with the others", flush=True)
    return rows, failed


def _why(failure: RankFailure) -> str:
    """The failed launch's first line, and the first error a rank raised in what the ranks wrote
    (e.g. a model name flowvision does not know), where there is one."""
    lines = str(failure).splitlines()
    raised = next((line.strip() for line in lines[1:] if _RAISED.match(line)), None)
    first = lines[0].rstrip(" :.")
    return first if raised is None else f"{first}: {raised}"


_RAISED = re.compile(r"^\w+(Error|Exception|Failure|Failed): ")


COLUMNS = [
    ("model", "model"),
    ("mesh", "mesh"),
    ("plan", "plan"),
    ("step_s", "s/step (median)"),
    ("predicted_step_s", "predicted s/step"),
    ("mib_sent", "MiB sent / rank"),
    ("predicted_mib", "predicted MiB"),
    ("first_call_s", "first call s (compile)"),
    ("planning_s", "planning s"),
    ("native_pass_s", "native pass s"),
    ("no_rule", "ops with no rule"),
    ("vs_dp", "vs DP"),
    ("vs_native", "vs native"),
    ("losses_equal_dp", f"losses = DP ({LOSS_STEPS} steps)"),
    ("steps_equal_dp", "steps = DP"),
    ("reordered_steps_equal_dp", "DP reordered: steps = DP"),
    ("misses", "issue 16 misses"),
]


def _names(text: str, known: Optional[Sequence[str]] = None, what: str = "") -> List[str]:
    """The comma-separated names of `text`; each one of `known` where given."""
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if known is not None and n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {', '.join(known or ())}")
    return names


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help="the zoo's models and any other flowvision constructor (held out) by name",
    )
    parser.add_argument(
        "--exclude", default="", help="models left out of --models (e.g. one too large here)"
    )
    parser.add_argument("--meshes", default="2,2x2")
    parser.add_argument(
        "--models-2x2",
        default=",".join(MODELS_2X2),
        help="the models the 2x2 mesh runs ('all': every one of --models)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=12,
        help=f"turns every plan takes (the sign test separates a pair below p={ALPHA} "
        f"from 8 rounds: p(8 of 8) = {sign_test(8, 8):.4f})",
    )
    parser.add_argument("--steps", type=int, default=2, help="timed steps of a plan in each round")
    parser.add_argument("--cluster", default="cpu-local", help="what AutoDDL plans for")
    parser.add_argument(
        "--batch", type=int, default=None, help="every model's batch (default: each model's own)"
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="every model's image size (default: each model's own; 224 for a held-out one)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    left_out = _names(args.exclude)
    models = [m for m in _names(args.models) if m not in left_out]
    meshes = _names(args.meshes, ["2", "2x2"], "meshes")
    wide = None if args.models_2x2 == "all" else _names(args.models_2x2)
    rows, failed = run(
        models, meshes, args.rounds, args.steps, args.cluster, wide, args.batch, args.image_size
    )
    print(show(rows, [c for c, _ in COLUMNS], [h for _, h in COLUMNS]))
    for r in rows:
        if r["note"] and r["note"] != "as OneFlow compiled it":
            print(f"{r['model']} on {r['mesh']}, {r['plan']}: {r['note']}")
    for line in failed:
        print(f"failed, no rows: {line}")
    write_json(args.json, rows)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
