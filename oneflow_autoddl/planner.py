"""plan(graph, cluster): the search as its steps, and the Plan it returns.

    problem = build_problem(...)   the graph as numbers: variables, compute, boxing tables
    starts  = seeds(problem)       expert plans, replicated, OneFlow's inference (+ the flat one)
    found   = descend(...)         coordinate descent from every start, under each objective
    best    = refine(...)          the pick by scheduled step and bytes, polished
    best    = fit_memory(...)      the cheapest price of memory at which a plan fits
    Plan    = assemble(...)        signatures, costs, baselines, boxings

Each step is a function of `oneflow_autoddl.search` with its inputs and outputs named; the knobs
are `search.options.SearchOptions`; independent descents run through an executor (this
process, or every rank of the job). When no plan can fit, the error says how much memory the
leanest plan needs.
"""

import logging
import math
import time
from typing import Dict, List, Optional, Union

from .assemble import assemble
from .cost.cluster import Cluster, load_cluster
from .errors import PlanningError
from .ir import Graph
from .plan import Plan
from .search import baselines
from .search.executor import SERIAL, Executor
from .search.fit import Memory, check_fits, descend_and_refine, fit_memory
from .search.memory import peak_memory
from .search.options import SearchOptions
from .search.problem import Problem, build_problem
from .search.seeds import flat_graph, lift, seeds

log = logging.getLogger(__name__)

STRATEGIES = ("autoddl",) + tuple(baselines.BASELINES)
Assignment = List[int]


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
    that expert plan as is, for comparisons on real ranks.
    """
    if strategy not in STRATEGIES:
        raise PlanningError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    options = options or SearchOptions()
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    limit = cluster.memory_bytes if memory_limit is None else memory_limit
    start = time.perf_counter()
    problem = build_problem(
        graph, cluster, hold, ranks_per_node, options.tie_layers, options.max_factor_entries
    )
    starts = seeds(problem)
    if strategy == "autoddl":
        x = search(problem, starts, limit, options, executor, held=bool(hold))
    else:
        x = starts[strategy]
    result = assemble(
        problem,
        x,
        starts,
        time.perf_counter() - start,
        None if math.isinf(limit) else limit,
        options.transfers_kept,
    )
    for note in result.notes:
        log.warning(note)
    return result


def search(
    problem: Problem,
    starts: Dict[str, Assignment],
    limit: float,
    options: SearchOptions,
    executor: Executor,
    held: bool = False,
) -> Assignment:
    """The fastest plan whose peak memory per device is within `limit` bytes, from `starts` (and
    the flat seed)."""
    experts = list(starts.values())
    flat = flat_seed(problem, options, executor, held) if options.flat_seed else None
    if flat is not None:
        experts.append(flat)
    best = descend_and_refine(problem, experts, 0.0, options, executor)
    if not math.isfinite(limit) or peak_memory(problem, best).bytes <= limit:
        return best
    memory = Memory(problem)  # what every candidate holds when: built only when it matters
    check_fits(problem, limit, memory)
    return fit_memory(problem, best, limit, options, executor, memory)


def flat_seed(
    problem: Problem, options: SearchOptions, executor: Executor, held: bool
) -> Optional[Assignment]:
    """The best plan of the 1-D mesh of the same devices, lifted (search.seeds.flat_graph says
    where there is one)."""
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
    x = search(flat, seeds(flat), math.inf, options, executor)
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
