"""plan(graph, cluster): the search as its steps, and the Plan it returns.

    problem = build_problem(...)   the graph as numbers: variables, compute, boxing tables
    starts  = seeds(problem)       expert plans, replicated, OneFlow's inference (+ the flat one)
    found   = descend(...)         coordinate descent from every start, under each objective
    best    = refine(...)          the pick by scheduled step and bytes, polished
    best    = fit_memory(...)      the cheapest price of memory at which a plan fits
    (no plan fits: the fewest first repeated blocks recomputed in backward with which the
     fastest plan would fit, else every one, else with copies per phase too; the steps again)
    Plan    = assemble(...)        signatures, costs, baselines, boxings

Each step is a function of `oneflow_autoddl.search` with its inputs and outputs named; the knobs
are `search.options.SearchOptions`; independent descents run through an executor (this
process, or every rank of the job). Where no plan fits the memory limit, the error says what
the leanest plan needs, or what the leanest found holds where one might exist that the search
did not reach.
"""

import functools
import logging
import math
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

from .assemble import assemble
from .cost.cluster import Cluster, load_cluster
from .cost.memory import least_peak, timeline
from .errors import PlanningError
from .gc_pause import gc_paused
from .ir import Graph
from .plan import Plan
from .recompute import original, recomputable, recompute_graph
from .regather import as_planned, regather_graph
from .sbp import Signature
from .search import baselines
from .search.descend import worth_splitting
from .search.executor import SERIAL, Executor
from .search.fit import (
    BOUND_SLACK,
    Memory,
    check_fits,
    descend_and_pick,
    descend_and_refine,
    fit_memory,
    none_found,
)
from .search.memory import peak_memory
from .search.options import SearchOptions
from .search.problem import Problem, build_problem
from .search.seeds import flat_graph, lift, seeds
from .search.select import pick
from .search.ties import repeated_blocks

log = logging.getLogger(__name__)

STRATEGIES = ("autoddl",) + tuple(baselines.BASELINES)
Assignment = List[int]
# search's (plan, or the error naming the leanest found; whether the memory limit bound it; the
# fastest plan found regardless of memory)
Searched = Tuple[Union[Assignment, PlanningError], bool, Optional[Assignment]]
PARTIAL_TRIES = 3  # estimates of the fewest blocks to recompute (_fewest_recomputed)


class Rung(NamedTuple):
    """A leaner graph to plan where the memory limit binds."""

    make: Callable[[], Graph]
    blocks: List[str]  # the repeated blocks it recomputes
    what: str
    binds: bool  # its fastest plan is known not to fit where it is reached (search's `binds`)
    every: bool  # it recomputes every block and nothing more: where it fits, fewer might


@gc_paused()
def plan(
    graph: Graph,
    cluster: Union[Cluster, str],
    memory_limit: Optional[float] = None,
    hold: Optional[Dict[str, str]] = None,
    ranks_per_node: Optional[int] = None,
    strategy: str = "autoddl",
    options: Optional[SearchOptions] = None,
    executor: Executor = SERIAL,
) -> Plan:
    """Plan `graph` on its mesh for `cluster` (a Cluster, a preset name or a JSON path).

    `memory_limit` is bytes per device, the cluster's device memory by default (math.inf:
    no limit). `hold` names ops that keep the signature OneFlow gave them, with the reason.
    `strategy` "autoddl" searches; a baseline name (data_parallel, megatron, zero) returns
    that expert plan as is, for comparisons on real ranks. `executor` runs the search's
    independent tasks (search.executor: here, on this machine's cores, or on every rank); the
    plan is the same whichever runs them. Python's cyclic collector is paused meanwhile
    (oneflow_autoddl.gc_pause).
    """
    if strategy not in STRATEGIES:
        raise PlanningError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    options = options or SearchOptions()
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    limit = cluster.memory_bytes if memory_limit is None else memory_limit
    start = time.perf_counter()

    def make(g: Graph) -> Problem:
        return build_problem(
            g, cluster, hold, ranks_per_node, options.tie_layers, options.max_factor_entries
        )

    def finish(
        problem: Problem, starts: Dict[str, Assignment], x: Assignment, blocks: List[str]
    ) -> Plan:
        searched = time.perf_counter() - start
        result = assemble(
            problem,
            x,
            starts,
            searched,
            None if math.isinf(limit) else limit,
            options.transfers_kept,
        )
        users_plan(result, blocks, graph)
        return result

    if strategy == "autoddl":
        result = _autoddl(graph, cluster, make, finish, limit, options, executor, bool(hold))
    else:
        problem = make(graph)
        starts = seeds(problem)
        result = finish(problem, starts, starts[strategy], [])
    for note in result.notes:
        log.warning(note)
    return result


