"""The exact optimum of small problems by complete enumeration (branch and bound).

The reference the coordinate descent is tested against: it visits every assignment
except those a lower bound proves worse than the best found, so its answer is the true
minimum of the same objective. The bound charges every open factor at least its
cheapest entry consistent with each variable already set (forward checking).
Exponential, so only for graphs of a few dozen ops.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np

from .problem import Price, Problem


def solve_exhaustive(
    problem: Problem,
    memory_weight: Price = 0.0,
    limit: int = 5_000_000,
    incumbent: Optional[List[int]] = None,
) -> Tuple[List[int], float]:
    """(optimal assignment, objective). Raises ValueError past `limit` search nodes.

    An `incumbent` assignment only speeds the proof up: its objective is the first bound,
    and it is returned only if nothing is cheaper.
    """
    unary = problem.unary(memory_weight)
    free = [
        v for v in range(len(problem.var_units)) if problem.is_free(v)
    ]  # graph order: factors fall due early
    position = {v: i for i, v in enumerate(free)}
    x = [0] * len(problem.var_units)
    due: List[List[int]] = [
        [] for _ in free
    ]  # factors charged when the last of their variables is set
    opened: List[List[int]] = [
        [] for _ in free
    ]  # factors a variable belongs to before they fall due
    constant = sum(float(unary[v][0]) for v in range(len(x)) if v not in position)
    margins: Dict[Tuple[int, int], np.ndarray] = {}
    for fid, f in enumerate(problem.factors):
        order = [position[v] for v in f.vars if v in position]
        if not order:
            constant += float(f.table[tuple(0 for _ in f.vars)])
            continue
        due[max(order)].append(fid)
        for axis, v in enumerate(f.vars):
            if v in position and position[v] < max(order):
                opened[position[v]].append(fid)
                others = tuple(a for a in range(f.table.ndim) if a != axis)
                margins[(fid, v)] = f.table.min(axis=others) if others else f.table
    floor = [float(unary[v].min()) for v in free]
    unary_rest = np.concatenate([np.cumsum(floor[::-1])[::-1], [0.0]])
    open_bound: Dict[int, float] = {}  # open factor -> best lower bound so far on this branch
    best: List[Optional[float]] = [None]
    best_x: List[int] = list(x)
    if incumbent is not None:
        best[0] = problem.objective(incumbent, memory_weight) - constant
        best_x[:] = list(incumbent)
    visited = [0]
    fmin = [float(f.table.min()) for f in problem.factors]

    def bound(depth: int) -> float:
        total = unary_rest[depth]
        for d in range(depth, len(free)):
            for fid in due[d]:
                total += open_bound.get(fid, fmin[fid])
        return total

    def descend(depth: int, cost: float) -> None:
        if best[0] is not None and cost + bound(depth) >= best[0] * (1 - 1e-12):
            return
        if depth == len(free):
            best[0], best_x[:] = cost, list(x)
            return
        v = free[depth]
        for k in np.argsort(unary[v], kind="stable"):
            visited[0] += 1
            if visited[0] > limit:
                raise ValueError(
                    f"exhaustive search passed {limit} nodes: the graph is too large for it"
                )
            x[v] = int(k)
            step = float(unary[v][k])
            for fid in due[depth]:
                f = problem.factors[fid]
                step += float(f.table[tuple(x[u] for u in f.vars)])
            saved = {fid: open_bound.get(fid) for fid in opened[depth]}
            for fid in opened[depth]:
                open_bound[fid] = max(open_bound.get(fid, fmin[fid]), float(margins[(fid, v)][k]))
            descend(depth + 1, cost + step)
            for fid, old in saved.items():
                if old is None:
                    open_bound.pop(fid, None)
                else:
                    open_bound[fid] = old
        x[v] = 0

    descend(0, 0.0)
    assert best[0] is not None  # replicated, everything broadcast, is always a plan
    return best_x, constant + best[0]
