"""Rank functions that trace the examples' training graphs as the examples build them (never
run them) and return rank 0's Job, base64-encoded, for tests/test_models.py to read."""

import argparse
import base64

import oneflow as flow

from examples.common import TrainGraph
from examples.gpt_model import GPT, GPTLoss
from examples.vgg_model import VGG
from oneflow_autoddl.adapter.placement import placement
from oneflow_autoddl.mesh import parse_mesh


def _on(mesh: str):
    """The mesh's placement, all-broadcast and all-batch-split SBPs, as examples/common.py's
    setup()."""
    nd = len(parse_mesh(mesh))
    return placement("cpu", mesh), [flow.sbp.broadcast] * nd, [flow.sbp.split(0)] * nd


def _job(model, loss_fn, optimizer, mesh, *inputs):
    place, broadcast, batch_split = _on(mesh)
    graph = TrainGraph(model, loss_fn, optimizer, argparse.Namespace(plan="dp"))
    graph.build_graph(*(x.to_global(place, broadcast).to_global(sbp=batch_split) for x in inputs))
    if flow.env.get_rank() != 0:
        return {}
    return {"job": base64.b64encode(graph._full_graph_proto.SerializeToString()).decode()}


def trace_gpt(
    mesh: str, layers: int, hidden: int, heads: int, seq_len: int, vocab: int, batch: int
):
    """examples/gpt.py's graph: GPT + GPTLoss, AdamW."""
    place, broadcast, _ = _on(mesh)
    model = GPT(layers, hidden, heads, seq_len, vocab).to_global(place, broadcast)
    optimizer = flow.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = flow.zeros(batch, seq_len, dtype=flow.int64)
    return _job(model, GPTLoss(), optimizer, mesh, tokens, tokens)


def trace_vgg(
    mesh: str, depth: int, width_mult: float, image_size: int, num_classes: int, batch: int
):
    """examples/vgg.py's graph: VGG, cross entropy, SGD with momentum."""
    place, broadcast, _ = _on(mesh)
    model = VGG(depth, width_mult, image_size, num_classes).to_global(place, broadcast)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    images = flow.zeros(batch, 3, image_size, image_size)
    labels = flow.zeros(batch, dtype=flow.int64)
    return _job(model, flow.nn.CrossEntropyLoss(), optimizer, mesh, images, labels)
