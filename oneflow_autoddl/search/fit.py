"""The memory step of the search: the fastest plan that fits the memory limit.

Memory is priced into the descents' objective (a Lagrange multiplier on the bytes a device
holds): the price rises until a plan fits, then bisects back towards the cheapest price that
still fits, since a dearer price gives up more step time than the limit asks for.
"""

import logging
from functools import partial
from typing import List

import numpy as np

from ..errors import PlanningError
from ..mesh import format_mesh
from .descend import descend, sweep
from .executor import Executor
from .memory import lean_memory_report
from .options import SearchOptions
from .problem import Problem
from .select import pick, refine

log = logging.getLogger(__name__)

Assignment = List[int]


def _gib(x: float) -> str:
    return f"{x / 2**30:.3f} GiB"


def check_fits(problem: Problem, limit: float) -> None:
    """PlanningError when even the leanest plan exceeds `limit`, naming what it needs per device
    and what that is made of (search.memory.lean_memory_report)."""
    need = problem.min_memory()
    if need > limit:
        raise PlanningError(
            f"no plan fits {_gib(limit)} per device on mesh "
            f"{format_mesh(problem.mesh.hierarchy)}: the leanest plan needs {_gib(need)} "
            f"{lean_memory_report(problem)}; give more memory or a larger mesh"
        )


def descend_and_refine(
    problem: Problem,
    starts: List[Assignment],
    memory_weight: float,
    options: SearchOptions,
    executor: Executor,
) -> Assignment:
    """The search's descend and refine steps at one price of memory."""
    swept = executor.map(
        partial(sweep, problem, memory_weight=memory_weight, options=options), starts
    )
    found = descend(problem, swept, memory_weight, options, executor)
    return refine(problem, found, starts, memory_weight, options, executor)


def fit_memory(
    problem: Problem,
    best: Assignment,
    limit: float,
    options: SearchOptions,
    executor: Executor,
) -> Assignment:
    """`best` if it fits `limit`; else the plan found at the cheapest price of memory that fits
    (the leanest plan, if no price in `options.penalty_rounds` rounds does)."""
    p = problem
    if p.memory_of(best) <= limit:
        return best
    lean = [int(np.argmin(m)) for m in p.memory]
    scale = max(p.objective(best), 1e-12) / max(p.memory_of(best), 1.0)
    lo, hi, fit = 0.0, scale, None
    for _ in range(options.penalty_rounds):
        x = descend_and_refine(p, [best, lean], hi, options, executor)
        if p.memory_of(x) <= limit:
            fit = x
            break
        lo, hi = hi, hi * 8
    if fit is None:
        fit = lean
    for _ in range(options.bisections):
        mid = (lo + hi) / 2
        x = descend_and_refine(p, [fit, best], mid, options, executor)
        if p.memory_of(x) <= limit:
            hi, fit = mid, pick(p, [fit, x], 0.0, options)
        else:
            lo = mid
    log.info(
        "memory limit %s: plan uses %s (unconstrained best %s)",
        _gib(limit),
        _gib(p.memory_of(fit)),
        _gib(p.memory_of(best)),
    )
    return fit
