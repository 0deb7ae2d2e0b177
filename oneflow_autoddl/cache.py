"""The plan cache: a second launch of the same graph on the same mesh and cluster reuses its plan.

A plan depends on the graph (its ops, shapes, attributes, placements and OneFlow's own
signatures), the cluster's description, the memory limit, the ops held to their SBP, the
ranks per node, the strategy, the search options and this planner's code. `plan_key` hashes
all of them, so any difference misses the cache. Entries are plan JSON files in one directory
(`ONEFLOW_AUTODDL_PLAN_CACHE`, default ~/.cache/oneflow_autoddl/plans); one that cannot be read
back is a miss: it is deleted with a warning and the new plan replaces it.
"""

import hashlib
import json
import logging
import os
import tempfile
from typing import Any, Dict, List, Optional

from .cost.cluster import Cluster
from .errors import PlanMismatch
from .ir import Graph
from .plan import Plan
from .search.options import SearchOptions

log = logging.getLogger(__name__)

ENV = "ONEFLOW_AUTODDL_PLAN_CACHE"
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_CODE: List[str] = []  # the planner's own digest, computed once


def default_directory() -> str:
    return os.environ.get(ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "oneflow_autoddl", "plans"
    )


def code_digest() -> str:
    """A digest of this package's code and presets: a plan from other code is not reused."""
    if not _CODE:
        h = hashlib.sha256()
        for here, dirs, files in os.walk(_PACKAGE):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    path = os.path.join(here, name)
                    h.update(os.path.relpath(path, _PACKAGE).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


def graph_fingerprint(graph: Graph) -> List[Any]:
    """Everything about the graph a plan depends on. Interface and train-step ops carry a
    process-wide counter in their names, so they are named by their place among such ops."""
    stable: Dict[str, str] = {}
    for op in graph.ops.values():
        stable[op.name] = f"{op.role}#{len(stable)}" if op.role in ("io", "system") else op.name
    rows: List[Any] = []
    for op in graph.ops.values():
        inputs = {}
        for bn, lbn in op.inputs.items():
            t = graph.tensor(lbn)
            inputs[bn] = (stable[t.producer], t.obn)
        outputs = {
            bn: (graph.tensor(lbn).shape, graph.tensor(lbn).dtype) for bn, lbn in op.outputs.items()
        }
        native = sorted((bn, repr(nd)) for bn, nd in op.native.items()) if op.native else None
        rows.append(
            [
                stable[op.name],
                op.type,
                op.role,
                sorted(inputs.items()),
                sorted(outputs.items()),
                sorted((k, repr(v)) for k, v in op.attrs.items()),
                [op.placement.device, list(op.placement.ranks), list(op.placement.hierarchy)],
                native,
            ]
        )
    return rows


def plan_key(
    graph: Graph,
    cluster: Cluster,
    memory_limit: Optional[float],
    hold: Optional[Dict[str, str]],
    ranks_per_node: Optional[int],
    strategy: str,
    options: SearchOptions,
) -> str:
    """The cache key: a hash of everything a plan depends on."""
    text = json.dumps(
        [
            graph_fingerprint(graph),
            cluster.to_json(),
            memory_limit,
            sorted((hold or {}).items()),
            ranks_per_node,
            strategy,
            repr(options.key()),
            code_digest(),
        ],
        sort_keys=True,
        default=repr,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class PlanCache:
    """Plans by key in `directory` (default_directory() when None)."""

    def __init__(self, directory: Optional[str] = None):
        self.directory = directory or default_directory()

    def path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def get(self, key: str) -> Optional[Plan]:
        """The plan stored under `key`, or None (a corrupt entry is deleted, with a warning)."""
        path = self.path(key)
        try:
            with open(path) as f:
                return Plan.from_json(f.read())
        except FileNotFoundError:
            return None
        except (OSError, PlanMismatch) as e:
            log.warning("AutoDDL: plan cache entry %s is unreadable (%s); searching anew", path, e)
            try:
                os.remove(path)
            except OSError:
                pass
            return None

    def put(self, key: str, plan: Plan) -> str:
        """Store `plan` under `key` (written whole, then renamed: a reader never sees half)."""
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(plan.to_json())
        os.replace(tmp, self.path(key))
        return self.path(key)
