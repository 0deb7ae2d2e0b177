"""On ranks: train the examples' models with and without the plugin and report what ran."""

import gc
import json
import logging
import os
import time

import oneflow as flow

import oneflow_autoddl
from benchmarks.rank_memory import memory_row
from examples import models as rank_models
from oneflow_autoddl import planner as autoddl_planner
from oneflow_autoddl.adapter import writeback
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.writeback import compiled_mismatches
from oneflow_autoddl.planner import describe
from oneflow_autoddl.sbp import parse_nd


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _release_together(graphs: list) -> None:
    """Close the graphs on every rank at the same point: a compiled graph's runtime waits for
    its peers when it closes, so a rank whose garbage collector closes one while another rank
    compiles the next graph waits forever (seen on 2 ranks: one rank in NNGraph::Close, the
    other in CompileAndInitRuntime's barrier)."""
    flow.comm.barrier()
    graphs.clear()
    gc.collect()
    flow.comm.barrier()


def _train(graph, inputs, steps):
    return [float(graph(*inputs).numpy()) for _ in range(steps)]


def _tight_limit(job, cluster: str, fraction: float) -> float:
    return fraction * describe(job, cluster).predicted.peak_memory_per_device


def _differs_from_data_parallel(graph, plan, cluster: str) -> int:
    """How many ops the plan gives another signature than data parallel does on the same Job."""
    dp = autoddl_planner.plan(read_job(graph._full_graph_proto), cluster, strategy="data_parallel")
    return sum(
        1 for n, op in plan.ops.items() if n in dp.ops and op.signature != dp.ops[n].signature
    )


def _report(graph, losses, cluster: str = "cpu-local"):
    plan = oneflow_autoddl.plan_of(graph)
    out = {"losses": losses, "fallback": getattr(graph, "_autoddl_fallback", None), "plan": None}
    if plan is not None:
        out["plan"] = {
            "split": sorted(
                n for n, s in plan.variables.items() if any(x.kind != "B" for x in parse_nd(s))
            ),
            "differs": _differs_from_data_parallel(graph, plan, cluster),
            "ops": len(plan.ops),
            "mismatches": compiled_mismatches(graph._compiled_graph_proto, plan),
            "notes": plan.notes,
            "variables": plan.variables,
            "peak": plan.predicted.peak_memory_per_device,
        }
    return out


def _memory_rows(wanted: bool, graph, model: str, mesh: str, plan: str, cluster: str) -> list:
    if not wanted or flow.env.get_rank() != 0:
        return []
    return [memory_row(graph, model, mesh, plan, cluster)]


def compare(
    cases,
    mesh: str,
    steps: int = 5,
    cluster: str = "cpu-local",
    memory_fraction: float = 0.995,
    with_fallbacks: bool = False,
    memory_rows: bool = False,
):
    """For each (model, optimizer, planner): data parallel losses (once per model and
    optimizer), then the plugin's; then `fallbacks()` where asked (one launch for both). With
    `memory_rows` (after adapter.plan_memory.dump_plans), rank 0 also gives each graph's
    benchmarks.rank_memory.memory_row.

    The plugin's memory limit is `memory_fraction` of what data parallel holds at its peak, so
    that data parallel does not fit and some plan does: on CPU ranks, where no memory is reused
    and boxing buffers add, the test GPT's leanest plan on 2 ranks holds barely less than data
    parallel (test_plans_fit_the_memory_data_parallel_does_not checks that it fits).
    """
    records = _Records()
    logging.getLogger("oneflow_autoddl").addHandler(records)
    results, alive, rows = [], [], []
    baseline = {}  # (model, optimizer) -> (data parallel's losses, the limit, seconds)
    for model, optimizer, planner in cases:
        graph = None
        _release_together(alive)
        if (model, optimizer) not in baseline:
            start = time.perf_counter()
            graph, inputs = rank_models.build(model, mesh, plan="dp", optimizer=optimizer)
            alive.append(graph)
            dp = _train(graph, inputs, steps)
            rows += _memory_rows(memory_rows, graph, model, mesh, "dp", cluster)
            limit = _tight_limit(read_job(graph._full_graph_proto), cluster, memory_fraction)
            baseline[model, optimizer] = (dp, limit, time.perf_counter() - start)
        dp, limit, dp_seconds = baseline[model, optimizer]
        start = time.perf_counter()
        graph, inputs = rank_models.build(
            model,
            mesh,
            plan=planner,
            optimizer=optimizer,
            cluster=cluster,
            memory_per_device=limit,
        )
        alive.append(graph)
        results.append(
            {
                "case": [model, optimizer, planner],
                "limit": limit,
                "dp": dp,
                **_report(graph, _train(graph, inputs, steps), cluster),
                "seconds": [dp_seconds, time.perf_counter() - start],
            }
        )
        rows += _memory_rows(memory_rows, graph, model, mesh, planner, cluster)
    graph = None
    _release_together(alive)
    logging.getLogger("oneflow_autoddl").removeHandler(records)
    out = {"results": results, "warnings": records.lines}
    if memory_rows:
        out["memory_rows"] = rows
    if with_fallbacks:
        out["fallbacks"] = fallbacks()
    return out


