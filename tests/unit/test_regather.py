"""Tensors boxed again per phase on the planner's IR (oneflow_autoddl.regather): the copies, what
they change in a plan's bytes and memory, and where the planner uses them. That OneFlow boxes each
copy for itself, as planned, is checked on ranks (tests/ranks/test_regather.py)."""

import sys

import pytest

from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.errors import PlanningError
from oneflow_autoddl.ir import CHECKPOINT_COPY_PREFIX
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.planner import _leaner, plan
from oneflow_autoddl.recompute import forward_pass, recompute_graph
from oneflow_autoddl.regather import (
    PHASES,
    UPDATE,
    as_planned,
    is_phase_copy,
    phase_copy_name,
    regather_graph,
)
from oneflow_autoddl.search import baselines
from oneflow_autoddl.search.executor import Cores
from oneflow_autoddl.search.memory import peak_memory
from oneflow_autoddl.search.options import SearchOptions
from oneflow_autoddl.search.problem import build_problem

BLOCKS = ["model.h.0", "model.h.1"]


@pytest.fixture(scope="module")
def gpt():
    return build_gpt(2, 64, 4, 256, 128, 32, (2, 2))


def _phase_of(graph, name, forward):
    in_forward = name in forward and not name.startswith(CHECKPOINT_COPY_PREFIX)
    return PHASES[0] if in_forward else PHASES[1]


def test_each_phase_reads_a_parameter_through_its_own_copy(gpt):
    lean = regather_graph(gpt)
    forward = forward_pass(gpt)
    order = list(lean.ops)
    for var in (op for op in gpt.ops.values() if op.role == "variable"):
        readers = [
            (c, ibn)
            for c, ibn in gpt.tensor(var.outputs["out"]).consumers
            if gpt.op(c).role in PHASES
        ]
        for name, ibn in readers:
            phase = _phase_of(gpt, name, forward)
            copy = phase_copy_name(var.outputs["out"], phase, [(name, ibn)])
            assert lean.op(name).inputs[ibn] == lean.op(copy).outputs["out_0"]
            assert lean.op(copy).inputs == {"in_0": var.outputs["out"]}
            assert order.index(copy) < order.index(name)
        # an update (and only an update) still reads the variable itself
        assert {lean.op(c).role for c, _ in lean.tensor(var.outputs["out"]).consumers} <= {
            "optimizer",
            *(PHASES if readers else ()),
        }
    assert all(lean.op(n).type == "identity" for n in lean.ops if is_phase_copy(n))


def test_a_recomputed_blocks_input_is_copied_for_its_backward_readers(gpt):
    redone = recompute_graph(gpt, BLOCKS)
    lean = regather_graph(redone)
    activation_copies = [
        n
        for n, op in lean.ops.items()
        if is_phase_copy(n)
        and not n.endswith(UPDATE)
        and lean.op(lean.tensor(op.inputs["in_0"]).producer).role != "variable"
    ]
    assert activation_copies
    for name in activation_copies:
        assert name.endswith(PHASES[1])
        readers = [c for c, _ in lean.tensor(lean.op(name).outputs["out_0"]).consumers]
        assert any(r.startswith(CHECKPOINT_COPY_PREFIX) for r in readers)
        source = lean.tensor(lean.op(name).inputs["in_0"])
        # the forward readers read the tensor itself
        assert any(lean.op(c).role == "forward" for c, _ in source.consumers)
    assert regather_graph(gpt).ops.keys().isdisjoint(activation_copies)


def test_a_gradient_is_copied_for_its_update_right_after_it_is_made(gpt):
    lean = regather_graph(gpt)
    order = list(lean.ops)
    updates = [op for op in gpt.ops.values() if op.role == "optimizer"]
    copied = 0
    for update in updates:
        for ibn, lbn in update.inputs.items():
            producer = gpt.op(gpt.tensor(lbn).producer)
            if producer.role != "backward" or producer.placement != update.placement:
                continue
            copy = phase_copy_name(lbn, UPDATE, [(update.name, ibn)])
            assert lean.op(update.name).inputs[ibn] == lean.op(copy).outputs["out_0"]
            assert lean.op(copy).inputs == {"in_0": lbn}
            assert order.index(copy) == order.index(producer.name) + 1 or all(
                is_phase_copy(n) for n in order[order.index(producer.name) + 1 : order.index(copy)]
            )
            copied += 1
    assert copied >= len([v for v in gpt.ops.values() if v.role == "variable"]) // 3


