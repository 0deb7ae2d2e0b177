"""plan(graph, cluster): the search end to end, and the Plan it returns.

Seeds (data parallel, Megatron-style, ZeRO-style, everything replicated, OneFlow's greedy
inference when the graph came from a Job) each get one sweep of coordinate descent; the best
then descend to convergence under each objective, and the fastest result by the schedule
(fewest bytes among near ties) within the memory limit wins, once descents from it under
every objective and single-variable moves from it to fewer bytes no longer replace it. When
the fastest plans do not fit, a memory penalty is raised until one does; when no plan can
fit, the error says how much memory the leanest plan needs.
"""

import logging
import math
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .cost.bounds import graph_bound_bytes
from .cost.cluster import Cluster, load_cluster
from .cost.compute import blob_bytes
from .cost.model import CostModel
from .ir import Graph, GraphError
from .mesh import format_mesh
from .plan import OpEntry, Plan, Predicted, signature_texts
from .remesh import remesh
from .rules import update_of
from .sbp import Signature, format_nd
from .search import baselines
from .search.descent import Descent
from .search.problem import SERIAL, Breakdown, Problem, Weights
from .search.units import PlanningError

log = logging.getLogger(__name__)

PENALTY_ROUNDS = 12  # memory price x8 a round until the plan fits
BISECTIONS = 2  # then halve the interval back towards the cheapest price that fits
FINALISTS = 2  # descents to convergence under the serial objective
FINALISTS_OTHER = 1  # and under each other one (they start from all found before)
TRANSFERS_KEPT = 50  # the costliest boxings a plan lists
SEED_GROUP = 32  # largest group the first sweep from every seed solves
POLISH_ROUNDS = 3  # descents from the winner under every objective, until it stays the winner
FLIPS = 8  # single-variable moves to fewer bytes a pick is weighed against (_thinner)
MAX_MOVES = 16  # of them taken one after the other
# A plan at most this fraction slower than the fastest may win by moving fewer bytes (_best).
# Predicted step times are good to a few percent between plans at best (on CPU ranks, in
# compare_plans, predicted over measured differs by up to 14% between one model's plans;
# cpu-local's figures move 10-40% between calibrations), while bytes are exact and what a
# shared network charges for: below this margin the prediction does not tell plans apart, and
# the bandwidth decides.
BYTES_TIE = 0.03


def _gib(x: float) -> str:
    return f"{x / 2**30:.3f} GiB"


def seeds(problem: Problem) -> Dict[str, List[int]]:
    out = {name: fn(problem) for name, fn in baselines.BASELINES.items()}
    out["replicated"] = baselines.replicated(problem)
    native = baselines.native(problem)
    if native is not None:
        out["oneflow_inference"] = (
            native  # OneFlow's greedy SBP inference, not its auto-parallel pass
        )
    elif any(op.native is not None for op in problem.graph.ops.values() if op.role != "io"):
        log.info("OneFlow's own signatures are not all among the candidates; not used as a seed")
    return out


def objectives(cluster: Cluster) -> List[Weights]:
    """What the descents minimise. Compute plus all of each boxing, one after the other, always.
    Where boxings wait on their peers at once (OneFlow's CPU boxing, cost.schedule) a boxing's
    latency mostly hides behind other ready work while moving its bytes holds the device, so
    there also compute plus moving alone, and once more with moving priced double: a step of a
    Lagrangian towards fewer bytes, for the tie-break in Planner._best. On one NCCL stream
    latencies queue, and the serial sum is the objective that sees them."""
    if not cluster.concurrent_boxing:
        return [SERIAL]
    return [SERIAL, Weights(latency=0.0), Weights(moving=2.0, latency=0.0)]


