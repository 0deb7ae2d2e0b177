"""Who runs the search's independent tasks: this process alone, or every rank of a job.

The search hands an executor lists of independent tasks (descents from different starts or
under different objectives) and uses the results in order. `Serial` runs them here. The
OneFlow adapter gives an executor whose `map` runs task i on rank i mod N and gathers every
result on every rank (adapter.ranks); since a task's result depends only on the problem and
the task, every rank assembles the same results in the same order, and so writes the same plan.
"""

from typing import Callable, List, Protocol, Sequence, TypeVar

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
