"""On ranks: train the examples' models under several plans and measure what each moves and
takes."""

import atexit
import gc
import hashlib
import importlib
import os
import re
import statistics
import tempfile
import time
from typing import Any, Optional, Sequence, Tuple

import oneflow as flow

import oneflow_autoddl
from benchmarks.bench import round_orders
from benchmarks.netcluster import link_counters, tcp_payload
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.ranks import broadcast_from_rank0
from oneflow_autoddl.adapter.writeback import variables_boxed_across_ranks
from oneflow_autoddl.errors import ClusterError
from oneflow_autoddl.ir import Graph
from oneflow_autoddl.planner import describe
from oneflow_autoddl.search.units import NO_RULE


def wchar() -> int:
    """Bytes this process has written so far: on CPU ranks, what OneFlow's CommNet sends."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def program_digest(graph: Graph) -> str:
    """The SBP every planned op of a compiled Job runs with, hashed without the interface and
    train-step ops (OneFlow numbers their names per graph): equal for two plans that are one
    program, whose measured step times differ by this machine's noise alone."""
    items = sorted(
        (op.name, repr(op.native)) for op in graph.ops.values() if op.role not in ("io", "system")
    )
    return hashlib.sha1(repr(items).encode()).hexdigest()[:12]


def _native_graph(build, model, mesh, options, cluster):
    """OneFlow's native plan, compiled as is, or (when OneFlow 0.9.0 would abort on it, boxing a
    split variable across ranks) applied through AutoDDL's write-back, which reads such
    variables through copies. `build`: a builder's build function, called with `options`.
    Returns (graph, inputs, note, the seconds the native pass took in a trace as OneFlow logs
    them: traced_with_pass_log)."""
    probe, inputs = build(model, mesh, plan="native", **options)
    (job, _), logged = traced_with_pass_log(probe, inputs)
    hazards = variables_boxed_across_ranks(job)
    if not hazards:
        graph, inputs = build(model, mesh, plan="native", **options)
        return graph, inputs, "as OneFlow compiled it", logged
    fd, path = tempfile.mkstemp(prefix="autoddl-native-plan-", suffix=".json")
    os.close(fd)
    atexit.register(
        os.remove, path
    )  # read when the graph first runs, so kept until the process ends
    describe(read_job(job), cluster).save(path)
    graph, inputs = build(model, mesh, plan="autoddl", cluster=cluster, load_plan=path, **options)
    return (
        graph,
        inputs,
        (
            f"OneFlow's plan boxes {len(hazards)} split variables across ranks, which aborts "
            f"0.9.0 on CPU (register.cpp:75); run through AutoDDL's write-back instead"
        ),
        logged,
    )


PASS_PAIRS = 4  # traces with the native pass and without it, timed in turns, at most
PASS_BUDGET_S = 30.0  # seconds of such traces after which no further pair is started
# planning_time's pairs at most: the pass on a graph of a few hundred ops adds a tenth of a second
# to traces of half a second, and four pairs' median of it moved by half from one run to the next
TIMING_PASS_PAIRS = 16
PLAN_REPEATS = 4  # planning_time's plans each way


def native_pass_seconds(
    build, model, mesh, options, pairs: int = PASS_PAIRS, budget: float = PASS_BUDGET_S
):
    """(the seconds OneFlow's native pass adds to a trace, the trace's seconds without it): the
    medians over up to `pairs` traces of each, taken in turns, the pass's as the median of each
    pair's difference; pairs stop once they have taken `budget` seconds on rank 0 (one pair of a
    model whose pass takes a minute is as telling as four of one whose pass takes a tenth of a
    second). Every rank stops where rank 0 does: a rank that traced once more than another
    would wait for it forever in the next collective. The process must have traced a graph
    before: the first trace pays for warming OneFlow up, more than the pass on small models.
    `build` and `options` as _native_graph's."""
    seconds: dict = {"dp": [], "native": []}
    spent = 0.0
    for i in range(pairs):
        for plan in ("native", "dp") if i % 2 else ("dp", "native"):
            graph, inputs = build(model, mesh, plan=plan, **options)
            start = time.perf_counter()
            graph.build_graph(*inputs)
            seconds[plan].append(time.perf_counter() - start)
            del graph, inputs
            gc.collect()  # a traced model lives in cycles: without this, every one stays
        spent += seconds["dp"][-1] + seconds["native"][-1]
        if broadcast_from_rank0(b"stop" if spent > budget else b"go") == b"stop":
            break
    added = [n - d for n, d in zip(seconds["native"], seconds["dp"])]
    return statistics.median(added), statistics.median(seconds["dp"])