def _saved_plan_with(plan: dict, victim_type: str, signature):
    """`plan` (a Plan's dict) with the first op of `victim_type` given `signature`, saved."""
    victim = next(n for n, e in plan["ops"].items() if e["type"] == victim_type)
    plan["ops"][victim]["signature"] = signature
    path = f"/tmp/autoddl-bad-plan-{os.getpid()}.json"
    with open(path, "w") as f:
        json.dump(plan, f)
    return victim, path


def fallbacks():
    """A train and an eval graph sharing one module; then the GPT's plan from there, saved with
    a signature that cannot run: refused by our check, and (check bypassed) by OneFlow itself;
    then ranks given different settings."""
    records = _Records()
    logging.getLogger("oneflow_autoddl").addHandler(records)
    gc.disable()  # the graphs built here are closed together at the end (_release_together)
    out = {}
    out["shared"], plan = _shared_module()
    good = out["shared"]["autoddl"]["train"]
    bad = {"a_0": "S(0)", "b_0": "S(0)", "out_0": "S(0)"}  # no such broadcast_matmul signature
    victim, path = _saved_plan_with(plan, "broadcast_matmul", bad)
    for name, bypass in (("ours", False), ("oneflow", True)):
        saved = writeback.check_signatures
        if bypass:
            writeback.check_signatures = lambda ir, plan: None
        try:
            graph, inputs = rank_models.build("gpt", "2", plan="autoddl", load_plan=path)
            losses = _train(graph, inputs, len(good))
        finally:
            writeback.check_signatures = saved
        out[name] = {
            "good": good,
            "losses": losses,
            "victim": victim,
            "plan": oneflow_autoddl.plan_of(graph) is not None,
            "fallback": getattr(graph, "_autoddl_fallback", None),
        }
    os.remove(path)
    out["disagree"] = _ranks_disagree(good)
    out["warnings"] = records.lines
    _release_together([])
    gc.enable()
    return out


def _ranks_disagree(good, steps: int = 3):
    """Rank 1 given another memory limit than rank 0: the ranks would search different problems
    (and wait on each other in the search's collectives), so both fall back instead, and train as
    the plugin's plan (`good`, its first `steps` losses) does."""
    limit = 1e9 * (1 + flow.env.get_rank())
    graph, inputs = rank_models.build("gpt", "2", plan="autoddl", memory_per_device=limit)
    return {
        "good": good[:steps],
        "losses": _train(graph, inputs, steps),
        "fallback": getattr(graph, "_autoddl_fallback", None),
    }


def _shared_module(steps: int = 3):
    """Train then eval on one module: data parallel, and with the plugin on both graphs after
    AutoDDL's and after ZeRO's train graph (its parameters split whatever the search picks).
    Also AutoDDL's train plan, as a dict."""
    results, autoddl_plan = {}, None
    for plan in ("dp", "autoddl", "zero"):
        train, inputs = rank_models.build("gpt", "2", plan=plan)
        model, loss_fn = train.model.to(flow.nn.Module), train.loss_fn.to(flow.nn.Module)

        class Eval(flow.nn.Graph):
            def __init__(self, model, loss_fn, plan):
                super().__init__()
                self.model, self.loss_fn = model, loss_fn
                if plan != "dp":
                    self.config.enable_auto_parallel(True)
                    self.config.enable_auto_parallel_ignore_user_sbp_config(True)

            def build(self, x, y):
                return self.loss_fn(self.model(x), y)

        losses = _train(train, inputs, steps)
        if plan == "autoddl":
            autoddl_plan = oneflow_autoddl.plan_of(train).to_dict()
        evaluate = Eval(model, loss_fn, plan)
        results[plan] = {
            "train": losses,
            "eval": [float(evaluate(*inputs).numpy()) for _ in range(2)],
            "train_after": _train(train, inputs, 1),
            "eval_plan": oneflow_autoddl.plan_of(evaluate) is not None if plan != "dp" else None,
            "split": sum(any(s != flow.sbp.broadcast for s in p.sbp) for p in model.parameters()),
        }
    return results, autoddl_plan
