"""The descent step of the search: coordinate descent from every start, under each objective.

What the descents minimise are additive objectives over the problem's factors (compute plus
boxing, weighed by `objectives`); the plans they find are compared by the exact scheduled step
afterwards (search.select). Every start gets one sweep of the small groups; then, objective by
objective, the starts it ranks best among all found so far descend to convergence.
"""

import logging
from functools import partial
from typing import List, Optional, Sequence

from ..cost.cluster import Cluster
from .descent import Descent
from .executor import Executor
from .options import SearchOptions
from .prices import StepPrices
from .problem import SERIAL, Price, Problem, Weights

log = logging.getLogger(__name__)

Assignment = List[int]


def objectives(cluster: Cluster, options: Optional[SearchOptions] = None) -> List[Weights]:
    """What the descents minimise: `options.objectives` where given; else compute plus all of each
    boxing one after the other, always: on one NCCL stream latencies queue, and on CPU ranks a
    boxing's waits and bytes hold the rank (cost.schedule), so the serial sum is what both
    charge. Where boxing is CPU work there is also a descent with moving priced double: a step
    of a Lagrangian towards fewer bytes, for the bytes tie of search.select."""
    if options is not None and options.objectives is not None:
        return list(options.objectives)
    if not cluster.boxing_on_cpu:
        return [SERIAL]
    return [SERIAL, Weights(moving=2.0)]


def descent(
    problem: Problem, memory_weight: Price, weights: Weights, options: SearchOptions
) -> Descent:
    """The Descent of `problem` under `weights` at `memory_weight`, made once: its group optima,
    groups' reach and boundaries serve every later run under the same prices. The groups and
    their elimination programs depend on the problem's structure only, so every Descent of the
    problem shares those of the first. Those of a price per time step are kept only until
    another such price's is made, as Problem keeps its tables: the search moves on from such a
    price, never back, and each holds its own priced tables."""
    made = problem.descents
    key = (memory_weight, weights, options.max_group_vars, options.max_table_entries)
    if key not in made:
        first = next(iter(made.values()), None)
        if isinstance(memory_weight, StepPrices):
            for stale in [
                k for k in made if isinstance(k[0], StepPrices) and k[0] is not memory_weight
            ]:
                del made[stale]
        made[key] = Descent(
            problem,
            memory_weight,
            first.groups if first is not None else None,
            weights,
            programs=first.programs if first is not None else None,
            max_group_vars=options.max_group_vars,
            max_table_entries=options.max_table_entries,
        )
    return made[key]


def worth_splitting(problem: Problem, options: SearchOptions) -> bool:
    """Whether the descents are worth splitting over several workers: not where one group holds
    every free variable, since each descent is then one exact elimination and the workers
    would spend more exchanging results than they save."""
    return descent(problem, 0.0, SERIAL, options).whole() is None


def sweep(
    problem: Problem, start: Assignment, memory_weight: Price, options: SearchOptions
) -> Assignment:
    """`start` after one sweep of the groups of at most `options.seed_sweep_group` variables,
    under the first objective."""
    first = objectives(problem.model.cluster, options)[0]
    d = descent(problem, memory_weight, first, options)
    return d.run(start, max_sweeps=1, max_group=options.seed_sweep_group)


def descend(
    problem: Problem,
    swept: Sequence[Assignment],
    memory_weight: Price,
    options: SearchOptions,
    executor: Executor,
) -> List[Assignment]:
    """The starts after their sweep (`sweep`), and the `finalists` each objective ranks best
    among them after descending to convergence under it; the descents are independent tasks."""
    tasks = []
    for weights in objectives(problem.model.cluster, options):
        ranked = sorted(swept, key=lambda x: problem.objective(x, memory_weight, weights))
        k = options.finalists if weights == SERIAL else options.finalists_other
        tasks += [(weights, x) for x in ranked[:k]]
    converge = partial(_converge, problem, memory_weight, options)
    found = executor.map(converge, tasks, affinity=lambda task: task[0])  # by objective
    log.debug("%d descents to convergence from %d swept starts", len(tasks), len(swept))
    return list(swept) + found


def _converge(problem: Problem, memory_weight: Price, options: SearchOptions, task) -> Assignment:
    weights, x = task
    return descent(problem, memory_weight, weights, options).run(x)
