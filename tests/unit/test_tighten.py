"""search.tighten: a fitted plan takes back time within the memory limit."""

from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.search.executor import SERIAL
from oneflow_autoddl.search.fit import Memory, descend_and_refine, fit_memory
from oneflow_autoddl.search.options import SearchOptions
from oneflow_autoddl.search.problem import build_problem
from oneflow_autoddl.search.seeds import seeds
from oneflow_autoddl.search.tighten import tighten


def test_a_fitted_plan_gets_faster_and_stays_within_the_limit():
    """The examples' GPT at scale on 4 A100s, the limit half way from the least peak any plan
    holds to the fastest plan's: the price's fit leaves room that unpriced moves take, for
    a lower objective and step, the memory items and the exact peak still within the limit."""
    problem = build_problem(build_gpt(2, 1024, 16, 256, 50257, 64, (4,)), load_cluster("dgx-a100"))
    memory = Memory(problem)
    untightened = SearchOptions(tighten_passes=0)
    best = descend_and_refine(problem, list(seeds(problem).values()), 0.0, untightened, SERIAL)
    least = float(memory.least().max())
    limit = least + 0.5 * (memory.peak(best) - least)
    fitted = fit_memory(problem, best, limit, untightened, SERIAL, memory)
    assert memory.usage(fitted).max() <= limit
    tight = tighten(problem, fitted, limit, memory.items, memory.usage(fitted), SearchOptions())
    assert problem.objective(tight) < problem.objective(fitted)
    assert problem.evaluate(tight).step_time < problem.evaluate(fitted).step_time
    assert memory.usage(tight).max() <= limit
    assert memory.peak(tight) <= limit
    assert fit_memory(problem, best, limit, SearchOptions(), SERIAL, memory) != fitted
