"""Shared fixtures: the rank harness, and a check that no launched rank outlives the suite."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import alive_groups, run_on_ranks  # noqa: E402


@pytest.fixture(scope="session")
def ranks():
    """`ranks(target, nproc, **kwargs)` runs tests/<module>.<function> on real OneFlow ranks."""
    return run_on_ranks


def pytest_sessionfinish(session, exitstatus):
    left = alive_groups()
    if left:
        print(f"\nERROR: rank process groups left running after the suite: {left}", file=sys.stderr)
        session.exitstatus = 1
