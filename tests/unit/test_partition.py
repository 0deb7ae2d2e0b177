"""Partitions of a factor graph into groups for the descent (search.partition)."""

import random

import numpy as np
import pytest

from oneflow_autoddl.search.eliminate import Factor, elimination_width
from oneflow_autoddl.search.factors import FactorGraph
from oneflow_autoddl.search.partition import grow_group, neighbours, partition


def _ladder(n: int = 20, reach: int = 10) -> FactorGraph:
    """A chain 0-1-...-(n-1) in program order plus long edges i - (i + reach), two choices each."""
    pairs = [(i, i + 1) for i in range(n - 1)] + [(i, i + reach) for i in range(n - reach)]
    factors = [Factor(pair, np.ones((2, 2))) for pair in pairs]
    return FactorGraph([2] * n, [np.zeros(2)] * n, factors)


def test_in_order_groups_are_stretches_of_the_program():
    """Grown in order from 5, five variables are 3-7, never a long edge's far end."""
    graph = _ladder()
    near, everything = neighbours(graph), set(range(20))
    for seed in range(5):
        rng = random.Random(seed)
        group = grow_group(graph, near, 5, everything, rng, max_vars=5, in_order=True)
        assert sorted(group) == [3, 4, 5, 6, 7]


def test_random_groups_take_long_edges_too():
    """The random order reaches past the stretch: that is what in order adds to, not replaces."""
    graph = _ladder()
    near, everything = neighbours(graph), set(range(20))
    groups = [
        sorted(grow_group(graph, near, 5, everything, random.Random(s), max_vars=5))
        for s in range(20)
    ]
    assert any(15 in g for g in groups)


@pytest.mark.parametrize("in_order", [False, True])
def test_a_partition_covers_every_variable_once(in_order):
    graph = _ladder(30, 7)
    groups = partition(graph, neighbours(graph), range(30), random.Random(1), 6, in_order=in_order)
    members = [v for g in groups for v in g]
    assert sorted(members) == list(range(30))
    assert all(len(g) <= 6 for g in groups)


def _grid(side: int, choices: int) -> FactorGraph:
    """A side x side grid of variables, each joined to its right and lower neighbours."""
    pairs = [(r * side + c, r * side + c + 1) for r in range(side) for c in range(side - 1)]
    pairs += [(r * side + c, (r + 1) * side + c) for r in range(side - 1) for c in range(side)]
    factors = [Factor(pair, np.ones((choices, choices))) for pair in pairs]
    return FactorGraph([choices] * side**2, [np.zeros(choices)] * side**2, factors)


def _width(graph: FactorGraph, group) -> int:
    inside = set(group)
    scopes = [tuple(v for v in f.vars if v in inside) for f in graph.factors]
    domain = {v: int(graph.domain[v]) for v in group}
    return elimination_width(list(group), domain, [s for s in scopes if s], 1 << 40)


@pytest.mark.parametrize("seed", range(6))
def test_groups_keep_within_the_width_and_hold_cycles(seed):
    """On a grid every closed cycle widens the elimination: the groups take cycles and still
    never pass the limit (with the width checks left out, four of these six seeds fail)."""
    graph, limit = _grid(8, 3), 3**4
    groups = partition(graph, neighbours(graph), range(64), random.Random(seed), 30, limit)
    assert sorted(v for g in groups for v in g) == list(range(64))
    assert all(_width(graph, g) <= limit for g in groups)
    edges_inside = [
        sum(1 for f in graph.factors if set(f.vars) <= set(g)) - (len(g) - 1) for g in groups
    ]
    assert max(edges_inside) > 0  # some group closes a cycle
