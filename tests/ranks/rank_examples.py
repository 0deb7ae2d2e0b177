"""On one rank: a model outside the examples, traced for the CLI's --job."""

from types import SimpleNamespace

import oneflow as flow
from oneflow import nn

from examples.common import TrainGraph
from oneflow_autoddl.adapter.trace import save_job


def trace_cnn(path: str):
    """A small CNN the user wrote, traced on one rank for `python -m oneflow_autoddl plan --job`."""
    place = flow.placement("cpu", ranks=[0])
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 16 * 16, 64),
        nn.Tanh(),
        nn.Linear(64, 10),
    ).to_global(place, flow.sbp.broadcast)
    opt = flow.optim.Adam(model.parameters(), lr=1e-3)

    x = flow.randn(32, 3, 32, 32).to_global(place, flow.sbp.broadcast)
    y = flow.randint(0, 10, (32,)).to_global(place, flow.sbp.broadcast)
    graph = TrainGraph(model, nn.CrossEntropyLoss(), opt, SimpleNamespace(plan="dp"))
    return {"ops": save_job(graph, x, y, path=path)}
