"""An IOPDDL graph solved by the project's search, under the memory limit at every time step.

The graph is first reduced without loss (iopddl.reduce). Then, as search.fit does for a plan,
a Lagrangian relaxation turns the limit into a price per byte at each time step
(search.prices), and the search minimises cost plus priced memory:
- sweeps of block moves over random induced forests (search.forest: most of the graph re-solved
  exactly at once, in about one pass over its factors) find the cheapest assignment, unpriced;
- subgradient steps then move the prices, up at the steps the assignment holds more than the
  limit at and down where it leaves room, the assignment settling under each price from where
  the last left it (forest sweeps, and within a share of the time a descent over a partition's
  groups, which hold cycles: search.descent over search.partition). The step shrinks each time
  the assignment crosses the limit and grows while it stays over, so that the assignments hover
  along the limit, where the cheapest that fits is. Each is repaired to fit (the variables live
  at the fullest step moved to leaner candidates, cheapest per byte freed first), now and then
  tightened (single-variable moves along the limit) and kept if cheapest;
- the second half of the time goes to iterated local search: a random ball of variables takes
  random candidates and the variables around it descend again over a partition's groups under
  a multiple of the last prices, kept if the result fits and costs less.
Only assignments that fit are ever returned.
"""

import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..search.descent import Descent
from ..search.factors import FactorGraph, Price
from ..search.forest import Forests
from ..search.memory import MemoryItem
from ..search.partition import ball, partition
from ..search.prices import StepPrices, lower_bound
from .instance import Instance
from .reduce import Infeasible, Reduction

log = logging.getLogger(__name__)

PATIENCE = 3  # forest sweeps (or partitions) in a row that lower nothing end a descent
GROUP_VARS = 300  # most variables in one group of a partition
CHUNK_VARS = 600  # variables a descent takes between looks at the clock
FIRST_SHARE = 0.1  # of the time, at most, for the unpriced sweeps
RELAX_SHARE = 0.5  # of the time left after them, for the subgradient steps of the prices
RELAX_SWEEPS = 3  # forest sweeps under each price
GROUPS_SHARE = 0.3  # of the time under each price, at most, for a partition's groups with cycles
FIRST_STEP = 3.0  # first subgradient step, in the unpriced assignment's cost per byte-step held
SHRINK = 0.7  # the step after the assignment crosses the limit, as a share of the last
STUCK = 4  # subgradient steps in a row over the limit after which the step doubles
TIGHTEN_EVERY = 5  # subgradient steps between tightenings of the assignment that fits
RESTART = 1e-3  # a step that shrank below this share of the first starts over at the first
KICK = 8  # most variables a kick sets at random
AROUND = 120  # variables around a kick that descend again (groups with cycles)
TIGHTEN_PASSES = 3  # of single-variable moves along the limit after a kick
LEVELS = (0.0, 0.5, 1.0, 2.0)  # the prices a kick descends under, as multiples of the last


@dataclass
class Solved:
    solution: List[int]  # a strategy per node; [] where no assignment found fits
    cost: float  # its cost (inf where none)
    peak: float  # its peak memory; where none fits, the least peak found


class Usage:
    """What an assignment of the reduced graph holds at each time step, and what a price per
    time step adds to each candidate, each in one numpy pass (every item of an IOPDDL graph hangs
    on one variable)."""

    def __init__(self, items: Sequence[MemoryItem], steps: int, domain: np.ndarray):
        self.items, self.steps = list(items), steps
        self.var: np.ndarray = np.array([item.vars[0] for item in items], dtype=np.int64)
        sizes: np.ndarray = np.array([len(item.usage) for item in items], dtype=np.int64)
        self.offset: np.ndarray = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.flat = np.concatenate([item.usage for item in items]) if items else np.zeros(0)
        self.start: np.ndarray = np.array([item.start for item in items], dtype=np.int64)
        self.end: np.ndarray = np.array([item.end for item in items], dtype=np.int64)
        self.domain: np.ndarray = np.asarray(domain, dtype=np.int64)
        self.var_offset = np.concatenate([[0], np.cumsum(self.domain)[:-1]]).astype(np.int64)
        self._sizes = sizes
        within = np.arange(int(sizes.sum())) - np.repeat(self.offset, sizes)
        self._slot = np.repeat(self.var_offset[self.var], sizes) + within

    def profile(self, x: Sequence[int]) -> np.ndarray:
        held = self.flat[self.offset + np.asarray(x, dtype=np.int64)[self.var]]
        delta = np.bincount(self.start, held, self.steps + 1)
        delta -= np.bincount(self.end, held, self.steps + 1)
        return np.cumsum(delta)[: self.steps]

    def peak(self, x: Sequence[int]) -> float:
        return float(self.profile(x).max()) if self.steps else 0.0

    def prices(self, per_step: np.ndarray) -> StepPrices:
        """`per_step[t]` per byte held at step t, as an extra cost per variable and candidate."""
        through = np.concatenate([[0.0], np.cumsum(per_step)])
        weight = np.repeat(through[self.end] - through[self.start], self._sizes)
        flat = np.bincount(self._slot, self.flat * weight, int(self.domain.sum()))
        extra = np.split(flat, self.var_offset[1:])
        return StepPrices(extra, {}, float(through[-1]))


