"""Rank functions over the zoo models of tests/zoo_models.py: AutoDDL's plan against data
parallel, loss for loss."""

import time
from typing import Dict, List, Sequence

import zoo_models

import oneflow_autoddl
from oneflow_autoddl.sbp import B, parse_nd


def _train(name: str, mesh: str, plan: str, steps: int, batch: int):
    graph, inputs = zoo_models.build(name, mesh, plan=plan, batch=batch)
    started = time.perf_counter()
    losses = [float(graph(*inputs).numpy())]
    first = time.perf_counter() - started
    losses += [float(graph(*inputs).numpy()) for _ in range(steps - 1)]
    return graph, losses, first


def losses(models: Sequence[str], mesh: str, steps: int = 3, batch: int = 8) -> Dict[str, dict]:
    """Per model: the losses of `steps` steps under data parallel and under AutoDDL's plan
    (cpu-local), the plan's parameters that are not replicated, the op types it left to
    OneFlow for want of a rule, and whether the hook fell back to OneFlow's inference."""
    out = {}
    for name in models:
        _, dp, dp_first = _train(name, mesh, "dp", steps, batch)
        graph, planned, first = _train(name, mesh, "autoddl", steps, batch)
        plan = oneflow_autoddl.plan_of(graph)
        sharded: List[str] = (
            [v for v, nd in plan.variables.items() if any(s != B for s in parse_nd(nd))]
            if plan
            else []
        )
        out[name] = {
            "data_parallel": dp,
            "autoddl": planned,
            "fallback": getattr(graph, "_autoddl_fallback", None),
            "no_rule": sorted(
                {u["type"] for u in plan.unplanned_ops.values() if "no SBP rule" in u["reason"]}
            )
            if plan
            else [],
            "sharded_parameters": len(sharded),
            "parameters": len(plan.variables) if plan else 0,
            "first_step_s": {"data_parallel": dp_first, "autoddl": first},
        }
    return out