Finish = Callable[[Problem, Dict[str, Assignment], Assignment, List[str]], Plan]


def _autoddl(
    graph: Graph,
    cluster: Cluster,
    make: Callable[[Graph], Problem],
    finish: Finish,
    limit: float,
    options: SearchOptions,
    executor: Executor,
    held: bool,
) -> Plan:
    """The search's plan (`finish` makes it of a problem, its starts, the assignment and the
    blocks recomputed); where the memory limit binds it and the device reuses memory, also the
    plans of the leaner graphs (`_leaner`), the first that fits of them (searched through
    `executor.first`: one after another, or at once where the executor has cores to spare): the
    fastest of those that fit, its search time the last search's. Recomputing fewer blocks
    costs fewer forwards again: before every block recomputed comes the graph with the fewest
    first blocks recomputed with which the fastest plan of the graph as it is would fit, where
    that graph was searched; where every block recomputed fits, the fewest with which that
    graph's fastest plan would is searched after (`_fewest_recomputed`). Where no plan fits, the
    leanest graph's PlanningError, which names the memory it needs. Where there is a leaner
    graph, a graph whose least peak (cost.memory.least_peak) is over the limit is not searched
    as it is: no plan of it can fit."""
    leaner = _leaner(graph, cluster, options)
    found: List[Plan] = []
    least = least_peak(graph, cluster.reuses_memory) if leaner and math.isfinite(limit) else 0.0
    if least > limit:
        log.info(
            "no plan of the graph as it is fits: it holds at least %.3f GiB per device",
            least / 2**30,
        )
    else:
        problem = make(graph)
        starts = seeds(problem)
        x, bound, fastest = _search_within(problem, starts, limit, options, executor, held)
        if bound and options.recompute and not cluster.reuses_memory:
            log.info(
                "the memory limit binds; recomputation frees nothing where memory is not reused"
            )
        if not bound or not leaner:
            return finish(problem, starts, _or_raise(x), [])
        if not isinstance(x, PlanningError):
            found.append(finish(problem, starts, x, []))
        if fastest is not None and leaner[0].every:
            every = leaner[0]
            fewer = _fewest_recomputed(graph, every.make(), every.blocks, problem, fastest, limit)
            leaner = ([_some_recomputed(graph, every.blocks, fewer)] if fewer else []) + leaner

    def step(rung: Rung) -> Tuple[Union[Plan, PlanningError], Optional[int]]:
        """The rung's plan (or error), and where it recomputes every block and fits, the fewest
        blocks its fastest plan would fit with recomputed, where fewer than all."""
        log.info("the memory limit binds: also planning with %s", rung.what)
        redone = make(rung.make())
        redone_starts = seeds(redone)
        y, _, fast = _search_within(
            redone, redone_starts, limit, options, executor, held, rung.binds
        )
        if isinstance(y, PlanningError):
            return y, None
        fewer = None
        if rung.every and fast is not None:
            fewer = _fewest_recomputed(graph, redone.graph, rung.blocks, redone, fast, limit)
        return finish(redone, redone_starts, y, rung.blocks), fewer

    tried = executor.first(step, leaner, lambda r: isinstance(r[0], Plan))
    searched = {len(rung.blocks) for rung in leaner}
    for rung, (result, fewer) in zip(leaner, tried):
        if isinstance(result, Plan):
            found.append(result)
        if fewer is not None and fewer not in searched:  # fewer recomputed might fit, faster
            again, _ = step(_some_recomputed(graph, rung.blocks, fewer))
            found += [again] if isinstance(again, Plan) else []
    if not found:
        leanest = tried[-1][0]  # none found, however lean: its error names the memory it needs
        assert isinstance(leanest, PlanningError)
        raise leanest
    best = min(found, key=lambda p: p.predicted.step_time_s)
    best.search_time_s = max(p.search_time_s for p in found)
    return best


def _leaner(graph: Graph, cluster: Cluster, options: SearchOptions) -> List[Rung]:
    """The leaner graphs (Rung) for where the memory limit binds, each holding less than the one
    before and costing more: the repeated blocks recomputed (options.recompute), then tensors
    boxed again per phase too (options.regather), which is reached only where recomputing found
    no plan, and whose fastest plan computes as that graph's (its copies take what their readers
    take), so does not fit either. None where the device reuses no memory: there neither frees
    anything, and both add to every step (oneflow_autoddl.recompute, .regather)."""
    if not cluster.reuses_memory:
        return []
    out: List[Rung] = []
    blocks = recomputable(graph, repeated_blocks(graph)) if options.recompute else []

    @functools.lru_cache(maxsize=None)  # both steps start from it
    def recomputed() -> Graph:
        return recompute_graph(graph, blocks) if blocks else graph

    if blocks:
        out.append(Rung(recomputed, blocks, f"{len(blocks)} blocks recomputed", False, True))
    if options.regather:
        what = f"{len(blocks)} blocks recomputed, " if blocks else ""
        copies = what + "tensors boxed again per phase"
        out.append(Rung(lambda: regather_graph(recomputed()), blocks, copies, bool(blocks), False))
    return out


