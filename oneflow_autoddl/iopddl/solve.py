"""An IOPDDL graph solved by the project's search, under the memory limit at every time step.

The graph is first reduced without loss (iopddl.reduce). Then rounds of coordinate descent
(search.descent, exact group re-solves by variable elimination, over random partitions of the
factor graph into groups of bounded elimination width: search.partition) each take a few
partitions, from where the last round left off, under a price per byte for each memory item
(search.weights): raised for the items live at a step over the limit, lowered for the others,
each bisected towards the least that keeps it within the limit (in the first rounds, the price
of an item never yet over halves each round). Each round's assignment is repaired to fit where
it does not (greedy moves of the variables at the fullest step to leaner candidates, each the
cheapest per byte of the excess it removes), tightened by single-variable moves along the limit
and kept if cheapest. After a while without a cheaper fit, the next round starts again from
the cheapest under the weights it was found under, scaled, or (where a round reached a cheaper
assignment over the limit) from the cheapest round under fresh weights; after restarts in a row
that found nothing, the partitions grow in program order until a restart finds a cheaper fit.
The rest of the time goes to iterated local search: a random ball of variables takes random
candidates, the groups around it descend again under a multiple of the last weights, and the
result is kept if it fits and costs less. Only assignments that fit are ever returned. How much
of each, and when: iopddl.options.SolveOptions.
"""

import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..gc_pause import gc_paused
from ..search.descent import Descent, Touching, touching
from ..search.factors import FactorGraph, Price
from ..search.memory import MemoryItem
from ..search.partition import ball, neighbours, partition
from ..search.prices import StepPrices, lower_bound
from ..search.weights import ItemWeights, items_over
from .instance import Instance
from .options import SolveOptions
from .reduce import Infeasible, Reduction

log = logging.getLogger(__name__)

Moves = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # variable, candidate, added, freed
NO_MOVES: Moves = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
DEFAULTS = SolveOptions()


@dataclass
class Solved:
    solution: List[int]  # a strategy per node; [] where no assignment found fits
    cost: float  # its cost (inf where none)
    peak: float  # its peak memory; where none fits, the least peak found


class Usage:
    """What an assignment of the reduced graph holds at each time step, and what per-item
    weights cost, each in one numpy pass (every item of an IOPDDL graph hangs on one variable)."""

    def __init__(self, items: Sequence[MemoryItem], steps: int, domain: Sequence[int]):
        self.items, self.steps = list(items), steps
        self.var: np.ndarray = np.array([item.vars[0] for item in items], dtype=np.int64)
        sizes: np.ndarray = np.array([len(item.usage) for item in items], dtype=np.int64)
        self.offset: np.ndarray = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.flat = np.concatenate([item.usage for item in items]) if items else np.zeros(0)
        self.start: np.ndarray = np.array([item.start for item in items], dtype=np.int64)
        self.end: np.ndarray = np.array([item.end for item in items], dtype=np.int64)
        self.item_at: np.ndarray = np.repeat(np.arange(len(items)), sizes)  # per flat entry
        starts: np.ndarray = np.concatenate([[0], np.cumsum(domain)[:-1]]).astype(np.int64)
        self.candidate_at = starts[self.var[self.item_at]] + np.arange(len(self.flat))
        self.candidate_at -= self.offset[self.item_at]  # per flat entry: its variable's candidate
        self.splits = starts[1:]
        self.candidates = int(np.sum(domain))

    def prices(self, weights: np.ndarray) -> StepPrices:
        """`weights[i]` per byte item i holds, as extra costs per variable and candidate."""
        extra = self.flat * weights[self.item_at]
        flat = np.bincount(self.candidate_at, extra, minlength=self.candidates)
        return StepPrices(np.split(flat, self.splits), {}, 1.0)

    def profile(self, x: Sequence[int]) -> np.ndarray:
        held = self.flat[self.offset + np.asarray(x, dtype=np.int64)[self.var]]
        delta = np.bincount(self.start, held, self.steps + 1)
        delta -= np.bincount(self.end, held, self.steps + 1)
        return np.cumsum(delta)[: self.steps]

    def peak(self, x: Sequence[int]) -> float:
        return float(self.profile(x).max()) if self.steps else 0.0


