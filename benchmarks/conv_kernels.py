"""Convolution kernels on CPU ranks beside the cost model: forward, data and filter gradients.

    python -m benchmarks.conv_kernels [--nproc 2] [--cluster cpu-local] [--json conv.json]

Each shape (samples per rank x channels x size, by a 3 x 3 filter padded to keep the size: the
stages of a ResNet at 64 px) is timed as calibrate times its convolutions
(adapter.calibrate_convs.conv_graphs: 16 stages, the median of 9 steps, the graphs taking turns,
all ranks at once). A kernel's time a stage is the forward step's share, or for a gradient the
difference of two train steps (calibrate_convs.stage_seconds, here with nothing taken off), and
stands beside what the cost model charges the same op on one rank's shapes (cost.compute.op_time
with the cluster scaled to the ranks in use, cost.sharing.for_ranks).
"""

import argparse
from typing import Dict, List, Tuple

from benchmarks.bench import run_on_ranks, show, write_json
from oneflow_autoddl.adapter.calibrate_convs import CONV_KERNELS, blob_shapes
from oneflow_autoddl.cost.cluster import Cluster, load_cluster
from oneflow_autoddl.cost.compute import op_time
from oneflow_autoddl.cost.sharing import for_ranks
from oneflow_autoddl.ir import Graph, Op, Placement, Tensor
from oneflow_autoddl.sbp import B, Signature

SHAPES = [
    (2, 512, 2),
    (4, 512, 2),
    (8, 512, 2),
    (4, 256, 4),
    (8, 256, 4),
    (4, 128, 8),
    (8, 128, 8),
    (4, 64, 16),
    (8, 64, 16),
]


def measured(shapes: List[Tuple[int, int, int]]) -> List[Dict[str, float]]:
    """On ranks: seconds a stage of each kernel takes, per shape (a shape's graphs taking turns;
    one shape's graphs alive at a time: the 45 graphs of all shapes at once crashed OneFlow)."""
    import oneflow as flow

    from oneflow_autoddl.adapter import calibrate_convs as convs
    from oneflow_autoddl.adapter.chains import step_times

    place = flow.placement("cpu", ranks=list(range(flow.env.get_world_size())))
    return [
        convs.stage_seconds(step_times(*convs.conv_graphs(place, tuple(shape))), 0.0, 0.0)
        for shape in shapes
    ]


def predicted(cluster: Cluster, kernel: str, shape: Tuple[int, int, int]) -> float:
    """Seconds the cost model charges `kernel` on one rank's `shape` (its blobs unsplit)."""
    place = Placement("cpu", (0,), (1,))
    tensors, inputs, local = [], {}, blob_shapes(kernel, shape)
    ops = []
    for bn, blob_shape in local.items():
        producer = kernel if bn.endswith(("out_0", "dx_0", "filter_diff_0")) else f"in-{bn}"
        tensors.append(Tensor(f"{producer}/{bn}", blob_shape, "float32", producer, bn))
        if producer != kernel:
            ops.append(Op(producer, "input_conf", {}, {bn: f"{producer}/{bn}"}, place))
            inputs[bn] = f"{producer}/{bn}"
    outputs = {t.obn: t.lbn for t in tensors if t.producer == kernel}
    attrs = {"kernel_size": [3, 3], "groups": 1, "padding_before": [1, 1], "strides": [1, 1]}
    op = Op(kernel, kernel, inputs, outputs, place, attrs)
    graph = Graph("conv", ops + [op], tensors)
    return op_time(cluster, graph, op, Signature({bn: (B,) for bn in local}))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cluster", default="cpu-local")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cluster = for_ranks(load_cluster(args.cluster), args.nproc)
    stages = run_on_ranks(
        "benchmarks.conv_kernels:measured", args.nproc, timeout=1200, shapes=SHAPES
    )[0]
    rows = []
    for shape, seconds in zip(SHAPES, stages):
        row = {"shape": " x ".join(map(str, shape))}
        for kernel in CONV_KERNELS:
            row[f"{kernel}_ms"] = 1e3 * seconds[kernel]
            row[f"{kernel}_ratio"] = predicted(cluster, kernel, shape) / seconds[kernel]
        rows.append(row)
    columns = ["shape"] + [f"{k}_{f}" for k in CONV_KERNELS for f in ("ms", "ratio")]
    headers = ["samples x channels x size (a rank)"] + [
        f"{k} {f}" for k in CONV_KERNELS for f in ("ms", "predicted / measured")
    ]
    print(show(rows, columns, headers))
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
