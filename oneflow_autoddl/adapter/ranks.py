"""The job's ranks planning together: independent search tasks split over them, results shared.

Every rank reads the same Job and runs the same search; `RankExecutor.map` runs task i on rank
i mod N and gives every rank every result (an all-gather of their pickled results), so all
ranks go through the same steps with the same numbers and write the same plan. A task that
fails on one rank fails the map on all of them, so no rank is left waiting in a collective.
`broadcast_from_rank0` shares what only rank 0 decides (a cached or saved plan).
"""

import os
import pickle
import traceback
from typing import Callable, Dict, List, Optional, Sequence, TypeVar

import numpy as np
import oneflow as flow

from ..search.executor import ranks_have_own_cores

T = TypeVar("T")
R = TypeVar("R")


class TaskFailed(RuntimeError):
    """A search task raised on some rank; the message holds that rank's error."""


def _to_tensor(payload: bytes, size: int) -> "flow.Tensor":
    data = np.zeros(size, dtype=np.uint8)
    data[: len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    return flow.tensor(data, dtype=flow.uint8)


def all_gather_bytes(payload: bytes) -> List[bytes]:
    """Every rank's `payload`, in rank order, on every rank."""
    world = flow.env.get_world_size()
    sizes = [flow.zeros(1, dtype=flow.int64) for _ in range(world)]
    flow.comm.all_gather(sizes, flow.tensor([len(payload)], dtype=flow.int64))
    lengths = [int(s.item()) for s in sizes]
    longest = max(lengths)
    parts = [flow.zeros(longest, dtype=flow.uint8) for _ in range(world)]
    flow.comm.all_gather(parts, _to_tensor(payload, longest))
    return [p.numpy().tobytes()[:n] for p, n in zip(parts, lengths)]


def broadcast_from_rank0(payload: Optional[bytes]) -> bytes:
    """Rank 0's `payload` (the other ranks pass None) on every rank. The ranks first meet at a
    barrier, where a rank waits idle: a rank waiting in OneFlow 0.9.0's broadcast polls a core
    (two of four ranks did, each half a core, for as long as rank 0 planned), taking it from rank
    0 where ranks share cores."""
    flow.comm.barrier()
    size = flow.tensor([len(payload or b"")], dtype=flow.int64)
    flow.comm.broadcast(size, 0)
    n = int(size.item())
    data = (
        _to_tensor(payload or b"", n)
        if flow.env.get_rank() == 0
        else flow.zeros(n, dtype=flow.uint8)
    )
    flow.comm.broadcast(data, 0)
    return data.numpy().tobytes()


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

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> List[R]:
        mine: Dict[int, object] = {}
        failure = None
        for i in range(self.rank, len(tasks), self.workers):
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
