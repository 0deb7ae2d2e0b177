"""An IOPDDL graph as the search's factor graph and memory items, made smaller without loss.

Two exact reductions, repeated until neither applies:
- a strategy no valid solution can take goes: a node cost at or above FORBIDDEN, or one that
  every strategy of a neighbour forbids on their edge;
- an edge on which every strategy of node u allows exactly one strategy of node v makes v a
  function of u: v is merged into u. u's cost becomes its own plus v's and the edge's under
  that function, v's other edges become u's (added to an edge u already has), and v's memory
  becomes one more memory item of u. About two thirds of the contest graphs' edges are such
  (resharding that only one layout survives); graph A's 34,932 nodes become 285 variables.
Edges over other numbers of nodes than two stay factors as they are.
"""

import collections
from typing import Dict, List, Optional, Set, Tuple

import numpy as np

from ..errors import PlanningError
from ..search.eliminate import Factor
from ..search.factors import FactorGraph
from ..search.memory import MemoryItem
from .instance import FORBIDDEN, Instance

INF = float(FORBIDDEN)  # every forbidden cost becomes this (a sum holding one is >= it)


class Infeasible(PlanningError):
    """No solution avoids the forbidden costs; the message says which node proves it."""


class Reduction:
    """The reduced graph (`graph`, `memory`) and how its assignments map back to the nodes."""

    def __init__(self, instance: Instance):
        n = len(instance.costs)
        self.instance = instance
        self.unary = [np.minimum(np.asarray(c, dtype=float), INF) for c in instance.costs]
        # per node: its current candidates' original strategies, and the nodes it stands for
        # with the map from its current candidates to their strategies
        self.members: List[List[Tuple[int, np.ndarray]]] = [
            [(i, np.arange(len(c)))] for i, c in enumerate(instance.costs)
        ]
        self.adj: List[Dict[int, np.ndarray]] = [dict() for _ in range(n)]  # u -> v -> [ku, kv]
        self.hyper: List[Tuple[List[int], np.ndarray]] = []
        self.pinned: Set[int] = set()  # nodes in an edge over more than two: never merged away
        self.alive = [True] * n
        self.queue: collections.deque = collections.deque()
        for members, costs in zip(instance.edge_nodes, instance.edge_costs):
            self._add_edge(members, costs)
        for u in range(n):
            self._prune(u, self.unary[u] < INF)
        for u in range(n):
            self.queue.extend((u, v) for v in self.adj[u] if u < v)
        self._run()
        self._build()

    # -- building ------------------------------------------------------------------------------
    def _add_edge(self, members: List[int], costs: List[int]) -> None:
        shape = tuple(len(self.unary[v]) for v in members)
        table = np.minimum(np.asarray(costs, dtype=float).reshape(shape), INF)
        vars_, table = _distinct(members, table)
        if len(vars_) == 1:
            self.unary[vars_[0]] = np.minimum(self.unary[vars_[0]] + table, INF)
        elif len(vars_) == 2:
            self._add_pair(vars_[0], vars_[1], table)
        else:
            self.hyper.append((vars_, table))
            self.pinned.update(vars_)

    def _add_pair(self, u: int, v: int, table: np.ndarray) -> None:
        if v in self.adj[u]:
            table = np.minimum(self.adj[u][v] + table, INF)
        self.adj[u][v] = table
        self.adj[v][u] = table.T

    # -- reducing ------------------------------------------------------------------------------
    def _prune(self, u: int, keep: np.ndarray) -> None:
        """Keep only the candidates of u where `keep` holds."""
        if keep.all():
            return
        if not keep.any():
            node = self.members[u][0][0]
            raise Infeasible(f"every strategy of node {node} is forbidden by its costs or edges")
        idx = np.flatnonzero(keep)
        self.unary[u] = self.unary[u][idx]
        self.members[u] = [(i, m[idx]) for i, m in self.members[u]]
        for v in list(self.adj[u]):
            table = self.adj[u][v][idx]
            self.adj[u][v], self.adj[v][u] = table, table.T
            self.queue.append((u, v))
        for h, (vars_, table) in enumerate(self.hyper):
            if u in vars_:
                self.hyper[h] = (vars_, np.take(table, idx, axis=vars_.index(u)))

    def _run(self) -> None:
        while self.queue:
            u, v = self.queue.popleft()
            if not (self.alive[u] and self.alive[v]) or v not in self.adj[u]:
                continue
            allowed = self.adj[u][v] < INF
            rows, cols = allowed.any(axis=1), allowed.any(axis=0)
            if not rows.all() or not cols.all():
                self._prune(u, rows)
                self._prune(v, cols)
                self.queue.append((u, v))
            elif v not in self.pinned and (allowed.sum(axis=1) == 1).all():
                self._merge(u, v, np.argmax(allowed, axis=1))
            elif u not in self.pinned and (allowed.sum(axis=0) == 1).all():
                self._merge(v, u, np.argmax(allowed, axis=0))

    def _merge(self, u: int, v: int, f: np.ndarray) -> None:
        """v takes candidate f[k] whenever u takes k: v becomes part of u."""
        edge = self.adj[u].pop(v)
        del self.adj[v][u]
        self.unary[u] = np.minimum(
            self.unary[u] + self.unary[v][f] + edge[np.arange(len(f)), f], INF
        )
        self.members[u] += [(i, m[f]) for i, m in self.members[v]]
        for w, table in self.adj[v].items():
            del self.adj[w][v]
            self._add_pair(u, w, table[f])
            self.queue.append((u, w))
        self.adj[v], self.members[v], self.alive[v] = {}, [], False
        self._prune(u, self.unary[u] < INF)

    # -- the result ----------------------------------------------------------------------------
    def _build(self) -> None:
        self.nodes = [u for u, a in enumerate(self.alive) if a]  # variable -> the node it is
        var_of = {u: i for i, u in enumerate(self.nodes)}
        domain = [len(self.unary[u]) for u in self.nodes]
        factors = [
            Factor((var_of[u], var_of[v]), table)
            for u in self.nodes
            for v, table in sorted(self.adj[u].items())
            if u < v
        ]
        factors += [Factor(tuple(var_of[u] for u in vs), t) for vs, t in self.hyper]
        self.graph = FactorGraph(domain, [self.unary[u] for u in self.nodes], factors)
        inst = self.instance
        self.items = [
            MemoryItem(
                (var_of[u],),
                np.asarray(inst.usages[i], dtype=float)[m],
                a,
                b,
                "activations",
                f"node {i}",
            )
            for u in self.nodes
            for i, m in self.members[u]
            for a, b in [inst.intervals[i]]
            if b > a
        ]
        self.steps = max((item.end for item in self.items), default=0)

    def expand(self, x: List[int]) -> List[int]:
        """The contest solution (a strategy per node) of an assignment of the reduced graph."""
        out: List[Optional[int]] = [None] * len(self.instance.costs)
        for var, u in enumerate(self.nodes):
            for i, m in self.members[u]:
                out[i] = int(m[x[var]])
        return out  # type: ignore[return-value]


def _distinct(members: List[int], table: np.ndarray) -> Tuple[List[int], np.ndarray]:
    """An edge naming a node twice costs only where both take one strategy: its diagonal."""
    vars_: List[int] = []
    for v in members:
        if v not in vars_:
            vars_.append(v)
    if len(vars_) == len(members):
        return vars_, table
    letters = "abcdefghijklmnopqrstuvwxyz"
    spec = "".join(letters[vars_.index(v)] for v in members)
    return vars_, np.einsum(f"{spec}->{letters[: len(vars_)]}", table)
