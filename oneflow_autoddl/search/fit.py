"""The memory step of the search: the fastest plan whose peak memory fits the limit.

A device's memory is held to the limit at every time step of the step (search.memory's items:
what each op's outputs, scratch buffers and boxings hold, and when). Memory is priced into the
descents' objective per time step (search.prices, a Lagrangian relaxation): where a plan's peak
is over the limit, the steps over it gain a price, raised round by round until a plan fits;
then the price is bisected back towards the cheapest that still fits, since a dearer price
gives up more step time than the limit asks for; last, unpriced moves take back what time they
can within the limit (search.tighten).
"""

import logging
from dataclasses import replace
from functools import partial
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..cost.memory import KINDS
from ..errors import PlanningError
from ..ir import CHECKPOINT_COPY_PREFIX
from ..mesh import format_mesh
from .descend import descend, sweep
from .executor import Executor
from .memory import ItemTable, MemoryItem, memory_items, peak_memory
from .options import SearchOptions
from .prices import SharedUsage, StepPrices, lower_bound, step_prices
from .problem import Price, Problem
from .select import pick, refine
from .tighten import tighten

log = logging.getLogger(__name__)

Assignment = List[int]
PRICE_STEP = 8.0  # a memory round's price scale over the last round's (fit_memory)
BOUND_SLACK = 1.2  # the memory items' peak over the exact one, at most (search.memory)


def _gib(x: float) -> str:
    return f"{x / 2**30:.3f} GiB"


class Memory:
    """The problem's memory items, and what an assignment holds at each step."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.items: List[MemoryItem] = memory_items(problem)
        self.steps = max((item.end for item in self.items), default=0)
        self.table = ItemTable(self.items)
        self.shared = SharedUsage(self.items)

    def usage(self, x: Sequence[int]) -> np.ndarray:
        """Bytes held at each step as the items count them (a bound: see search.memory)."""
        return self.table.usage(x, self.steps)

    def peak(self, x: Sequence[int]) -> float:
        """The exact peak of x's timeline, as the Plan reports it (at most the items' bound)."""
        return peak_memory(self.problem, x).bytes

    def least(self) -> np.ndarray:
        return lower_bound(self.items, self.steps)

    def least_by_kind(self, step: int) -> Dict[str, float]:
        out = {kind: 0.0 for kind in KINDS}
        for item in self.items:
            if item.start <= step < item.end:
                out[item.kind] += float(item.usage.min())
        return out

    def prices(self, per_step: np.ndarray) -> StepPrices:
        p = self.problem
        factor_vars = [f.vars for f in p.factors]
        return step_prices(self.shared, list(p.domain), per_step, factor_vars, p.factors_of)


def check_fits(problem: Problem, limit: float, memory: Optional[Memory] = None) -> None:
    """PlanningError when no plan can fit `limit`: even with every item at its least, some step
    holds more. The error names that least peak and what it is made of."""
    memory = memory or Memory(problem)
    least = memory.least()
    if not memory.steps or least.max() <= limit:
        return
    step = int(least.argmax())
    raise PlanningError(
        f"no plan fits {_gib(limit)} per device on mesh {format_mesh(problem.mesh.hierarchy)}: "
        f"the least memory any plan holds at its peak is {_gib(float(least.max()))} "
        f"({_parts(memory.least_by_kind(step))}, each split as far as the rules allow"
        f"{_recomputed(problem)}); {_advice(problem)}"
    )


def none_found(problem: Problem, x: Assignment, limit: float, memory: Memory) -> PlanningError:
    """The error for a limit that some plan might meet (the least peak is within it) but none the
    search found does: it names the leanest found, `x`, and what it holds at its peak."""
    peak = peak_memory(problem, x)
    return PlanningError(
        f"no plan found within {_gib(limit)} per device on mesh "
        f"{format_mesh(problem.mesh.hierarchy)}: the leanest found holds {_gib(peak.bytes)} at "
        f"its peak, at {peak.op} ({_parts(peak.by_kind)}{_recomputed(problem)}), where no plan "
        f"could hold less than {_gib(float(memory.least().max()))}; {_advice(problem)}"
    )


def _parts(kinds: Dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {_gib(kinds[k])}" for k in KINDS if kinds[k])


def _recomputed(problem: Problem) -> str:
    copies = any(name.startswith(CHECKPOINT_COPY_PREFIX) for name in problem.graph.ops)
    return ", every repeated block recomputed" if copies else ""


def _advice(problem: Problem) -> str:
    """What to change; recomputation only where it is not done and frees memory (reuse)."""
    more = "give more memory, a larger mesh, a smaller batch"
    if _recomputed(problem) or not problem.model.cluster.reuses_memory:
        return f"{more} or mixed precision"
    return f"{more}, mixed precision or recomputation"


def descend_and_refine(
    problem: Problem,
    starts: List[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    executor: Executor,
) -> Assignment:
    """The search's descend and refine steps at one price of memory."""
    found = _descents(problem, starts, memory_weight, options, executor)
    return refine(problem, found, starts, memory_weight, options, executor)


