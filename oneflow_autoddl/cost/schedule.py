"""A step's time with communication overlapping compute: one device's ops on two streams.

OneFlow runs an op as soon as its inputs are there (actors, not a fixed program), and its
boxing runs beside the compute kernels: on CUDA, NCCL on its own stream, so a gradient's
all-reduce can go on while the backward pass computes the gradients before it, and only
what the compute waits for is on the step's time. How much of a boxing the device can
compute through is the cluster's `comm_overlap` (0 to 1). On CPU ranks sharing cores it
is nil: the boxing is CPU work too (measured by `calibrate`: a matmul chain beside an
independent all-gather chain takes their sum, not their maximum).

The simulation is list scheduling on one device (every device of a mesh does the same work
under an SBP plan): a compute stream runs the ready op that comes first in the graph's
order; a communication stream runs each boxing, first come first served, once its producer
has finished, and the compute stream spends (1 - overlap) of its time on it; a consumer
starts when its inputs have arrived. With no overlap this is compute plus communication.
"""
import heapq
from dataclasses import dataclass
from typing import Collection, List, Mapping, Tuple

from ..ir import Graph


@dataclass
class Schedule:
    step_time: float  # when the last op or boxing ends
    exposed_comm_time: float  # the part of it not spent computing: boxing the compute could not hide


def overlapped(graph: Graph, op_compute: Mapping[str, float], boxings: Mapping[str, Tuple[float, Collection[str]]],
               overlap: float) -> Schedule:
    """`op_compute`: seconds per op; `boxings`: per boxed tensor (lbn), its seconds of boxing and the
    consumers that wait for it (the others take it as produced); `overlap`: the fraction of a
    boxing's time the compute stream is free for other ops."""
    names = list(graph.ops)
    index = {name: i for i, name in enumerate(names)}
    waiting = [len(set(graph.ops[name].inputs.values())) for name in names]
    earliest = [0.0] * len(names)
    pending: List[Tuple[float, int]] = [(0.0, i) for i, w in enumerate(waiting) if w == 0]  # (inputs there at, op)
    ready: List[int] = []
    clock = comm_free = busy = 0.0
    for _ in names:
        if not ready and pending[0][0] > clock:  # nothing to run: the stream idles until inputs come
            clock = pending[0][0]
        while pending and pending[0][0] <= clock:
            heapq.heappush(ready, heapq.heappop(pending)[1])
        i = heapq.heappop(ready)
        op = graph.ops[names[i]]
        spent = op_compute.get(op.name, 0.0)
        clock, busy = clock + spent, busy + spent
        for lbn in op.outputs.values():
            produced = boxed = clock
            boxing, waiting_ops = boxings.get(lbn, (0.0, ()))
            if boxing:
                comm_free = boxed = max(comm_free, clock) + boxing
                clock += (1 - overlap) * boxing
            for consumer in {c for c, _ in graph.tensor(lbn).consumers}:
                j = index[consumer]
                earliest[j] = max(earliest[j], boxed if consumer in waiting_ops else produced)
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(pending, (earliest[j], j))
    step = max(clock, comm_free)
    return Schedule(step, step - busy)