def _fewest_recomputed(
    graph: Graph,
    every: Graph,
    blocks: List[str],
    problem: Problem,
    x: Assignment,
    limit: float,
) -> Optional[int]:
    """The fewest of the first `blocks` to recompute in `graph` for the plan x of `problem` (of
    `graph`, or of `every`: `graph` with every block recomputed) to fit `limit`, each op taking
    its signature under x and a recomputed copy `problem` lacks its original's, as OneFlow's
    copies do (cost.memory's timelines), interpolated between none and all but one of them
    recomputed (PARTIAL_TRIES timelines more at most); None where that is every block, or none
    fits. A block fewer recomputed holds more, so where all but one do not fit, none fewer do
    (GPT-3 in bf16: one timeline of its 12k ops spared)."""
    ops = problem.unit_of

    def signature(name: str) -> Signature:
        return problem.signature(name if name in ops else original(name), x)

    def peak(k: int) -> float:
        if k in (0, len(blocks)):
            redone = every if k else graph
        else:
            redone = recompute_graph(graph, blocks[:k])
        return timeline(redone, signature, problem.model).peak().bytes

    if len(blocks) < 2 or peak(len(blocks)) > limit:
        return None
    lo, hi = 0, len(blocks) - 1
    at_hi = peak(hi)
    if at_hi > limit:
        return None
    at_lo = peak(lo)
    for _ in range(PARTIAL_TRIES):
        if hi - lo < 2 or at_lo <= at_hi:
            break
        k = lo + math.ceil((hi - lo) * (at_lo - limit) / (at_lo - at_hi))
        k = min(max(k, lo + 1), hi - 1)
        at = peak(k)
        if at <= limit:
            hi, at_hi = k, at
        else:
            lo, at_lo = k, at
    return hi


def _some_recomputed(graph: Graph, blocks: List[str], k: int) -> Rung:
    """The rung of `graph` with its first k repeated `blocks` recomputed."""
    maker = functools.partial(recompute_graph, graph, blocks[:k])
    return Rung(maker, blocks[:k], f"{k} of {len(blocks)} blocks recomputed", False, False)


def _or_raise(x: Union[Assignment, PlanningError]) -> Assignment:
    if isinstance(x, PlanningError):
        raise x
    return x


def _search_within(
    problem: Problem,
    starts: Dict[str, Assignment],
    limit: float,
    options: SearchOptions,
    executor: Executor,
    held: bool,
    binds: bool = False,
) -> Searched:
    """`search`'s (plan, whether the memory limit bound it, the fastest plan regardless of
    memory); (the error, True, None) where no plan can fit. `binds`: see `search`. Where
    the descents are not worth splitting (search.descend.worth_splitting), one worker of
    `executor` searches alone and the others take its result, the error too."""
    if executor is not SERIAL and not worth_splitting(problem, options):
        alone = [(problem, starts, limit, options, SERIAL, held, binds)]
        return executor.map(lambda task: _search_within(*task), alone)[0]
    try:
        return search(problem, starts, limit, options, executor, held, binds)
    except PlanningError as e:
        return e, True, None


def _fits(problem: Problem, x: Assignment, limit: float) -> bool:
    return not math.isfinite(limit) or peak_memory(problem, x).bytes <= limit


def users_plan(plan: Plan, recomputed: List[str], graph: Graph) -> None:
    """`plan`, made on the user's `graph` with the modules `recomputed` recomputed (and copies
    per phase, oneflow_autoddl.regather), made the plan of `graph` itself, in place: the
    recomputed copies are left out, to take their originals' signatures where the hook retraces
    the graph with OneFlow's checkpointing (adapter.recompute); so are the phase copies only
    recomputation makes (of a recomputed block's input, of a parameter only its recomputed
    forward reads in backward), made again there; the others stay, as regather.as_planned finds
    them in `graph`."""
    if not recomputed:
        return
    kept = set(as_planned(graph, plan.ops).ops)
    plan.recompute = list(recomputed)
    plan.ops = {n: e for n, e in plan.ops.items() if n in kept}
    plan.unplanned_ops = {n: e for n, e in plan.unplanned_ops.items() if n in kept}


