"""The refine step of the search: pick the plan, by the scheduled step and then by bytes.

The descents lower additive objectives; here their results are compared by what a step takes
with boxing overlapping compute (cost.schedule, `Problem.evaluate`), tensor by tensor (the
factors may count a boxing that consumers in different runs share more than once). Among
plans within `options.bytes_tie` of the fastest, fewer bytes win (`pick`); single-variable
moves to fewer bytes are offered to that rule (`fewer_bytes`); and the pick descends again
under every objective until it stays the pick (`refine`).
"""

import logging
import math
import weakref
from functools import partial
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .descend import descent, objectives
from .executor import Executor
from .options import SearchOptions
from .problem import Price, Problem, Weights

log = logging.getLogger(__name__)

Assignment = List[int]


def pick(
    problem: Problem,
    candidates: Sequence[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    experts: Sequence[Assignment] = (),
) -> Assignment:
    """The candidate of least predicted step time plus memory price (the fastest), or one within
    `options.bytes_tie` of its step time, no dearer than any of `experts`, that moves fewer bytes
    by at least the fraction of the step it adds: of those, the one moving fewest.

    A step takes at least its compute, so a candidate whose compute alone is too slow is not
    scheduled."""
    p = problem
    scored: Dict[Tuple[int, ...], Tuple[float, float]] = {}  # (cost, bytes)
    fastest: Tuple[int, ...] = ()
    step = 0.0  # the fastest's step time (not its price)
    distinct = {tuple(x): x for x in candidates}.values()
    for x in sorted(distinct, key=lambda y: p.objective(y, memory_weight)):
        price = p.memory_cost(x, memory_weight)
        least = scored[fastest][0] if fastest else math.inf
        if p.compute_of(x) + price >= least + options.bytes_tie * step:
            continue
        detail = p.evaluate(x)
        scored[tuple(x)] = (detail.step_time + price, detail.bytes_per_device)
        if detail.step_time + price < least:
            fastest, step = tuple(x), detail.step_time
    least, sent = scored[fastest]
    ceiling = min(
        [least + options.bytes_tie * step]
        + [scored[tuple(x)][0] for x in experts if tuple(x) in scored]
    )
    worth = [fastest] + [
        key
        for key, (cost, moved) in scored.items()
        if cost <= ceiling and (sent - moved) / max(sent, 1.0) * step >= cost - least
    ]
    chosen = min(worth, key=lambda key: (scored[key][1], scored[key][0]))
    if chosen != fastest:
        log.debug(
            "picked a plan %.3g%% slower than the fastest for %.3g%% fewer bytes",
            100 * (scored[chosen][0] / least - 1),
            100 * (1 - scored[chosen][1] / max(sent, 1.0)),
        )
    return list(chosen)


# var -> (the values of the variables around it, its candidates that save bytes, the bytes
# each saves, the least rise of an objective each costs): what fewer_bytes found there last
Savings = Dict[int, Tuple[Tuple[int, ...], np.ndarray, np.ndarray, np.ndarray]]
_SAVINGS: "weakref.WeakKeyDictionary[Problem, Dict[tuple, Savings]]" = weakref.WeakKeyDictionary()


def fewer_bytes(
    problem: Problem,
    x: Assignment,
    memory_weight: Price,
    options: SearchOptions,
    savings: Optional[Savings] = None,
) -> List[Assignment]:
    """x with one variable changed where that moves fewer bytes, and where some objective's
    rise is within what `pick` would pay for the bytes saved and that save at least
    `byte_move_floor` of x's bytes: the `byte_moves_offered` that save most, for `pick` to weigh
    exactly. The descents lower predicted time and never take a move
    that saves bytes at a cost of microseconds, which `pick`'s tie would. `savings` (at one
    memory price) keeps each variable's savings for the next call, which recomputes only those
    of variables with a neighbour moved."""
    p = problem
    detail = p.evaluate(x)
    price = detail.step_time / max(detail.bytes_per_device, 1.0)  # seconds per byte saved
    floor = options.byte_move_floor * detail.bytes_per_device
    weights = objectives(p.model.cluster, options)
    savings = {} if savings is None else savings
    moves = []
    for v in range(len(x)):
        if not p.is_free(v):
            continue
        key = tuple(map(x.__getitem__, p.around(v)))
        if v not in savings or savings[v][0] != key:
            savings[v] = (key, *_savings(p, x, v, memory_weight, weights))
        _, fewer, saved, rise = savings[v]
        if not len(fewer):
            continue
        for j in np.flatnonzero((rise <= saved * price) & (saved >= floor)):
            moves.append((-float(saved[j]), v, int(fewer[j])))
    out = []
    for _, v, k in sorted(moves)[: options.byte_moves_offered]:
        y = list(x)
        y[v] = k
        out.append(y)
    return out


def _savings(
    p: Problem, x: Assignment, v: int, memory_weight: Price, weights: Sequence[Weights]
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the candidates of v that move fewer bytes than x[v], the bytes each saves, the least rise
    of an objective each costs)."""
    around = p.bytes_around_all(x, v)
    with np.errstate(invalid="ignore"):  # inf - inf where a boxing OneFlow lacks: no saving
        saved = around[x[v]] - around
    fewer = np.flatnonzero(saved > 0)
    if fewer.size == 0:
        return fewer, saved[fewer], saved[fewer]
    rise = np.min([p.changes(x, v, memory_weight, w)[fewer] for w in weights], axis=0)
    return fewer, saved[fewer], rise


def thinner(
    problem: Problem,
    pool: List[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    experts: Sequence[Assignment],
) -> Assignment:
    """`pick` of the pool; then, while `pick` takes one, of the pool and the moves to fewer bytes
    from its pick. The pool's fastest stays in, so moves add up to no more than the bytes tie.
    What the moves save is kept per problem, price and objectives, for the next call's moves."""
    best = pick(problem, pool, memory_weight, options, experts)
    weights = tuple(objectives(problem.model.cluster, options))
    savings = _SAVINGS.setdefault(problem, {}).setdefault((memory_weight, weights), {})
    for _ in range(options.byte_moves_taken):
        offered = pool + [best] + fewer_bytes(problem, best, memory_weight, options, savings)
        moved = pick(problem, offered, memory_weight, options, experts)
        if moved == best:
            break
        best = moved
    return best


def _descend_from(
    problem: Problem, memory_weight: Price, options: SearchOptions, x: Assignment, w: Weights
) -> Assignment:
    return descent(problem, memory_weight, w, options).run(x)


def refine(
    problem: Problem,
    found: List[Assignment],
    starts: Sequence[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    executor: Executor,
) -> Assignment:
    """The pick of what the descents found and of the starts themselves (no plan slower than a
    start); then the pick, which one objective's descents did not start from when another found
    it, descends under every objective in turn until it stays the pick."""
    experts = list(starts)
    best = thinner(problem, found + experts, memory_weight, options, experts)
    weights = objectives(problem.model.cluster, options)
    for _ in range(options.polish_rounds):
        again = partial(_descend_from, problem, memory_weight, options, best)
        found = found + executor.map(again, weights, affinity=lambda w: w)
        best, last = thinner(problem, found + experts, memory_weight, options, experts), best
        if best == last:
            break
    return best
