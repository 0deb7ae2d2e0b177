"""Memory on a 2 x 2 mesh of CPU ranks, in the launch shared with other modules (conftest's
two_by_two; tests.ranks.rank_recompute):

- predicted peak memory per rank within 15% of what OneFlow allocates, for data parallel,
  Megatron-style and AutoDDL plans of the examples' GPT and VGG;
- a plan that recomputes every block of the GPT, applied by the hook through OneFlow's activation
  checkpointing: the losses of data parallel, the plan compiled as carried over, OneFlow's
  recompute copies as oneflow_autoddl.recompute makes them, and the memory each rank holds
  changing as predicted."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def out(two_by_two):
    return two_by_two


@pytest.fixture(scope="module")
def rows(out):
    return out["memory_rows"]


@pytest.mark.ranks
def test_predicted_peak_memory_within_15_percent(rows):
    assert len(rows) == 6
    for r in rows:
        print(
            f"\n{r['model']} {r['mesh']} {r['plan']}: predicted {r['predicted_bytes']:.0f}, "
            f"measured {r['measured_bytes']:.0f} bytes on the fullest rank "
            f"({100 * r['error']:+.2f}%)"
        )
        assert abs(r["error"]) <= 0.15, r


@pytest.mark.ranks
def test_parameters_and_optimizer_state_are_the_variables_allocated(rows):
    """What the peak holds of parameters and optimizer state is what OneFlow's variables take."""
    for r in rows:
        variables = r["predicted_by_kind"]["parameters"] + r["predicted_by_kind"]["optimizer_state"]
        measured = max(rank["variables"] for rank in r["measured_by_rank"].values())
        assert variables == pytest.approx(measured, rel=0.15), r


@pytest.mark.ranks
def test_the_plan_is_read_line_by_line_as_protobuf_parses_it(tmp_path):
    from google.protobuf import text_format
    from oneflow.core.job import plan_pb2, task_pb2

    from oneflow_autoddl.adapter.plan_memory import load_plan, memory_by_rank, read_memory

    plan = plan_pb2.Plan()
    for i, (kind, name, op, block) in enumerate(
        [
            ("kNormalForward", "__out_0", "m-matmul-3", 7),
            ("kNormalForward", "tmp", "m-reduce_sum-4", 8),
            ("kSliceBoxing", "out", "m-matmul-3", 9),
            ("kTick", "out", "System-Tick-1", 10),
            ("kNormalForward", "__out", "m.weight", 11),
        ]
    ):
        task = plan.task.add()
        task.task_type, task.machine_id = task_pb2.TaskType.Value(kind), i % 2
        regst = task.produced_regst_desc[name]
        regst.mem_block_id = block
        lbi = regst.regst_desc_type.data_regst_desc.lbi2blob_desc.add().lbi
        lbi.op_name, lbi.blob_name = op, "out_0"
        mb = plan.block_chunk_list.mem_block.add()
        mb.mem_block_id, mb.machine_id, mb.mem_size = block, i % 2, 512 * (i + 1)
        if op == "m.weight":
            mb.variable_op_name = op
    path = tmp_path / "job_g_plan"
    path.write_text(text_format.MessageToString(plan))
    assert read_memory(str(path)) == memory_by_rank(load_plan(str(path)))
    assert read_memory(str(path))[0] == {
        "variables": 2560.0,
        "outputs": 512.0,
        "workspaces": 0.0,
        "boxing": 1536.0,
        "control": 0.0,
    }


@pytest.mark.ranks
def test_recomputing_every_block_trains_like_data_parallel(out):
    assert out["fallback"] is None
    assert out["recompute"] == ["model.h.0", "model.h.1"]
    assert out["split"] > 0  # AutoDDL's plan is not data parallel
    np.testing.assert_allclose(out["recomputed"], out["dp"], rtol=1e-4)
    np.testing.assert_allclose(out["kept"], out["dp"], rtol=1e-4)


@pytest.mark.ranks
def test_recomputing_some_blocks_trains_like_data_parallel(out):
    """A plan that recomputes the first of the two blocks only (the planner's rung of fewer
    blocks recomputed): the hook checkpoints that module alone and the losses are data
    parallel's."""
    assert out["partly_fallback"] is None
    assert out["partly_recompute"] == ["model.h.0"]
    np.testing.assert_allclose(out["partly"], out["dp"], rtol=1e-4)


@pytest.mark.ranks
def test_the_carried_plan_compiles_as_planned(out):
    assert out["mismatches"] == []
    assert out["unmatched"] == []


@pytest.mark.ranks
def test_oneflows_copies_are_the_ones_the_planner_makes(out):
    assert out["copies_oneflow"] and out["copies_oneflow"] == out["copies_ours"]


@pytest.mark.ranks
def test_memory_changes_as_predicted(out):
    """On CPU ranks OneFlow reuses no memory, so the copies add to what a rank holds."""
    (before, after), (held, held_redone) = out["predicted"], out["measured"]
    print(f"\npredicted {before:.0f} -> {after:.0f}, measured {held:.0f} -> {held_redone:.0f}")
    print(f"without the checkpoint identities: {out['analytic']}")
    assert after > before and held_redone > held
    assert after - before == pytest.approx(held_redone - held, rel=0.15)
    analytic_before, analytic_after = out["analytic"]
    assert analytic_before == pytest.approx(before)
    assert analytic_after - analytic_before == pytest.approx(held_redone - held, rel=0.15)
