"""Rank functions over the zoo models of examples/zoo.py: every op type has a rule, and AutoDDL's
plan trains to data parallel's losses."""

import time
from typing import Dict, List, Optional, Sequence

import oneflow_autoddl
from examples import zoo
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.ir import Graph, Op
from oneflow_autoddl.remesh import remesh
from oneflow_autoddl.rules import has_rule
from oneflow_autoddl.sbp import B, parse_nd
from oneflow_autoddl.search.units import NO_RULE, Unit, build_units, fill_candidates


def _form(graph: Graph, op: Op):
    blobs = tuple(
        (bn, graph.tensor(lbn).shape, graph.tensor(lbn).dtype)
        for bn, lbn in {**op.inputs, **op.outputs}.items()
    )
    return op.type, op.role, repr(sorted(op.attrs.items())), blobs


def _distinct(graph: Graph, units: List[Unit]) -> List[Unit]:
    """One unit of each form (all a rule reads of its ops: types, roles, attributes, shapes,
    dtypes): a repeated block's units have the same candidates and are filled once."""
    forms: Dict[tuple, Unit] = {}
    for unit in units:
        forms.setdefault(tuple(_form(graph, graph.op(n)) for n in unit.ops), unit)
    return list(forms.values())


def coverage(
    meshes: Sequence[Sequence[int]], models: Optional[Sequence[str]] = None
) -> Dict[str, dict]:
    """Per model of `models` (default: every model examples/zoo.py builds), traced on this one
    device (build_graph only; SGD with momentum and AdamW taking turns across models): its op
    types with no rule, whether it holds dropout, and per mesh the units left to OneFlow for want
    of a rule and the searched units with no candidate."""
    out = {}
    for index, name in enumerate(models or list(zoo.ZOO)):
        optimizer = zoo.OPTIMIZERS[index % len(zoo.OPTIMIZERS)]
        graph = read_job(zoo.trace(name, optimizer))
        meshes_out = {}
        for mesh in meshes:
            planned = remesh(graph, mesh)
            units = _distinct(planned, build_units(planned))
            for unit in units:
                fill_candidates(planned, unit, planned.main_placement(), {})
            meshes_out["x".join(map(str, mesh))] = {
                "no_rule": [u.fixed for u in units if u.fixed and NO_RULE in u.fixed],
                "no_candidates": [u.ops[0] for u in units if u.fixed is None and not u.candidates],
                "searched": sum(u.fixed is None for u in units),
            }
        out[name] = {
            "optimizer": optimizer,
            "unruled_types": sorted(
                {op.type for op in graph.ops.values() if not has_rule(op.type)}
            ),
            "dropout": "dropout" in graph.op_types(),
            "meshes": meshes_out,
        }
    return out


def _train(name: str, mesh: str, plan: str, steps: int, batch: int):
    graph, inputs = zoo.build(name, mesh, plan=plan, batch=batch)
    started = time.perf_counter()
    losses = [float(graph(*inputs).numpy())]
    first = time.perf_counter() - started
    losses += [float(graph(*inputs).numpy()) for _ in range(steps - 1)]
    return graph, losses, first


def losses(models: Sequence[str], mesh: str, steps: int = 3, batch: int = 8) -> Dict[str, dict]:
    """Per model: the losses of `steps` steps under data parallel and under AutoDDL's plan
    (cpu-local), the plan's parameters that are not replicated, its predicted bytes per device
    beside data parallel's, the op types it left to OneFlow for want of a rule, and whether the
    hook fell back to OneFlow's inference."""
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
                {u["type"] for u in plan.unplanned_ops.values() if NO_RULE in u["reason"]}
            )
            if plan
            else [],
            "sharded_parameters": len(sharded),
            "parameters": len(plan.variables) if plan else 0,
            "predicted_bytes": plan.predicted.bytes_per_device if plan else None,
            "data_parallel_predicted_bytes": (
                plan.baselines["data_parallel"].bytes_per_device if plan else None
            ),
            "first_step_s": {"data_parallel": dp_first, "autoddl": first},
        }
    return out
