"""On 4 ranks, a 2 x 2 mesh, in one launch: the planner's search split over the four
(rank_planning), the hook's 2 x 2 case (rank_hook), and the memory checks (rank_recompute),
whose VGG data parallel and AutoDDL rows come from the hook's graphs. One launch instead of
three spares two starts of four OneFlow processes and two compiles of the VGG."""

from oneflow_autoddl.adapter.plan_memory import dump_plans
from tests.ranks import rank_hook, rank_planning, rank_recompute
from tests.ranks.cases import HOOK_CASES_2D, PLANNING_CASE


def run(mesh: str = "2x2"):
    planned = rank_planning.plan_together(PLANNING_CASE)
    dump_plans()  # every graph compiled from here on writes the Plan its memory is read from
    hook = rank_hook.compare(HOOK_CASES_2D, mesh, memory_rows=True)
    rows = hook.pop("memory_rows")
    out = rank_recompute.run(mesh, vgg_plans=["megatron"])
    out["memory_rows"] += rows
    return {"planned": planned, "hook": hook, **out}
