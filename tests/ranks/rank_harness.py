"""Tiny rank functions that exercise the harness itself."""

import time

import oneflow as flow


def fail_on_rank(rank: int):
    if flow.env.get_rank() == rank:
        raise RuntimeError(f"rank {rank} refuses")
    return {}


def sleep(seconds: float):
    time.sleep(seconds)
    return {}
