"""Who runs the search's independent tasks: this process alone, or every rank of a job.

The search hands an executor lists of independent tasks (descents from different starts or
under different objectives) and uses the results in order. `Serial` runs them here. The
OneFlow adapter gives an executor whose `map` runs each task on the rank `WorkerOf` names and
gathers every result on every rank (adapter.ranks); since a task's result depends only on the
problem and the task, every rank assembles the same results in the same order, and so writes the
same plan.
"""

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


class Serial:
    """Every task here, one after another."""

    workers = 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], affinity: Affinity = None) -> List[R]:
        return [fn(t) for t in tasks]


SERIAL = Serial()


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
