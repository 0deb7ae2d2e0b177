"""The examples' models at test sizes, as untraced training graphs with their inputs (for the tests
and benchmarks)."""

import numpy as np
import oneflow as flow

from .common import batch_inputs, replicate, train_graph
from .gpt_model import GPT, GPTLoss
from .vgg_model import VGG

GPT_SIZES = dict(layers=2, hidden=32, heads=4, seq_len=8, vocab=64)
VGG_SIZES = dict(depth=16, width_mult=0.125, image_size=32, num_classes=10)


def fuse_layer_norm() -> None:
    """Trace nn.LayerNorm as the fused layer_norm op, as OneFlow does on CUDA (its CPU kernel is
    missing, so graphs traced this way can be compiled here but not run)."""

    def forward(self, x):
        axis = x.dim() - len(self.normalized_shape)
        return flow._C.layer_norm_affine(
            x,
            self.weight,
            self.bias,
            begin_norm_axis=axis,
            begin_params_axis=axis,
            epsilon=self.eps,
        )

    flow.nn.LayerNorm.forward = forward


def build(
    model: str,
    mesh: str,
    plan: str = "dp",
    batch: int = 8,
    optimizer: str = "default",
    sizes=None,
    **flags,
):
    """(graph, inputs) for "gpt", "gpt-fused" (LayerNorm as on CUDA) or "vgg" on `mesh`, at the
    test sizes or `sizes`; `plan` and flags as examples/common.configure takes them. The plan
    cache is off unless `plan_cache=True`: tests and benchmarks measure the search."""
    if model == "gpt-fused":
        fuse_layer_norm()
        model = "gpt"
    flow.manual_seed(0)
    rng = np.random.RandomState(0)
    if model == "gpt":
        s = dict(GPT_SIZES, **(sizes or {}))
        net = replicate(GPT(**s), mesh)
        loss_fn = GPTLoss()
        x = rng.randint(0, s["vocab"], (batch, s["seq_len"]))
        y = rng.randint(0, s["vocab"], (batch, s["seq_len"]))
    else:
        s = dict(VGG_SIZES, **(sizes or {}))
        net = replicate(VGG(**s), mesh)
        loss_fn = flow.nn.CrossEntropyLoss()
        x = rng.randn(batch, 3, s["image_size"], s["image_size"]).astype(np.float32)
        y = rng.randint(0, s["num_classes"], (batch,))
    if optimizer == "adam" or (optimizer == "default" and model == "gpt"):
        opt = flow.optim.Adam(net.parameters(), lr=1e-3)
    elif optimizer == "sgd":
        opt = flow.optim.SGD(net.parameters(), lr=0.05)
    else:
        opt = flow.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    return train_graph(net, loss_fn, opt, plan, **flags), batch_inputs([x, y], mesh)
