"""Who runs the search's independent tasks: this process alone, forked copies of it on this
machine's cores, or every rank of a job.

The search hands an executor lists of independent tasks and uses the results in order: `map`
takes descents from different starts or under different objectives, `first` the searches of
leaner graphs where the memory limit binds, of which the first that finds a plan is used.
`Serial` runs them here. `Cores` (the CLI's) runs `map` here too and `first`'s tasks at once in
forked copies of this process. The OneFlow adapter gives an executor whose `map` runs each task
on the rank `WorkerOf` names and gathers every result on every rank (adapter.ranks); since a
task's result depends only on the problem and the task, every rank assembles the same results in
the same order, and so writes the same plan.
"""

import os
import pickle
import signal
import sys
import traceback
from collections import Counter
from typing import Any, Callable, Dict, Hashable, List, Optional, Protocol, Sequence, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")


Affinity = Optional[Callable[[Any], Hashable]]  # a task's key: see WorkerOf


class Executor(Protocol):
    """Runs independent tasks; `map` returns their results in the order of the tasks. Tasks of
    one `affinity` key run where that key's earlier tasks ran, where there are several workers."""

    workers: int  # how many run at once

    def map(
        self, fn: Callable[[T], R], tasks: Sequence[T], affinity: Affinity = None
    ) -> List[R]: ...

    def first(
        self, fn: Callable[[T], R], tasks: Sequence[T], found: Callable[[R], bool]
    ) -> List[R]: ...


def in_order(fn: Callable[[T], R], tasks: Sequence[T], found: Callable[[R], bool]) -> List[R]:
    """The results of fn over `tasks` in order, up to and with the first that is `found` (all
    where none is): what every executor's `first` returns, however it runs the tasks."""
    results = []
    for task in tasks:
        results.append(fn(task))
        if found(results[-1]):
            break
    return results


class Serial:
    """Every task here, one after another."""

    workers = 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], affinity: Affinity = None) -> List[R]:
        return [fn(t) for t in tasks]

    def first(
        self, fn: Callable[[T], R], tasks: Sequence[T], found: Callable[[R], bool]
    ) -> List[R]:
        return in_order(fn, tasks, found)


SERIAL = Serial()


class TaskFailed(RuntimeError):
    """A search task raised where it ran (another rank, a forked copy); the message holds that
    task's traceback."""


class _Forked:
    """fn(task) running in a forked copy of this process, its result pickled back through a
    pipe; the copy never returns into the caller's code (it leaves through os._exit)."""

    def __init__(self, fn: Callable[[T], R], task: T):
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(read)
            _run_and_exit(fn, task, write)
        os.close(write)
        self.reader = os.fdopen(read, "rb")

    def result(self) -> Any:
        """The task's result, waiting for it; TaskFailed where it raised."""
        with self.reader:
            blob = self.reader.read()
        os.waitpid(self.pid, 0)
        if not blob:
            raise TaskFailed(f"forked search task {self.pid} ended with no result")
        ok, value = pickle.loads(blob)
        if not ok:
            raise TaskFailed(value)
        return value

    def stop(self) -> None:
        """Kill the copy (its result is not wanted) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.reader.close()


def _run_and_exit(fn: Callable[[T], R], task: T, write: int) -> None:
    code = 0
    try:
        try:
            blob = pickle.dumps((True, fn(task)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            blob, code = pickle.dumps((False, traceback.format_exc(limit=8))), 1
        with os.fdopen(write, "wb") as out:
            out.write(blob)
    finally:
        os._exit(code)


class Cores:
    """`map` here, and `first`'s tasks at once on this machine's cores: the first task here, each
    later one in a forked copy of this process (`workers` at a time), and the copies whose
    results are not needed (a task before them found) killed. Where OneFlow is loaded (a Job
    read from a file), one after another: its runtime's threads do not survive a fork. `map`'s
    tasks (a descent: tens of milliseconds on the examples) are too small for a fork of the
    planning process to pay."""

    def __init__(self, workers: Optional[int] = None):
        self.workers = workers or len(os.sched_getaffinity(0))

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], affinity: Affinity = None) -> List[R]:
        return SERIAL.map(fn, tasks)

    def first(
        self, fn: Callable[[T], R], tasks: Sequence[T], found: Callable[[R], bool]
    ) -> List[R]:
        if self.workers < 2 or len(tasks) < 2 or "oneflow" in sys.modules:
            return in_order(fn, tasks, found)
        forked: Dict[int, _Forked] = {}
        upcoming = iter(range(1, len(tasks)))

        def fork_more(busy_here: bool) -> None:
            while len(forked) < self.workers - busy_here:
                i = next(upcoming, None)
                if i is None:
                    return
                forked[i] = _Forked(fn, tasks[i])

        try:
            fork_more(busy_here=True)
            results = [fn(tasks[0])]
            for i in range(1, len(tasks)):
                if found(results[-1]):
                    break
                fork_more(busy_here=False)
                results.append(forked.pop(i).result())
            return results
        finally:
            for left in forked.values():
                left.stop()


class WorkerOf:
    """Which of `workers` runs each task of a map: task i on worker i mod `workers`; where the
    map gives its tasks an affinity key, every task of one key on one worker, the same in every
    later map (a key not seen before goes to the worker with the fewest of this map's tasks so
    far, ties to the lowest). A descent under one objective keeps the group optima it finds in
    that objective's Descent (search.descend), and the later descents under it (the polish
    rounds) read them: on the worker that ran the earlier ones they are found, elsewhere solved
    again. The same on every rank: it depends on the tasks' keys and order only."""

    def __init__(self, workers: int):
        self.workers = workers
        self._sticky: Dict[Hashable, int] = {}

    def __call__(self, tasks: Sequence[Any], affinity: Affinity = None) -> List[int]:
        if affinity is None:
            return [i % self.workers for i in range(len(tasks))]
        load = [0] * self.workers
        placed = []
        for task in tasks:
            key = affinity(task)
            if key not in self._sticky:
                self._sticky[key] = min(range(self.workers), key=lambda w: (load[w], w))
            worker = self._sticky[key]
            load[worker] += 1
            placed.append(worker)
        return placed


def ranks_have_own_cores(ranks: Sequence[Tuple[str, int]]) -> bool:
    """Whether splitting the search over the job's ranks can pay: no machine runs more ranks than
    it has cores. `ranks` holds, per rank, its machine (e.g. its boot id: emulated nodes share
    one) and the cores it may use. Ranks that share cores and search together run the search's
    serial steps all at once on the same cores, slower than one rank searching alone."""
    on = Counter(machine for machine, _ in ranks)
    return all(on[machine] <= cores for machine, cores in ranks)
