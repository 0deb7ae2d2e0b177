"""Partitions of a factor graph into groups for the descent (search.partition)."""

import random

import numpy as np
import pytest

from oneflow_autoddl.search.eliminate import Factor
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
