"""Block moves over induced forests: a large share of a factor graph re-solved exactly at once.

A set of variables whose factors, the other variables held, join them into a forest (no cycle,
no factor over three of them) is minimised exactly by variable elimination leaf first: each leaf
sends its parent, for every candidate of the parent, its best cost below; the roots take their
best candidate and the leaves read theirs back. No table larger than a factor is built, so one
move over most of the graph costs about one pass over its factors. Drawn anew from a random
order, a forest puts every variable in new company, as search.partition's groups do, at a
fraction of their cost: search.partition bounds the elimination width of groups with cycles,
which the forest leaves to those groups.
"""

import random
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .eliminate import condition
from .factors import FactorGraph

HUBS_FIRST = 0.5  # of the draws, those whose order favours variables of many neighbours


class Forests:
    """Induced forests of one factor graph, drawn at random and solved exactly."""

    def __init__(self, graph: FactorGraph):
        self.graph = graph
        self.near: List[List[int]] = [
            sorted({u for f in fids for u in graph.factors[f].vars} - {v})
            for v, fids in enumerate(graph.factors_of)
        ]
        # each pairwise factor at both ends, its table over (this end, the other end)
        self.pairs: List[List[Tuple[int, np.ndarray]]] = [[] for _ in graph.factors_of]
        self.others: List[List[int]] = [[] for _ in graph.factors_of]  # the other factors
        for fid, f in enumerate(graph.factors):
            if len(f.vars) == 2:
                a, b = f.vars
                self.pairs[a].append((b, f.table))
                self.pairs[b].append((a, f.table.T))
            else:
                for v in f.vars:
                    self.others[v].append(fid)

    def draw(self, rng: random.Random, variables: Sequence[int]) -> Set[int]:
        """A maximal induced forest among `variables`, grown in random order: a variable joins
        where its neighbours already in lie in distinct trees (union-find), so that it closes no
        cycle and no factor holds three of the forest's variables. A variable of many neighbours
        rarely joins late, so HUBS_FIRST of the draws put such variables early (a random key
        divided by one plus the degree): else the hubs would hardly ever move."""
        order = list(variables)
        if rng.random() >= HUBS_FIRST:
            rng.shuffle(order)
        else:
            order.sort(key=lambda v: rng.random() / (1 + len(self.near[v])))
        parent: Dict[int, int] = {}
        for v in order:
            roots = _distinct_roots(parent, [u for u in self.near[v] if u in parent])
            if roots is None:
                continue
            parent[v] = v
            for root in roots:
                parent[root] = v
        return set(parent)

    def solve(self, x: List[int], forest: Set[int], unary: Sequence[np.ndarray]) -> List[int]:
        """x with the forest's variables at their exact optimum, every other variable held: the
        objective `unary` plus the graph's factors never rises."""
        belief: Dict[int, np.ndarray] = {v: np.array(unary[v], dtype=float) for v in forest}
        joint: Dict[Tuple[int, int], np.ndarray] = {}  # over the pair (a < b): (a's, b's)
        for v in forest:
            for u, table in self.pairs[v]:
                if u not in forest:
                    belief[v] += table[:, x[u]]
                elif v < u:
                    _join(joint, v, u, table)
        for fid in sorted({f for v in forest for f in self.others[v]}):
            f = self.graph.factors[fid]
            held = condition(f.vars, f.table, forest, x)
            if held is not None and len(held.vars) == 1:
                belief[held.vars[0]] += held.table
            elif held is not None and held.vars[0] < held.vars[1]:
                _join(joint, held.vars[0], held.vars[1], held.table)
            elif held is not None:
                _join(joint, held.vars[1], held.vars[0], held.table.T)
        edges: Dict[int, List[Tuple[int, np.ndarray]]] = {v: [] for v in forest}
        for (a, b), table in joint.items():
            edges[a].append((b, table))
            edges[b].append((a, table.T))
        order, up = _rooted(forest, edges)
        pick: Dict[int, np.ndarray] = {}
        for v in reversed(order):
            if up[v] is None:
                continue
            p, table = up[v]  # table over (p's candidates, v's candidates)
            total = table + belief[v][None, :]
            pick[v] = total.argmin(axis=1)
            belief[p] += total[np.arange(len(pick[v])), pick[v]]
        x = list(x)
        for v in order:
            x[v] = int(belief[v].argmin()) if up[v] is None else int(pick[v][x[up[v][0]]])
        return x


def _join(joint: Dict[Tuple[int, int], np.ndarray], a: int, b: int, table: np.ndarray) -> None:
    """Add a table over (a, b) to the pair's: two factors may join one pair of variables."""
    joint[a, b] = joint[a, b] + table if (a, b) in joint else table


def _distinct_roots(parent: Dict[int, int], inside: List[int]) -> Optional[List[int]]:
    """The trees (roots) of `inside`, or None where two of them share a tree."""
    roots: List[int] = []
    for u in inside:
        root = u
        while parent[root] != root:
            root = parent[root]
        while parent[u] != root:
            parent[u], u = root, parent[u]
        if root in roots:
            return None
        roots.append(root)
    return roots


def _rooted(forest: Set[int], edges: Dict[int, List[Tuple[int, np.ndarray]]]):
    """The forest's variables breadth first from a root per tree, and each one's parent with the
    table between them over (parent's candidates, its candidates); None at a root."""
    order: List[int] = []
    up: Dict[int, Optional[Tuple[int, np.ndarray]]] = {}
    for root in sorted(forest):
        if root in up:
            continue
        up[root] = None
        start = len(order)
        order.append(root)
        while start < len(order):
            v = order[start]
            start += 1
            for u, table in edges[v]:
                if u not in up:
                    up[u] = (v, table)
                    order.append(u)
    return order, up
