"""A step's time with communication overlapping compute: one device's ops on two streams.

OneFlow runs an op as soon as its inputs are there (actors, not a fixed program), and its
boxing runs beside the compute kernels. A boxing's time is latency (its alpha terms: waiting
on peers) and moving bytes. Measured on 4 CPU ranks sharing 2 cores (2026-12-02):
  - moving bytes is CPU work there: a matmul chain beside an independent chain of 1 MiB
    all-gathers takes the sum of the two (165 + 170 -> 339 ms; 172 + 663 -> 827 ms). How much
    of it the device can compute through is the cluster's `device.comm_overlap` (`calibrate`
    measures ~0 here; on CUDA NCCL has its own stream, the presets say 1);
  - latency is not, and OneFlow's CPU boxings run at once (CommNet is asynchronous): 16
    independent all-reduces of 16 KiB took 15-16 ms beyond the same graph without them, 16
    chained ones 33-39 ms (of 1 MiB: 61-78 against 64-91, bytes dominating). On CUDA the
    collectives of a placement queue on one NCCL stream, latency included (`concurrent` off).
So in this list schedule of one device (every device of a mesh does the same work under an
SBP plan): a compute stream runs the ready op that comes first in the graph's order; a
communication stream runs each boxing, first come first served, once its producer has
finished, and the compute stream spends (1 - overlap) of the time it moves bytes on it; the
boxing's consumers start when it has moved its bytes and its latency has passed, which with
`concurrent` boxings holds no stream.
"""

import heapq
from dataclasses import dataclass, field
from typing import Collection, List, Mapping, Tuple

from ..ir import Graph

# lbn -> (seconds of boxing, of which latency, the consumers that read it boxed)
Boxings = Mapping[str, Tuple[float, float, Collection[str]]]


@dataclass
class Schedule:
    step_time: float  # when the last op or boxing ends
    exposed_comm_time: (
        float  # the part of it not spent computing: boxing the compute could not hide
    )
    order: List[str] = field(
        default_factory=list
    )  # the ops in the order the compute stream ran them


class Scheduler:
    """A graph's dependencies, gathered once (a plan's step is scheduled many times in a search)."""

    def __init__(self, graph: Graph):
        self.names = list(graph.ops)
        index = {name: i for i, name in enumerate(self.names)}
        self.inputs = [len(set(graph.ops[name].inputs.values())) for name in self.names]
        self.outputs = [
            [
                (lbn, sorted({index[c] for c, _ in graph.tensor(lbn).consumers}))
                for lbn in graph.ops[name].outputs.values()
            ]
            for name in self.names
        ]

    def run(
        self, op_compute: Mapping[str, float], boxings: Boxings, overlap: float, concurrent: bool
    ) -> Schedule:
        """`op_compute`: seconds per op; `boxings`: per boxed tensor, its time, its latency and the
        consumers that wait for it (the others take it as produced); `overlap`: the fraction of
        the time a boxing moves bytes that the compute stream is free for other ops; `concurrent`:
        whether boxings wait on their peers at once, or one after another."""
        waiting, earliest = list(self.inputs), [0.0] * len(self.names)
        pending: List[Tuple[float, int]] = [
            (0.0, i) for i, w in enumerate(waiting) if w == 0
        ]  # (inputs at, op)
        ready: List[int] = []
        clock = comm_free = busy = end = 0.0
        order: List[str] = []
        for _ in self.names:
            if (
                not ready and pending[0][0] > clock
            ):  # nothing to run: the stream idles until inputs come
                clock = pending[0][0]
            while pending and pending[0][0] <= clock:
                heapq.heappush(ready, heapq.heappop(pending)[1])
            i = heapq.heappop(ready)
            order.append(self.names[i])
            spent = op_compute.get(self.names[i], 0.0)
            clock, busy = clock + spent, busy + spent
            for lbn, consumers in self.outputs[i]:
                produced = boxed = clock
                seconds, latency, boxed_consumers = boxings.get(lbn, (0.0, 0.0, ()))
                if seconds:
                    moving = seconds - latency
                    comm_free = max(comm_free, clock) + (moving if concurrent else seconds)
                    boxed = comm_free + latency if concurrent else comm_free
                    end = max(end, boxed)
                    clock += (1 - overlap) * moving
                for j in consumers:
                    at = boxed if seconds and self.names[j] in boxed_consumers else produced
                    if at > earliest[j]:
                        earliest[j] = at
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        heapq.heappush(pending, (earliest[j], j))
        step = max(clock, end)
        return Schedule(step, step - busy, order)
