"""On ranks: the planner's search split over the job's ranks, and the plan cache on compile."""

import hashlib
import time

import oneflow as flow

import oneflow_autoddl
from examples import models
from oneflow_autoddl.adapter.ranks import RankExecutor
from oneflow_autoddl.models import build_gpt, build_vgg
from oneflow_autoddl.planner import plan
from oneflow_autoddl.search.executor import SERIAL


def _digest(p) -> str:
    items = sorted((n, sorted(e.signature.items())) for n, e in p.ops.items())
    return hashlib.sha1(repr(items).encode()).hexdigest()


def plan_together(model: str, mesh):
    """Plan the model's graph on `mesh` with every rank of this job searching."""
    if model == "gpt":
        graph = build_gpt(2, 128, 4, 32, 256, 8, mesh=tuple(mesh), device="cpu")
    else:
        graph = build_vgg(16, 0.125, 32, 10, 16, mesh=tuple(mesh), device="cpu")
    executor = RankExecutor() if flow.env.get_world_size() > 1 else SERIAL
    start = time.perf_counter()
    p = plan(graph, "cpu-local", executor=executor)
    return {
        "digest": _digest(p),
        "seconds": time.perf_counter() - start,
        "step": p.predicted.step_time_s,
    }


def cache_hits(directory: str):
    """Compile the GPT three times with the cache in `directory`: the same graph, then another
    batch (a changed shape), then another cluster."""
    out = []
    for batch, cluster in ((8, None), (8, None), (16, None), (8, "dgx-a100")):
        graph, inputs = models.build(
            "gpt", "2", plan="autoddl", batch=batch, cluster=cluster, plan_cache=True
        )
        graph.config.set_auto_parallel_plan_cache(directory)
        start = time.perf_counter()
        loss = float(graph(*inputs).numpy())
        p = oneflow_autoddl.plan_of(graph)
        out.append(
            {
                "cached": any("plan cache" in n for n in p.notes),
                "digest": _digest(p),
                "seconds": time.perf_counter() - start,
                "loss": loss,
            }
        )
    return out
