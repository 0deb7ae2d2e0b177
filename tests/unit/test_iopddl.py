"""IOPDDL contest graphs: reading, the contest's evaluator, and the search under a memory limit at
every time step, against brute force on small random graphs."""

import gzip
import itertools
import json
import random
import time

import numpy as np
import pytest

from benchmarks import iopddl as bench
from benchmarks import iopddl_seeds
from oneflow_autoddl.errors import AutoDDLError, GraphError
from oneflow_autoddl.iopddl import solve as solve_module
from oneflow_autoddl.iopddl.instance import FORBIDDEN, evaluate, parse, read
from oneflow_autoddl.iopddl.options import SolveOptions, with_settings
from oneflow_autoddl.iopddl.solve import Search, Usage, solve
from oneflow_autoddl.search.descent import Descent
from oneflow_autoddl.search.eliminate import Factor
from oneflow_autoddl.search.factors import FactorGraph
from oneflow_autoddl.search.memory import MemoryItem
from oneflow_autoddl.search.partition import partition


def _problem(costs, usages, intervals, edges, edge_costs, limit):
    return {
        "problem": {
            "name": "t",
            "nodes": {"costs": costs, "usages": usages, "intervals": intervals},
            "edges": {"nodes": edges, "costs": edge_costs},
            "usage_limit": limit,
        }
    }


HAND = _problem(
    costs=[[10, 20], [5, 1, 7], [3, 3]],
    usages=[[4, 1], [2, 2, 6], [5, 0]],
    intervals=[[0, 2], [1, 3], [2, 4]],
    edges=[[0, 1], [1, 2]],
    edge_costs=[[0, 1, 2, 3, 4, 5], [7, 8, 9, FORBIDDEN, 0, 1]],
    limit=8,
)


def test_evaluator_by_hand():
    inst = parse(HAND)
    # nodes 20 + 1 + 3; edge (0, 1) at 1 * 3 + 1: 4; edge (1, 2) at 1 * 2 + 0: 9. Memory held:
    # step 0 node 0 (1); step 1 nodes 0, 1 (1 + 2); step 2 nodes 1, 2 (2 + 5); step 3 node 2 (5)
    fine = evaluate(inst, [1, 1, 0])
    assert (fine.cost, fine.peak, fine.valid) == (24 + 4 + 9, 7, True)
    # node 1 strategy 2 (6) beside node 2 strategy 0 (5) at step 2: 11 > 8
    over = evaluate(inst, [1, 2, 0])
    assert (over.cost, over.peak, over.valid) == (20 + 7 + 3 + 5 + 0, 11, False)
    forbidden = evaluate(inst, [0, 1, 1])  # edge (1, 2) at 1 * 2 + 1
    assert not forbidden.valid and "forbidden" in forbidden.problems[0]


def test_malformed_files_name_what_is_missing(tmp_path):
    broken = json.loads(json.dumps(HAND))
    del broken["problem"]["nodes"]["intervals"]
    path = tmp_path / "broken.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(broken, f)
    with pytest.raises(GraphError, match=r"nodes\.intervals"):
        read(str(path))
    short = json.loads(json.dumps(HAND))
    short["problem"]["edges"]["costs"][0] = [1, 2]
    with pytest.raises(GraphError, match=r"edges\.costs\[0\] needs 6 entries"):
        parse(short)


def _random_problem(rng, n, limit_share):
    domains = [rng.randint(2, 3) for _ in range(n)]
    costs = [[rng.randint(0, 20) for _ in range(d)] for d in domains]
    usages = [[rng.randint(1, 10) for _ in range(d)] for d in domains]
    intervals = []
    for _ in range(n):
        a = rng.randint(0, 6)
        intervals.append([a, a + rng.randint(1, 4)])
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.45]
    edge_costs = [[rng.randint(0, 30) for _ in range(domains[u] * domains[v])] for u, v in pairs]
    most = sum(max(u) for u in usages)
    limit = int(limit_share * most)
    return _problem(costs, usages, intervals, [list(p) for p in pairs], edge_costs, limit)


def _brute_force(inst):
    best = None
    for x in itertools.product(*[range(len(c)) for c in inst.costs]):
        e = evaluate(inst, list(x))
        if e.valid and (best is None or e.cost < best):
            best = e.cost
    return best


@pytest.mark.parametrize("seed", range(4))
def test_descent_over_one_group_is_exact(seed):
    """Elimination over every variable at once is the brute-force minimum."""
    rng = np.random.default_rng(seed)
    domain = list(rng.integers(2, 4, size=6))
    unary = [rng.random(d) for d in domain]
    pairs = [(u, v) for u in range(6) for v in range(u + 1, 6) if rng.random() < 0.5]
    factors = [Factor((u, v), rng.random((domain[u], domain[v]))) for u, v in pairs]
    graph = FactorGraph(domain, unary, factors)
    x = Descent(graph, 0.0, [list(range(6))]).run([0] * 6)
    best = min(
        graph.objective(list(y)) for y in itertools.product(*[range(int(d)) for d in domain])
    )
    assert graph.objective(x) == pytest.approx(best)


@pytest.mark.parametrize("seed", range(6))
def test_search_honours_the_memory_intervals(seed):
    """On small random graphs whose limit binds: a valid solution, as cheap as brute force's."""
    rng = random.Random(seed)
    inst = parse(_random_problem(rng, 7, 0.45))
    best = _brute_force(inst)
    solved = solve(inst, time.monotonic() + 0.5, seed)
    if best is None:
        assert solved.solution == []
        return
    result = evaluate(inst, solved.solution)
    assert result.valid, result.problems
    assert result.cost == best == solved.cost


