"""Exact min-sum variable elimination over a few variables, the rest held fixed.

Each coordinate-descent step hands this a group of variables; factors touching the group
are conditioned on the fixed variables, then the group's variables are eliminated one at
a time (smallest resulting table first), keeping argmin tables to read the optimum back.
It returns None instead of building a table over MAX_ENTRIES, so callers can skip the group.
"""

from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

MAX_ENTRIES = 1 << 22


class Factor:
    __slots__ = ("vars", "table")

    def __init__(self, vars_: Tuple[int, ...], table: np.ndarray):
        self.vars, self.table = vars_, table


def condition(vars_: Sequence[int], table: np.ndarray, free: Set[int], x) -> Optional[Factor]:
    """Fix every non-free variable of a factor (distinct variables) at its value in x."""
    index = tuple(slice(None) if v in free else x[v] for v in vars_)
    kept = tuple(v for v in vars_ if v in free)
    if not kept:
        return None
    return Factor(kept, table[index])


def _combine(factors: List[Factor], domain: Dict[int, int]) -> Tuple[Tuple[int, ...], np.ndarray]:
    vars_ = tuple(sorted({v for f in factors for v in f.vars}))
    axis = {v: i for i, v in enumerate(vars_)}
    total = None
    for f in sorted(factors, key=lambda f: -f.table.size):
        order = sorted(range(len(f.vars)), key=lambda i: axis[f.vars[i]])
        view = [1] * len(vars_)
        for i in order:
            view[axis[f.vars[i]]] = f.table.shape[i]
        t = (
            np.transpose(f.table, order).reshape(view)
            if order != list(range(len(order)))
            else f.table.reshape(view)
        )
        total = t if total is None else total + t
    return vars_, np.broadcast_to(total, tuple(domain[v] for v in vars_))


def elimination_width(
    free: Sequence[int], domain: Dict[int, int], scopes: List[Tuple[int, ...]]
) -> int:
    """Largest table `solve` would build for factors over `scopes` (free variables only), without
    building it."""
    pool: Dict[int, Set[int]] = {
        i: set(s) for i, s in enumerate([(v,) for v in free] + list(scopes))
    }
    touch: Dict[int, Set[int]] = {v: set() for v in free}
    for fid, s in pool.items():
        for v in s:
            touch[v].add(fid)
    widest, next_id = 0, len(pool)
    remaining = set(free)
    while remaining:
        best, best_size, best_scope = -1, 0, set()
        for v in sorted(remaining):
            scope = {u for fid in touch[v] for u in pool[fid]}
            size = 1
            for u in scope:
                size *= domain[u]
            if best < 0 or size < best_size:
                best, best_size, best_scope = v, size, scope
        widest = max(widest, best_size)
        if widest > MAX_ENTRIES:
            return widest
        fids = touch.pop(best)
        for fid in fids:
            for u in pool.pop(fid):
                if u != best:
                    touch[u] -= fids
        rest = best_scope - {best}
        if rest:
            pool[next_id] = rest
            for u in rest:
                touch[u].add(next_id)
            next_id += 1
        remaining.discard(best)
    return widest


def solve(
    free: Sequence[int], domain: Dict[int, int], unary: Dict[int, np.ndarray], factors: List[Factor]
) -> Optional[Tuple[Dict[int, int], float]]:
    """Minimise sum(unary) + sum(factors) over the free variables. None if a table would be too
    large."""
    pool: Dict[int, Factor] = dict(enumerate([Factor((v,), unary[v]) for v in free] + factors))
    touch: Dict[int, Set[int]] = {v: set() for v in free}
    for fid, f in pool.items():
        for v in f.vars:
            touch[v].add(fid)
    next_id = len(pool)
    constant = 0.0
    trace: List[Tuple[int, Tuple[int, ...], np.ndarray]] = []
    remaining = set(free)
    while remaining:
        best, best_size = -1, 0
        for v in sorted(remaining):
            size = 1
            for u in {u for fid in touch[v] for u in pool[fid].vars}:
                size *= domain[u]
            if best < 0 or size < best_size:
                best, best_size = v, size
        if best_size > MAX_ENTRIES:
            return None
        fids = touch.pop(best)
        touching = [pool.pop(fid) for fid in fids]
        for f in touching:
            for u in f.vars:
                if u != best:
                    touch[u] -= fids
        vars_, table = _combine(touching, domain)
        ax = vars_.index(best)
        rest = vars_[:ax] + vars_[ax + 1 :]
        trace.append((best, rest, np.moveaxis(table, ax, -1)))  # argmin only where read back
        reduced = np.min(table, axis=ax)
        if rest:
            pool[next_id] = Factor(rest, reduced)
            for u in rest:
                touch[u].add(next_id)
            next_id += 1
        else:
            constant += float(reduced)
        remaining.discard(best)
    choice: Dict[int, int] = {}
    for v, rest, table in reversed(trace):
        choice[v] = int(np.argmin(table[tuple(choice[u] for u in rest)]))
    return choice, constant
