"""The Plan: JSON round trip, reuse refused with the first difference, readable tables."""

import json

import pytest

from oneflow_autoddl.plan import Plan, PlanMismatch
from oneflow_autoddl.planner import describe, plan
from oneflow_autoddl.report import comparison_table, summary
from tests.irkit import Kit


def mlp(width=64, mesh=(2,)):
    kit = Kit(mesh)
    x = kit.input("x", (16, 32))
    kit.output(
        "out", kit.linear("m.fc2", kit.unary("m.act", "relu", kit.linear("m.fc1", x, width)), 8)
    )
    return kit.graph()


def test_a_runs_record_loads_as_the_plan_it_holds(tmp_path):
    """The examples' --json (losses, step times, the plan) is what --load-plan takes back."""
    p = plan(mlp(), "cpu-local")
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"losses": [1.0], "step_times_s": [0.1], "plan": p.to_dict()}))
    assert Plan.load(str(record)) == p
    (tmp_path / "other.json").write_text(json.dumps({"losses": [1.0]}))
    with pytest.raises(PlanMismatch, match="not a plan JSON"):
        Plan.load(str(tmp_path / "other.json"))
    (tmp_path / "broken.json").write_text("{'mesh': 2")
    with pytest.raises(PlanMismatch, match="broken.json is not a plan JSON"):
        Plan.load(str(tmp_path / "broken.json"))


def test_json_round_trips(tmp_path):
    p = plan(mlp(), "cpu-local")
    text = p.to_json()
    assert isinstance(text, str)
    assert Plan.from_json(text) == p
    assert json.loads(text) == p.to_dict()
    assert Plan.from_dict(json.loads(text)) == p
    p.save(str(tmp_path / "p.json"))
    assert Plan.load(str(tmp_path / "p.json")).signatures() == p.signatures()
    data = p.to_dict()
    for key in (
        "mesh",
        "cluster",
        "ops",
        "variables",
        "unplanned_ops",
        "predicted",
        "baselines",
        "search_time_s",
    ):
        assert key in data
    assert set(data["predicted"]) >= {"step_time_s", "bytes_per_device", "memory_per_device"}
    assert "data_parallel" in data["baselines"]
    assert data["variables"]["m.fc1.weight"] in ("S(0)", "S(1)", "B")


def test_a_plan_for_another_graph_is_refused_with_the_first_difference():
    p = plan(mlp(64), "cpu-local")
    with pytest.raises(PlanMismatch, match=r"blob a_0 has shape \[16, 32\] in the graph|shape"):
        p.check_matches(mlp(128), (2,))
    with pytest.raises(PlanMismatch, match="mesh 2, the graph runs on 4"):
        p.check_matches(mlp(64, (4,)), (4,))
    p.check_matches(mlp(64), (2,))


def test_not_a_plan_json():
    with pytest.raises(PlanMismatch, match="not a plan JSON"):
        Plan.from_dict({"mesh": "2"})
    with pytest.raises(PlanMismatch, match="not a plan JSON"):
        Plan.from_json("{'mesh': 2")


def test_tables_name_every_parameter_and_compare_the_baselines():
    p = plan(mlp(), "cpu-local")
    text = p.table()
    for name in ("m.fc1.weight", "m.fc1.bias", "m.fc2.weight"):
        assert name in text
    assert "m.fc1-matmul-2" not in text and "input SBP" not in text
    with_ops = p.table(ops=True)
    assert "m.fc1-matmul-2" in with_ops and "input SBP" in with_ops
    comparison = comparison_table(p)
    for name in ("autoddl", "data_parallel", "megatron", "zero"):
        assert f"| {name}" in comparison
    assert "predicted step" in summary(p)


def test_describe_costs_a_graph_as_given():
    d = describe(mlp(), "cpu-local")
    assert d.predicted.step_time_s > 0 and "m.fc1-matmul-2" in d.ops and "x" in d.unplanned_ops


def test_planning_pauses_the_cyclic_collector_and_restores_it(monkeypatch):
    """The collector is off while the search runs, and after planning as it was before, even
    when planning fails."""
    import gc

    from oneflow_autoddl import planner

    seen = []
    build = planner.build_problem

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return build(*args, **kwargs)

    monkeypatch.setattr(planner, "build_problem", recording)
    was_on = gc.isenabled()
    try:
        gc.enable()
        plan(mlp(), "cpu-local")
        assert seen and not any(seen) and gc.isenabled()
        with pytest.raises(Exception, match="unknown strategy"):
            plan(mlp(), "cpu-local", strategy="pipeline")
        assert gc.isenabled()
        gc.disable()
        plan(mlp(), "cpu-local")
        assert not gc.isenabled()
    finally:
        (gc.enable if was_on else gc.disable)()
