"""A small training graph that uses every op type the zoo's rules brought (BatchNorm, pools,
upsampling, activations, concat, slice, slice_update, narrow, roll, expand, gather_nd, casts,
the two-stage max of a class-split softmax, ...), so that a Job with any of their candidates
compiles in seconds.

Past the convolution, BatchNorm and pools everything is 2-D (batch, features): the
candidates of an op grow with its rank (on a 2 x 2 mesh, as the square of its 1-D list), and
a round of tests/ranks/rank_acceptance.py tries one per op. Op types with the longest lists
(split_like, narrow_grad, reshape_like) appear several times, so that a round tries several.
Every concat joins two inputs (their gradients, split_like, then share one list). Every size
divides a 2 x 2 mesh evenly. `build("ops", mesh)` as examples/models.build.
"""

import numpy as np
import oneflow as flow
import oneflow.nn.functional as F

from oneflow_autoddl.mesh import parse_mesh

from .common import batch_inputs, replicate, train_graph

BATCH, CHANNELS, SIZE, CLASSES = 8, 8, 8, 8


class OpZoo(flow.nn.Module):
    """conv + BatchNorm, pools to (batch, features), activations, pieces and a table lookup,
    summed into a classifier whose logits are split over the classes (the class-split form of
    sparse_softmax_cross_entropy)."""

    def __init__(self, mesh_ndim: int):
        super().__init__()
        c = CHANNELS
        self.class_split = [flow.sbp.split(0)] * (mesh_ndim - 1) + [flow.sbp.split(1)]
        self.conv = flow.nn.Conv2d(4, c, 3, padding=1)
        self.bn = flow.nn.BatchNorm2d(c)
        self.scale = flow.nn.Parameter(flow.ones(1, c))
        self.gains = flow.nn.ParameterList([flow.nn.Parameter(flow.ones(c)) for _ in range(3)])
        self.table = flow.nn.Parameter(flow.randn(16, c))
        self.register_buffer("index", flow.tensor([3, 1, 4, 1, 5, 9, 2, 6], dtype=flow.int64))
        self.register_buffer("other", flow.tensor([2, 7, 1, 8, 2, 8, 1, 8], dtype=flow.int64))
        self.fc = flow.nn.Linear(4 * c, CLASSES)

    def pools(self, h):
        """(batch, 3 c) from 1-, 2- and 3-D average and adaptive average pools (the first two
        of upsampled images)."""
        n, c = BATCH, CHANNELS
        wide = F.interpolate(h.reshape(n, c, SIZE * SIZE), scale_factor=2.0, mode="nearest")
        one = F.adaptive_avg_pool1d(F.avg_pool1d(wide, 8), 1)
        large = F.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        two = F.adaptive_avg_pool2d(F.avg_pool2d(large, 4), 1)
        three = F.adaptive_avg_pool3d(F.avg_pool3d(h.reshape(n, c, 4, 4, 4), 2), 1)
        pairs = flow.cat([one.reshape(n, c), two.reshape(n, c)], dim=1)
        return flow.cat([pairs, three.reshape(n, c)], dim=1)

    def activations(self, z):
        s = flow.sigmoid(z)
        a = F.hardtanh(z, 0.0, 6.0) + F.hardswish(z) + F.hardsigmoid(z) + F.silu(z) + s
        a = a + flow.tanh(z) + flow.exp(s) + flow.log(s + 1.0) + flow.sqrt(s + 1.0) + s.pow(2)
        mask = (s >= 0.5).to(flow.float32)
        return a * mask + z.to(flow.float64).to(flow.float32)

    def pieces(self, a):
        """(batch, 2 c) from slices and narrows of the 3 c features, rolled, concatenated,
        scaled by gains unsqueezed to rows, and part of it added to in place."""
        c = CHANNELS
        cut = a[:, :c] + a[:, 2 * c :] + a.narrow(1, c, c) + a.narrow(1, 2 * c, c)
        cut = cut * self.gains[0][None, :] + self.scale.expand(BATCH, c)
        cut = flow.cat([cut, flow.roll(cut, 1, 1)], dim=1) * flow.cat(
            [self.gains[1][None, :], self.gains[2][None, :]], dim=1
        )
        cut[:, :c] += a[:, c : 2 * c]  # written in place: a slice_update
        return cut + a.narrow(1, 0, 2 * c)

    def forward(self, x):
        a = self.activations(self.pools(self.bn(self.conv(x))))
        rows = flow.cat([self.table[self.index], self.table[self.other]], dim=1)
        features = flow.cat([self.pieces(a), rows], dim=1)
        peak, _, count = flow._C.reduce_max_device_stage(features, [1])
        top, _ = flow._C.reduce_max_global_stage(peak, count, [1], True)
        return self.fc(features - top).to_global(sbp=self.class_split)


class ClassSplitLoss(flow.nn.Module):
    def forward(self, logits, labels):
        return flow._C.sparse_softmax_cross_entropy(logits, labels).mean()


def build(model: str, mesh: str, plan: str = "dp", **flags):
    """(graph, inputs) of the op zoo ("ops") on `mesh`: SGD with momentum, batch split."""
    if model != "ops":
        raise ValueError(f"op_zoo builds only 'ops', not {model!r}")
    flow.manual_seed(0)
    net = replicate(OpZoo(len(parse_mesh(mesh))), mesh)
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, 4, SIZE, SIZE).astype(np.float32)
    y = rng.randint(0, CLASSES, (BATCH,))
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    graph = train_graph(net, ClassSplitLoss(), opt, plan, **flags)
    inputs = batch_inputs([x, y], mesh)
    return graph, inputs