class Search:
    def __init__(
        self,
        graph: FactorGraph,
        usage: Usage,
        limit: float,
        deadline: float,
        seed: int = 0,
        options: SolveOptions = DEFAULTS,
    ):
        self.graph, self.usage, self.limit, self.deadline = graph, usage, limit, deadline
        self.options = options
        self.rng = random.Random(seed)
        self.near = neighbours(graph)
        self.free = [v for v in range(len(graph)) if graph.is_free(v)]
        self.least_peak = math.inf
        self.items_of: List[List[MemoryItem]] = [[] for _ in range(len(graph))]
        for item in usage.items:
            self.items_of[item.vars[0]].append(item)
        self.best: Optional[Tuple[float, List[int]]] = None  # (cost, x) of the best that fits
        self.in_order = False  # whether partitions grow in program order (search.partition)
        self._touchings: Dict[int, List[Touching]] = {}  # per variable: its factors, v's axis last

    def _time_left(self, until: Optional[float] = None) -> bool:
        return time.monotonic() < min(self.deadline, until or math.inf)

    def share(self, share: float) -> float:
        """The moment `share` of the time left from now has passed."""
        now = time.monotonic()
        return now + share * max(self.deadline - now, 0.0)

    def descend(
        self,
        x: List[int],
        price: Price,
        variables: Sequence[int],
        until: Optional[float] = None,
        passes: Optional[int] = None,
    ) -> List[int]:
        """x after descents over random partitions of `variables`: `passes` of them, or (None)
        until `options.patience` partitions in a row lower nothing; fewer where time is up or
        `until` has passed (the groups go a few at a time, so that a large graph's sweep stops
        near it)."""
        fails, done, o = 0, 0, self.options
        value = self.graph.objective(x, price)
        while fails < o.patience and done != passes and self._time_left(until):
            groups = partition(
                self.graph,
                self.near,
                variables,
                self.rng,
                o.group_vars,
                in_order=self.in_order,
                max_checks=o.group_checks,
            )
            for chunk in _chunks(groups, o.chunk_vars):
                if not self._time_left(until):
                    break
                x = Descent(self.graph, price, chunk).run(x, max_sweeps=3)
            new = self.graph.objective(x, price)
            fails = 0 if new < value or passes is not None else fails + 1
            value, done = new, done + 1
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
            log.debug("fits: cost %.6g peak %.4g of %.4g", cost, peak, self.limit)
        return True

    def balance(self, x: List[int], until: float) -> np.ndarray:
        """Rounds of `options.round_passes` partitions' descents under per-item memory weights
        (search.weights) until `until`, each from where the last left off; what each lands on
        is repaired to fit, tightened along the limit and kept if cheapest. A descent that goes
        on under moving weights leaves basins that one price's descents stay in; where it has
        wandered `stale_share` of the time without a cheaper fit, it starts again from the
        cheapest, under the weights that found it scaled by a random one of `restart_scales`
        (the same weights again would repeat the same rounds where the descent is exact); or,
        `from_lowest` of the time where a round reached an assignment cheaper than the cheapest
        fit, from that one under fresh weights: the cheapest fit can be a local optimum of the
        descent that no weights lead out of (graph G: 229,274, where the fit 217,039 differs in
        50 variables), the rounds over the limit come at it from the cheap side. Where
        `in_order_after` restarts in a row found nothing, the next ones grow their partitions in
        program order (no draw, so the random choices stay as they were until then): G's way out
        of 229,274 is a stretch of the program re-solved at once, which random connected groups
        split, while S's rounds, which seldom stall so long, need random groups.
        The weights reached (none where memory is unlimited: the descent then goes to
        convergence)."""
        self.consider(x)
        if not math.isfinite(self.limit):
            self.consider(self.descend(x, 0.0, self.free, until))
            return np.zeros(len(self.usage.items))
        weights = self._fresh(x)
        o = self.options
        patience = o.stale_share * max(until - time.monotonic(), 0.0)
        found_under, since, rounds = weights.scaled(1.0), time.monotonic(), 0
        fruitless = 0  # restarts since the cheapest fit last changed
        lowest = (math.inf, x)  # the cheapest assignment a round reached, fitting or not
        while self._time_left(until):
            cheapest = self.best
            x = self.descend(x, self.usage.prices(weights.weight), self.free, until, o.round_passes)
            lowest = min(lowest, (self.graph.objective(x), x), key=lambda pair: pair[0])
            profile = self.usage.profile(x)
            fitting = x if profile.max() <= self.limit else self.repair(x, until)
            if self.consider(fitting):
                self.consider(self.tighten(fitting, self.free, until))
            if self.best is not cheapest:
                found_under, since, fruitless = weights.scaled(1.0), time.monotonic(), 0
            over = items_over(self.usage.start, self.usage.end, profile, self.limit)
            weights.update(over, fall=rounds < o.fall_rounds)
            rounds += 1
            if time.monotonic() - since >= patience and self.best is not None:
                self.in_order = fruitless >= o.in_order_after
                fruitless += 1
                scale = self.rng.choice(o.restart_scales)
                x, weights = list(self.best[1]), found_under.scaled(scale)
                if lowest[0] < self.best[0] and self.rng.random() < o.from_lowest:
                    x, weights = list(lowest[1]), self._fresh(lowest[1])
                since = time.monotonic()
                log.debug("back to the cheapest fit, cost %.6g", self.best[0])
        log.info("%d rounds of item weights", rounds)
        return weights.weight

    def _fresh(self, x: List[int]) -> ItemWeights:
        """Weights that start every item at x's cost per byte of its peak."""
        first = max(self.graph.objective(x), 1.0) / max(self.usage.peak(x), 1.0)
        return ItemWeights.start(len(self.usage.items), first)

    def repair(self, x: List[int], until: Optional[float] = None) -> List[int]:
        """x with variables live at its fullest step moved to leaner candidates, one move at a
        time, each the least cost added per byte of that step's excess it removes (bytes freed
        past the excess count for nothing), one per variable, until the step's excess is
        covered; again at the next fullest step, until it fits or no move frees any."""
        x = list(x)
        while self._time_left(until):
            profile = self.usage.profile(x)
            step = int(profile.argmax())
            excess = profile[step] - self.limit
            if excess <= 0:
                break
            var, candidate, added, freed = self._leaner(x, step)
            if not len(var):
                break
            while excess > 0 and len(var):
                j = int(np.argmin(added / np.minimum(freed, excess)))
                x[var[j]] = int(candidate[j])
                excess -= freed[j]
                left = var != var[j]
                var, candidate, added, freed = var[left], candidate[left], added[left], freed[left]
        self.consider(x)
        return x

    def _leaner(self, x: List[int], step: int) -> Moves:
        """Every move of a variable live at `step` to a candidate that frees bytes there: its
        variable, candidate, cost added (at least 0, every other variable as in x) and bytes
        freed at `step`."""
        u = self.usage
        held: Dict[int, np.ndarray] = {}
        for i in np.flatnonzero((u.start <= step) & (step < u.end)):
            v = int(u.var[i])
            held[v] = held.get(v, 0.0) + self.usage.items[i].usage
        moves: List[Tuple[np.ndarray, ...]] = []
        for v, bytes_ in held.items():
            freed = bytes_[x[v]] - bytes_
            lean = np.flatnonzero(freed > 0)
            if len(lean):
                costs = self.local_costs(x, v)
                added = np.maximum(costs[lean] - costs[x[v]], 0.0)
                moves.append((np.full(len(lean), v), lean, added, freed[lean]))
        if not moves:
            return NO_MOVES
        var, candidate, added, freed = (np.concatenate(column) for column in zip(*moves))
        return var, candidate, added, freed

    def local_costs(self, x: Sequence[int], v: int) -> np.ndarray:
        """The objective's terms over v per candidate, every other variable as in x, each factor
        read through its table with v's axis last (search.descent.touching, made once per
        variable)."""
        total = self.graph.compute[v].copy()
        for _, _, held_first, held, _ in self._touching(v):
            total += held_first if held is None else held_first[held(x)]
        return total

    def _touching(self, v: int) -> List[Touching]:
        found = self._touchings.get(v)
        if found is None:
            found = [touching(self.graph.factors[f], {v}) for f in self.graph.factors_of[v]]
            self._touchings[v] = found
        return found

    def tighten(
        self, x: List[int], variables: Sequence[int], until: Optional[float] = None
    ) -> List[int]:
        """x (which fits) after single-variable moves to cheaper candidates that keep it within
        the limit, until none is left: the moves along the limit that no one price's descent
        makes."""
        x = list(x)
        profile = self.usage.profile(x)
        for _ in range(self.options.tighten_passes):
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

    def improve(self, weights: np.ndarray) -> int:
        """Iterated local search from the best assignment that fits, until the deadline; the
        number of kicks. Each kick descends under weights drawn from `levels` times the last ones:
        the cheapest assignment that fits need not be the optimum of any one set of weights (the
        relaxation's gap), and an unpriced descent that lands over the limit is kept from."""
        kicks = 0
        levels: List[Price] = [0.0]
        if weights.any():
            levels = [self.usage.prices(level * weights) for level in self.options.levels]
        while self.best is not None and self._time_left() and self.free:
            price = self.rng.choice(levels)
            x = list(self.best[1])
            hit = ball(
                self.near, [self.rng.choice(self.free)], self.rng.randint(1, self.options.kick)
            )
            hit = [v for v in hit if self.graph.is_free(v)]
            for v in hit:
                x[v] = self.rng.randrange(int(self.graph.domain[v]))
            around = [v for v in ball(self.near, hit, self.options.around) if self.graph.is_free(v)]
            x = self.descend(x, price, around)
            if self.consider(x):
                self.consider(self.tighten(x, around))
            kicks += 1
        return kicks


@gc_paused()
def solve(
    instance: Instance, deadline: float, seed: int = 0, options: SolveOptions = DEFAULTS
) -> Solved:
    """The cheapest assignment found by `deadline` (time.monotonic()) that fits the limit, searched
    as `options` say; Python's cyclic collector paused meanwhile, as planner.plan pauses it
    (oneflow_autoddl.gc_pause)."""
    limit = math.inf if instance.usage_limit is None else float(instance.usage_limit)
    try:
        reduction = Reduction(instance)
    except Infeasible as e:
        log.warning("%s", e)
        return Solved([], math.inf, _least_peak(instance))
    usage = Usage(reduction.items, reduction.steps, list(reduction.graph.domain))
    least = float(lower_bound(reduction.items, usage.steps).max()) if usage.steps else 0.0
    if least > limit:
        log.warning("no assignment fits %d: the least peak memory is %d", limit, least)
        return Solved([], math.inf, least)
    graph = reduction.graph
    search = Search(graph, usage, limit, deadline, seed, options)
    start = [int(np.argmin(u)) for u in graph.compute]
    weights = search.balance(start, search.share(options.rounds_share))
    kicks = search.improve(weights)
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
