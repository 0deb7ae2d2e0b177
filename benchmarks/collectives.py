"""Collectives on CPU ranks against the cost model, at two rank counts.

    python -m benchmarks.collectives [--nproc 2,4] [--cluster cpu-local] [--json coll.json]

On all ranks of one machine at once, each collective (all-gather, reduce-scatter, all-reduce,
all-to-all over every rank) on float tensors of ROWS x 256, each boxed chain against the same
chain without the boxing, all taking turns (calibrate's own measurement,
adapter.calibrate_links), beside what the cluster predicts for that boxing on that many ranks
(cost.model: the calibration's figures for its own rank count, cost.sharing's scaling for
another). The last columns set each rank count's time against the first's, measured and
predicted: the model keeps a link's figures per byte and per message at any rank count, so its
ratio is that of the bytes and messages per rank; the measured ratio says what the machine does.
"""

import argparse
from typing import Dict, List

from benchmarks.bench import run_on_ranks, show, write_json

ROWS = (1024, 4096, 8192)  # of 256 floats: 1, 4 and 8 MiB
WIDTH = 256
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
TARGET = "benchmarks.collectives:times"


def times(cluster: str = "cpu-local") -> List[dict]:
    """On ranks: per collective and size, measured and predicted seconds per boxing."""
    import oneflow as flow

    from oneflow_autoddl.adapter.calibrate_links import COLLECTIVE_STAGES, collective_times, flat
    from oneflow_autoddl.cost.cluster import load_cluster
    from oneflow_autoddl.cost.model import CostModel

    n = flow.env.get_world_size()
    model = CostModel(load_cluster(cluster), (n,))
    rows = []
    for kind in KINDS:
        src, dst = COLLECTIVE_STAGES[kind][2]
        for size, (seconds, _, _) in zip(ROWS, collective_times(flat(n), kind, ROWS, WIDTH)):
            predicted = model.transfer((src,), (dst,), (size, WIDTH), "float32")
            rows.append(
                {
                    "ranks": n,
                    "kind": kind,
                    "mib": size * WIDTH * 4 / 2**20,
                    "measured_ms": seconds * 1e3,
                    "predicted_ms": predicted.time * 1e3,
                    "bytes_per_rank": predicted.bytes,
                }
            )
    return rows


def against_first(rows: List[dict], first: int) -> None:
    """Each row's times over the same collective's on `first` ranks, measured and predicted."""
    base: Dict[tuple, dict] = {(r["kind"], r["mib"]): r for r in rows if r["ranks"] == first}
    for r in rows:
        b = base[(r["kind"], r["mib"])]
        r["predicted_over_measured"] = r["predicted_ms"] / r["measured_ms"]
        r["measured_vs_first"] = r["measured_ms"] / b["measured_ms"]
        r["predicted_vs_first"] = r["predicted_ms"] / b["predicted_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", default="2,4", help="rank counts, comma-separated")
    parser.add_argument("--cluster", default="cpu-local")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    counts = [int(n) for n in args.nproc.split(",")]
    rows: List[dict] = []
    for n in counts:
        on_ranks = run_on_ranks(TARGET, n, timeout=900, cluster=args.cluster)
        rows += on_ranks[0]  # every rank measures the same collectives; rank 0's rows
    against_first(rows, counts[0])
    columns = [
        "ranks",
        "kind",
        "mib",
        "measured_ms",
        "predicted_ms",
        "predicted_over_measured",
        "measured_vs_first",
        "predicted_vs_first",
    ]
    headers = [
        "ranks",
        "collective",
        "MiB",
        "measured ms",
        "predicted ms",
        "predicted / measured",
        f"measured / {counts[0]} ranks'",
        f"predicted / {counts[0]} ranks'",
    ]
    print(show(rows, columns, headers))
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
