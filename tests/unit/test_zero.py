"""The ZeRO stage a plan's SBP amounts to, per parameter and per plan (oneflow_autoddl.zero)."""

import pytest

from oneflow_autoddl.amp import amp_graph
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.models import build_gpt, build_vgg
from oneflow_autoddl.planner import plan
from oneflow_autoddl.report import comparison_table, summary
from oneflow_autoddl.sbp import B, S
from oneflow_autoddl.search import baselines
from oneflow_autoddl.search.problem import build_problem
from oneflow_autoddl.zero import parameter_stages, stage_shares


@pytest.fixture(scope="module", params=["gpt", "vgg"])
def problem(request):
    if request.param == "gpt":
        g = build_gpt(2, 64, 4, 16, 128, 16, (2, 2))
    else:
        g = build_vgg(11, 0.125, 32, 10, 16, (2, 2))
    return build_problem(g, load_cluster("dgx-a100"))


def _shares(problem, x):
    return stage_shares(problem.graph, lambda name: problem.signature(name, x))


def test_the_expert_plans_are_the_stages_they_are_named_after(problem):
    """ZeRO-style splits every parameter on every axis it can: VGG's last bias (10 classes) does
    not split evenly over 4 devices, and is stage 3 over one axis only."""
    assert _shares(problem, baselines.data_parallel(problem)) == {"zero-0": pytest.approx(1.0)}
    zero = _shares(problem, baselines.zero(problem))
    assert zero["zero-3"] > 0.9999 and set(zero) <= {"zero-3", "zero-3 partial"}
    assert _shares(problem, baselines.replicated(problem)) == {
        "no data parallelism": pytest.approx(1.0)
    }


def test_data_parallel_is_found_once_and_stays_what_it_is(problem):
    """ZeRO-style starts from data parallel's plan, found once per problem: sharding it must not
    change the plan a later data_parallel call gives."""
    first = baselines.data_parallel(problem)
    baselines.zero(problem)
    first[0] = -1
    assert _shares(problem, baselines.data_parallel(problem)) == {"zero-0": pytest.approx(1.0)}


def test_a_parameter_split_on_one_of_two_data_parallel_axes_is_stage_3_there_only(problem):
    """Data parallel, but the largest parameter split over mesh axis 1 alone: its gradient is
    reduce-scattered over axis 1 and all-reduced over axis 0."""
    x = baselines.data_parallel(problem)
    g = problem.graph
    stages = parameter_stages(g, lambda name: problem.signature(name, x))
    biggest = max(stages, key=lambda n: g.tensor(g.op(n).outputs["out"]).nbytes)
    v = next(
        v for v, members in enumerate(problem.var_units) if biggest in problem.units[members[0]].ops
    )
    unit = problem.units[problem.var_units[v][0]]
    pos = unit.ops.index(biggest)
    k = next(
        k
        for k, joint in enumerate(unit.candidates)
        if joint[pos]["out"][0] == B and joint[pos]["out"][1] == S(0)
    )
    x[v] = k
    stages = parameter_stages(g, lambda name: problem.signature(name, x))
    assert stages[biggest] == "zero-3 partial"
    shares = _shares(problem, x)
    assert sum(shares.values()) == pytest.approx(1.0) and 0 < shares["zero-3 partial"] < 1


def test_the_report_names_the_stages():
    result = plan(build_gpt(2, 64, 4, 16, 128, 16, (4,)), "dgx-a100")
    table = comparison_table(result)
    assert "ZeRO (parameter bytes)" in table and "zero-0 100%" in table and "zero-3 100%" in table
    assert "ZeRO: " in summary(result) and "peak memory per device" in summary(result)
    assert sum(result.predicted.zero_stages.values()) == pytest.approx(1.0)


def test_megatron_zero_shards_a_weight_on_the_dimension_tensor_parallelism_leaves_whole():
    """Megatron+ZeRO stores each matrix split over the data-parallel axis on the dimension the
    tensor-parallel axis does not split: gathering it is then one all-gather over axis 0, where a
    shard nested in the tensor-parallel one must be shuffled across both axes."""
    problem = build_problem(build_gpt(2, 64, 4, 16, 128, 16, (2, 2)), load_cluster("dgx-a100"))
    x = baselines.megatron_zero(problem)
    g = problem.graph
    weights = 0
    for v in baselines._param_vars(problem):
        nd = baselines._var_sbp(problem, v, x[v])
        unit = problem.units[problem.var_units[v][0]]
        var = next(n for n in unit.ops if g.op(n).role == "variable")
        if len(g.tensor(g.op(var).outputs["out"]).shape) == 2 and nd[1].is_split:
            weights += 1
            assert nd[0].is_split and nd[0] != nd[1], (var, nd)
    assert weights >= 6  # q, k, v, proj, fc, proj (the layers are tied: one variable each)


@pytest.mark.parametrize("mesh", [(4,), (2, 2)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_megatron_style_computes_with_its_weights_as_it_stores_them(mesh, dtype):
    """Megatron-style's matrix products read each weight in the SBP it stores (through the cast
    of mixed precision): tensor parallelism moves activations, never the weights."""
    g = build_gpt(2, 64, 4, 16, 128, 16, mesh)
    g = amp_graph(g, dtype) if dtype != "fp32" else g
    problem = build_problem(g, load_cluster("dgx-a100"))
    x = baselines.megatron(problem)
    roles = baselines.megatron_roles(problem)
    read = 0
    for op in g.ops.values():
        weight = baselines._weight_of(problem, op)
        if weight is None or roles.get(weight) not in ("column", "row"):
            continue
        read += 1
        stored = problem.signature(weight, x)["out"]
        assert problem.signature(op.name, x)["b_0"] == stored, (op.name, weight)
    assert read >= 12  # q, k, v, proj, fc, proj of 2 layers
