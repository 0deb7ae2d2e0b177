"""What the tests' model builders share: a module on a mesh, replicated, as examples/common.py's
TrainGraph, fed numpy batches split over every mesh axis as the examples feed them."""

from types import SimpleNamespace
from typing import Sequence

import common  # examples/common.py
import numpy as np
import oneflow as flow

from oneflow_autoddl.adapter.placement import placement
from oneflow_autoddl.mesh import parse_mesh

FLAGS = ("cluster", "ranks_per_node", "memory_per_device", "load_plan")


def replicate(net: flow.nn.Module, mesh: str) -> flow.nn.Module:
    """`net` on `mesh` ("2", "2x2"; "1" in one process), every parameter broadcast."""
    return net.to_global(placement("cpu", mesh), [flow.sbp.broadcast] * len(parse_mesh(mesh)))


def train_graph(net, loss_fn, optimizer, plan: str = "dp", **flags) -> "common.TrainGraph":
    """loss_fn(net(x), y), backward, `optimizer`; `plan` and flags as common.configure takes
    them (unknown flags are refused)."""
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise TypeError(f"unknown flags {sorted(unknown)}; known: {', '.join(FLAGS)}")
    args = SimpleNamespace(plan=plan, **{f: flags.get(f) for f in FLAGS})
    return common.TrainGraph(net, loss_fn, optimizer, args)


def batch_inputs(arrays: Sequence[np.ndarray], mesh: str):
    """Global tensors on `mesh` with their batch split over every mesh axis."""
    place, nd = placement("cpu", mesh), len(parse_mesh(mesh))
    bcast, split = [flow.sbp.broadcast] * nd, [flow.sbp.split(0)] * nd
    return [flow.tensor(a).to_global(place, bcast).to_global(sbp=split) for a in arrays]
