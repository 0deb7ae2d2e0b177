"""Parameters (and recomputed blocks' inputs) boxed again per phase (oneflow_autoddl.regather) on
real CPU ranks (tests.ranks.rank_regather): the copies the plan lists are the ones compiled, the
losses are data parallel's, and the bytes each rank sends are the prediction's, which counts a
gather for each phase: OneFlow boxes each copy for itself."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def two_by_two(ranks):
    return ranks("tests.ranks.rank_regather:run", 4, timeout=600, mesh="2x2")


@pytest.fixture(scope="module")
def two(ranks):
    return ranks("tests.ranks.rank_regather:run", 2, timeout=600, mesh="2", lean=False)


def _check_applied(results, key):
    first = results[0][key]
    assert first["fallback"] is None
    assert first["mismatches"] == []
    assert first["planned_copies"]
    # besides the plan's copies, only OneFlow's identity ops grouping a copy's readers
    extra = set(first["copies"]) - set(first["planned_copies"])
    assert set(first["planned_copies"]) <= set(first["copies"])
    assert all(name.startswith("Sys-Boxing-GroupIdentity-") for name in extra), extra
    assert set(first["planned_copies"]) <= set(first["waiting"])
    np.testing.assert_allclose(first["losses"], results[0]["dp"], rtol=1e-4)
    measured = np.mean([r[key]["sent"] for r in results])
    print(f"\n{key}: predicted {first['predicted']:.0f}, measured {measured:.0f} bytes/rank/step")
    assert first["predicted"] == pytest.approx(measured, rel=0.05)


@pytest.mark.ranks
@pytest.mark.parametrize("mesh", ["2", "2x2"])
def test_a_zero_plan_gathering_per_phase_trains_and_sends_as_predicted(mesh, request):
    results = request.getfixturevalue({"2": "two", "2x2": "two_by_two"}[mesh])
    _check_applied(results, "zero")
    # a gather for each phase: more than the same plan gathering once for every reader
    assert results[0]["zero"]["predicted"] > 1.2 * results[0]["zero_once"]


@pytest.mark.ranks
def test_copies_taking_what_their_readers_take_box_the_parameter_once(two_by_two):
    """A split parameter its copies read gathered is boxed once, through the write-back's local
    copy of a split variable, as without copies: about the bytes of ZeRO-style gathering once."""
    _check_applied(two_by_two, "through")
    through = two_by_two[0]["through"]["predicted"]
    assert through == pytest.approx(two_by_two[0]["zero_once"], rel=0.05)
    assert through < two_by_two[0]["zero"]["predicted"]


@pytest.mark.ranks
def test_a_lean_plan_recomputes_and_copies_as_the_hook_carries_it(two_by_two):
    """ZeRO-style with every block recomputed and parameters copied per phase: the hook retraces
    the graph with checkpointing, copies again there (a recomputed block's input too) and trains
    it."""
    lean = two_by_two[0]["lean"]
    assert lean["made"]["recompute"] == ["model.h.0", "model.h.1"]
    assert lean["recompute"] == lean["made"]["recompute"]
    assert set(lean["made"]["copies"]) < set(lean["planned_copies"])
    _check_applied(two_by_two, "lean")
