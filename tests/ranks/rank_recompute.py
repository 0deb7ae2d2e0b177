"""On ranks: the examples' GPT with AutoDDL's plan under a memory limit below data parallel's
peak, then the same plan recomputing every block (applied by the hook through OneFlow's
activation checkpointing), beside data parallel; and the memory each rank holds for data
parallel, Megatron-style and AutoDDL plans of the GPT and VGG (benchmarks.rank_memory), the
GPT's two graphs trained here among them."""

import os

import oneflow as flow

import oneflow_autoddl
from benchmarks.memory_check import PLANS
from benchmarks.rank_memory import measure, memory_row, predicted
from examples import models
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.plan_memory import dump_plans, plan_path, read_memory, step_memory
from oneflow_autoddl.adapter.recompute import match_ops, unmatched
from oneflow_autoddl.adapter.writeback import compiled_mismatches
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.recompute import PREFIX, original, recompute_delta, recompute_graph
from oneflow_autoddl.sbp import parse_nd
from oneflow_autoddl.search.problem import build_problem


def _train(graph, inputs, steps):
    return [float(graph(*inputs).numpy()) for _ in range(steps)]


def _measured(graph):
    return max(step_memory(r) for r in read_memory(plan_path(graph.name)).values())


def _source(graph, lbn):
    """The tensor an identity op (a checkpoint's, or the write-back's copy of a variable) passes
    on, back to the first tensor that is not one."""
    t = graph.tensor(lbn)
    while graph.op(t.producer).type == "identity":
        t = graph.tensor(graph.op(t.producer).inputs["in_0"])
    return t


def _copies(graph, first=None):
    """Each recompute copy as (its original, {input blob: (copy?, producer's original, blob)}),
    by the first trace's names where `first` maps them, identities seen through."""
    name = (lambda n: first.get(original(n), original(n))) if first else original
    out = {}
    for op in graph.ops.values():
        if op.name.startswith(PREFIX):
            inputs = {}
            for bn, lbn in op.inputs.items():
                t = _source(graph, lbn)
                inputs[bn] = (t.producer.startswith(PREFIX), name(t.producer), t.obn)
            out[name(op.name)] = inputs
    return out


def run(mesh: str = "2x2", steps: int = 3, cluster: str = "cpu-local", vgg_plans=PLANS):
    dump_plans()
    dp_graph, inputs = models.build("gpt", mesh, plan="dp")
    dp = _train(dp_graph, inputs, steps)
    # below data parallel's peak, so that AutoDDL's plan shards (unlimited, on this small GPT it
    # may be data parallel's, and recomputation is checked on sharded blocks)
    limit = 0.9 * predicted(dp_graph, cluster).peak_memory_per_device
    kept, inputs = models.build("gpt", mesh, plan="autoddl", memory_per_device=limit)
    kept_losses = _train(kept, inputs, steps)
    rows = measure(mesh, ["gpt"], ["megatron"]) + measure(mesh, ["vgg"], vgg_plans)
    if flow.env.get_rank() == 0:
        rows += [memory_row(g, "gpt", mesh, p) for g, p in ((dp_graph, "dp"), (kept, "autoddl"))]
    plan = oneflow_autoddl.plan_of(kept)
    scopes = [f"model.h.{i}" for i in range(models.GPT_SIZES["layers"])]
    plan.recompute = scopes
    path = f"/tmp/autoddl-recompute-plan-{os.getpid()}.json"
    plan.save(path)
    redone, inputs = models.build("gpt", mesh, plan="autoddl", load_plan=path)
    redone_losses = _train(redone, inputs, steps)
    plan.recompute = scopes[:1]  # some of the blocks, as the planner's fewer-blocks rung does
    plan.save(path)
    partly, inputs = models.build("gpt", mesh, plan="autoddl", load_plan=path)
    partly_losses = _train(partly, inputs, steps)
    partly_carried = oneflow_autoddl.plan_of(partly)
    os.remove(path)
    carried = oneflow_autoddl.plan_of(redone)
    probe, inputs = models.build("gpt", mesh, plan="dp")
    first = read_job(probe.build_graph(*inputs)[0])
    out = {
        "dp": dp,
        "kept": kept_losses,
        "recomputed": redone_losses,
        "fallback": getattr(redone, "_autoddl_fallback", None),
        "partly": partly_losses,
        "partly_recompute": partly_carried.recompute if partly_carried else None,
        "partly_fallback": getattr(partly, "_autoddl_fallback", None),
        "memory_rows": rows,
    }
    if flow.env.get_rank() != 0 or carried is None:
        return out
    second = read_job(redone._full_graph_proto)
    ours = recompute_graph(first, scopes)
    problem = build_problem(first, load_cluster(cluster))
    x = problem.assignment_of({n: plan.signature(n) for n in plan.ops if n in first.ops})
    delta = recompute_delta(problem, scopes, x)
    out.update(
        recompute=carried.recompute if carried else None,
        mismatches=compiled_mismatches(redone._compiled_graph_proto, carried) if carried else None,
        split=sum(any(s.kind != "B" for s in parse_nd(v)) for v in plan.variables.values()),
        unmatched=unmatched(first, second),
        copies_oneflow=sorted(map(str, _copies(second, match_ops(first, second)).items())),
        copies_ours=sorted(map(str, _copies(ours).items())),
        predicted=[plan.predicted.peak_memory_per_device, carried.predicted.peak_memory_per_device],
        measured=[_measured(kept), _measured(redone)],
        analytic=[delta.peak_before.bytes, delta.peak_after.bytes],
        compute=[plan.predicted.compute_time_s, carried.predicted.compute_time_s, delta.compute_s],
    )
    return out
