"""The job's ranks planning together: independent search tasks split over them, results shared.

Every rank reads the same Job and runs the same search; `RankExecutor.map` runs each task on the
rank search.executor.WorkerOf names and gives every rank every result (an all-gather of their
pickled results), so all ranks go through the same steps with the same numbers and write the
same plan. A task that fails on one rank fails the map on all of them, so no rank is left
waiting in a collective.
`broadcast_from_rank0` shares what only rank 0 decides (a cached or saved plan).
"""

import os
import pickle
import traceback
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

import oneflow as flow

from ..search.executor import Affinity, TaskFailed, WorkerOf, in_order, ranks_have_own_cores

T = TypeVar("T")
R = TypeVar("R")


def _cpu_broadcast(payload: Optional[bytes], root: int) -> bytes:
    """`root`'s payload (the other ranks pass None) on every rank, over OneFlow's CPU transport
    (the call `flow.load` shares Python objects with): a rank waiting in it sleeps rather than
    polling a core, and no eager tensor or device sync is involved."""
    return flow._oneflow_internal.cpu_broadcast(payload, root)


def all_gather_bytes(payload: bytes) -> List[bytes]:
    """Every rank's `payload`, in rank order, on every rank: each rank broadcasts in turn."""
    rank = flow.env.get_rank()
    return [
        _cpu_broadcast(payload if r == rank else None, r) for r in range(flow.env.get_world_size())
    ]


def broadcast_from_rank0(payload: Optional[bytes]) -> bytes:
    """Rank 0's `payload` (the other ranks pass None) on every rank."""
    return _cpu_broadcast(payload if flow.env.get_rank() == 0 else None, 0)


def machine_id() -> str:
    """This machine's boot id: ranks with the same one run on the same cores (emulated nodes
    do)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def split_pays() -> bool:
    """Whether the job's ranks should search together (search.executor.ranks_have_own_cores),
    from every rank's machine and cores, all-gathered: every rank decides alike."""
    mine = f"{machine_id()} {len(os.sched_getaffinity(0))}".encode()
    ranks = [blob.decode().split() for blob in all_gather_bytes(mine)]
    return ranks_have_own_cores([(m, int(n)) for m, n in ranks])


class RankExecutor:
    """search.executor.Executor over the ranks of this job."""

    def __init__(self) -> None:
        self.rank = flow.env.get_rank()
        self.workers = flow.env.get_world_size()
        self._worker_of = WorkerOf(self.workers)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], affinity: Affinity = None) -> List[R]:
        mine: Dict[int, object] = {}
        failure = None
        placed = self._worker_of(tasks, affinity)
        for i in [i for i, worker in enumerate(placed) if worker == self.rank]:
            try:
                mine[i] = fn(tasks[i])
            except Exception:  # shipped to every rank, raised on all
                failure = f"rank {self.rank}, task {i}: {traceback.format_exc(limit=4)}"
                break
        results: Dict[int, object] = {}
        failures = []
        for blob in all_gather_bytes(pickle.dumps((mine, failure))):
            theirs, error = pickle.loads(blob)
            results.update(theirs)
            if error:
                failures.append(error)
        if failures:
            raise TaskFailed(failures[0])
        return [results[i] for i in range(len(tasks))]  # type: ignore[misc]

    def first(
        self, fn: Callable[[T], R], tasks: Sequence[T], found: Callable[[R], bool]
    ) -> List[R]:
        """The tasks one after another, every rank in each (its descents split by `map`): a rank
        cannot drop a task another rank still runs collectives in."""
        return in_order(fn, tasks, found)