# OneFlow 0.9.0 logs each compile pass's time at glog verbosity 1 (cost_util.h), e.g.
# [count log]{"loc":"[GraphCompile]TrainGraph_0 AutoParallelPass",...,"time_cost":"41 milliseconds"}
PASS_LOG = re.compile(r'AutoParallelPass",.*"time_cost":"([\d.]+) (milliseconds|seconds)"')


def traced_with_pass_log(graph, inputs) -> Tuple[Any, Optional[float]]:
    """(`graph.build_graph(*inputs)`, the seconds OneFlow's native pass took in it as OneFlow
    logs them: PASS_LOG; None where the ranks run without benchmarks.bench.PASS_LOG_ENV or the
    pass did not run): the pass's own time, where native_pass_seconds' difference of two traces
    also holds their noise (negative on AlexNet and VGG11-BN on 2 ranks). The rank's stderr goes
    to a file for the trace."""
    with tempfile.TemporaryFile("w+b") as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            traced = graph.build_graph(*inputs)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        found = PASS_LOG.findall(log.read().decode(errors="replace"))
    if not found:
        return traced, None
    value, unit = found[-1]
    return traced, float(value) / (1000.0 if unit == "milliseconds" else 1.0)


def pass_and_planning(
    model: str,
    mesh: str,
    traces: int = 2,
    batch: Optional[int] = 8,
    sizes=None,
    cluster: str = "cpu-local",
    builder: str = "examples.models",
):
    """On the ranks of `mesh`, for one model: OneFlow's native pass as OneFlow logs it
    (traced_with_pass_log) over `traces` traces, and rank 0's AutoDDL search of the same model's
    data-parallel Job as many times (Plan.search_time_s: problem construction and search), taken
    in turns; the medians, and on rank 0 its every figure. The launch must set
    benchmarks.bench.PASS_LOG_ENV."""
    from oneflow_autoddl.planner import plan

    build = importlib.import_module(builder).build
    options = dict(batch=batch, sizes=sizes)
    graph, inputs = build(model, mesh, plan="dp", **options)
    ir = read_job(graph.build_graph(*inputs)[0])
    del graph, inputs
    passes, searches = [], []
    for _ in range(traces):
        graph, inputs = build(model, mesh, plan="native", **options)
        passes.append(traced_with_pass_log(graph, inputs)[1])
        del graph, inputs
        gc.collect()
        flow.comm.barrier()
        if flow.env.get_rank() == 0:
            searches.append(plan(ir, cluster).search_time_s)
        flow.comm.barrier()
    timed = [s for s in passes if s is not None]
    return {
        "model": model,
        "mesh": mesh,
        "ops": len(ir.ops),
        "pass_s": statistics.median(timed) if timed else None,
        "passes_s": passes,
        "search_s": statistics.median(searches) if searches else None,
        "searches_s": searches,
    }


def _no_rule(plan) -> dict:
    """Op type -> ops of that type the plan left to OneFlow for want of a rule."""
    counts: dict = {}
    for entry in plan.unplanned_ops.values():
        if NO_RULE in entry["reason"]:
            counts[entry["type"]] = counts.get(entry["type"], 0) + 1
    return counts


