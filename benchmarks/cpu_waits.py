"""Whether CPU ranks compute through a boxing's waits on its peers (cost.schedule's on_cpu).

    python -m benchmarks.cpu_waits [--nproc 4] [--json waits.json]

On all ranks at once, taking turns step by step (chains.step_times): a matmul chain of 16
stages (ROWS x 256 by 256 x 256 per rank), a chain of 16 all-reduces of 4 x 16 floats per rank
(latency-bound: its time is its waits), and the two side by side, independent of each other.
"hidden" is the share of the all-reduce chain's time the side-by-side step did not add to the
matmuls'; cost.schedule charges CPU ranks all of a boxing's waits, as 0 here says.
"""

import argparse

from benchmarks.bench import run_on_ranks, show, write_json

ROWS = (1024, 256)  # matmul rows per rank, two chain lengths of compute beside the same waits


def times(trials: int = 2):
    """On ranks: per ROWS and trial, (matmul chain, all-reduce chain, both) step seconds."""
    import oneflow as flow

    from oneflow_autoddl.adapter.calibrate_links import boxing_stage, flat
    from oneflow_autoddl.adapter.chains import Chain, Holder, step_times

    n = flow.env.get_world_size()
    axis = flat(n)
    all_reduce = boxing_stage(axis, ("P", "B"))  # a partial sum made whole: one all-reduce
    out = []
    for rows in ROWS:
        holder = Holder(
            x=axis.tensor(rows * n, 256, "S0"),
            w=axis.tensor(256, 256, "B", 0.01),
            z=axis.tensor(4 * n, 16, "P"),
        )
        waits = Holder(x=axis.tensor(4 * n, 16, "P"))
        matmul = lambda h, x: flow.matmul(x, h.w)  # noqa: E731
        for _ in range(trials):
            out.append(
                (
                    rows,
                    *step_times(
                        Chain(holder, matmul),
                        Chain(waits, all_reduce),
                        Chain(holder, matmul, beside=all_reduce),
                    ),
                )
            )
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = [
        {
            "rows": r,
            "matmul_ms": 1e3 * m,
            "all_reduce_ms": 1e3 * a,
            "both_ms": 1e3 * both,
            "hidden": (m + a - both) / a,
        }
        for r, m, a, both in run_on_ranks("benchmarks.cpu_waits:times", args.nproc, timeout=900)[0]
    ]
    print(
        show(
            rows,
            ["rows", "matmul_ms", "all_reduce_ms", "both_ms", "hidden"],
            [
                "matmul rows / rank",
                "matmul chain ms",
                "all-reduce chain ms",
                "side by side ms",
                "share of the waits hidden",
            ],
        )
    )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
