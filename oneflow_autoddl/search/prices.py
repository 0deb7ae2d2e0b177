"""A price on the memory a device holds at each time step, as costs the descents see.

Memory must stay under the limit at every time step of the step (search.memory: items with
live spans). A Lagrangian relaxation prices each step's bytes: an item then costs its usage
times the sum of the prices over its span, added to its variable's candidates. An item over
several variables (a boxing's blobs, which depend on the SBPs at both ends) is added to the
boxing factor over the same variables, so that the descents see exactly what a joint choice
holds; where no factor covers its variables, to the first of them at the most the others'
choices make it (a bound; the final check is exact). The search raises the prices where the
peak is over the limit until a plan fits (search.fit).
"""

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .eliminate import filled

if TYPE_CHECKING:  # search.memory builds on search.problem, which prices with this module
    from .memory import MemoryItem


class StepPrices:
    """Extra cost for holding memory, per variable and candidate (`unary`) and per factor and
    joint choice (`factors`: factor index -> table over that factor's variables): compared by
    identity, so that the search's caches keep one set of tables per price."""

    def __init__(self, unary: List[np.ndarray], factors: Dict[int, np.ndarray], scale: float):
        self.unary = unary
        self.factors = factors
        self.scale = scale  # the price of a byte held over every step, in seconds

    def factor_cost(self, vars_of: Sequence[Tuple[int, ...]], x: Sequence[int]) -> float:
        """What the factor extras add at x (`vars_of[f]`: factor f's variables)."""
        return sum(float(t[tuple(x[v] for v in vars_of[f])]) for f, t in self.factors.items())

    def __repr__(self) -> str:
        return f"StepPrices(scale={self.scale:.3g})"


class SharedUsage:
    """Memory items grouped by the usage table they hold (tied layers' items share theirs), to
    be priced at many step prices: a group costs its table once, times the sum of the prices
    over its items' spans."""

    def __init__(self, items: Sequence["MemoryItem"]):
        keys: Dict[Tuple[Tuple[int, ...], int], int] = {}  # -> its group
        self.first: List[MemoryItem] = []  # each group's first item
        group = []
        for item in items:
            key = (item.vars, id(item.usage))
            if key not in keys:
                keys[key] = len(self.first)
                self.first.append(item)
            group.append(keys[key])
        self.group: np.ndarray = np.array(group, dtype=int)
        self.starts: np.ndarray = np.array([item.start for item in items], dtype=int)
        self.ends: np.ndarray = np.array([item.end for item in items], dtype=int)

    def weighed(self, through: np.ndarray) -> List[Tuple["MemoryItem", float]]:
        """Each group with a positive weight, the sum of `through`'s differences over its items'
        spans (`through[t]`: the prices of steps before t), in the order of its first item with
        a positive one; sums added up item by item, as a loop over the items would."""
        weight = through[self.ends] - through[self.starts]
        positive = np.flatnonzero(weight > 0)
        groups = self.group[positive]
        sums = np.bincount(groups, weight[positive], minlength=len(self.first))
        _, first = np.unique(groups, return_index=True)
        order = groups[np.sort(first)]
        return [(self.first[g], float(sums[g])) for g in order.tolist()]


def step_prices(
    items: SharedUsage,
    domain: Sequence[int],
    prices: np.ndarray,
    factor_vars: Sequence[Tuple[int, ...]] = (),
    factors_of: Sequence[Sequence[int]] = (),
) -> StepPrices:
    """`prices[t]` seconds per byte held at step t, as extra costs over the variables and over
    the factors (`factor_vars[f]`: factor f's variables; `factors_of[v]`: the factors of v)."""
    through = np.concatenate([[0.0], np.cumsum(prices)])
    extra = [np.zeros(int(d)) for d in domain]
    joint: Dict[int, np.ndarray] = {}
    for item, weight in items.weighed(through):
        if len(item.vars) == 1:
            extra[item.vars[0]] += weight * item.usage
            continue
        f = _covering(item.vars, factor_vars, factors_of)
        if f is None:  # no factor over these variables: a bound on the first
            extra[item.vars[0]] += weight * item.usage.max(axis=tuple(range(1, item.usage.ndim)))
            continue
        table = _spread(item, factor_vars[f], domain) * weight
        joint[f] = joint[f] + table if f in joint else table
    return StepPrices(extra, joint, float(through[-1]))


def _covering(
    vars_: Tuple[int, ...],
    factor_vars: Sequence[Tuple[int, ...]],
    factors_of: Sequence[Sequence[int]],
) -> Optional[int]:
    """A factor over all of `vars_` (the smallest), if any."""
    if not factors_of:
        return None
    covering = [f for f in factors_of[vars_[0]] if set(vars_) <= set(factor_vars[f])]
    if not covering:
        return None
    return min(covering, key=lambda f: len(factor_vars[f]))


def _spread(item: "MemoryItem", onto: Tuple[int, ...], domain: Sequence[int]) -> np.ndarray:
    """The item's usage as a table over the variables `onto` (a superset of the item's)."""
    order = sorted(range(len(item.vars)), key=lambda i: onto.index(item.vars[i]))
    usage = np.transpose(item.usage, order)
    shape = [int(domain[v]) if v in item.vars else 1 for v in onto]
    return filled(usage.reshape(shape), [int(domain[v]) for v in onto])


def lower_bound(items: Sequence["MemoryItem"], steps: int) -> np.ndarray:
    """Bytes held at each step if every item took its least usage: no plan holds less."""
    delta = np.zeros(steps + 1)
    for item in items:
        least = float(item.usage.min())
        delta[item.start] += least
        delta[item.end] -= least
    return np.cumsum(delta)[:steps]
