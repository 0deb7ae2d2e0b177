"""The search's problem as a plain factor graph, for sources other than the planner's Problem.

Variable v takes one of `domain[v]` candidates; an assignment x costs
    sum_v unary[v][x_v] + sum_f factors[f].table[x_{f.vars}]
Descent (search.descent) needs only this of a problem: `domain`, `factors` with `factors_of`,
`is_free`, `unary(price)` and `tables(weights)`, which search.problem.Problem provides too. A
FactorGraph has one set of factor tables, so every Weights prices them alike; a price of
memory per time step (search.prices.StepPrices) adds to the unary tables as it does for a
Problem. Its `groups` are the coordinates a descent takes where no module scopes suggest any.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .eliminate import Factor
from .prices import StepPrices

Price = Union[float, StepPrices]
PRICES_KEPT = 8  # priced unary tables a graph keeps, the oldest dropped first


class FactorGraph:
    def __init__(
        self,
        domain: Sequence[int],
        unary: List[np.ndarray],
        factors: List[Factor],
        groups: Optional[List[List[int]]] = None,
    ):
        """`factors`: each over distinct variables; `groups`: the descent's coordinates (default:
        none beyond each variable with its neighbours)."""
        self.domain: np.ndarray = np.asarray(domain, dtype=np.int64)
        self.compute: List[np.ndarray] = [np.asarray(u, dtype=float) for u in unary]
        self.factors = factors
        self.groups: List[List[int]] = groups or []
        self.factors_of: List[List[int]] = [[] for _ in self.domain]
        for i, f in enumerate(factors):
            for v in f.vars:
                self.factors_of[v].append(i)
        self._flat = _FlatFactors(factors, len(self.domain))
        self._offset: np.ndarray = np.concatenate([[0], np.cumsum(self.domain)[:-1]]).astype(
            np.int64
        )
        self._priced: Dict[Price, Tuple[List[np.ndarray], np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.domain)

    def is_free(self, var: int) -> bool:
        return bool(self.domain[var] > 1)

    def unary(self, price: Price = 0.0) -> List[np.ndarray]:
        """The unary tables, plus a price of memory per time step where one is given (the last
        PRICES_KEPT prices' kept: a search that moves its prices makes many)."""
        return self._unary(price)[0]

    def _unary(self, price: Price) -> Tuple[List[np.ndarray], np.ndarray]:
        if price not in self._priced:
            if len(self._priced) >= PRICES_KEPT:
                del self._priced[next(iter(self._priced))]
            tables = self.compute
            if isinstance(price, StepPrices):
                tables = [c + e for c, e in zip(self.compute, price.unary)]
            flat = np.concatenate(tables) if tables else np.zeros(0)
            self._priced[price] = (tables, flat)
        return self._priced[price]

    def tables(self, weights: object = None, price: Price = 0.0) -> List[Factor]:
        """The factors (one set: every weighting of them is the same; a price of memory adds
        nothing to them, since each memory item here hangs on one variable)."""
        return self.factors

    def objective(self, x: Sequence[int], price: Price = 0.0) -> float:
        xa: np.ndarray = np.asarray(x, dtype=np.int64)
        flat = self._unary(price)[1]
        return float(flat[self._offset + xa].sum()) + self._flat.total(xa)


class _FlatFactors:
    """Every pairwise factor's table in one flat array, so that their sum at an assignment is one
    gather; factors over other numbers of variables are summed one by one."""

    def __init__(self, factors: List[Factor], n: int):
        pairs = [f for f in factors if len(f.vars) == 2]
        self.others = [f for f in factors if len(f.vars) != 2]
        self.u: np.ndarray = np.array([f.vars[0] for f in pairs], dtype=np.int64)
        self.v: np.ndarray = np.array([f.vars[1] for f in pairs], dtype=np.int64)
        self.cols: np.ndarray = np.array([f.table.shape[1] for f in pairs], dtype=np.int64)
        sizes = [f.table.size for f in pairs]
        self.start: np.ndarray = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.flat = np.concatenate([f.table.ravel() for f in pairs]) if pairs else np.zeros(0)

    def total(self, x: np.ndarray) -> float:
        index = self.start + x[self.u] * self.cols + x[self.v]
        rest = sum(float(f.table[tuple(x[list(f.vars)])]) for f in self.others)
        return float(self.flat[index].sum()) + rest
