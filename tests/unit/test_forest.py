"""Block moves over induced forests (search.forest): the drawn sets are forests, and the move is
the exact optimum over them, the rest held, against brute force on small random graphs."""

import itertools
import random

import numpy as np
import pytest

from oneflow_autoddl.search.eliminate import Factor
from oneflow_autoddl.search.factors import FactorGraph
from oneflow_autoddl.search.forest import Forests


def _graph(seed: int, n: int = 8, density: float = 0.45, triple: bool = False) -> FactorGraph:
    rng = np.random.default_rng(seed)
    domain = [int(d) for d in rng.integers(1, 4, size=n)]
    unary = [rng.random(d) for d in domain]
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < density]
    factors = [Factor((u, v), rng.random((domain[u], domain[v]))) for u, v in pairs]
    if triple:
        a, b, c = (int(v) for v in rng.choice(n, size=3, replace=False))
        factors.append(Factor((a, b, c), rng.random((domain[a], domain[b], domain[c]))))
    return FactorGraph(domain, unary, factors)


def _is_induced_forest(graph: FactorGraph, chosen: set) -> bool:
    """No factor holds three chosen variables and the pairs the factors join make no cycle."""
    parent = {v: v for v in chosen}
    joined = set()

    def root(v):
        while parent[v] != v:
            v = parent[v]
        return v

    for f in graph.factors:
        inside = [v for v in f.vars if v in chosen]
        if len(inside) > 2:
            return False
        if len(inside) == 2 and tuple(sorted(inside)) not in joined:
            joined.add(tuple(sorted(inside)))
            a, b = root(inside[0]), root(inside[1])
            if a == b:
                return False
            parent[a] = b
    return True


@pytest.mark.parametrize("seed", range(8))
def test_a_drawn_forest_is_an_induced_forest_and_maximal(seed):
    graph = _graph(seed, n=10, density=0.5, triple=seed % 2 == 1)
    forests = Forests(graph)
    chosen = forests.draw(random.Random(seed), range(len(graph)))
    assert _is_induced_forest(graph, chosen)
    for v in set(range(len(graph))) - chosen:
        assert not _is_induced_forest(graph, chosen | {v}), f"{v} could have joined"


@pytest.mark.parametrize("seed", range(8))
def test_the_move_is_exact_over_the_forest(seed):
    """Over the forest's variables, every other one held at x, the move's objective is the
    brute-force minimum; the held variables keep their values."""
    graph = _graph(seed, triple=seed % 2 == 1)
    forests = Forests(graph)
    rng = random.Random(seed)
    x = [rng.randrange(int(d)) for d in graph.domain]
    chosen = forests.draw(rng, range(len(graph)))
    moved = forests.solve(x, chosen, graph.compute)
    assert all(moved[v] == x[v] for v in range(len(graph)) if v not in chosen)
    free = sorted(chosen)
    best = np.inf
    for values in itertools.product(*[range(int(graph.domain[v])) for v in free]):
        y = list(x)
        for v, k in zip(free, values):
            y[v] = k
        best = min(best, graph.objective(y))
    assert graph.objective(moved) == pytest.approx(best)
    assert graph.objective(moved) <= graph.objective(x) + 1e-12
