"""On ranks: plans that box parameters again per phase (oneflow_autoddl.regather), given to the
examples' GPT as saved plans and applied by the hook, beside data parallel: a ZeRO-style plan
gathering each parameter for forward and again for backward, and the same with every block
recomputed (the hook retraces the graph with checkpointing and copies again there). The losses,
the compiled Job against the plan, the copies inserted, and the bytes each rank sends per step
against the plan's prediction."""

import os
from typing import List

import oneflow_autoddl
from benchmarks.rank_bench import wchar
from examples import models
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.writeback import compiled_mismatches
from oneflow_autoddl.assemble import assemble
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.plan import Plan
from oneflow_autoddl.planner import plan, users_plan
from oneflow_autoddl.recompute import recompute_graph
from oneflow_autoddl.regather import is_phase_copy, regather_graph
from oneflow_autoddl.search import baselines
from oneflow_autoddl.search.problem import build_problem


def _train(graph, inputs, steps):
    return [float(graph(*inputs).numpy()) for _ in range(steps)]


def _apply(mesh, saved, steps):
    """Losses, bytes sent per step (after the first) and what compiled, of the saved plan."""
    path = f"/tmp/autoddl-regather-plan-{os.getpid()}.json"
    saved.save(path)
    graph, inputs = models.build("gpt", mesh, plan="autoddl", load_plan=path)
    losses = _train(graph, inputs, 1)
    before = wchar()
    losses += _train(graph, inputs, steps - 1)
    sent = (wchar() - before) / (steps - 1)
    os.remove(path)
    applied = oneflow_autoddl.plan_of(graph)
    compiled = [op.name for op in graph._compiled_graph_proto.net.op]
    waiting = [op.name for op in graph._compiled_graph_proto.net.op if op.ctrl_in_op_name]
    return {
        "losses": losses,
        "sent": sent,
        "fallback": getattr(graph, "_autoddl_fallback", None),
        "predicted": applied.predicted.bytes_per_device if applied else None,
        "mismatches": compiled_mismatches(graph._compiled_graph_proto, applied) if applied else [],
        "copies": _copies(compiled),
        "waiting": _copies(waiting),  # the copies that wait for the op before them
        "planned_copies": _copies(applied.ops) if applied else [],
        "recompute": list(applied.recompute) if applied else None,
    }


def run(mesh: str = "2x2", steps: int = 4, cluster: str = "cpu-local", lean: bool = True):
    dp_graph, inputs = models.build("gpt", mesh, plan="dp")
    out: dict = {"dp": _train(dp_graph, inputs, steps)}
    probe, inputs = models.build("gpt", mesh, plan="dp")
    ir = read_job(probe.build_graph(*inputs)[0])
    out["zero_once"] = plan(ir, cluster, strategy="zero").predicted.bytes_per_device
    zero = plan(regather_graph(ir), cluster, strategy="zero")
    out["zero"] = _apply(mesh, zero, steps)
    out["through"] = _apply(mesh, _gathered_through_copies(regather_graph(ir), cluster), steps)
    if not lean:
        return out
    # blocks recomputed and ZeRO-style with copies, as the planner gives it to the user's graph
    # (at the examples' sizes recomputing alone fits wherever a plan does, so the planner's
    # ladder stops before the copies: tests/unit/test_regather.py plans one at scale)
    blocks = ["model.h.0", "model.h.1"]
    lean = plan(regather_graph(recompute_graph(ir, blocks)), cluster, strategy="zero")
    users_plan(lean, blocks, ir)
    out["lean"] = _apply(mesh, lean, steps)
    out["lean"]["made"] = {"recompute": lean.recompute, "copies": _copies(lean.ops)}
    return out


def _gathered_through_copies(graph, cluster: str) -> Plan:
    """ZeRO-style with each copy taking the parameter in the SBP its readers take: the
    parameter (split) is boxed once for both copies, through the write-back's local copy of a
    split variable, as without copies."""
    problem = build_problem(graph, load_cluster(cluster))
    x = baselines.zero(problem)
    for v, members in enumerate(problem.var_units):
        unit = problem.units[members[0]]
        if len(unit.ops) != 1 or not is_phase_copy(unit.ops[0]):
            continue
        out = graph.op(unit.ops[0]).outputs["out_0"]
        reader, ibn = graph.tensor(out).consumers[0]
        wanted = problem.signature(reader, x)[ibn]
        x[v] = next((k for k, (sig,) in enumerate(unit.candidates) if sig["in_0"] == wanted), x[v])
    return assemble(problem, x, {}, 0.0)


def _copies(names) -> List[str]:
    return sorted(n for n in names if is_phase_copy(n))
