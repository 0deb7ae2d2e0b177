"""The seed step of the search: the plans the descents start from.

The expert plans (search.baselines: data parallel, Megatron-style, ZeRO-style), everything
replicated, OneFlow's own greedy inference where the graph came from a Job, and on n-D
meshes whose axes share their links the best plan of the flat 1-D mesh, lifted.
"""

import logging
from typing import Dict, List, Optional

from ..errors import GraphError
from ..remesh import remesh
from ..sbp import Signature
from . import baselines
from .problem import Problem

log = logging.getLogger(__name__)

Assignment = List[int]


def seeds(problem: Problem) -> Dict[str, Assignment]:
    """The expert plans, everything replicated, and OneFlow's own inference where known."""
    out = {name: fn(problem) for name, fn in baselines.BASELINES.items()}
    if problem.mesh.ndim > 1:
        out["megatron_zero"] = baselines.megatron_zero(problem)
    out["replicated"] = baselines.replicated(problem)
    native = baselines.native(problem)
    if native is not None:
        out["oneflow_inference"] = native  # OneFlow's greedy SBP inference, not its auto-parallel
    elif any(op.native is not None for op in problem.graph.ops.values() if op.role != "io"):
        log.info("OneFlow's own signatures are not all among the candidates; not used as a seed")
    return out


def flat_graph(problem: Problem, held: bool):
    """The graph on the 1-D mesh of the same devices, where a flat plan can seed this one: an
    n-D mesh whose axes all run over the same links (a 1-D mesh across nodes is held to the
    slowest link), with no user SBP held, and a batch that splits over every device."""
    axes = problem.model.mapping.axes
    if len(axes) < 2 or held or len({(a.link, a.crosses_nodes) for a in axes}) > 1:
        return None
    try:
        return remesh(problem.graph, (problem.mesh.size,), problem.mesh.ranks)
    except GraphError:  # the batch does not split over all devices: no 1-D data parallelism
        return None


def lift(problem: Problem, flat: Problem, x: Assignment) -> Optional[Assignment]:
    """The flat plan `x` on `problem`'s mesh, each SBP repeated on every axis (S(0) over 4
    devices is (S(0), S(0)) over 2 x 2); fixed ops keep what OneFlow gave them. None where a
    lifted signature is not a candidate."""
    axes = problem.mesh.ndim
    lifted = {}
    for unit in problem.units:
        for name in unit.ops if unit.fixed is None else ():
            sig = flat.signature(name, x)
            if problem.graph.op(name).placement == problem.mesh:
                sig = Signature({bn: nd * axes for bn, nd in sig.items()})
            lifted[name] = sig
    return problem.assignment_of(lifted)
