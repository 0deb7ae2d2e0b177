"""A price on the memory a device holds at each time step, as costs the descents see.

Memory must stay under the limit at every time step of the step (search.memory: items with
live spans). A Lagrangian relaxation prices each step's bytes: an item then costs its usage
times the sum of the prices over its span, added to its variable's candidates (an item over
several variables, a boxing's blobs, to the first of them at the most the others' choices make
it: the descents see a bound, the final check is exact). The search raises the
prices where the peak is over the limit until a plan fits (search.fit).
"""

from typing import TYPE_CHECKING, List, Sequence

import numpy as np

if TYPE_CHECKING:  # search.memory builds on search.problem, which prices with this module
    from .memory import MemoryItem


class StepPrices:
    """Extra cost per variable and candidate for holding memory: compared by identity, so that
    the search's caches keep one set of tables per price."""

    def __init__(self, unary: List[np.ndarray], scale: float):
        self.unary = unary
        self.scale = scale  # the price of a byte held over every step, in seconds

    def __repr__(self) -> str:
        return f"StepPrices(scale={self.scale:.3g})"


def step_prices(
    items: Sequence["MemoryItem"], domain: Sequence[int], prices: np.ndarray
) -> StepPrices:
    """`prices[t]` seconds per byte held at step t, as extra costs over the variables."""
    through = np.concatenate([[0.0], np.cumsum(prices)])
    extra = [np.zeros(int(d)) for d in domain]
    for item in items:
        weight = through[item.end] - through[item.start]
        if weight <= 0:
            continue
        usage = item.usage
        if len(item.vars) > 1:
            usage = usage.max(axis=tuple(range(1, usage.ndim)))
        extra[item.vars[0]] += weight * usage
    return StepPrices(extra, float(through[-1]))


def lower_bound(items: Sequence["MemoryItem"], steps: int) -> np.ndarray:
    """Bytes held at each step if every item took its least usage: no plan holds less."""
    delta = np.zeros(steps + 1)
    for item in items:
        least = float(item.usage.min())
        delta[item.start] += least
        delta[item.end] -= least
    return np.cumsum(delta)[:steps]
