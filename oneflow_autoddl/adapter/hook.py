"""nn.Graph integration: `graph.config.enable_auto_parallel(True)` runs AutoDDL at first compile.

Installed on `import oneflow_autoddl`. For a graph with the flag on (and the planner left
at "autoddl"), the first compile
  1. traces the graph with the flag switched off for the trace, so OneFlow's native pass
     and its side effects on op-add-time inference stay out (notes 1.1);
  2. reads the Job, plans it (or takes the saved plan given); where the plan recomputes
     modules, traces again with OneFlow's activation checkpointing on them and carries the
     plan over to that Job (adapter.recompute); writes the plan back;
  3. compiles; if OneFlow rejects the plan, compiles again with OneFlow's own inference;
  4. reads the compiled Job and the parameters back and checks them against the plan.
Every way out of the plan is a warning that says which op and why.
"""

import json
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Set, Union

import oneflow as flow
from oneflow.nn.graph.graph_block import GraphTensor
from oneflow.nn.graph.graph_config import GraphConfig

from ..cache import PlanCache, plan_key
from ..cost.cluster import Cluster, check_launch, load_cluster
from ..cost.model import CostModel
from ..errors import ConfigError
from ..gc_pause import gc_paused
from ..ir import Graph
from ..plan import Plan, PlanMismatch
from ..planner import STRATEGIES, describe
from ..planner import plan as make_plan
from ..regather import as_planned
from ..report import summary
from ..search.executor import SERIAL, Executor
from ..search.options import SearchOptions
from .ranks import RankExecutor, all_gather_bytes, broadcast_from_rank0, split_pays

# The other adapter modules are imported where used: `import oneflow` may come from inside
# one of them (adapter.job reads OneFlow's protobufs), and installing this hook then must
# not import that half-initialised module by name.

log = logging.getLogger("oneflow_autoddl")

PLANNERS = STRATEGIES + ("native",)
_ORIGINAL_COMPILE = flow.nn.Graph._compile
# Each live graph compiled with a plan, with the ids of the parameters it re-sharded: other
# graphs must keep their SBP. Held weakly: a graph's ids are its tensors' only while it lives
# (it holds them), and a stale id taken by a new tensor would hold that tensor on one rank only.
_PLACED: "weakref.WeakKeyDictionary[Any, Set[int]]" = weakref.WeakKeyDictionary()


@dataclass
class AutoDDLConfig:
    planner: str = "autoddl"
    cluster: Optional[str] = None
    ranks_per_node: Optional[int] = None
    memory_per_device: Optional[float] = None
    plan: Optional[Union[str, Plan]] = None
    plan_cache: Union[bool, str] = True


def _settings(config: GraphConfig) -> AutoDDLConfig:
    if not hasattr(config, "_autoddl"):
        config._autoddl = AutoDDLConfig()
    return config._autoddl


def set_auto_parallel_planner(self, planner: str = "autoddl"):
    """`autoddl` (the search; the default once this package is imported), `native` (OneFlow's
    own pass), or an expert baseline applied as is: `data_parallel`, `megatron`, `zero`."""
    if planner not in PLANNERS:
        raise ConfigError(f"auto-parallel planner must be one of {PLANNERS}, not {planner!r}")
    _settings(self).planner = planner


def set_auto_parallel_cluster(self, cluster: str):
    """Cluster preset name (dgx-a100, dgx-h100, piz-daint, cpu-local) or a cluster JSON file;
    refused here, with the reason, if it is malformed or cannot describe this launch's nodes."""
    launch_ranks_per_node(load_cluster(cluster), _settings(self).ranks_per_node)
    _settings(self).cluster = cluster


def set_auto_parallel_ranks_per_node(self, ranks: int):
    """How many consecutive ranks share a node (default: the launch's, as OneFlow's launcher
    placed them; on one node, this groups its ranks into nodes to plan for)."""
    if ranks < 1:
        raise ConfigError(f"ranks per node must be >= 1, not {ranks}")
    if _settings(self).cluster:
        launch_ranks_per_node(load_cluster(_settings(self).cluster), ranks)
    _settings(self).ranks_per_node = ranks


