"""One setting of the IOPDDL solve over several seeds: how a change to it should be judged.

    python -m benchmarks.iopddl_seeds FILE [--timeout S] [--seeds 0-5] [--jobs 2]
        [--best COST] [--option NAME=VALUE ...] [--json rows.json]

Each seed runs `python -m benchmarks.iopddl FILE --timeout S --seed N` (with the options) in a
process of its own, `--jobs` at a time (each solve uses one core, so at most one per core for
times that mean anything); each solution is checked with the contest's rules
(iopddl.instance.evaluate). The table gives each seed's cost, its ratio to `--best` (the best
known cost: ../shared/iopddl/README.md lists them), its validity and wall time, then the mean,
least and most ratio. On graph S one seed's result moves by points from run to run (where the
machine's speed puts the time-based restarts): compare settings over six seeds or more, taking
turns, not one run each.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

from tabulate import tabulate

from benchmarks.bench import write_json
from oneflow_autoddl.errors import AutoDDLError
from oneflow_autoddl.iopddl.instance import Instance, evaluate, read
from oneflow_autoddl.iopddl.options import SolveOptions, with_settings


def parse_seeds(text: str) -> List[int]:
    """`0-5` or `0,2,7` as a list of seeds; an AutoDDLError saying the form otherwise."""
    try:
        if "-" in text:
            first, last = (int(part) for part in text.split("-", 1))
            return list(range(first, last + 1))
        return [int(part) for part in text.split(",")]
    except ValueError as e:
        raise AutoDDLError(f"--seeds {text!r}: give a range like 0-5 or a list like 0,2,7") from e


def _run(path: str, timeout: float, seed: int, settings: List[str]) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.iopddl", path, "--timeout", str(timeout)]
    cmd += ["--seed", str(seed)] + [f"--option={s}" for s in settings]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode or not lines:
        raise AutoDDLError(f"seed {seed}: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return {"seed": seed, "solution": json.loads(lines[-1]), "wall_s": wall}


def _row(instance: Instance, run: dict, best: Optional[float]) -> dict:
    result = evaluate(instance, run["solution"])
    valid = bool(run["solution"]) and result.valid  # `[]`: no solution found
    return {
        "seed": run["seed"],
        "cost": result.cost if valid else None,
        "ratio": result.cost / best if valid and best else None,
        "valid": valid,
        "wall_s": run["wall_s"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a contest graph, .json or .json.gz")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per solve")
    parser.add_argument("--seeds", default="0-5", help="a range (0-5) or a list (0,2,7)")
    parser.add_argument("--jobs", type=int, default=2, help="solves at once (one core each)")
    parser.add_argument("--best", type=float, help="the best known cost, for the ratios")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--json", default="", help="write the rows here")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        with_settings(SolveOptions(), args.option)  # a bad setting fails here, not in every run
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            runs = list(pool.map(lambda s: _run(args.file, args.timeout, s, args.option), seeds))
        instance = read(args.file)
    except AutoDDLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = [_row(instance, run, args.best) for run in runs]
    print(tabulate(rows, headers="keys", tablefmt="github", floatfmt=".4f"))
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    if ratios:
        print(
            f"\nratio over {len(ratios)} seeds: mean {statistics.mean(ratios):.4f}, "
            f"least {min(ratios):.4f}, most {max(ratios):.4f}"
        )
    print(f"valid: {sum(r['valid'] for r in rows)} of {len(rows)}")
    write_json(args.json, {"options": args.option, "timeout": args.timeout, "rows": rows})
    return 0 if all(r["valid"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
