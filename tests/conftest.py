"""Shared fixtures: the rank harness, and a check that no launched rank outlives the suite."""

import sys

import pytest

from oneflow_autoddl.launch import alive_groups, run_on_ranks


@pytest.fixture(scope="session")
def ranks():
    """`ranks("tests.ranks.<module>:<function>", nproc, **kwargs)` runs it on real OneFlow ranks."""
    return run_on_ranks


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist's `--dist loadgroup` (ci/test.sh): the tests that launch ranks
    all on one worker, one launch at a time (each launch takes the cores it counts on), and
    each planner module's tests on one worker (its module fixtures built once). Tests marked
    `timing` go last, when the planner's worker is done: they time the machine, and measure
    again what other work drowns."""
    for item in items:
        group = "ranks" if item.path.parent.name == "ranks" else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("timing") is not None)


_LEFT_BY_WORKERS: list = []  # rank groups pytest-xdist's workers reported left running


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, on the controller
def pytest_testnodedown(node, error):
    _LEFT_BY_WORKERS.extend(getattr(node, "workeroutput", {}).get("ranks_left", []))


def pytest_sessionfinish(session, exitstatus):
    """Fails the suite where a launched rank's process group outlived it. A pytest-xdist worker
    hands its count to the controller (a worker's exit status does not reach pytest's)."""
    left = alive_groups()
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["ranks_left"] = left
        return
    left += _LEFT_BY_WORKERS
    if left:
        print(f"\nERROR: rank process groups left running after the suite: {left}", file=sys.stderr)
        session.exitstatus = 1