def reordered(inputs):
    """The inputs with each rank's shard of the batch in reverse order: the same step in exact
    arithmetic, only the order of its sums changes."""
    return [
        flow.flip(x.to_local(), [0]).to_global(placement=x.placement, sbp=x.sbp) for x in inputs
    ]


def reordered_losses(build, model, mesh, options, steps: int):
    """(graph, losses of `steps` steps of data parallel on the batch reordered within each shard
    (`reordered`)): how far float32 summation order alone moves this model's losses. The caller
    keeps the graph until the run ends, as it keeps the plans' graphs: a graph closed on one rank
    while its peers still run waits for them forever (docs/oneflow-0.9.md, Closing graphs)."""
    graph, inputs = build(model, mesh, plan="dp", **options)
    inputs = reordered(inputs)
    losses = [float(graph(*inputs).numpy()) for _ in range(steps)]
    return graph, losses


def measure(
    model: str,
    mesh: str,
    plans,
    steps: int = 2,
    warmup: int = 2,
    batch: Optional[int] = 8,
    sizes=None,
    cluster: str = "cpu-local",
    optimizer: str = "default",
    rounds: int = 1,
    across_nodes: bool = False,
    costed_on: Sequence[str] = (),
    builder: str = "examples.models",
    pass_time: bool = False,
    reorder_steps: int = 0,
):
    """For each plan: median step time (of all steps, and of its block in each round), bytes sent
    per step by this rank, and what was predicted; with `across_nodes` (ranks in emulated nodes,
    benchmarks.netcluster), also the TCP payload the rank's node sent to other nodes a step,
    divided among the node's ranks; `costed_on` other clusters, the predicted step on each.
    `builder`: the module whose build(model, mesh, plan, batch=, optimizer=, sizes=, **flags)
    gives the graphs (examples.models, examples.zoo; batch None: the zoo model's own). Every
    row holds the plan's first call (trace, pass, compile and one step) and the op types it
    left with no rule; with `pass_time`, the native row also the time OneFlow's native pass
    took in a trace, as OneFlow logs it (traced_with_pass_log: the launch must set
    benchmarks.bench.PASS_LOG_ENV); with `reorder_steps`, the data parallel
    row also the losses of that many steps on the batch reordered within each shard
    (`reordered_losses`).

    The plans' graphs are all built first. Then each round runs every plan for one block of
    `steps` timed steps, after one untimed step that brings the plan's state back into the
    caches, in round_orders' order. Round k of one plan and round k of another ran seconds
    apart, so their ratio is free of the machine's slow drifts in load (compare_plans pairs
    them). Bytes are counted in the first round (they are the same in every step)."""
    build = importlib.import_module(builder).build
    options = dict(batch=batch, optimizer=optimizer, sizes=sizes)
    built, first_call, native_pass = {}, {}, None
    for plan in plans:
        note = ""
        if plan == "native":
            graph, inputs, note, logged = _native_graph(build, model, mesh, options, cluster)
            if pass_time:
                native_pass = logged
        else:
            graph, inputs = build(model, mesh, plan=plan, cluster=cluster, **options)
        start = time.perf_counter()
        losses = [float(graph(*inputs).numpy())]
        first_call[plan] = time.perf_counter() - start
        losses += [float(graph(*inputs).numpy()) for _ in range(warmup - 1)]
        built[plan] = (graph, inputs, note, losses)
    reference = (
        reordered_losses(build, model, mesh, options, reorder_steps) if reorder_steps else None
    )
    times, blocks, sent, across = {p: [] for p in plans}, {p: [] for p in plans}, {}, {}
    per_node = flow.env.get_world_size() // flow.env.get_node_size()
    for order in round_orders(plans, rounds):
        for plan in order:
            graph, inputs, _, losses = built[plan]
            losses.append(float(graph(*inputs).numpy()))
            before, link, block = wchar(), link_counters() if across_nodes else None, []
            for _ in range(steps):
                start = time.perf_counter()
                losses.append(float(graph(*inputs).numpy()))
                block.append(time.perf_counter() - start)
            sent.setdefault(plan, (wchar() - before) / steps)
            if link is not None:
                across.setdefault(plan, tcp_payload(link, link_counters()) / steps / per_node)
            times[plan] += block
            blocks[plan].append(statistics.median(block))
    rows = []
    for plan in plans:
        graph, _, note, losses = built[plan]
        compiled = read_job(graph._full_graph_proto)
        predicted = oneflow_autoddl.plan_of(graph) or describe(compiled, cluster)
        rows.append(
            {
                "model": model,
                "mesh": mesh,
                "plan": plan,
                "rank": flow.env.get_rank(),
                "program": program_digest(compiled),
                "measured_bytes": sent[plan],
                "predicted_bytes": predicted.predicted.bytes_per_device,
                "measured_step_s": statistics.median(times[plan]),
                "block_step_s": blocks[plan],
                "predicted_step_s": predicted.predicted.step_time_s,
                "measured_inter_node_bytes": across.get(plan),
                "predicted_inter_node_bytes": predicted.predicted.inter_node_bytes_per_device,
                "predicted_step_s_on": {c: _step_on(compiled, c) for c in costed_on},
                "losses": losses,
                "search_time_s": getattr(predicted, "search_time_s", None),
                "first_call_s": first_call[plan],
                "native_pass_s": native_pass if plan == "native" else None,
                "no_rule": _no_rule(predicted),
                "note": note,
                "reordered_losses": reference[1] if reference and plan == "dp" else None,
            }
        )
    return rows