def set_auto_parallel_memory_per_device(self, nbytes: float):
    """Memory one device may use for parameters, gradients, optimizer state and activations."""
    if nbytes <= 0:
        raise ConfigError(f"memory per device must be > 0 bytes, not {nbytes}")
    _settings(self).memory_per_device = float(nbytes)


def set_auto_parallel_plan(self, plan: Union[str, Plan]):
    """Use a saved plan (a Plan or its JSON file) instead of searching."""
    _settings(self).plan = plan


def set_auto_parallel_plan_cache(self, cache: Union[bool, str] = True):
    """Reuse the plan of an identical earlier compile (True: from ONEFLOW_AUTODDL_PLAN_CACHE or
    ~/.cache/oneflow_autoddl/plans; a path: from that directory; False: always search)."""
    if not isinstance(cache, (bool, str)):
        raise ConfigError(f"the plan cache is True, False or a directory, not {cache!r}")
    _settings(self).plan_cache = cache


def _default_cluster(device: str) -> str:
    return "cpu-local" if device == "cpu" else "dgx-a100"


def _parameters(graph) -> Dict[str, "flow.Tensor"]:
    """Variable op name -> the parameter or buffer tensor behind it, named as nn.Graph names
    them."""
    out = {}
    for block in graph._state():
        gt = block.to(GraphTensor)
        out.setdefault(gt.name_prefix + gt.name, block.to(flow.Tensor))
    return out


def hold_user_sbp(graph: Graph) -> Dict[str, str]:
    """Every parameter keeps its SBP (OneFlow's enable_auto_parallel_ignore_user_sbp_config
    off)."""
    reason = "user SBP kept (enable_auto_parallel_ignore_user_sbp_config is off)"
    return {op.name: reason for op in graph.by_role("variable")}


def _hold(graph, ir, settings: AutoDDLConfig) -> Dict[str, str]:
    hold = (
        {} if graph.config.proto.enable_auto_parallel_ignore_user_sbp_config else hold_user_sbp(ir)
    )
    for name, tensor in _parameters(graph).items():
        owner = _placed_by(id(tensor), graph)
        if owner is not None and name in ir.ops:
            hold[name] = f"shared with graph {owner}, which already placed it"
    return hold


def _placed_by(tensor_id: int, graph) -> Optional[str]:
    """The name of the first other live graph that placed the tensor with this id, if any."""
    return next((g.name for g, ids in _PLACED.items() if g is not graph and tensor_id in ids), None)


def _saved(graph, ir, settings: AutoDDLConfig) -> Optional[Plan]:
    """The saved plan given to the graph, if it fits the graph (else a warning, and None)."""
    if settings.plan is None:
        return None
    saved = settings.plan if isinstance(settings.plan, Plan) else Plan.load(settings.plan)
    try:
        planned = as_planned(ir, saved.ops)
        saved.check_matches(planned, ir.main_placement().hierarchy)
        from . import writeback

        writeback.check_signatures(planned, saved)
        return saved
    except PlanMismatch as e:
        log.warning(
            "AutoDDL: the saved plan does not match graph %s (%s); searching a new plan",
            graph.name,
            e,
        )
        return None


def _cache(settings: AutoDDLConfig) -> Optional[PlanCache]:
    if settings.plan_cache is False or settings.planner != "autoddl":
        return None
    return PlanCache(settings.plan_cache if isinstance(settings.plan_cache, str) else None)


