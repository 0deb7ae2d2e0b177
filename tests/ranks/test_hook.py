"""graph.config.enable_auto_parallel(True) on real ranks: same losses as data parallel, the plan
compiled as planned, fallbacks that name the op, OneFlow's planner on request."""

import numpy as np
import pytest

# Each model once, each optimizer once (the suite must stay under 10 minutes on 2 cores); on
# 2 x 2, tests.ranks.cases.HOOK_CASES_2D, in the launch shared with other modules
CASES = [["gpt", "adam", "autoddl"], ["vgg", "sgd", "autoddl"]]
NATIVE = [["gpt", "adam", "native"]]  # OneFlow's own pass, once: it is OneFlow's to test


@pytest.fixture(scope="module")
def on_two(ranks):
    """The cases on 2 ranks and, in the same launch, the fallbacks (rank_hook.fallbacks)."""
    cases = CASES + NATIVE
    return ranks(
        "tests.ranks.rank_hook:compare", 2, timeout=600, cases=cases, mesh="2", with_fallbacks=True
    )[0]


@pytest.fixture(scope="module", params=["2", "2x2"], ids=["mesh2", "mesh2x2"])
def runs(request):
    if request.param == "2":
        return "2", request.getfixturevalue("on_two")
    return "2x2", request.getfixturevalue("two_by_two")["hook"]


@pytest.mark.ranks
def test_plugin_losses_equal_data_parallel(runs):
    mesh, out = runs
    for r in out["results"]:
        np.testing.assert_allclose(r["losses"], r["dp"], rtol=1e-4, err_msg=str(r["case"]))
        assert r["fallback"] is None, r


@pytest.mark.ranks
def test_plans_fit_the_memory_data_parallel_does_not(runs):
    mesh, out = runs
    for r in out["results"]:
        if r["case"][2] == "autoddl":
            assert r["plan"]["peak"] <= r["limit"], r["case"]


@pytest.mark.ranks
def test_plans_differ_from_data_parallel(runs):
    """Each AutoDDL plan gives some ops other signatures than data parallel, so that equal losses
    say something (under a memory limit, splitting parameters does not always pay: the tiny GPT
    with SGD holds more in its boxings' buffers than in its parameters)."""
    mesh, out = runs
    for r in out["results"]:
        if r["case"][2] == "autoddl":
            assert r["plan"]["differs"] > 0, r["case"]


@pytest.mark.ranks
def test_compiled_job_agrees_with_every_planned_op(runs):
    mesh, out = runs
    for r in out["results"]:
        if r["case"][2] == "autoddl":
            assert r["plan"]["ops"] > 100
            assert r["plan"]["mismatches"] == [], r["case"]
            assert not any("differs" in n for n in r["plan"]["notes"])


@pytest.mark.ranks
def test_native_planner_chosen_per_graph(runs):
    mesh, out = runs
    native = [r for r in out["results"] if r["case"][2] == "native"]
    assert bool(native) == (mesh == "2")
    assert all(r["plan"] is None for r in native)  # OneFlow's own pass ran; no AutoDDL plan


@pytest.fixture(scope="module")
def fallbacks(on_two):
    return on_two["fallbacks"]


@pytest.mark.ranks
@pytest.mark.parametrize("who", ["ours", "oneflow"])
def test_invalid_saved_plan_falls_back_naming_the_op(fallbacks, who):
    """Refused by our check, or (check bypassed) rejected by OneFlow: OneFlow's own inference
    runs."""
    r = fallbacks[who]
    assert r["victim"] in r["fallback"]
    assert any(r["victim"] in w for w in fallbacks["warnings"])
    assert r["plan"] is False
    np.testing.assert_allclose(r["losses"], r["good"], rtol=1e-4)


@pytest.mark.ranks
def test_ranks_planning_different_problems_fall_back_together(fallbacks):
    r = fallbacks["disagree"]
    assert "rank(s) [1] would plan another Job or with other settings" in r["fallback"]
    np.testing.assert_allclose(r["losses"], r["good"], rtol=1e-4)


@pytest.mark.ranks
def test_train_and_eval_graphs_share_one_module(fallbacks):
    """The eval graph keeps the parameters as the train graph placed them, and reads split ones
    through local copies (0.9.0 aborts when a variable's own buffer is boxed across ranks)."""
    shared = fallbacks["shared"]
    dp = shared["dp"]
    assert shared["zero"]["split"] > 0 and dp["split"] == 0
    for plan in ("autoddl", "zero"):
        assert shared[plan]["eval_plan"], plan
        for key in ("train", "eval", "train_after"):
            np.testing.assert_allclose(
                shared[plan][key], dp[key], rtol=1e-4, err_msg=f"{plan} {key}"
            )
