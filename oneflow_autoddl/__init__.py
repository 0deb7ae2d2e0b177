"""AutoDDL for OneFlow: near-optimal-bandwidth SBP plans for nn.Graph.

Importing the package installs the nn.Graph hook, so `graph.config.enable_auto_parallel(True)`
plans with AutoDDL: at once if OneFlow is already imported, otherwise the moment it is.
The planner itself (IR, SBP, rules, cost model, search, report, CLI) never imports OneFlow,
so planning for a cluster you do not have costs no OneFlow start-up.
"""

import importlib.abc
import importlib.util
import logging
import sys

from .plan import Plan, PlanMismatch
from .planner import plan

logging.getLogger(__name__).addHandler(logging.NullHandler())


def plan_of(graph):
    """The Plan AutoDDL applied to a compiled nn.Graph (None if it compiled without one)."""
    return getattr(graph, "_autoddl_plan", None)


def _install() -> None:
    from .adapter.hook import install

    install()


class _InstallAfterOneflow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `_install` right after `import oneflow` finishes, wherever that import happens; on a
    rank other than 0 of a launch, first waits for rank 0 to listen (launch.wait_for_rank0):
    OneFlow's import finding it not yet listening sleeps 10 s."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "oneflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        from .launch import wait_for_rank0

        wait_for_rank0()
        self._loader.exec_module(module)
        _install()


if "oneflow" in sys.modules and sys.modules["oneflow"] is not None:
    _install()
elif "oneflow" not in sys.modules:
    sys.meta_path.insert(0, _InstallAfterOneflow())

__all__ = ["Plan", "PlanMismatch", "plan", "plan_of"]