class Planner:
    """Holds one problem (graph, mesh, cluster) and searches it."""

    def __init__(
        self,
        graph: Graph,
        cluster: Cluster,
        hold: Optional[Dict[str, str]] = None,
        tie: bool = True,
        ranks_per_node: Optional[int] = None,
    ):
        self.graph, self.cluster = graph, cluster
        self.hold, self.tie, self.ranks_per_node = hold, tie, ranks_per_node
        self.mesh = graph.main_placement()
        self.model = CostModel(cluster, self.mesh.hierarchy, self.mesh.ranks, ranks_per_node)
        self.problem = Problem(graph, self.model, hold=hold, tie=tie)
        self._groups: Optional[List[List[int]]] = None  # the descent's, found once
        self._evaluated: Dict[Tuple[int, ...], Breakdown] = {}  # seeds recur in every descent
        self.objectives = objectives(cluster)

    def min_memory(self) -> float:
        return float(sum(m.min() for m in self.problem.memory))

    def evaluate(self, x: Sequence[int]) -> Breakdown:
        key = tuple(x)
        if key not in self._evaluated:
            self._evaluated[key] = self.problem.evaluate(x)
        return self._evaluated[key]

    def _best(
        self, candidates: Sequence[List[int]], weight: float, experts: Sequence[List[int]] = ()
    ) -> List[int]:
        """The candidate of least predicted step time plus memory price (the fastest), or one
        within BYTES_TIE of its step time, no dearer than any of `experts`, that moves fewer bytes
        by at least the fraction of the step it adds: of those, the one moving fewest.

        The descents lower additive objectives; their results are compared by what a step takes
        with boxing overlapping compute (cost.schedule), evaluated tensor by tensor (the factors
        may also count a boxing that consumers in different runs share more than once). A step
        takes at least its compute, so a candidate whose compute alone is too slow is not
        scheduled."""
        p = self.problem
        scored: Dict[Tuple[int, ...], Tuple[float, float]] = {}  # (cost, bytes)
        fastest, step = None, 0.0  # the least cost, and that plan's step time (not its price)
        for x in sorted(candidates, key=lambda y: p.objective(y, weight)):
            price = weight * p.memory_of(x)
            least = math.inf if fastest is None else scored[fastest][0]
            if tuple(x) in scored or p.compute_of(x) + price >= least + BYTES_TIE * step:
                continue
            detail = self.evaluate(x)
            scored[tuple(x)] = (detail.step_time + price, detail.bytes_per_device)
            if detail.step_time + price < least:
                fastest, step = tuple(x), detail.step_time
        least, sent = scored[fastest]
        ceiling = min(
            [least + BYTES_TIE * step]
            + [scored[tuple(x)][0] for x in experts if tuple(x) in scored]
        )
        worth = [fastest] + [
            key
            for key, (cost, moved) in scored.items()
            if cost <= ceiling and (sent - moved) / max(sent, 1.0) * step >= cost - least
        ]
        return list(min(worth, key=lambda key: (scored[key][1], scored[key][0])))

    def _descend(self, starts: Sequence[List[int]], weight: float) -> List[int]:
        """One sweep of the small groups from every seed; then for each objective, descent to
        convergence (all groups) from the FINALISTS it ranks best among all found so far; the best
        of all those and of the seeds themselves, evaluated exactly, and of moves from it to fewer
        bytes (_thinner). Then the pick, which an objective's descents did not start from when
        another objective found it, descends under each objective in turn until it stays the pick
        (the GPT of compare_plans: a plan 3% faster)."""
        found: List[List[int]] = []
        for weights in self.objectives:
            d = Descent(self.problem, memory_weight=weight, groups=self._groups, weights=weights)
            self._groups = d.groups
            if not found:
                found = [d.run(x, max_sweeps=1, max_group=SEED_GROUP) for x in starts]
            ranked = sorted(found, key=lambda x: self.problem.objective(x, weight, weights))
            found += [
                d.run(x) for x in ranked[: FINALISTS if weights == SERIAL else FINALISTS_OTHER]
            ]
        best = self._thinner(found + list(starts), weight, starts)
        for _ in range(POLISH_ROUNDS):
            found += [
                Descent(self.problem, memory_weight=weight, groups=self._groups, weights=w).run(
                    best
                )
                for w in self.objectives
            ]
            best, last = self._thinner(found + list(starts), weight, starts), best
            if best == last:
                break
        return best

    def _thinner(
        self, pool: List[List[int]], weight: float, experts: Sequence[List[int]]
    ) -> List[int]:
        """_best of the pool; then, while _best takes one, of the pool and single-variable moves
        from its pick to fewer bytes (_fewer_bytes). The pool's fastest stays in, so moves add up
        to no more than BYTES_TIE of its step."""
        best = self._best(pool, weight, experts)
        for _ in range(MAX_MOVES):
            moved = self._best(pool + [best] + self._fewer_bytes(best, weight), weight, experts)
            if moved == best:
                break
            best = moved
        return best

    def _fewer_bytes(self, x: List[int], weight: float) -> List[List[int]]:
        """x with one variable changed where that moves fewer bytes, and where some objective's
        rise is within what _best would pay for the bytes saved: the FLIPS that save most, for
        _best to weigh exactly. The descents lower predicted time, and never take a move that
        saves bytes at a cost of microseconds, which _best's tie would (VGG on 4 CPU ranks: a
        bias added before the all-reduce, not after)."""
        p = self.problem
        detail = self.evaluate(x)
        price = detail.step_time / max(
            detail.bytes_per_device, 1.0
        )  # _best's seconds per byte saved
        flips = []
        for v in range(len(x)):
            if not p.is_free(v):
                continue
            here, y = p.bytes_around(x, v), list(x)
            for k in range(p.domain[v]):
                if k == x[v]:
                    continue
                y[v] = k
                saved = here - p.bytes_around(y, v)
                if (
                    saved > 0
                    and min(p.change(x, v, k, weight, w) for w in self.objectives) <= saved * price
                ):
                    flips.append((-saved, v, k))
        out = []
        for _, v, k in sorted(flips)[:FLIPS]:
            y = list(x)
            y[v] = k
            out.append(y)
        return out

    def flattened(self) -> Optional[List[int]]:
        """On an n-D mesh whose axes all run over the same links, the best plan for the 1-D mesh
        of the same devices with each SBP repeated on every axis (S(0) over 4 devices is
        (S(0), S(0)) over 2 x 2): a seed the descent does not reach from the others, since it
        moves one group at a time. None where the axes' links differ (a 1-D mesh across nodes
        is held to the slowest link), where user SBP is held, where the batch does not divide
        the devices, or where it is not a candidate."""
        axes = self.model.mapping.axes
        if len(axes) < 2 or self.hold or len({(a.link, a.crosses_nodes) for a in axes}) > 1:
            return None
        try:
            graph = remesh(self.graph, (self.mesh.size,), self.mesh.ranks)
        except GraphError:  # the batch does not split over all devices: no 1-D data parallelism
            return None
        flat = Planner(graph, self.cluster, tie=self.tie, ranks_per_node=self.ranks_per_node)
        x, _ = flat.search()
        lifted = {}
        for unit in self.problem.units:
            for name in (
                unit.ops if unit.fixed is None else ()
            ):  # fixed ones keep what OneFlow gave them
                sig = flat.problem.signature(name, x)
                if self.graph.op(name).placement == self.mesh:
                    sig = Signature({bn: nd * len(axes) for bn, nd in sig.items()})
                lifted[name] = sig
        return self.problem.assignment_of(lifted)

    def search(
        self, memory_limit: Optional[float] = None
    ) -> Tuple[List[int], Dict[str, List[int]]]:
        """(best assignment, baseline assignments)."""
        p = self.problem
        starts = seeds(p)
        need = self.min_memory()
        if memory_limit is not None and need > memory_limit:
            raise PlanningError(
                f"no plan fits {_gib(memory_limit)} per device on mesh "
                f"{format_mesh(self.mesh.hierarchy)}: the leanest plan needs {_gib(need)} "
                f"(parameters, gradients, optimizer state and kept "
                f"activations, split as far as the rules allow); give more memory or a larger mesh"
            )
        flat = self.flattened()
        best = self._descend(list(starts.values()) + ([flat] if flat is not None else []), 0.0)
        if memory_limit is None or p.memory_of(best) <= memory_limit:
            return best, starts
        return self._fit_memory(best, starts, memory_limit), starts

    def _fit_memory(self, best: List[int], starts: Dict[str, List[int]], limit: float) -> List[int]:
        """Raise the memory price until the plan fits, then bisect back to the cheapest that
        fits."""
        p = self.problem
        lean = [int(np.argmin(m)) for m in p.memory]
        scale = max(p.objective(best), 1e-12) / max(p.memory_of(best), 1.0)
        lo, hi, fit = 0.0, scale, None
        for _ in range(PENALTY_ROUNDS):
            x = self._descend([best, lean], hi)
            if p.memory_of(x) <= limit:
                fit = x
                break
            lo, hi = hi, hi * 8
        if fit is None:
            fit = lean
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            x = self._descend([fit, best], mid)
            if p.memory_of(x) <= limit:
                hi, fit = mid, self._best([fit, x], 0.0)
            else:
                lo = mid
        log.info(
            "memory limit %s: plan uses %s (unconstrained best %s)",
            _gib(limit),
            _gib(p.memory_of(fit)),
            _gib(p.memory_of(best)),
        )
        return fit

    def _is_parameter(self, unit, name: str) -> bool:
        """A model parameter or buffer, not an optimizer state (momentum, Adam's m and v)."""
        head = self.graph.op(unit.ops[0])
        update = update_of(head)
        if head.name == name or update is None:
            return True
        return self.graph.tensor(head.inputs[update.model]).producer == name

    def to_plan(
        self,
        x: Sequence[int],
        others: Dict[str, List[int]],
        search_time: float,
        everything: bool = False,
    ) -> Plan:
        """The Plan of assignment x; `everything` lists held ops (but interface and train-step
        ops) as planned too, for describe."""
        p, g = self.problem, self.graph
        detail = self.evaluate(x)
        ops, unplanned, variables, var_shapes, var_bytes = {}, {}, {}, {}, {}
        for unit in p.units:
            for name in unit.ops:
                op = g.op(name)
                sig = p.signature(name, x)
                if unit.fixed is not None and (not everything or op.role in ("io", "system")):
                    unplanned[name] = {"type": op.type, "reason": unit.fixed}
                    continue
                ops[name] = OpEntry(
                    op.type,
                    signature_texts(sig),
                    {bn: list(g.shape(op, bn)) for bn in op.bns},
                    list(op.inputs),
                    detail.op_compute.get(name, 0.0),
                    detail.op_comm.get(name, 0.0),
                )
                if op.role == "variable" and self._is_parameter(unit, name):
                    variables[name] = ops[name].signature["out"]
                    var_shapes[name] = list(g.shape(op, "out"))
                    var_bytes[name] = blob_bytes(g, op, "out", sig["out"], op.placement.hierarchy)
        transfers = self._transfers(x, detail)
        unknown = sorted({u["type"] for u in unplanned.values() if "no SBP rule" in u["reason"]})
        notes = (
            [f"op types with no SBP rule, left to OneFlow's own inference: {', '.join(unknown)}"]
            if unknown
            else []
        )
        return Plan(
            graph=g.name,
            mesh=format_mesh(self.mesh.hierarchy),
            cluster=self.cluster.name,
            device=self.mesh.device,
            ops=ops,
            variables=variables,
            variable_shapes=var_shapes,
            variable_bytes=var_bytes,
            unplanned_ops=unplanned,
            predicted=Predicted.of(detail),
            baselines={name: Predicted.of(self.evaluate(y)) for name, y in others.items()},
            lower_bound_bytes=graph_bound_bytes(g, self.mesh.size),
            transfers=transfers,
            search_time_s=search_time,
            notes=notes,
        )

    def _transfers(self, x: Sequence[int], detail, limit: int = TRANSFERS_KEPT) -> List[Dict]:
        """The boxings that cost most: tensor, shape, SBP from and to, bytes and time per device."""
        p, g = self.problem, self.graph
        out = []
        for lbn, tr in sorted(detail.tensor_comm.items(), key=lambda kv: -kv[1].time)[:limit]:
            t = g.tensor(lbn)
            src = p.signature(t.producer, x)[t.obn]
            dsts = sorted(
                {
                    format_nd(p.signature(c, x)[ibn])
                    for c, ibn in t.consumers
                    if g.op(c).placement == g.op(t.producer).placement
                }
                - {format_nd(src)}
            )
            out.append(
                {
                    "tensor": lbn,
                    "shape": list(t.shape),
                    "from": format_nd(src),
                    "to": dsts,
                    "bytes": tr.bytes,
                    "time_s": tr.time,
                }
            )
        return out


