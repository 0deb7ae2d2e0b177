"""python -m oneflow_autoddl {plan, calibrate}: plan any cluster from a laptop; measure this one."""
import argparse
import os
import sys
from typing import List, Optional

from .cost.cluster import PRESET_DIR


def _calibrate(args) -> int:
    from .launch import run_module
    command = f"python -m oneflow_autoddl calibrate --nproc {args.nproc} --out {args.out}"
    return run_module("oneflow_autoddl.adapter.calibrate", args.nproc, [os.path.abspath(args.out), command])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oneflow_autoddl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="measure CPU ranks of this machine and write a cluster JSON")
    cal.add_argument("--nproc", type=int, default=4, help="ranks to measure at once")
    cal.add_argument("--out", default=os.path.join(PRESET_DIR, "cpu-local.json"))
    cal.set_defaults(run=_calibrate)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
