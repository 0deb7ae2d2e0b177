"""A step's time with communication overlapping compute: one device's ops on two streams.

OneFlow runs an op as soon as its inputs are there (actors, not a fixed program), and its
boxing runs beside the compute kernels. A boxing's time is latency (its alpha terms: waiting
on peers) and moving bytes. How much of it the device computes through depends on where the
boxing runs:
  - OneFlow's CPU boxing (CommNet over sockets) is the ranks' own CPU work: moving bytes
    holds the rank but for the cluster's `device.comm_overlap` of it (`calibrate` measures
    ~0 on CPU ranks), and so do its waits on peers: the matmuls beside a chain of
    latency-bound all-reduces hide little or none of its time (benchmarks.cpu_waits).
    Boxings do not queue behind one another there (CommNet is asynchronous);
  - NCCL collectives run on their own stream (the presets' overlap 1), one after another,
    latency included, and the compute waits for none of it.
So in this list schedule of one device (every device of a mesh does the same work under an
SBP plan): a compute stream runs the ready op that comes first in the graph's order; a
communication stream runs each boxing once its producer has finished (first come first
served where boxings queue); the compute stream spends (1 - overlap) of the time the boxing
moves bytes on it, and its latency too where the boxing is CPU work; the boxing's consumers
start when it has moved its bytes and its latency has passed.
"""

import heapq
from dataclasses import dataclass, field
from typing import Collection, List, Mapping, Sequence, Tuple, Union

from ..ir import Graph

# lbn -> (seconds of boxing, of which latency, the consumers that read it boxed)
Boxings = Mapping[str, Tuple[float, float, Collection[str]]]
_UNBOXED: Tuple[float, float, Collection[str]] = (0.0, 0.0, ())


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
        self,
        op_compute: Union[Sequence[float], Mapping[str, float]],
        boxings: Boxings,
        overlap: float,
        on_cpu: bool,
    ) -> Schedule:
        """`op_compute`: seconds per op, by name or listed in the graph's order; `boxings`: per
        boxed tensor, its time, its latency and the consumers that wait for it (the others take
        it as produced); `overlap`: the fraction of the time a boxing moves bytes that the
        compute stream is free for other ops; `on_cpu`: whether boxing is the device's CPU work
        (its waits hold the compute stream, boxings do not queue) or a stream's of its own
        (boxings queue, waits included, the compute free)."""
        names = self.names
        if isinstance(op_compute, Mapping):
            op_compute = [op_compute.get(name, 0.0) for name in names]
        if on_cpu and overlap == 0.0:
            return self._serial(op_compute, boxings)
        outputs, push, pop, get = self.outputs, heapq.heappush, heapq.heappop, boxings.get
        waiting, earliest = list(self.inputs), [0.0] * len(names)
        ready = [i for i, w in enumerate(waiting) if w == 0]  # inputs there, by graph order
        pending: List[Tuple[float, int]] = []  # (when its inputs come, op), later than now
        clock = comm_free = busy = end = 0.0
        order: List[int] = []
        for _ in names:
            if pending and (not ready or pending[0][0] <= clock):
                if not ready:  # nothing to run: idle until inputs come
                    clock = max(clock, pending[0][0])
                while pending and pending[0][0] <= clock:
                    push(ready, pop(pending)[1])
            i = pop(ready)
            order.append(i)
            clock, busy = clock + op_compute[i], busy + op_compute[i]
            for lbn, consumers in outputs[i]:
                produced = boxed = clock
                seconds, latency, boxed_consumers = get(lbn, _UNBOXED)
                if seconds:
                    moving = seconds - latency
                    comm_free = max(comm_free, clock) + (moving if on_cpu else seconds)
                    boxed = comm_free + latency if on_cpu else comm_free
                    end = max(end, boxed)
                    clock += (1 - overlap) * moving + (latency if on_cpu else 0.0)
                for j in consumers:
                    at = boxed if seconds and names[j] in boxed_consumers else produced
                    if at > earliest[j]:
                        earliest[j] = at
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        if earliest[j] <= clock:
                            push(ready, j)
                        else:
                            push(pending, (earliest[j], j))
        step = max(clock, end)
        return Schedule(step, step - busy, [names[i] for i in order])

    def _serial(self, op_compute: Sequence[float], boxings: Boxings) -> Schedule:
        """`run` where every boxing holds the rank for all of its time (CPU work, no overlap): a
        boxing ends when the compute stream is past it, so no op waits for an input, the ops run
        in the graph's (topological) order and the step is the sum of the compute and of the
        boxings, added up in that order."""
        clock = busy = 0.0
        for i, spent in enumerate(op_compute):
            clock, busy = clock + spent, busy + spent
            for lbn, _ in self.outputs[i]:
                seconds = boxings.get(lbn, _UNBOXED)[0]
                clock += seconds
        return Schedule(clock, clock - busy, list(self.names))