def test_without_a_usage_limit_memory_is_free():
    data = _random_problem(random.Random(7), 7, 0.0)
    del data["problem"]["usage_limit"]
    inst = parse(data)
    solved = solve(inst, time.monotonic() + 0.3)
    assert evaluate(inst, solved.solution).cost == _brute_force(inst) == solved.cost


@pytest.mark.parametrize("seed", range(3))
def test_local_costs_are_the_objective_along_one_variable(seed):
    """Search.local_costs(x, v)[k] differs from [x[v]] by what setting v to k changes the
    objective by, pairwise and three-variable factors alike (tighten and repair rank moves by
    it)."""
    rng = np.random.default_rng(seed)
    domain = list(rng.integers(2, 5, size=6))
    unary = [rng.random(d) for d in domain]
    scopes = [(0, 1), (1, 2), (2, 0), (3, 4), (1, 3, 5), (5, 0)]
    factors = [Factor(s, rng.random([domain[v] for v in s])) for s in scopes]
    graph = FactorGraph(domain, unary, factors)
    search = Search(graph, Usage([], 0, domain), float("inf"), time.monotonic() + 10.0)
    x = [int(rng.integers(d)) for d in domain]
    for v in range(6):
        costs = search.local_costs(x, v)
        for k in range(domain[v]):
            y = x[:v] + [k] + x[v + 1 :]
            moved = graph.objective(y) - graph.objective(x)
            assert costs[k] - costs[x[v]] == pytest.approx(moved)


def test_repair_pays_only_for_the_bytes_over_the_limit():
    """One byte over: moving variable 1 (5 for 1 byte) beats variable 0 (10 for 100 bytes, the
    cheaper per byte freed, but 99 of them are not needed)."""
    graph = FactorGraph([2, 2], [np.array([0.0, 10.0]), np.array([0.0, 5.0])], [])
    items = [
        MemoryItem((0,), np.array([100.0, 0.0]), 0, 1, "activations", "a"),
        MemoryItem((1,), np.array([10.0, 9.0]), 0, 1, "activations", "b"),
    ]
    search = Search(graph, Usage(items, 1, [2, 2]), 109.0, time.monotonic() + 10.0)
    assert search.repair([0, 0]) == [0, 1]


def test_infeasible_gives_no_solution_and_the_least_memory():
    inst = parse(
        _problem(
            costs=[[1, 2], [1, 2]],
            usages=[[5, 3], [4, 6]],
            intervals=[[0, 2], [1, 3]],
            edges=[[0, 1]],
            edge_costs=[[0, 0, 0, 0]],
            limit=6,
        )
    )
    solved = solve(inst, time.monotonic() + 0.5)
    assert solved.solution == [] and solved.peak == 3 + 4


def test_benchmark_prints_the_solution_last_and_checks_it(tmp_path, capsys):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(HAND))
    assert bench.main([str(path), "--timeout", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    solution = json.loads(last)
    assert evaluate(parse(HAND), solution).valid
    assert bench.main(["--check", str(path), last]) == 0
    assert "valid True" in capsys.readouterr().out
    assert bench.main(["--check", str(path), "[1, 2, 0]"]) == 1


def test_settings_set_the_solve_options_and_name_what_is_wrong():
    options = with_settings(SolveOptions(), ["round_passes=1", "stale_share=1", "levels=(0, 2.0)"])
    assert (options.round_passes, options.stale_share, options.levels) == (1, 1.0, (0, 2.0))
    assert isinstance(options.stale_share, float)
    for bad, says in [
        ("rounds=3", "NAME one of rounds_share"),
        ("kick", "NAME=VALUE"),
        ("kick=x", "not a Python literal"),
        ("kick=1.5", "kick must be of type int"),
    ]:
        with pytest.raises(AutoDDLError, match=says):
            with_settings(SolveOptions(), [bad])


def test_the_search_takes_its_partitions_as_the_options_say(monkeypatch):
    """Options reach the search: the partitions' group size and width checks are the options'."""
    asked = []

    def recording(*args, **kwargs):
        asked.append((args[4], kwargs["max_checks"]))
        return partition(*args, **kwargs)

    monkeypatch.setattr(solve_module, "partition", recording)
    inst = parse(_random_problem(random.Random(1), 7, 0.45))  # one some assignment fits
    options = SolveOptions(group_vars=3, group_checks=0)
    solved = solve(inst, time.monotonic() + 0.3, 0, options)
    assert asked and set(asked) == {(3, 0)}
    assert evaluate(inst, solved.solution).valid


def test_seeds_runner_checks_every_seed(tmp_path, capsys):
    assert iopddl_seeds.parse_seeds("2-4") == [2, 3, 4]
    assert iopddl_seeds.parse_seeds("0,5") == [0, 5]
    with pytest.raises(AutoDDLError, match="range like 0-5"):
        iopddl_seeds.parse_seeds("a-b")
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(HAND))
    rows = tmp_path / "rows.json"
    best = _brute_force(parse(HAND))
    argv = [str(path), "--timeout", "3", "--seeds", "0-1", "--best", str(best), "--json", str(rows)]
    assert iopddl_seeds.main(argv + ["--option", "kick=2"]) == 0
    assert "valid: 2 of 2" in capsys.readouterr().out
    written = json.loads(rows.read_text())
    assert written["options"] == ["kick=2"]
    assert [r["ratio"] for r in written["rows"]] == [1.0, 1.0]
    assert iopddl_seeds.main(argv + ["--option", "nope=1"]) == 2
