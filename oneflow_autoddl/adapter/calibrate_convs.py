"""The rates of CPU convolutions' passes below their roofline, forward and both gradients.

OneFlow 0.9.0's CPU kernels unfold (or fold back) columns for every sample and read (or
accumulate into) the filter once a sample, around a matrix product (rules.nn). Each kernel's two
passes have rates of their own (cost.cluster.KERNEL_KINDS); `calibrate` reads them here from
graphs of STAGES 3 x 3 convolutions at two shapes, one mostly columns and one mostly filter, so
that a kernel's two rates are the two unknowns of two equations. The graphs take turns with
calibrate's other chains (calibrate._device), all ranks at once:

  - forward: the convolutions alone;
  - data: a train step in which the input learns and the filters do not: forward plus one data
    gradient a stage;
  - filter: the same with the filters requiring gradients too (no optimizer updates them): plus
    one filter gradient a stage;
  - and a forward and a train step with no stage, whose difference (the loss's gradient and the
    input's update) the data step is net of.

A gradient's stage is then a difference of steps with the same fixed cost (starting a step,
fetching its output), a forward stage the forward step's share net of an empty chain's (which
carries that cost); each is net of the cost per op and of its FLOPs at the matmul chain's rate,
as the rules give both to cost.compute.
"""

from typing import Dict, Sequence, Tuple

import numpy as np
import oneflow as flow

from ..rules import get_rule
from .chains import STAGES, TrainStep, broadcast_ones, split_ones

# (samples per rank, channels, size) of the two convolutions, by a 3 x 3 filter padded to keep
# the size: one mostly columns (a large image, a small filter), one mostly filter (a small image,
# a large filter), so the two rates of each kernel solve apart.
CONV_SHAPES = ((8, 32, 16), (4, 512, 2))
# The kernels whose passes calibrate measures (rule names); each rule names its two kinds.
CONV_KERNELS = ("conv2d", "conv_data_grad", "conv_filter_grad")


class _Convs(flow.nn.Module):
    """`stages` 3 x 3 convolutions from a learning input, each with its own filter (so that no
    gradient sums over stages), the output summed; the filters require gradients where asked."""

    def __init__(self, place, shape: Tuple[int, int, int], stages: int, filter_grads: bool):
        super().__init__()
        batch, c, size = shape
        n = flow.env.get_world_size()
        self.x = flow.nn.Parameter(split_ones(place, batch * n, c, size, size))
        self.stages = stages
        for i in range(stages):
            w = broadcast_ones(place, c, c, 3, 3)
            setattr(self, f"w{i}", flow.nn.Parameter(w, requires_grad=filter_grads))

    def forward(self):
        x = self.x
        for i in range(self.stages):
            x = flow.nn.functional.conv2d(x, getattr(self, f"w{i}"), padding=1)
        return x.sum()


class _Forward(flow.nn.Graph):
    def __init__(self, convs: _Convs):
        super().__init__()
        self.convs = convs

    def build(self):
        return self.convs()


def _train(convs: _Convs) -> TrainStep:
    """A train step whose optimizer updates the input only (lr 0: every step alike)."""
    return TrainStep(convs, flow.optim.SGD([convs.x], lr=0.0))


def conv_graphs(place, shape: Tuple[int, int, int]) -> Tuple[flow.nn.Graph, ...]:
    """forward, data, filter, and the forward and train steps with no stage (see the module's
    docstring), in the order stage_seconds reads their step times."""
    return (
        _Forward(_Convs(place, shape, STAGES, False)),
        _train(_Convs(place, shape, STAGES, False)),
        _train(_Convs(place, shape, STAGES, True)),
        _Forward(_Convs(place, shape, 0, False)),
        _train(_Convs(place, shape, 0, False)),
    )


def stage_seconds(times: Sequence[float], empty: float, per_op: float) -> Dict[str, float]:
    """Seconds a stage of each kernel takes net of the cost per op, from the step times of one
    shape's graphs, an empty chain's stage and the cost per op."""
    forward, data, both, bare_forward, bare_train = times
    return {
        "conv2d": forward / STAGES - empty,
        "conv_data_grad": (data - forward - bare_train + bare_forward) / STAGES - per_op,
        "conv_filter_grad": (both - data) / STAGES - per_op,
    }


def blob_shapes(kernel: str, shape: Tuple[int, int, int]) -> Dict[str, Tuple[int, ...]]:
    """A stage's blob shapes on one rank, as the kernel's rule names them."""
    batch, c, size = shape
    image, weight = (batch, c, size, size), (c, c, 3, 3)
    return {
        "conv2d": {"in_0": image, "weight_0": weight, "out_0": image},
        "conv_data_grad": {"dy_0": image, "filter_0": weight, "x_like_0": image, "dx_0": image},
        "conv_filter_grad": {"dy_0": image, "x_0": image, "filter_diff_0": weight},
    }[kernel]


def work(kernel: str, shape: Tuple[int, int, int]) -> Tuple[float, Dict[str, float]]:
    """(FLOPs, elements of each of its passes by kind) of a stage on one rank, from its rule."""
    rule, local = get_rule(kernel), blob_shapes(kernel, shape)
    attrs = {"kernel_size": [3, 3], "groups": 1}
    return rule.flops(attrs, local), {kind: f(attrs, local) for kind, f in rule.passes}


def pass_rates(stages: Sequence[Dict[str, float]], flops: float) -> Dict[str, float]:
    """Bytes/s of every kernel's two passes: for each kernel, the rates that make its stage time
    at both CONV_SHAPES (stage_seconds), net of its FLOPs at `flops`, equal its passes' float32
    bytes at those rates. A rate lost in the noise (a solved time at or below zero) comes out
    above calibrate.IMPLAUSIBLE, so that calibrate measures again."""
    rates = {}
    for kernel in CONV_KERNELS:
        kinds = [kind for kind, _ in get_rule(kernel).passes]
        net, elements = [], []
        for shape, seconds in zip(CONV_SHAPES, stages):
            stage_flops, passes = work(kernel, shape)
            net.append(seconds[kernel] - stage_flops / flops)
            elements.append([4.0 * passes[kind] for kind in kinds])
        inverse = np.linalg.solve(np.array(elements), np.array(net))
        rates.update({kind: 1.0 / max(x, 1e-18) for kind, x in zip(kinds, inverse)})
    return rates