def search(
    problem: Problem,
    starts: Dict[str, Assignment],
    limit: float,
    options: SearchOptions,
    executor: Executor,
    held: bool = False,
    binds: bool = False,
) -> Searched:
    """(the fastest plan whose peak memory per device is within `limit` bytes, from `starts`
    and the flat seed; whether the limit bound it: the fastest plan found did not fit; the
    fastest plan found regardless of memory). Where none found fits, its PlanningError in the
    plan's place (naming the leanest found, search.fit.none_found); raised where no plan can
    fit (search.fit.check_fits). Where the limit is known to bind (`binds`: no plan of a graph
    computing the same fits) or no start fits, the fastest plan regardless of memory is only
    picked, not refined, before the memory fit (refined only if it fits after all)."""
    experts = list(starts.values())
    bound = binds or not any(_fits(problem, x, limit) for x in experts)
    memory = None  # what every candidate holds when: built only when it matters
    if bound:
        memory = Memory(problem)  # first see whether any plan can fit
        check_fits(problem, limit, memory)
    flat = flat_seed(problem, options, executor, held) if options.flat_seed else None
    if flat is not None:
        experts.append(flat)
        bound = bound and not _fits(problem, flat, limit)
    best = _unconstrained(problem, experts, limit, options, executor, bound)
    if _fits(problem, best, limit):
        return best, False, best
    memory = memory or Memory(problem)
    check_fits(problem, limit, memory)
    fitted = fit_memory(problem, best, limit, options, executor, memory)
    x = _fastest_fitting(problem, fitted, experts, limit, memory, options)
    if not _fits(problem, x, limit):
        return none_found(problem, x, limit, memory), True, best
    return x, True, best


def _unconstrained(
    problem: Problem,
    starts: List[Assignment],
    limit: float,
    options: SearchOptions,
    executor: Executor,
    bound: bool,
) -> Assignment:
    """The fastest plan found regardless of memory. Where the limit is known to bind (`bound`: no
    start fits), the descents' pick only: it starts the memory fit, whose every round refines
    its own plan; refined as well in case it fits after all."""
    if bound:
        best = descend_and_pick(problem, starts, options, executor)
        if not _fits(problem, best, limit):
            return best
    return descend_and_refine(problem, starts, 0.0, options, executor)


def _fastest_fitting(
    problem: Problem,
    fitted: Assignment,
    experts: List[Assignment],
    limit: float,
    memory: Memory,
    options: SearchOptions,
) -> Assignment:
    """The pick of the memory fit's plan and the experts that fit `limit` (the fit's plan where
    none does), no slower than any of those experts (search.select.pick's bytes tie may trade
    a little time for bytes, but not for a plan slower than an expert that fits): the memory fit
    settles on the first price at which a plan fits, which can be slower than a start that fits
    as it is. The items' bound, at most BOUND_SLACK over the exact peak on the plans measured
    (tests/unit/test_memory.py), spares the timelines of plans far over."""

    def fits(x: Assignment) -> bool:
        return memory.usage(x).max() <= limit * BOUND_SLACK and _fits(problem, x, limit)

    fitting_experts = [x for x in experts if fits(x)]
    pool = ([fitted] if fits(fitted) else []) + fitting_experts
    return pick(problem, pool, 0.0, options, fitting_experts) if pool else fitted


def flat_seed(
    problem: Problem, options: SearchOptions, executor: Executor, held: bool
) -> Optional[Assignment]:
    """The plan of the 1-D mesh of the same devices, lifted (search.seeds.flat_graph says where
    there is one): its descents from its own seeds and their pick, no refine, since the n-D
    search refines the lifted plan (moves to fewer bytes, polish rounds) as one of its starts."""
    graph = flat_graph(problem, held)
    if graph is None:
        return None
    flat = build_problem(
        graph,
        problem.model.cluster,
        ranks_per_node=problem.model.ranks_per_node,
        tie=options.tie_layers,
        max_factor_entries=options.max_factor_entries,
    )
    x = descend_and_pick(flat, list(seeds(flat).values()), options, executor)
    return lift(problem, flat, x)


def describe(
    graph: Graph, cluster: Union[Cluster, str], ranks_per_node: Optional[int] = None
) -> Plan:
    """The Plan OneFlow's own signatures in `graph` amount to, costed by our model (for
    comparisons)."""
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    start = time.perf_counter()
    hold = {name: "as OneFlow chose" for name in graph.ops}
    problem = build_problem(graph, cluster, hold, ranks_per_node)
    x = [0] * len(problem.var_units)
    return assemble(problem, x, {}, time.perf_counter() - start, everything=True)
