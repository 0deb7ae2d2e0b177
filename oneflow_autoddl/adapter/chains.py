"""Timing chains of identical stages inside compiled nn.Graphs, on all ranks at once.

What `calibrate` measures with (and benchmarks time their own stages with): a graph of STAGES
stages from a held tensor, stepped many times; graphs whose figures are read against each
other take turns step by step (step_times), so a drift in the machine's load weighs on each
alike.
"""

import statistics
import time
from typing import Callable, List, Optional

import oneflow as flow

STAGES = 16
# steps timed per chain, the median taken (`calibrate --repeats` for a quicker, noisier run)
REPEATS = 9
_repeats = [REPEATS]  # this process's (one calibration per process)


def set_repeats(repeats: int) -> None:
    _repeats[0] = repeats


class Holder(flow.nn.Module):
    def __init__(self, **tensors):
        super().__init__()
        for name, t in tensors.items():
            setattr(self, name, flow.nn.Parameter(t, requires_grad=False))


class Chain(flow.nn.Graph):
    """`stages` stages of `stage(holder, x)` from holder.x; the output is summed so nothing is
    pruned. With `beside`, a second chain of its stages from holder.z, independent of the first."""

    def __init__(
        self, holder, stage: Callable, beside: Optional[Callable] = None, stages: int = STAGES
    ):
        super().__init__()
        self.holder, self.stage, self.beside, self.stages = holder, stage, beside, stages

    def build(self):
        x = self.holder.x
        for _ in range(self.stages):
            x = self.stage(self.holder, x)
        if self.beside is None:
            return x.sum()
        z = self.holder.z
        for _ in range(self.stages):
            z = self.beside(self.holder, z)
        return x.sum() + z.sum()


class TrainStep(flow.nn.Graph):
    """A train step of `module` (its forward returns the loss) under `optimizer`."""

    def __init__(self, module: flow.nn.Module, optimizer):
        super().__init__()
        self.module = module
        self.add_optimizer(optimizer)

    def build(self):
        loss = self.module()
        loss.backward()
        return loss


def _step(graph) -> None:
    """One step, waited for on this rank: its output's local part, so that fetching it moves
    nothing between ranks (a global fetch would, and across emulated nodes that added tens of ms
    of a link's latency to every step, burying the cost of small ops)."""
    graph().to_local().numpy()


def step_times(
    *graphs,
    clock: Callable[[], float] = time.perf_counter,
    pick: Callable[[List[float]], float] = statistics.median,
) -> List[float]:
    """`pick` (the median unless told) of each graph's step times on `clock` (wall time unless
    told), the graphs taking turns (an untimed step, then a timed one) so that the machine's
    drifts in load weigh on each alike and a figure formed from their difference is not one
    graph's luck. The untimed step takes in what the other graph left running: a train step's
    loss is out before its update ends."""
    for graph in graphs:
        _step(graph)
    flow.comm.barrier()
    times: List[List[float]] = [[] for _ in graphs]
    for _ in range(_repeats[0]):
        for graph, taken in zip(graphs, times):
            _step(graph)
            start = clock()
            _step(graph)
            taken.append(clock() - start)
    return [pick(taken) for taken in times]


def stage_time(stage: Callable, **tensors) -> float:
    """Seconds a stage of `stage(holder, x)` takes in a chain of STAGES from tensors["x"], on all
    ranks at once (benchmarks time their own stages with it)."""
    return step_times(Chain(Holder(**tensors), stage))[0] / STAGES


def split_ones(place, *shape):
    """Ones of `shape` (logical) split on axis 0 over `place` (1-D)."""
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))


def broadcast_ones(place, *shape):
    """0.01s of `shape` on every rank of `place` (1-D)."""
    return flow.ones(*shape).to_global(place, flow.sbp.broadcast) * 0.01
