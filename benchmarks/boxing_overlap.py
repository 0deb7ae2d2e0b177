"""What an all-reduce costs a CPU rank where other work is in flight beside it, against its price.

    python -m benchmarks.boxing_overlap [--nproc 2] [--rows 4 90 360 1440] [--json overlap.json]

On all ranks at once, per size (rows x 256 floats, the whole tensor on every rank), each graph
taking turns step by step (chains.step_times), 16 all-reduces (P -> B) in four arrangements,
each net of the same graph without them, per all-reduce:
  - "on the path": a matmul chain (rows x 256 by 256 x 256) whose every stage's output is
    all-reduced before the next stage reads it (activations resharded between layers);
  - "beside": the same chain whose every stage's output is also all-reduced on a branch of its
    own, read only by the loss at the end (data parallel's gradients: each all-reduced as backward
    goes on, read by its update at the end);
  - "chained": one all-reduce after another, no compute;
  - "at once": 16 independent all-reduces, no compute.
"price" is cost.boxing's for the same transition on `cpu-local` (cost.schedule charges a CPU
rank all of it in each arrangement: moving bytes and waits alike hold the rank). The first
and third say what a boxing on the critical path costs; the second and fourth what the waits
of boxings in flight together cost, which the schedule does not model (docs/results.md).
"""

import argparse
import statistics

from benchmarks.bench import run_on_ranks, show, write_json

STAGES = 16
WIDTH = 256
ARRANGEMENTS = ("on the path", "beside", "chained", "at once")


def _graphs(rows: int):
    """(graph with the all-reduces, graph without) per arrangement."""
    import oneflow as flow

    from oneflow_autoddl.adapter.calibrate_links import boxing_stage, flat
    from oneflow_autoddl.adapter.chains import Holder

    axis = flat(flow.env.get_world_size())
    tensors = {f"x{i}": axis.tensor(rows, WIDTH, "B") for i in range(STAGES)}
    holder = Holder(w=axis.tensor(WIDTH, WIDTH, "B", 1.0 / WIDTH), **tensors)
    all_reduce = boxing_stage(axis, ("P", "B"))

    def copy(h, x):
        return x * 1.0

    class Arranged(flow.nn.Graph):
        def __init__(self, arrangement: str, boxing):
            super().__init__()
            self.holder, self.arrangement, self.boxing = holder, arrangement, boxing

        def build(self):
            h, kind, box = self.holder, self.arrangement, self.boxing
            if kind == "at once":
                outs = [box(h, getattr(h, f"x{i}")) for i in range(STAGES)]
            else:
                x, outs = h.x0, []
                for _ in range(STAGES):
                    x = x if kind == "chained" else flow.matmul(x, h.w)
                    if kind == "beside":
                        outs.append(box(h, x))
                    else:
                        x = box(h, x)
                outs.append(x)
            total = outs[0].sum()
            for out in outs[1:]:
                total = total + out.sum()
            return total

    pairs = [(Arranged(a, all_reduce), Arranged(a, copy)) for a in ARRANGEMENTS]
    return [g for pair in pairs for g in pair]


def per_all_reduce(sizes, trials: int = 5):
    """On ranks: per size, the median over `trials` of each arrangement's step with its
    all-reduces less the step without them, per all-reduce, in seconds."""
    from oneflow_autoddl.adapter.chains import step_times

    out = []
    for rows in sizes:
        graphs = _graphs(rows)
        runs = [step_times(*graphs) for _ in range(trials)]
        steps = [statistics.median(run[i] for run in runs) for i in range(len(graphs))]
        net = [(steps[2 * k] - steps[2 * k + 1]) / STAGES for k in range(len(ARRANGEMENTS))]
        out.append((rows, net))
    return out


def price(rows: int, nproc: int, cluster: str = "cpu-local") -> float:
    """cost.boxing's seconds for the all-reduce (P -> B) of rows x WIDTH floats on nproc ranks."""
    from oneflow_autoddl.cost.cluster import load_cluster
    from oneflow_autoddl.cost.model import CostModel
    from oneflow_autoddl.sbp import parse_nd

    model = CostModel(load_cluster(cluster), [nproc])
    return model.transfer(parse_nd("P"), parse_nd("B"), (rows, WIDTH), "float32").time


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 90, 360, 1440])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    measured = run_on_ranks(
        "benchmarks.boxing_overlap:per_all_reduce", args.nproc, timeout=900, sizes=args.rows
    )[0]
    rows = []
    for size, net in measured:
        row = {
            "rows": size,
            "KiB": size * WIDTH * 4 / 1024,
            "price_ms": 1e3 * price(size, args.nproc),
        }
        row.update({a: 1e3 * t for a, t in zip(ARRANGEMENTS, net)})
        rows.append(row)
    columns = ["rows", "KiB", *ARRANGEMENTS, "price_ms"]
    headers = ["rows x 256", "KiB", *(f"{a} ms" for a in ARRANGEMENTS), "price ms"]
    print(show(rows, columns, headers))
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
