"""Both examples for 50 steps on 4 CPU ranks (2x2): the loss falls and the plan records every
parameter.

python -m benchmarks.smoke [--steps 50] [--json smoke.json]
"""

import argparse
import json
import os
import statistics
import tempfile

from benchmarks.bench import show, write_json
from oneflow_autoddl.launch import run_script


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        examples = [
            (
                name,
                [
                    "--mesh",
                    "2x2",
                    "--steps",
                    str(args.steps),
                    "--quiet",
                    "--json",
                    os.path.join(d, name),
                ],
            )
            for name in ("gpt", "vgg")
        ]
        for name, argv in examples:
            run_script([f"examples/{name}.py", *argv], 4, timeout=1800)
        for name, _ in examples:
            with open(os.path.join(d, name)) as f:
                out = json.load(f)
            first, last = statistics.mean(out["losses"][:10]), statistics.mean(out["losses"][-10:])
            plan = out["plan"]
            rows.append(
                {
                    "example": name,
                    "first10": first,
                    "last10": last,
                    "falls": last < first,
                    "parameters": len(plan["variables"]),
                    "all_recorded": all(plan["variables"].values()),
                    "median_step_s": statistics.median(out["step_times_s"][1:]),
                }
            )
    print(
        show(
            rows,
            [
                "example",
                "first10",
                "last10",
                "falls",
                "parameters",
                "all_recorded",
                "median_step_s",
            ],
            [
                "example",
                "mean loss, first 10",
                "mean loss, last 10",
                "falls",
                "parameters",
                "SBP recorded",
                "median step s",
            ],
        )
    )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
