"""Shared fixtures: the rank harness, and a check that no launched rank outlives the suite."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import run_on_ranks  # noqa: E402


@pytest.fixture(scope="session")
def ranks():
    """`ranks(target, nproc, **kwargs)` runs tests/<module>.<function> on real OneFlow ranks."""
    return run_on_ranks


def our_launchers():
    """PIDs of oneflow.distributed.launch processes started by this suite (they run tests/rank_main.py)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    here = os.path.dirname(os.path.abspath(__file__))
    return [line.split()[0] for line in out.splitlines()
            if "rank_main.py" in line and here in line]


def pytest_sessionfinish(session, exitstatus):
    left = our_launchers()
    if left:
        print(f"\nERROR: rank processes left running after the suite: {left}", file=sys.stderr)
        session.exitstatus = 1
