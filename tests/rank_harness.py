"""Tiny rank functions that exercise the harness itself."""
import time

import oneflow as flow


def whoami():
    return {"rank": flow.env.get_rank(), "world": flow.env.get_world_size()}


def fail_on_rank(rank: int):
    if flow.env.get_rank() == rank:
        raise RuntimeError(f"rank {rank} refuses")
    return {}


def sleep(seconds: float):
    time.sleep(seconds)
    return {}