class Search:
    def __init__(
        self, graph: FactorGraph, usage: Usage, limit: float, deadline: float, seed: int = 0
    ):
        self.graph, self.usage, self.limit, self.deadline = graph, usage, limit, deadline
        self.rng = random.Random(seed)
        self.forests = Forests(graph)
        self.near = self.forests.near
        self.free = [v for v in range(len(graph)) if graph.is_free(v)]
        self.least_peak = math.inf
        self.items_of: List[List[MemoryItem]] = [[] for _ in range(len(graph))]
        for item in usage.items:
            self.items_of[item.vars[0]].append(item)
        self.best: Optional[Tuple[float, List[int]]] = None  # (cost, x) of the best that fits
        self.spent = {"forests": 0.0, "groups": 0.0}  # seconds of each kind of move in settle

    def _time_left(self, until: Optional[float] = None) -> bool:
        return time.monotonic() < min(self.deadline, until or math.inf)

    def share(self, share: float) -> float:
        """The moment `share` of the time left from now has passed."""
        now = time.monotonic()
        return now + share * max(self.deadline - now, 0.0)

    def priced(self, x: Sequence[int], price: Price) -> float:
        extra = 0.0
        if isinstance(price, StepPrices):
            extra = sum(float(price.unary[v][k]) for v, k in enumerate(x))
        return self.graph.objective(x) + extra

    def sweep(
        self,
        x: List[int],
        price: Price,
        rounds: Optional[int] = None,
        until: float = math.inf,
        variables: Optional[Sequence[int]] = None,
    ) -> List[int]:
        """x after block moves over random induced forests of `variables` (default: the free
        ones) under `price`: `rounds` of them, or (None) until PATIENCE in a row lower nothing."""
        variables = self.free if variables is None else variables
        unary = self.graph.compute
        if isinstance(price, StepPrices):
            unary = [c + e for c, e in zip(unary, price.unary)]
        value, fails, done = self.priced(x, price), 0, 0
        while self._time_left(until) and (fails < PATIENCE if rounds is None else done < rounds):
            x = self.forests.solve(x, self.forests.draw(self.rng, variables), unary)
            new = self.priced(x, price)
            fails = 0 if new < value else fails + 1
            value, done = new, done + 1
        return x

    def settle(self, x: List[int], price: Price, until: float) -> List[int]:
        """x after RELAX_SWEEPS forest sweeps under `price`, then one descent over a partition's
        groups (which hold cycles: the moves a forest cannot make) where the partitions' time so
        far is within GROUPS_SHARE of the whole: on a small graph they are cheap and exact, on a
        large one a partition costs tens of forest sweeps."""
        start = time.monotonic()
        x = self.sweep(x, price, RELAX_SWEEPS, until)
        self.spent["forests"] += time.monotonic() - start
        if self.spent["groups"] <= GROUPS_SHARE * sum(self.spent.values()) and self._time_left(
            until
        ):
            start = time.monotonic()
            groups = partition(self.graph, self.near, self.free, self.rng, GROUP_VARS)
            for chunk in _chunks(groups, CHUNK_VARS):
                if self._time_left(until):
                    x = Descent(self.graph, price, chunk).run(x, max_sweeps=3)
            self.spent["groups"] += time.monotonic() - start
        return x

    def descend(self, x: List[int], price: Price, variables: Sequence[int]) -> List[int]:
        """x after descents over random partitions of `variables` (groups with cycles, of bounded
        elimination width) until PATIENCE partitions in a row lower nothing, or time is up (the
        groups go a few at a time, so that a large graph's partition stops near the deadline)."""
        fails = 0
        value = self.graph.objective(x, price)
        while fails < PATIENCE and self._time_left():
            groups = partition(self.graph, self.near, variables, self.rng, GROUP_VARS)
            for chunk in _chunks(groups, CHUNK_VARS):
                if self._time_left():
                    x = Descent(self.graph, price, chunk).run(x, max_sweeps=3)
            new = self.graph.objective(x, price)
            fails = 0 if new < value else fails + 1
            value = new
        return x

    def consider(self, x: List[int]) -> bool:
        """Record x if it fits and is the cheapest so far; whether it fits."""
        peak = self.usage.peak(x)
        self.least_peak = min(self.least_peak, peak)
        if peak > self.limit:
            return False
        cost = self.graph.objective(x)
        if self.best is None or cost < self.best[0]:
            self.best = (cost, list(x))
            left = self.deadline - time.monotonic()
            log.debug(
                "fits: cost %.6g peak %.4g of %.4g, %.1f s left", cost, peak, self.limit, left
            )
        return True

    def relax(self, x: List[int], until: float) -> np.ndarray:
        """Subgradient steps of the prices per time step, from zero, until `until`; the prices
        reached. x (the cheapest unpriced assignment) sweeps under each price from where the last
        left it; each result is repaired to fit and kept if cheapest, tightened every
        TIGHTEN_EVERY steps. The step starts at FIRST_STEP times x's cost per byte-step it holds,
        shrinks by SHRINK when the assignment crosses the limit (either way) and doubles after
        STUCK steps in a row over it: a fixed schedule either stalls over the limit or overshoots
        into lean, dear assignments. A step that shrank below RESTART times the first
        (assignments that cross the limit at every step) starts over at the first: the prices
        froze else."""
        per_step = np.zeros(self.usage.steps)
        if not math.isfinite(self.limit) or not self.usage.steps:
            return per_step
        profile = self.usage.profile(x)
        first = FIRST_STEP * max(self.graph.objective(x), 1.0) / max(float(profile.sum()), 1.0)
        step = first
        was_over, stuck, rounds = True, 0, 0
        while self._time_left(until):
            over = bool(profile.max() > self.limit)
            stuck = stuck + 1 if over and was_over else 0
            if over != was_over:
                step = step * SHRINK if step * SHRINK >= RESTART * first else first
            elif stuck >= STUCK:
                step, stuck = step * 2, 0
            was_over = over
            per_step = np.maximum(per_step + step * (profile - self.limit) / self.limit, 0.0)
            x = self.settle(x, self.usage.prices(per_step), until)
            profile = self.usage.profile(x)
            fitting = x if profile.max() <= self.limit else self.repair(x, until)
            rounds += 1
            if self.consider(fitting) and rounds % TIGHTEN_EVERY == 0:
                self.consider(self.tighten(fitting, self.free, until))
        log.info("%d subgradient steps, the last %.3g", rounds, step)
        return per_step

    def repair(self, x: List[int], until: Optional[float] = None) -> List[int]:
        """x with variables live at its fullest step moved to the candidates that free most bytes
        there per unit of cost added, as many as cover that step's excess (one per variable),
        again at the next fullest step, until it fits or no move frees any."""
        x = list(x)
        while self._time_left(until):
            profile = self.usage.profile(x)
            step = int(profile.argmax())
            excess = profile[step] - self.limit
            if excess <= 0:
                break
            moves = self._leaner(x, step)
            if not moves:
                break
            for _, v, k, freed in moves:
                x[v] = k
                excess -= freed
                if excess <= 0:
                    break
        self.consider(x)
        return x

    def _leaner(self, x: List[int], step: int) -> List[Tuple[float, int, int, float]]:
        """(cost added per byte freed, variable, candidate, bytes freed at `step`) of the best
        move of each variable live at `step` that frees bytes there, best first."""
        u = self.usage
        held: Dict[int, np.ndarray] = {}
        for i in np.flatnonzero((u.start <= step) & (step < u.end)):
            v = int(u.var[i])
            held[v] = held.get(v, 0.0) + self.usage.items[i].usage
        moves = []
        for v, bytes_ in held.items():
            freed = bytes_[x[v]] - bytes_
            lean = np.flatnonzero(freed > 0)
            if not len(lean):
                continue
            costs = self.local_costs(x, v)
            ratio = np.maximum(costs[lean] - costs[x[v]], 0.0) / freed[lean]
            best = int(np.argmin(ratio))
            moves.append((float(ratio[best]), v, int(lean[best]), float(freed[lean[best]])))
        return sorted(moves)

    def local_costs(self, x: Sequence[int], v: int) -> np.ndarray:
        """The objective's terms over v per candidate, every other variable as in x."""
        total = self.graph.compute[v].copy()
        for fid in self.graph.factors_of[v]:
            f = self.graph.factors[fid]
            index = tuple(slice(None) if u == v else x[u] for u in f.vars)
            total += f.table[index]
        return total

    def tighten(
        self, x: List[int], variables: Sequence[int], until: Optional[float] = None
    ) -> List[int]:
        """x (which fits) after single-variable moves to cheaper candidates that keep it within
        the limit, until none is left: the moves along the limit that no one price's descent
        makes."""
        x = list(x)
        profile = self.usage.profile(x)
        for _ in range(TIGHTEN_PASSES):
            moved = False
            for i, v in enumerate(variables):
                if i % 64 == 0 and not self._time_left(until):
                    return x
                costs = self.local_costs(x, v)
                for k in np.argsort(costs, kind="stable"):
                    if costs[k] >= costs[x[v]]:
                        break
                    if self._room(profile, v, x[v], int(k)):
                        self._shift(profile, v, x[v], int(k))
                        x[v], moved = int(k), True
                        break
            if not moved:
                break
        return x

    def _room(self, profile: np.ndarray, v: int, old: int, new: int) -> bool:
        return all(
            item.usage[new] <= item.usage[old]
            or profile[item.start : item.end].max() + item.usage[new] - item.usage[old]
            <= self.limit
            for item in self.items_of[v]
        )

    def _shift(self, profile: np.ndarray, v: int, old: int, new: int) -> None:
        for item in self.items_of[v]:
            profile[item.start : item.end] += item.usage[new] - item.usage[old]

    def improve(self, per_step: np.ndarray) -> int:
        """Iterated local search from the best assignment that fits, until the deadline; the
        number of kicks. The AROUND variables nearest a kick descend over a partition's groups
        (cycles included: forest sweeps, tried here too, found less), under a price drawn from
        LEVELS times the last one: the cheapest assignment that fits need not be the optimum of
        any one price (the relaxation's gap), and an unpriced descent that lands over the limit
        is kept from."""
        kicks = 0
        levels: List[Price] = [0.0]
        if per_step.any():
            levels = [self.usage.prices(level * per_step) for level in LEVELS]
        while self.best is not None and self._time_left() and self.free:
            price = self.rng.choice(levels)
            x = list(self.best[1])
            hit = ball(self.near, [self.rng.choice(self.free)], self.rng.randint(1, KICK))
            hit = [v for v in hit if self.graph.is_free(v)]
            for v in hit:
                x[v] = self.rng.randrange(int(self.graph.domain[v]))
            near = [v for v in ball(self.near, hit, AROUND) if self.graph.is_free(v)]
            x = self.descend(x, price, near)
            if self.consider(x):
                self.consider(self.tighten(x, near))
            kicks += 1
        return kicks


