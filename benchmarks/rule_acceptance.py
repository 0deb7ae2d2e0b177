"""Rule acceptance over the zoo's own models: rounds of tests/ranks/rank_acceptance.py (a fresh
candidate written into every op of a traced training Job, compiled, checked against the
compiled Job, and trained `--steps` steps against data parallel's losses) on real ranks.

    python -m benchmarks.rule_acceptance --mesh 2 --rounds 3 --models resnet18 vit_tiny_patch16_224
    python -m benchmarks.rule_acceptance --mesh 2x2 --rounds 2 --json acceptance.json
    python -m benchmarks.rule_acceptance --builder models --models gpt vgg --rounds 8
    python -m benchmarks.rule_acceptance --builder op_zoo --mesh 2x2 --rounds 10 --steps 2

The suite's own check (tests/ranks/test_zoo_on_ranks.py) runs examples/op_zoo.py's small graph
on 2 ranks until every candidate is tried; on 2 x 2 the same takes the 10 rounds of the last
command (too long for the suite's budget), and these models have far more candidates per op than
rounds fit in a suite. Losses: step 1 is compared by default; later steps of MobileNetV2 and
ShuffleNetV2 at these sizes move by tenths of a percent under any change of summation order.
"""

import argparse
from typing import List

from benchmarks.bench import on_ranks, show, write_json
from examples.zoo_names import MODELS as ZOO

COUNTED = ["rejected", "mismatched", "diverged"]
# examples/ modules whose build(model, mesh) gives a training graph, and their models
BUILDERS = {"zoo": list(ZOO), "models": ["gpt", "gpt-fused", "vgg"], "op_zoo": ["ops"]}


def rows(results: dict, mesh: str) -> List[dict]:
    out = []
    for model, r in results.items():
        tried = sum(t for t, _ in r["types"].values())
        total = sum(n for _, n in r["types"].values())
        out.append(
            {
                "model": model,
                "mesh": mesh,
                "rounds": r["rounds"],
                "signatures": r["signatures"],
                "patterns": f"{tried}/{total}",
                "untried": ", ".join(
                    f"{t} ({n - k} of {n})" for t, (k, n) in sorted(r["types"].items()) if k < n
                )
                or "-",
                "rejected": len(r["rejected"]),
                "mismatched": len(r["mismatched"]),
                "diverged": len(r["diverged"]),
                "detail": r["rejected"][:3] + r["mismatched"][:3] + r["diverged"][:3],
            }
        )
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", default="2", choices=["2", "2x2"])
    parser.add_argument("--builder", default="zoo", choices=list(BUILDERS))
    parser.add_argument("--models", nargs="+", default=None, help="default: all the builder's")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1, help="steps checked against data parallel")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    known = BUILDERS[args.builder]
    models = args.models or known
    for model in models:
        if model not in known:
            parser.error(f"unknown model {model!r} for {args.builder}; choose from {known}")
    if "gpt-fused" in models and args.steps:
        parser.error("gpt-fused compiles but cannot run on CPU (no layer_norm kernel): --steps 0")
    results = {}
    for model in models:  # a launch each: a process keeps every graph it built (7 zoo models
        # in one launch reached 11 GB on a rank here and were killed for memory)
        results.update(
            on_ranks(
                "tests.ranks.rank_acceptance:accept_all",
                args.mesh,
                models=[model],
                rounds=args.rounds,
                builder=f"examples.{args.builder}",
                steps=args.steps,
            )[0]
        )
    table = rows(results, args.mesh)
    print(
        show(
            table,
            [
                "model",
                "mesh",
                "rounds",
                "signatures",
                "patterns",
                "untried",
                "rejected",
                "mismatched",
                "diverged",
            ],
            [
                "model",
                "mesh",
                "rounds",
                "op signatures compiled",
                "patterns tried",
                "op types with candidates left untried",
                "rejected",
                "mismatched",
                "diverged",
            ],
        )
    )
    for row in table:
        for line in row["detail"]:
            print(f"{row['model']}: {line}")
    write_json(args.json, table)


if __name__ == "__main__":
    main()