def _step_on(compiled: Graph, cluster: str):
    """The compiled program's predicted step on `cluster`; None where it has too few devices."""
    try:
        return describe(compiled, cluster).predicted.step_time_s
    except ClusterError:
        return None


def planning_time(
    model: str,
    mesh: str,
    sizes=None,
    batch: Optional[int] = 8,
    cluster: str = "cpu-local",
    repeats: int = PLAN_REPEATS,
    builder: str = "examples.models",
):
    """On the ranks of `mesh`, for one model's traced Job: OneFlow's native pass (the time it adds
    to a trace, native_pass_seconds over up to TIMING_PASS_PAIRS pairs within its time budget),
    AutoDDL's plan with rank 0 planning alone (the others waiting at a barrier) and with every
    rank planning together, each the median of `repeats` plans taken in turns; whether the two
    plans are the same. `builder` as measure's."""
    from oneflow_autoddl.adapter.ranks import RankExecutor
    from oneflow_autoddl.planner import plan
    from oneflow_autoddl.search.executor import SERIAL

    build = importlib.import_module(builder).build
    options = dict(batch=batch, sizes=sizes)
    graph, inputs = build(model, mesh, plan="dp", **options)
    ir = read_job(graph.build_graph(*inputs)[0])  # also warms OneFlow up for the pass's traces
    native_s, build_s = native_pass_seconds(build, model, mesh, options, TIMING_PASS_PAIRS)
    alone_s, together_s = [], []
    for _ in range(repeats):
        flow.comm.barrier()
        start = time.perf_counter()
        alone = plan(ir, cluster, executor=SERIAL) if flow.env.get_rank() == 0 else None
        flow.comm.barrier()
        alone_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        together = plan(ir, cluster, executor=RankExecutor())
        together_s.append(time.perf_counter() - start)
    return {
        "model": model,
        "mesh": mesh,
        "ops": len(ir.ops),
        "native_s": native_s,
        "build_s": build_s,
        "alone_s": statistics.median(alone_s),
        "together_s": statistics.median(together_s),
        "same_plan": alone is None or alone.digest() == together.digest(),
        "predicted_step_s": together.predicted.step_time_s,
        "predicted_bytes": together.predicted.bytes_per_device,
    }
