"""Activation recomputation on the planner's IR (oneflow_autoddl.recompute): the copies OneFlow's
CheckpointingPass makes, and what they change in a plan's compute, boxing and memory. That
OneFlow makes exactly these copies is checked on ranks (tests/ranks/test_memory.py)."""

import pytest

from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.errors import PlanningError
from oneflow_autoddl.ir import module_scope
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.recompute import (
    PREFIX,
    forward_pass,
    original,
    recompute_delta,
    recompute_graph,
    recomputed_ops,
)
from oneflow_autoddl.search import baselines
from oneflow_autoddl.search.problem import build_problem

BLOCKS = ["model.h.0", "model.h.1"]


@pytest.fixture(scope="module")
def gpt():
    """Long sequences: activations outweigh the parameters and their state."""
    return build_gpt(2, 64, 4, 256, 128, 32, (4,))


def test_each_forward_op_of_a_block_gets_one_copy_read_by_the_backward(gpt):
    redone = recompute_graph(gpt, BLOCKS)
    copies = [n for n in redone.ops if n.startswith(PREFIX)]
    assert sorted(map(original, copies)) == sorted(
        n for b in BLOCKS for n in recomputed_ops(gpt, b)
    )
    forward = forward_pass(gpt)
    recomputed = {n for b in BLOCKS for n in recomputed_ops(gpt, b)}
    for name, op in redone.ops.items():
        readers_of_originals = [
            redone.tensor(lbn).producer in recomputed for lbn in op.inputs.values()
        ]
        if name not in forward and not name.startswith(PREFIX):
            assert not any(readers_of_originals), name  # the backward reads the copies
    order = list(redone.ops)
    last = max(order.index(n) for n in forward if redone.op(n).role == "forward")
    for name in copies:  # a copy runs after the whole forward, before the backward reads it
        assert order.index(name) > last
        assert module_scope(name) == module_scope(original(name))


def test_the_decomposed_layer_norms_gradient_ops_are_not_recomputed(gpt):
    """ir.assign_roles calls an op of the backward that reads only forward tensors forward; the
    pass copies only the forward pass."""
    cpu = build_gpt(2, 64, 4, 16, 128, 16, (4,), device="cpu")
    ops = recomputed_ops(cpu, "model.h.0.ln1")
    stray = [n for n, op in cpu.ops.items() if op.scope == "model.h.0.ln1" and op.role == "forward"]
    assert set(ops) < set(stray)


def test_recomputing_costs_the_forward_again_and_frees_memory_where_it_is_reused(gpt):
    problem = build_problem(gpt, load_cluster("dgx-a100"))
    x = baselines.data_parallel(problem)
    delta = recompute_delta(problem, BLOCKS, x)
    forward = sum(problem.evaluate(x).op_compute[n] for b in BLOCKS for n in recomputed_ops(gpt, b))
    assert delta.compute_s == pytest.approx(forward)
    assert delta.memory_saved > 0
    assert delta.peak_after.by_kind["activations"] < delta.peak_before.by_kind["activations"]


def test_without_reuse_the_copies_add_memory():
    g = build_gpt(2, 64, 4, 16, 128, 16, (2, 2), device="cpu")
    problem = build_problem(g, load_cluster("cpu-local"))
    delta = recompute_delta(problem, BLOCKS, baselines.megatron(problem))
    assert delta.memory_saved < 0 and delta.comm_s > 0 and delta.bytes_sent > 0


def test_an_unknown_module_is_named(gpt):
    with pytest.raises(PlanningError, match="model.h.7"):
        recompute_graph(gpt, ["model.h.7"])


@pytest.mark.parametrize("cluster", ["dgx-a100", "cpu-local"])
def test_the_items_of_a_recomputed_module_give_the_recomputed_timelines_peak(gpt, cluster):
    """Per module, the items to swap (search.memory.recompute_items), in the graph's own time
    steps: exact for data parallel here, within 16% for the other plans (boxing spans bound,
    a boxing shared by consumers costed in runs counted once a run, copies read only by copies
    left out)."""
    from oneflow_autoddl.search.memory import ItemTable, memory_items, recompute_items

    g = gpt if cluster == "dgx-a100" else build_gpt(2, 32, 4, 8, 64, 8, (2, 2), device="cpu")
    problem = build_problem(g, load_cluster(cluster))
    items = memory_items(problem)
    swapped = list(items)
    for scope in BLOCKS:
        removed, added = recompute_items(problem, items, scope)
        gone = {id(i) for i in removed}
        swapped = [i for i in swapped if id(i) not in gone] + added
    for name, seed in baselines.BASELINES.items():
        x = seed(problem)
        exact = recompute_delta(problem, BLOCKS, x).peak_after.bytes
        found = float(ItemTable(swapped).usage(x, len(g.ops)).max())
        if name == "data_parallel":
            assert found == exact
        assert found == pytest.approx(exact, rel=0.16), name


def test_a_module_of_normalization_alone_is_not_recomputable():
    """OneFlow's pass copies no normalization op, so a repeated BatchNorm module (as VGG11-BN's
    features.9, 12, ... are) has nothing to recompute: recomputable leaves it out, and the
    planner's ladder never asks recompute_graph for it (which refuses it)."""
    from oneflow_autoddl.recompute import recomputable
    from tests.irkit import Kit

    kit = Kit()
    x = kit.input("x", (8, 16))
    for i in range(2):
        x = kit.unary(f"m.act.{i}", "relu", kit.linear(f"m.fc.{i}", x, 16))
        gamma = kit.variable(f"m.bn.{i}.weight", (16,))
        x = kit.op(
            f"m.bn.{i}-normalization-{len(kit.ops)}",
            "normalization",
            {"x_0": x, "gamma_0": gamma},
            {"y_0": (8, 16)},
        )["y_0"]
    kit.output("out", x)
    graph = kit.graph()
    assert recomputable(graph, ["m.fc.0", "m.bn.0", "m.fc.1", "m.bn.1"]) == ["m.fc.0", "m.fc.1"]
    with pytest.raises(PlanningError, match="no forward op of module 'm.bn.0'"):
        recompute_graph(graph, ["m.bn.0"])
