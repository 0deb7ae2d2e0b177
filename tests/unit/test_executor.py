"""search.executor: the searches of leaner graphs (`first`) here, or at once in forked copies."""

import os
import sys
import time

import pytest

from oneflow_autoddl.search.executor import SERIAL, Cores, TaskFailed


@pytest.fixture(autouse=True)
def forking(monkeypatch):
    """Cores forks only where OneFlow is not loaded; the suite's other tests load it in this
    process."""
    monkeypatch.delitem(sys.modules, "oneflow", raising=False)


def square(t):
    return t * t


@pytest.mark.parametrize("executor", [SERIAL, Cores(2), Cores(3)], ids=["serial", "2", "3"])
@pytest.mark.parametrize("found, expected", [(4, [0, 1, 4]), (100, [0, 1, 4, 9, 16])])
def test_first_gives_the_results_in_order_up_to_the_first_found(executor, found, expected):
    assert executor.first(square, range(5), lambda r: r >= found) == expected


def _no_children_left():
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_the_later_tasks_run_in_forked_copies():
    pids = Cores(2).first(lambda t: os.getpid(), range(3), lambda r: False)
    assert pids[0] == os.getpid() and os.getpid() not in pids[1:]
    _no_children_left()


def test_tasks_after_the_first_found_are_killed():
    def slow_after_the_first(t):
        if t:
            time.sleep(60)
        return t

    start = time.perf_counter()
    assert Cores(3).first(slow_after_the_first, range(4), lambda r: True) == [0]
    assert time.perf_counter() - start < 10
    _no_children_left()


def test_a_forked_task_that_raises_fails_with_its_traceback():
    def fails_after_the_first(t):
        if t:
            raise ValueError(f"task {t} is bad input")
        return t

    with pytest.raises(TaskFailed, match="ValueError: task 1 is bad input"):
        Cores(2).first(fails_after_the_first, range(3), lambda r: False)
    _no_children_left()


def test_where_oneflow_is_loaded_every_task_runs_here(monkeypatch):
    monkeypatch.setitem(sys.modules, "oneflow", object())
    pids = Cores(2).first(lambda t: os.getpid(), range(3), lambda r: False)
    assert pids == [os.getpid()] * 3