def test_zero_with_copies_gathers_each_phase_and_frees_the_gathered_weights(gpt):
    """ZeRO-style on the graph with copies gathers each parameter for forward and again for
    backward, and reduces each gradient as it is made: more bytes, and (where memory is reused)
    less held at the peak than ZeRO-style gathering once for every reader."""
    cluster = load_cluster("dgx-a100")
    once, twice = build_problem(gpt, cluster), build_problem(regather_graph(gpt), cluster)
    x_once, x_twice = baselines.zero(once), baselines.zero(twice)
    graph = twice.graph
    for name in graph.ops:
        if not is_phase_copy(name):
            continue
        readers = graph.tensor(graph.op(name).outputs["out_0"]).consumers
        if name.endswith(UPDATE):
            reader, ibn = readers[0]
            wanted = twice.signature(reader, x_twice)[ibn]
        else:
            source = graph.tensor(graph.op(name).inputs["in_0"])
            wanted = twice.signature(source.producer, x_twice)[source.obn]
        assert twice.signature(name, x_twice)["in_0"] == wanted
    assert twice.evaluate(x_twice).bytes_per_device > 1.2 * once.evaluate(x_once).bytes_per_device
    assert peak_memory(twice, x_twice).bytes < peak_memory(once, x_once).bytes


def test_copies_only_where_recomputing_alone_finds_no_plan():
    """On a device that reuses memory: at half the fastest plan's peak recomputing the blocks
    fits, and the plan has no copy; at 40% only the copies fit too, and the plan lists the ones
    regather_graph makes of the user's graph (those only recomputation makes, of the blocks'
    inputs, are made again where the hook retraces the graph)."""
    g = build_gpt(4, 2048, 16, 128, 50257, 16, (2, 4))
    cluster = load_cluster("dgx-a100")
    fastest = plan(g, cluster).predicted.peak_memory_per_device
    recomputed = plan(g, cluster, memory_limit=0.5 * fastest)
    assert recomputed.recompute and not any(is_phase_copy(n) for n in recomputed.ops)
    lean = plan(g, cluster, memory_limit=0.4 * fastest)
    assert lean.recompute == recomputed.recompute
    assert lean.predicted.peak_memory_per_device <= 0.4 * fastest
    assert any(is_phase_copy(n) for n in lean.ops)
    assert set(lean.ops) | set(lean.unplanned_ops) == set(as_planned(g, lean.ops).ops)
    with pytest.raises(PlanningError, match="the leanest found holds"):
        plan(g, cluster, memory_limit=0.4 * fastest, options=SearchOptions(regather=False))


@pytest.mark.parametrize("share", [0.5, 0.4])
def test_the_leaner_graphs_searched_at_once_give_the_same_plan(share, monkeypatch):
    """On this machine's cores (search.executor.Cores) the recomputed graph is searched here and
    the one with copies too in a forked copy: at half the fastest plan's peak the first fits
    (the copy is killed), at 40% only the second; the plans are those searched one after the
    other. (Cores forks only where OneFlow is not loaded; the suite's other tests load it.)"""
    monkeypatch.delitem(sys.modules, "oneflow", raising=False)
    g = build_gpt(4, 2048, 16, 128, 50257, 16, (2, 4))
    cluster = load_cluster("dgx-a100")
    limit = share * plan(g, cluster).predicted.peak_memory_per_device
    alone, at_once = plan(g, cluster, limit), plan(g, cluster, limit, executor=Cores(2))
    assert at_once.digest() == alone.digest() and at_once.recompute == alone.recompute
    assert any(is_phase_copy(n) for n in at_once.ops) is (share == 0.4)


def test_no_copies_where_memory_is_not_reused(gpt):
    """On CPU ranks (no memory reused) a copy frees nothing and recomputation neither: the planner
    has no leaner graph to plan where the limit binds; on GPUs, the blocks recomputed, then the
    copies too."""
    assert _leaner(gpt, load_cluster("cpu-local"), SearchOptions()) == []
    recomputed, lean = _leaner(gpt, load_cluster("dgx-a100"), SearchOptions())
    assert recomputed.blocks == lean.blocks == BLOCKS
    assert recomputed.every and not lean.every
    assert not recomputed.binds and lean.binds  # the copies' fastest plan is the recomputed one's
    assert set(recomputed.make().ops) == set(recompute_graph(gpt, BLOCKS).ops)
    assert set(lean.make().ops) == set(regather_graph(recompute_graph(gpt, BLOCKS)).ops)
