"""The ASPLOS/EuroSys 2025 IOPDDL contest's graphs solved by the project's search.

    python -m benchmarks.iopddl FILE [--timeout S] [--seed N] [--option NAME=VALUE ...]
    python -m benchmarks.iopddl --check FILE SOLUTION

The first form reads a contest graph (gzip'd or plain JSON, ../shared/iopddl/README.md) and
solves it with oneflow_autoddl.iopddl.solve within `--timeout` seconds of wall clock, reading
included, on one core; it prints the cost and the time, and as its last line the solution as the
contest required: a list of strategy indices, `[]` where none fits the memory limit (then the
least peak memory found is printed above it). `--option` sets one of the solve's knobs
(oneflow_autoddl.iopddl.options.SolveOptions) for the run; `benchmarks.iopddl_seeds` runs a
setting over several seeds. The second form checks a solution (a file holding
such a list, or the list itself) with the evaluator written from the contest's rules
(oneflow_autoddl.iopddl.instance.evaluate) and prints its cost, peak memory and validity; it
exits 1 if the solution is not valid.
"""

import argparse
import json
import logging
import os
import sys
import time

from oneflow_autoddl.errors import AutoDDLError
from oneflow_autoddl.iopddl.instance import evaluate, read
from oneflow_autoddl.iopddl.options import SolveOptions, with_settings
from oneflow_autoddl.iopddl.solve import solve

MARGIN = 2.5  # seconds kept back from the timeout: starting Python and numpy, writing the answer


def _solve(path: str, timeout: float, seed: int, options: SolveOptions) -> int:
    start = time.monotonic()
    instance = read(path)
    solved = solve(instance, start + timeout - MARGIN, seed, options)
    seconds = time.monotonic() - start
    if solved.solution:
        print(f"cost {solved.cost:.0f}")
        print(f"peak memory {solved.peak:.0f} of limit {instance.usage_limit}")
    else:
        print(f"no solution fits the limit {instance.usage_limit}")
        print(f"least peak memory found {solved.peak:.0f}")
    print(f"time {seconds:.2f} s")
    print(json.dumps(solved.solution, separators=(", ", ":")))
    return 0


def _check(path: str, solution: str) -> int:
    text = open(solution).read() if os.path.exists(solution) else solution
    lines = [line for line in text.strip().splitlines() if line.strip()]
    chosen = json.loads(lines[-1]) if lines else []
    result = evaluate(read(path), chosen)
    print(f"cost {result.cost}")
    print(f"peak memory {result.peak}")
    print(f"valid {result.valid}")
    for problem in result.problems[:10]:
        print(f"  {problem}")
    return 0 if result.valid else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a contest graph, .json or .json.gz")
    parser.add_argument("solution", nargs="?", help="with --check: a solution file or list")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds, reading included")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one of iopddl.options.SolveOptions for this run (repeatable)",
    )
    parser.add_argument("--check", action="store_true", help="evaluate SOLUTION on FILE")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the search's progress")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        if args.check:
            if args.solution is None:
                parser.error("--check needs FILE and SOLUTION")
            return _check(args.file, args.solution)
        options = with_settings(SolveOptions(), args.option)
        return _solve(args.file, args.timeout, args.seed, options)
    except AutoDDLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
