"""Matmul FLOP rate by shape on 4 CPU ranks: what one rate per dtype in the cluster file misses.

    python -m benchmarks.matmul_shapes [--nproc 4] [--json shapes.json]

Each shape (rows per rank x K x N) is timed as calibrate times its matmul chain (16 stages,
here two matmuls a stage, x @ W then @ W2, the median of 9 steps), all ranks at once; the rate
is given as measured and net of the cluster file's cost per op (`device.op_overhead`), beside
the cluster's one figure. The examples' GPT has 64 rows per rank under data parallel on 4
ranks and 128 under Megatron-style on 2 x 2.
"""

import argparse

from benchmarks.bench import run_on_ranks, show, write_json
from oneflow_autoddl.cost.cluster import load_cluster

SHAPES = [
    (1024, 256, 256),
    (256, 512, 512),
    (128, 512, 256),
    (128, 512, 768),
    (64, 512, 512),
    (64, 512, 1536),
]


def rates(shapes):
    """On ranks: seconds per matmul of each shape (one stage holds two)."""
    import oneflow as flow

    from oneflow_autoddl.adapter.chains import broadcast_ones, split_ones, stage_time

    n = flow.env.get_world_size()
    place = flow.placement("cpu", ranks=list(range(n)))
    return [
        stage_time(
            lambda h, x: flow.matmul(flow.matmul(x, h.w), h.w2),
            x=split_ones(place, rows * n, k),
            w=broadcast_ones(place, k, m),
            w2=broadcast_ones(place, m, k),
        )
        / 2
        for rows, k, m in shapes
    ]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--cluster", default="cpu-local")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cluster = load_cluster(args.cluster)
    seconds = run_on_ranks(
        "benchmarks.matmul_shapes:rates", args.nproc, timeout=900, shapes=SHAPES
    )[0]
    rows = []
    for (m, k, n), t in zip(SHAPES, seconds):
        flops = 2 * m * k * n
        rows.append(
            {
                "shape": f"{m} x {k} x {n}",
                "ms": 1e3 * t,
                "gflops": flops / t / 1e9,
                "net_gflops": flops / max(t - cluster.op_overhead, 1e-9) / 1e9,
                "cluster_gflops": cluster.flops_for("float32") / 1e9,
            }
        )
    print(
        show(
            rows,
            ["shape", "ms", "gflops", "net_gflops", "cluster_gflops"],
            [
                "rows per rank x K x N",
                "ms per matmul",
                "GFLOP/s",
                "net of the cost per op",
                f"{args.cluster}'s figure",
            ],
        )
    )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
