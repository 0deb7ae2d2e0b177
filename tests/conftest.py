"""Shared fixtures: the rank harness, and a check that no launched rank outlives the suite."""

import sys

import pytest

from oneflow_autoddl.launch import alive_groups, run_on_ranks


@pytest.fixture(scope="session")
def ranks():
    """`ranks("tests.ranks.<module>:<function>", nproc, **kwargs)` runs it on real OneFlow ranks."""
    return run_on_ranks


def pytest_sessionfinish(session, exitstatus):
    left = alive_groups()
    if left:
        print(f"\nERROR: rank process groups left running after the suite: {left}", file=sys.stderr)
        session.exitstatus = 1