def solve(instance: Instance, deadline: float, seed: int = 0) -> Solved:
    """The cheapest assignment found by `deadline` (time.monotonic()) that fits the limit."""
    limit = math.inf if instance.usage_limit is None else float(instance.usage_limit)
    try:
        reduction = Reduction(instance)
    except Infeasible as e:
        log.warning("%s", e)
        return Solved([], math.inf, _least_peak(instance))
    graph = reduction.graph
    usage = Usage(reduction.items, reduction.steps, graph.domain)
    least = float(lower_bound(reduction.items, usage.steps).max()) if usage.steps else 0.0
    if least > limit:
        log.warning("no assignment fits %d: the least peak memory is %d", limit, least)
        return Solved([], math.inf, least)
    search = Search(graph, usage, limit, deadline, seed)
    x = [int(np.argmin(u)) for u in graph.compute]
    x = search.sweep(x, 0.0, until=search.share(FIRST_SHARE))
    per_step = np.zeros(usage.steps)
    if not search.consider(x):
        per_step = search.relax(x, search.share(RELAX_SHARE))
    if search.best is None:
        search.repair(x)
    kicks = search.improve(per_step)
    log.info("%d kicks", kicks)
    if search.best is None:
        return Solved([], math.inf, search.least_peak)
    x = search.best[1]
    return Solved(reduction.expand(x), search.best[0], usage.peak(x))


def _chunks(groups: List[List[int]], size: int) -> List[List[List[int]]]:
    """The groups in runs of about `size` variables in all."""
    runs: List[List[List[int]]] = [[]]
    held = 0
    for group in groups:
        if held >= size:
            runs.append([])
            held = 0
        runs[-1].append(group)
        held += len(group)
    return runs


def _least_peak(instance: Instance) -> float:
    """The least peak memory of any assignment, forbidden costs aside: every node at its least."""
    delta: dict = {}
    for usages, (a, b) in zip(instance.usages, instance.intervals):
        if b > a:
            delta[a] = delta.get(a, 0) + min(usages)
            delta[b] = delta.get(b, 0) - min(usages)
    running, peak = 0, 0
    for t in sorted(delta):
        running += delta[t]
        peak = max(peak, running)
    return float(peak)
