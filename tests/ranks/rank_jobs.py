"""Functions the tests run on OneFlow ranks (oneflow_autoddl.launch.run_on_ranks); each returns
JSON."""

from types import SimpleNamespace

import numpy as np
import oneflow as flow
from oneflow import nn

from examples.common import TrainGraph
from oneflow_autoddl.adapter.placement import placement


def _mlp(place, nd):
    """A 2-layer MLP with numpy-made weights, the same on every rank and for every mesh."""
    rng = np.random.RandomState(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    for p in model.parameters():
        p.data = flow.tensor(rng.randn(*p.shape).astype(np.float32) * 0.2)
    return model.to_global(place, [flow.sbp.broadcast] * nd)


def train_mlp(mesh: str, steps: int = 3):
    """Data parallel: batch split on every mesh axis, parameters replicated, SGD."""
    place = placement("cpu", mesh)
    nd = len(mesh.split("x"))
    model = _mlp(place, nd)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    graph, rng = (
        TrainGraph(model, nn.CrossEntropyLoss(), opt, SimpleNamespace(plan="dp")),
        np.random.RandomState(1),
    )
    split = [flow.sbp.split(0)] * nd
    losses = []
    for _ in range(steps):
        x = flow.tensor(rng.randn(16, 32).astype(np.float32)).to_global(
            place, [flow.sbp.broadcast] * nd
        )
        y = flow.tensor(rng.randint(0, 8, 16)).to_global(place, [flow.sbp.broadcast] * nd)
        losses.append(float(graph(x.to_global(sbp=split), y.to_global(sbp=split)).numpy()))
    return {"losses": losses, "rank": flow.env.get_rank()}