def hold_user_sbp(graph: Graph) -> Dict[str, str]:
    """Every parameter keeps its SBP (OneFlow's enable_auto_parallel_ignore_user_sbp_config off)."""
    reason = "user SBP kept (enable_auto_parallel_ignore_user_sbp_config is off)"
    return {op.name: reason for op in graph.by_role("variable")}


STRATEGIES = ("autoddl",) + tuple(baselines.BASELINES)


def plan(
    graph: Graph,
    cluster,
    memory_limit: Optional[float] = None,
    hold: Optional[Dict[str, str]] = None,
    tie: bool = True,
    ranks_per_node: Optional[int] = None,
    strategy: str = "autoddl",
) -> Plan:
    """Plan `graph` on its mesh for `cluster` (a Cluster, a preset name or a JSON path).

    `memory_limit` is bytes per device, the cluster's device memory by default (math.inf:
    no limit). `hold` names ops that keep the signature OneFlow gave them, with the reason.
    `strategy` "autoddl" searches; a baseline name (data_parallel, megatron, zero) returns
    that expert plan as is, for comparisons on real ranks.
    """
    if strategy not in STRATEGIES:
        raise PlanningError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if isinstance(cluster, str):
        cluster = load_cluster(cluster)
    start = time.perf_counter()
    planner = Planner(graph, cluster, hold=hold, tie=tie, ranks_per_node=ranks_per_node)
    if memory_limit is None:
        memory_limit = cluster.memory_bytes
    if strategy == "autoddl":
        x, starts = planner.search(None if math.isinf(memory_limit) else memory_limit)
    else:
        starts = seeds(planner.problem)
        x = starts[strategy]
    elapsed = time.perf_counter() - start
    result = planner.to_plan(x, starts, elapsed)
    result.memory_limit_bytes = None if math.isinf(memory_limit) else memory_limit
    for note in result.notes:
        log.warning(note)
    return result


def describe(graph: Graph, cluster, ranks_per_node: Optional[int] = None) -> Plan:
    """The Plan OneFlow's own signatures in `graph` amount to, costed by our model (for
    comparisons)."""
    if isinstance(cluster, str):
        cluster = load_cluster(cluster)
    start = time.perf_counter()
    hold = {name: "as OneFlow chose" for name in graph.ops}
    planner = Planner(graph, cluster, hold=hold, ranks_per_node=ranks_per_node)
    x = [0] * len(planner.problem.var_units)
    return planner.to_plan(x, {}, time.perf_counter() - start, everything=True)
