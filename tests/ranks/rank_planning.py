"""On ranks: the planner's search split over the job's ranks, and the plan cache on compile."""

import time
from typing import Optional

import oneflow_autoddl
from examples import models
from oneflow_autoddl.adapter.ranks import RankExecutor
from oneflow_autoddl.planner import plan
from tests.graphs import MESHES, MODELS


def plan_together(case: str, cache_directory: Optional[str] = None):
    """Plan `case` ("model@mesh" of tests.graphs) with every rank of this job searching; then,
    where `cache_directory` is given, `cache_hits` in the same launch."""
    model, mesh = case.split("@")
    start = time.perf_counter()
    p = plan(MODELS[model](MESHES[mesh]), "cpu-local", executor=RankExecutor())
    out = {"digest": p.digest(), "seconds": time.perf_counter() - start}
    if cache_directory is not None:
        out["cache"] = cache_hits(cache_directory)
    return out


def cache_hits(directory: str):
    """Compile the GPT four times with the cache in `directory`: the same graph twice, then
    another batch (a changed shape), then another cluster."""
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
                "digest": p.digest(),
                "seconds": time.perf_counter() - start,
                "loss": loss,
            }
        )
    return out


def native_pass_pairs(pairs: int):
    """rank_bench.native_pass_seconds on the examples' VGG with rank 1's clock running a million
    times faster than rank 0's: rank 1 alone would think the budget spent after one pair. The
    traces each rank made (both must make rank 0's number, 2 per pair, or wait forever)."""
    import oneflow as flow

    from benchmarks import rank_bench

    made = []

    def build(*args, **kwargs):
        made.append(kwargs["plan"])
        return models.build(*args, **kwargs)

    if flow.env.get_rank() == 1:
        clock = iter(range(0, 10**12, 10**6))
        rank_bench.time = _Clock(lambda: float(next(clock)))
    rank_bench.native_pass_seconds(build, "vgg", "2", {}, pairs=pairs, budget=1e5)
    return {"traces": len(made)}


class _Clock:
    """A stand-in for the time module: perf_counter from `read`."""

    def __init__(self, read):
        self.perf_counter = read
