"""On ranks: compile the examples' models under several plans and read what OneFlow allocates
on each rank (adapter.plan_memory) beside what the plan predicts (cost.memory)."""

import oneflow as flow

import oneflow_autoddl
from examples import models as rank_models
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.plan_memory import dump_plans, plan_path, read_memory, step_memory
from oneflow_autoddl.planner import describe


def predicted(graph, cluster: str):
    """The plan the graph compiled with (OneFlow's own signatures for data parallel), costed."""
    plan = oneflow_autoddl.plan_of(graph)
    if plan is None:
        plan = describe(read_job(graph._full_graph_proto), cluster)
    return plan.predicted


def memory_row(graph, model: str, mesh: str, plan: str, cluster: str = "cpu-local") -> dict:
    """On rank 0, for a graph compiled after dump_plans(): the predicted peak and what it is made
    of, and per rank the bytes of OneFlow's memory blocks by category, with the error."""
    p = predicted(graph, cluster)
    ranks = read_memory(plan_path(graph.name))
    measured = max(step_memory(r) for r in ranks.values())
    return {
        "model": model,
        "mesh": mesh,
        "plan": plan,
        "predicted_bytes": p.peak_memory_per_device,
        "predicted_by_kind": p.peak_memory_by_kind,
        "measured_bytes": measured,
        "measured_by_rank": {str(k): v for k, v in sorted(ranks.items())},
        "error": p.peak_memory_per_device / measured - 1,
    }


def measure(mesh, models, plans, batch=8, sizes=None, cluster="cpu-local"):
    """memory_row per model and plan, on rank 0 (compile only: the blocks are allocated then)."""
    dump_plans()
    rows = []
    for model, name in [(m, p) for m in models for p in plans]:
        graph, inputs = rank_models.build(model, mesh, plan=name, batch=batch, sizes=sizes)
        graph._compile(*inputs)
        if flow.env.get_rank() == 0:
            rows.append(memory_row(graph, model, mesh, name, cluster))
    return rows
