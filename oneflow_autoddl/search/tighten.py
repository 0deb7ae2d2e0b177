"""The memory fit's last step: moves along the limit that no one price's descent makes.

A price of memory per time step (search.fit) charges every step it prices, so the plan it fits
can hold far less than the limit where that costs time: the groups of the descent are re-solved
here without any price, then each variable alone, and a result is kept where it lowers the
objective and the memory items (a bound on the exact peak, search.memory) stay within the limit
at every step. So a fitted plan takes back the speed its price gave up, as far as the limit lets
it, one move at a time.
"""

from typing import Dict, List, Sequence

import numpy as np

from .descend import descent
from .descent import REL_TOL
from .memory import MemoryItem
from .options import SearchOptions
from .problem import SERIAL, Problem

Assignment = List[int]


class _Held:
    """What an assignment holds at each step, moved by the changes of a few variables."""

    def __init__(self, items: Sequence[MemoryItem], usage: np.ndarray):
        self.items, self.steps, self.usage = items, len(usage), usage
        self.of: Dict[int, List[int]] = {}
        for i, item in enumerate(items):
            for v in item.vars:
                self.of.setdefault(v, []).append(i)

    def after(self, x: Sequence[int], y: Sequence[int]) -> np.ndarray:
        """The usage once x becomes y (which differ in a few variables)."""
        changed = [v for v, (a, b) in enumerate(zip(x, y)) if a != b]
        touched = sorted({i for v in changed for i in self.of.get(v, [])})
        delta = np.zeros(self.steps + 1)
        for i in touched:
            item = self.items[i]
            change = item.at(y) - item.at(x)
            if change:
                delta[item.start] += change
                delta[item.end] -= change
        return self.usage + np.cumsum(delta)[: self.steps]


def tighten(
    problem: Problem,
    x: Sequence[int],
    limit: float,
    items: Sequence[MemoryItem],
    usage: np.ndarray,
    options: SearchOptions,
) -> Assignment:
    """x after unpriced group re-solves and single-variable moves that lower the objective and
    keep the items within `limit`, in up to `options.tighten_passes` passes (until one keeps
    none); `usage`: what x's items hold at each time step. Where x's own items are over `limit`
    (they bound its exact peak from above, which may meet it), within x's: the caller checks
    the result's exact peak."""
    x = list(x)
    held = _Held(items, usage)
    limit = max(limit, float(held.usage.max(initial=0.0)))
    unpriced = descent(problem, 0.0, SERIAL, options)
    for _ in range(options.tighten_passes):
        moved = False
        for group in unpriced.groups:
            y = list(x)
            if unpriced.step(group, y):
                moved = _keep(held, x, y, limit) or moved
        for v in range(len(x)):
            if problem.is_free(v):
                moved = _move_one(problem, held, x, v, limit) or moved
        if not moved:
            break
    return x


def _keep(held: _Held, x: Assignment, y: Sequence[int], limit: float) -> bool:
    """Make x y where y's items fit `limit`; whether it did."""
    usage = held.after(x, y)
    if usage.max(initial=0.0) > limit:
        return False
    x[:] = y
    held.usage = usage
    return True


def _move_one(problem: Problem, held: _Held, x: Assignment, v: int, limit: float) -> bool:
    """The candidate of v that lowers the objective most and keeps the items within `limit`."""
    delta = problem.changes(x, v)
    least = -REL_TOL * max(1.0, abs(problem.objective(x)))
    for k in np.argsort(delta, kind="stable"):
        if not delta[k] < least:
            return False
        y = list(x)
        y[v] = int(k)
        if _keep(held, x, y, limit):
            return True
    return False
