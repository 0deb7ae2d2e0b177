"""Running benchmark rank functions and printing their tables."""

import json
from typing import Any, List

from tabulate import tabulate

from oneflow_autoddl.launch import run_on_ranks

# What the ranks' environment needs for OneFlow to log each compile pass's time
# (rank_bench.traced_with_pass_log); glog reads it as OneFlow starts, so the launch sets it.
PASS_LOG_ENV = {"GLOG_v": "1", "GLOG_logtostderr": "1", "GLOG_minloglevel": "0"}

NPROC = {"1": 1, "2": 2, "4": 4, "2x2": 4}


def on_ranks(target: str, mesh: str, timeout: float = 1800, **kwargs) -> List[Any]:
    """`benchmarks.<module>:function` on the ranks `mesh` needs; results of every rank."""
    return run_on_ranks(target, NPROC[mesh], timeout=timeout, mesh=mesh, **kwargs)


def round_orders(plans, rounds: int):
    """The order plans run in each round: rotated by one a round, reversed every other cycle of
    rotations, so that over 2 x len(plans) rounds each plan runs in every position of a round
    equally often, and before and after its neighbours equally often."""
    n = len(plans)
    orders = []
    for r in range(rounds):
        order = list(plans[r % n :]) + list(plans[: r % n])
        orders.append(order[::-1] if (r // n) % 2 else order)
    return orders


def show(rows: List[dict], columns: List[str], headers: List[str]) -> str:
    return tabulate(
        [[r[c] for c in columns] for r in rows], headers=headers, tablefmt="github", floatfmt=".4g"
    )


def write_json(path: str, rows: Any) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"\nwritten to {path}")