def _obtain_plan(graph, ir, settings: AutoDDLConfig) -> Plan:
    """The saved plan, the cached plan (rank 0 decides, every rank takes its word), or a plan all
    ranks search together (rank 0 alone where ranks share cores: adapter.ranks.split_pays);
    rank 0's is the plan every rank writes, and it is cached."""
    cluster = load_cluster(settings.cluster or _default_cluster(ir.main_placement().device))
    hold = _hold(graph, ir, settings)
    per_node = launch_ranks_per_node(cluster, settings.ranks_per_node)
    args = (settings.memory_per_device, hold, per_node, settings.planner)
    cache = _cache(settings)
    several = flow.env.get_world_size() > 1
    key = plan_key(ir, cluster, *args, SearchOptions()) if cache is not None or several else ""
    if several:
        _check_ranks_agree(key)

    def ready() -> Optional[dict]:
        found = _saved(graph, ir, settings)
        if found is None and cache is not None:
            found = cache.get(key)
            if found is not None:
                found.notes.append(f"read from the plan cache ({cache.path(key)}): no search")
        return found.to_dict() if found is not None else None

    known = _from_rank0(ready)
    if known is not None:
        return Plan.from_dict(known)

    def search(executor: Executor) -> Plan:
        return make_plan(
            ir,
            cluster,
            memory_limit=settings.memory_per_device,
            hold=hold,
            ranks_per_node=per_node,
            strategy=settings.planner,
            executor=executor,
        )

    together = search(RankExecutor()) if several and split_pays() else None

    def shared() -> dict:
        planned = together if together is not None else search(SERIAL)
        if cache is not None:
            try:
                cache.put(key, planned)
            except OSError as e:
                log.warning("AutoDDL: could not write the plan cache (%s)", e)
        return planned.to_dict()

    return Plan.from_dict(_from_rank0(shared))