def descend_and_pick(
    problem: Problem, starts: List[Assignment], options: SearchOptions, executor: Executor
) -> Assignment:
    """The search's descend step and the pick of what it found and of the starts, with no refine:
    a start for a larger search, whose own refine works on it."""
    found = _descents(problem, starts, 0.0, options, executor)
    return pick(problem, found + starts, 0.0, options, starts)


def _descents(
    problem: Problem,
    starts: List[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    executor: Executor,
) -> List[Assignment]:
    at_price = partial(sweep, problem, memory_weight=memory_weight, options=options)
    swept = executor.map(at_price, starts)
    return descend(problem, swept, memory_weight, options, executor)


def _first_price(problem: Problem, best: Assignment, usage: np.ndarray, over: np.ndarray) -> float:
    """The first round's price scale: at it, what `best` holds where it is `over` the limit (each
    step's excess, a fraction of the limit) costs as much as `best`'s objective, however many
    steps the excess spans; the rounds raise the price from there and the bisections lower it
    back towards zero, so it must start on the objective's own scale."""
    return max(problem.objective(best), 1e-12) / max(float(np.dot(over, usage)), 1.0)


def _round(
    problem: Problem,
    starts: List[Assignment],
    prices: StepPrices,
    limit: float,
    memory: Memory,
    options: SearchOptions,
    executor: Executor,
) -> Assignment:
    """A memory round's plan: the descents' from `starts` at `prices`, refined (search.select)
    where one of those or of the starts might fit `limit` (its items' bound within BOUND_SLACK
    of it); else the least by the priced objective, a start for the next round's dearer price.
    A refine weighs plans by their exact schedules, which a round that cannot fit has no use
    for (on GPT-3 175B they were most of such a round's time)."""
    found = _descents(problem, starts, prices, options, executor)
    if any(memory.usage(y).max() <= limit * BOUND_SLACK for y in found + starts):
        return refine(problem, found, starts, prices, options, executor)
    return min(found + starts, key=lambda y: problem.objective(y, prices))


def fit_memory(
    problem: Problem,
    best: Assignment,
    limit: float,
    options: SearchOptions,
    executor: Executor,
    memory: Optional[Memory] = None,
) -> Assignment:
    """`best` if its peak fits `limit`; else the plan found at the cheapest price of memory that
    fits (the leanest plan found, if no price in `options.penalty_rounds` rounds does).

    Each round prices every step its plan holds over the limit by the excess, at a scale
    PRICE_STEP times the last round's, and keeps the earlier rounds' prices as they were: the
    prices follow the steps the latest plans overfill, and the steps only the first plans
    overfilled (starts can overfill every step) do not keep an item held all step dearer than
    a larger one held for a few. The rounds look for a price at which some plan fits: they
    refine only where a plan might (`_round`), and without the moves to fewer bytes, since the
    bytes tie only chooses among plans that fit (the bisections refine with the moves that
    save at least `options.fit_byte_move_floor` of the bytes: on GPT-3 175B in float32 the
    smaller moves' exact schedules took two seconds and saved under 0.1%)."""
    memory = memory or Memory(problem)
    rounds = replace(options, byte_moves_taken=0)
    bisecting = replace(options, byte_move_floor=options.fit_byte_move_floor)
    if memory.peak(best) <= limit:
        return best
    usage = memory.usage(best)
    over = np.maximum(usage - limit, 0.0) / limit  # where plans found held more, how much
    lean = [int(np.argmin(e)) for e in memory.prices(np.ones(memory.steps)).unary]
    lo, hi, fit, x = 0.0, _first_price(problem, best, usage, over), None, best
    leanest = (memory.peak(best), best)
    for _ in range(options.penalty_rounds):
        prices = memory.prices(hi * over)
        x = _round(problem, [x, best, lean], prices, limit, memory, rounds, executor)
        usage, peak = memory.usage(x), memory.peak(x)
        leanest = min(leanest, (peak, x))
        log.debug("memory price %.3g: peak %s", hi, _gib(peak))
        if peak <= limit:
            fit = x
            break
        over = over / PRICE_STEP + np.maximum(usage - limit, 0.0) / limit
        lo, hi = hi, hi * PRICE_STEP
    if fit is None:
        log.info(
            "no price of memory found a plan within %s; the leanest holds %s",
            _gib(limit),
            _gib(leanest[0]),
        )
        return leanest[1]
    for _ in range(options.bisections):
        mid = (lo + hi) / 2
        x = descend_and_refine(problem, [fit, best], memory.prices(mid * over), bisecting, executor)
        if memory.peak(x) <= limit:
            hi, fit = mid, pick(problem, [fit, x], 0.0, options)
        else:
            lo = mid
    tight = tighten(problem, fit, limit, memory.items, memory.usage(fit), options)
    if memory.peak(tight) <= limit:
        fit = pick(problem, [fit, tight], 0.0, options)
    log.info(
        "memory limit %s: peak %s (unconstrained best %s)",
        _gib(limit),
        _gib(memory.peak(fit)),
        _gib(memory.peak(best)),
    )
    return fit
