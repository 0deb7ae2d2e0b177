"""Who runs the search's independent tasks: this process alone, or every rank of a job.

The search hands an executor lists of independent tasks (descents from different starts or
under different objectives) and uses the results in order. `Serial` runs them here. The
OneFlow adapter gives an executor whose `map` runs task i on rank i mod N and gathers every
result on every rank (adapter.ranks); since a task's result depends only on the problem and
the task, every rank assembles the same results in the same order, and so writes the same plan.
"""

from collections import Counter
from typing import Callable, List, Protocol, Sequence, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs independent tasks; `map` returns their results in the order of the tasks."""

    workers: int  # how many run at once

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> List[R]: ...


class Serial:
    """Every task here, one after another."""

    workers = 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> List[R]:
        return [fn(t) for t in tasks]


SERIAL = Serial()


def ranks_have_own_cores(ranks: Sequence[Tuple[str, int]]) -> bool:
    """Whether splitting the search over the job's ranks can pay: no machine runs more ranks than
    it has cores. `ranks` holds, per rank, its machine (e.g. its boot id: emulated nodes share
    one) and the cores it may use. Ranks that share cores and search together run the search's
    serial steps all at once on the same cores, slower than one rank searching alone."""
    on = Counter(machine for machine, _ in ranks)
    return all(on[machine] <= cores for machine, cores in ranks)