def launch_ranks_per_node(cluster: Cluster, asked: Optional[int] = None) -> int:
    """The ranks per node to plan this launch with on `cluster` (cost.cluster.check_launch: a
    cluster that cannot describe the launch is refused, naming both)."""
    nodes = flow.env.get_node_size()
    return check_launch(cluster, nodes, flow.env.get_world_size() // nodes, asked)


def _check_ranks_agree(key: str) -> None:
    """PlanningFailed on every rank unless every rank is to plan the same Job with the same
    settings (`key`, cache.plan_key): ranks that searched different problems would make
    different numbers of collective calls and wait on each other forever."""
    keys = [k.decode() for k in all_gather_bytes(key.encode())]
    if len(set(keys)) > 1:
        differ = [r for r, k in enumerate(keys) if k != keys[0]]
        raise PlanningFailed(
            f"rank(s) {differ} would plan another Job or with other settings than rank 0 "
            f"(their plan keys differ); give every rank the same graph and AutoDDL settings"
        )


def _from_rank0(fn: Callable[[], Any]) -> Any:
    """fn() on rank 0 only, its JSON-able result (or its error, re-raised) on every rank."""
    if flow.env.get_world_size() == 1:
        return fn()
    payload = None
    if flow.env.get_rank() == 0:
        try:
            payload = json.dumps({"ok": fn()}).encode()
        except Exception as e:  # shipped to the other ranks, raised on all
            payload = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
    message = json.loads(broadcast_from_rank0(payload).decode())
    if "error" in message:
        raise PlanningFailed(message["error"])
    return message["ok"]


class PlanningFailed(RuntimeError):
    """Rank 0 failed where it alone decides; every rank falls back together."""


def _fallback(graph, reason: str) -> None:
    log.warning(
        "AutoDDL: %s; graph %s is compiled with OneFlow's own SBP inference instead",
        reason,
        graph.name,
    )
    graph._autoddl_plan = None
    graph._autoddl_fallback = reason


def _verify(graph, plan: Plan) -> None:
    from .placement import from_flow_sbp
    from .writeback import compiled_mismatches

    problems = compiled_mismatches(graph._compiled_graph_proto, plan)
    params = _parameters(graph)
    for name, want in plan.variables.items():
        tensor = params.get(name)
        if tensor is not None and tensor.is_global:
            have = from_flow_sbp(tensor.sbp)
            if have != plan.variable_sbp(name):
                problems.append(f"parameter {name} has SBP {have} after compile, planned {want}")
    if problems:
        plan.notes.append("compiled job differs from the plan: " + "; ".join(problems[:5]))
        log.warning(
            "AutoDDL: graph %s compiled differently from its plan at %d op(s): %s",
            graph.name,
            len(problems),
            "; ".join(problems[:5]),
        )
    _PLACED[graph] = {id(tensor) for tensor in params.values()}


def _trace(graph, build):
    """build(), a trace of the graph, with OneFlow's native pass and its side effects on
    op-add-time inference kept out (notes 1.1)."""
    proto = graph.config.proto
    proto.enable_auto_parallel = False
    try:
        return build()
    finally:
        proto.enable_auto_parallel = True


def _carried(graph, first, job, plan: Plan, settings: AutoDDLConfig) -> Plan:
    """`plan` (made for the trace `first`) carried over to `job`, the trace with its modules
    recomputed, and costed as it runs there (adapter.recompute). Every rank traces the same Job,
    so rank 0 carries it and the others take its word (`_from_rank0`), as for the plan itself."""
    from .job import read_job
    from .recompute import carry_signatures

    first, second = as_planned(first, plan.ops), as_planned(read_job(job), plan.ops)
    mesh = second.main_placement()
    cluster = load_cluster(settings.cluster or _default_cluster(mesh.device))
    model = CostModel(
        cluster, mesh.hierarchy, mesh.ranks, launch_ranks_per_node(cluster, settings.ranks_per_node)
    )
    for name, sig in carry_signatures(first, second, plan.signatures(), model).items():
        second.op(name).native = sig
    carried = describe(second, cluster, settings.ranks_per_node)
    carried.recompute = list(plan.recompute)
    carried.baselines, carried.search_time_s = plan.baselines, plan.search_time_s
    carried.memory_limit_bytes = plan.memory_limit_bytes
    return carried


def _compile(self, *args, **kwargs):
    settings = _settings(self.config)
    proto = self.config.proto
    if not proto.enable_auto_parallel or settings.planner == "native":
        return _ORIGINAL_COMPILE(self, *args, **kwargs)
    _, eager_outputs = _trace(self, lambda: self.build_graph(*args, **kwargs))
    job = self._full_graph_proto
    started = time.perf_counter()
    try:
        from .job import read_job
        from .recompute import retrace
        from .writeback import write_plan

        with gc_paused():  # as planner.plan, reading the Job and writing the plan back too
            ir = read_job(job)
            plan = _obtain_plan(self, ir, settings)
            if plan.recompute:
                job, eager_outputs = _trace(
                    self, lambda: retrace(self, plan.recompute, *args, **kwargs)
                )
                carried = _from_rank0(lambda: _carried(self, ir, job, plan, settings).to_dict())
                plan = Plan.from_dict(carried)
            planned = write_plan(job, plan)
    except Exception as e:  # a plan we cannot make must never stop training
        _fallback(self, f"planning failed ({type(e).__name__}: {e})")
        self.finish_complie_and_init_runtime()
        return eager_outputs
    self._full_graph_proto = planned
    try:
        self.finish_complie_and_init_runtime()
    except Exception as e:  # OneFlow refused a signature: its message names the op
        first = next((line for line in str(e).splitlines() if line.strip()), repr(e))
        self._full_graph_proto = job
        _fallback(self, f"OneFlow rejected the plan: {first.strip()}")
        self.finish_complie_and_init_runtime()
        return eager_outputs
    self._autoddl_plan = plan
    _verify(self, plan)
    if flow.env.get_rank() == 0:
        log.info(
            "AutoDDL plan for graph %s (planned in %.2f s):\n%s",
            self.name,
            time.perf_counter() - started,
            summary(plan),
        )
    return eager_outputs


def install() -> None:
    """Patch nn.Graph and GraphConfig (idempotent)."""
    for fn in (
        set_auto_parallel_planner,
        set_auto_parallel_cluster,
        set_auto_parallel_ranks_per_node,
        set_auto_parallel_memory_per_device,
        set_auto_parallel_plan,
        set_auto_parallel_plan_cache,
    ):
        setattr(GraphConfig, fn.__name__, fn)
    flow.nn.Graph._compile = _compile
