"""AutoDDL for OneFlow: near-optimal-bandwidth SBP plans for nn.Graph.

Importing the package installs the nn.Graph hook when OneFlow is importable, so
`graph.config.enable_auto_parallel(True)` plans with AutoDDL. The planner itself
(IR, SBP, rules, cost model, search, report) never imports OneFlow.
"""
import logging

from .plan import Plan, PlanMismatch
from .planner import plan

logging.getLogger(__name__).addHandler(logging.NullHandler())

try:
    import oneflow  # noqa: F401
except ImportError:  # planning only: no OneFlow here
    plan_of = None
else:
    from .adapter.hook import install, plan_of

    install()

__all__ = ["Plan", "PlanMismatch", "plan", "plan_of"]
