"""Exact min-sum elimination: the order its steps add tables in, and its optimum by brute force."""

import itertools

import numpy as np
import pytest

from oneflow_autoddl.search import eliminate
from oneflow_autoddl.search.eliminate import Factor, add_up, solve, sum_plan


@pytest.mark.parametrize("seed", range(20))
def test_a_sum_plan_adds_every_table_once_and_never_into_one_it_was_given(seed):
    """Tables over the same axes, over a subset of another's and over unrelated ones: the plan's
    last entry is their sum at the full shape, and the tables themselves are left as they were."""
    rng = np.random.default_rng(seed)
    full = tuple(int(n) for n in rng.integers(2, 5, size=4))
    views = []
    for _ in range(int(rng.integers(1, 12))):
        axes = rng.random(len(full)) < 0.5
        views.append(tuple(n if keep else 1 for n, keep in zip(full, axes)))
    views.append(tuple(full[0] if a == 0 else 1 for a in range(len(full))))  # the variable's own
    tables = [rng.random(v) for v in views]
    given = [t.copy() for t in tables]
    total = add_up(list(tables), sum_plan(views))
    expect = sum(np.broadcast_to(t, full) for t in given)
    assert np.allclose(np.broadcast_to(total, full), expect)
    assert all(np.array_equal(t, g) for t, g in zip(tables, given))


def test_tables_over_the_same_axes_are_summed_at_their_own_size():
    """Fifty tables over one axis of a 3-axis step and one table over all three: forty-nine sums
    of a few entries, then one sum at the full size."""
    views = [(4, 1, 1)] * 50 + [(4, 5, 6)]
    plan = sum_plan(views)
    sizes = []
    shapes = [np.empty(v) for v in views]
    for i, j, _ in plan:
        shapes.append(np.empty(np.broadcast_shapes(shapes[i].shape, shapes[j].shape)))
        sizes.append(shapes[-1].size)
    assert sizes.count(4 * 5 * 6) == 1 and len(sizes) == 50


@pytest.mark.parametrize("seed", range(10))
def test_solve_finds_the_brute_force_minimum_with_many_tables_a_scope(seed):
    """Random factors over 5 variables, several over the same pair (as conditioning leaves
    them): solve's value and choice are the minimum over every assignment."""
    rng = np.random.default_rng(seed)
    domain = {v: int(rng.integers(2, 4)) for v in range(5)}
    unary = {v: rng.random(domain[v]) for v in domain}
    factors = []
    for _ in range(12):
        a, b = sorted(rng.choice(5, size=2, replace=False).tolist())
        factors.append(Factor((a, b), rng.random((domain[a], domain[b]))))
    found = solve(list(domain), domain, unary, factors)
    assert found is not None
    choice, value = found

    def cost(x):
        return sum(unary[v][x[v]] for v in domain) + sum(
            f.table[tuple(x[v] for v in f.vars)] for f in factors
        )

    best = min(cost(x) for x in itertools.product(*(range(domain[v]) for v in domain)))
    assert value == pytest.approx(best) and cost(choice) == pytest.approx(best)


@pytest.mark.parametrize("seed", range(6))
def test_steps_summed_in_reused_buffers_choose_and_value_as_fresh_sums_do(seed, monkeypatch):
    """Every step through the reused buffers (a limit of one entry) against none: the same choice
    and the same value to the bit, on factors over pairs and triples in unsorted order, where
    later steps overwrite the buffers of earlier ones before their lines are read back; and the
    optimum by brute force."""
    rng = np.random.default_rng(seed)
    domain = {v: int(rng.integers(2, 5)) for v in range(6)}
    unary = {v: rng.random(domain[v]) for v in domain}
    factors = []
    for size in [2] * 8 + [3] * 4:
        scope = tuple(int(v) for v in rng.choice(6, size=size, replace=False))
        factors.append(Factor(scope, rng.random(tuple(domain[v] for v in scope))))
    results = {}
    for entries in (1, 1 << 40):
        monkeypatch.setattr(eliminate, "SCRATCH_ENTRIES", entries)
        results[entries] = solve(list(domain), domain, unary, factors)
    assert results[1] == results[1 << 40]
    choice, value = results[1]

    def cost(x):
        return sum(unary[v][x[v]] for v in domain) + sum(
            f.table[tuple(x[v] for v in f.vars)] for f in factors
        )

    best = min(cost(x) for x in itertools.product(*(range(domain[v]) for v in domain)))
    assert value == pytest.approx(best) and cost(choice) == pytest.approx(best)
