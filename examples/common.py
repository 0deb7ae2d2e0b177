"""What the GPT and VGG examples share: flags, the training graph, the loop, the report."""

import argparse
import json
import logging
import sys
import time
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import oneflow as flow
from tqdm import tqdm

import oneflow_autoddl
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.adapter.placement import placement
from oneflow_autoddl.cli import parse_bytes
from oneflow_autoddl.mesh import mesh_size, parse_mesh
from oneflow_autoddl.planner import describe
from oneflow_autoddl.report import summary

PLANS = ("autoddl", "native", "dp", "megatron", "zero")


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--mesh", default=None, help="device mesh, e.g. 4 or 2x2 (default: all ranks, 1-D)"
    )
    parser.add_argument(
        "--cluster",
        default=None,
        help="cluster preset or JSON file for the cost model (default: cpu-local on cpu, "
        "dgx-a100 on cuda)",
    )
    parser.add_argument(
        "--ranks-per-node",
        type=int,
        default=None,
        help="ranks per node for the cost model (default: the cluster's devices per node)",
    )
    parser.add_argument(
        "--memory-per-device",
        type=parse_bytes,
        default=None,
        help="bytes a device may hold (80e9, 40GiB, 512MB)",
    )
    parser.add_argument(
        "--plan",
        default="autoddl",
        choices=PLANS,
        help="autoddl: search; native: OneFlow's auto-parallel; dp: plain data parallel; "
        "megatron / zero: those expert plans, applied by the plugin",
    )
    parser.add_argument(
        "--load-plan", default=None, help="a plan JSON saved by --json, to skip the search"
    )
    parser.add_argument(
        "--no-plan-cache",
        action="store_true",
        help="always search (default: reuse the plan of an identical earlier run)",
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--json", default=None, help="write losses, step times and the plan here (rank 0)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    parser.add_argument("--op-table", action="store_true", help="also print every op's SBP")
    parser.add_argument(
        "--save-job",
        default=None,
        help="write the traced Job (protobuf) here, for `python -m oneflow_autoddl plan --job`",
    )


def start(parser: argparse.ArgumentParser, argv=None):
    """Parse the flags (the common ones added), set up logging, the placement for --mesh and
    the seed. Returns (args, placement, n-D broadcast, n-D batch split)."""
    add_common_flags(parser)
    args = parser.parse_args(argv)
    mesh = parse_mesh(args.mesh) if args.mesh else (flow.env.get_world_size(),)
    if args.batch_size % mesh_size(mesh):
        raise SystemExit(
            f"--batch-size {args.batch_size} must be a multiple of the {mesh_size(mesh)} devices "
            f"of the mesh"
        )
    level = logging.INFO if flow.env.get_rank() == 0 and not args.quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stdout)
    flow.manual_seed(args.seed)
    return (
        args,
        placement(args.device, mesh),
        [flow.sbp.broadcast] * len(mesh),
        [flow.sbp.split(0)] * len(mesh),
    )


def configure(graph: flow.nn.Graph, args) -> None:
    """Auto-parallel settings in OneFlow's style, from the example's flags."""
    if args.plan == "dp":
        return
    graph.config.enable_auto_parallel(True)
    graph.config.enable_auto_parallel_ignore_user_sbp_config(True)
    if args.plan == "native":
        graph.config.set_auto_parallel_planner("native")
        graph.config.enable_auto_parallel_trunk_algo(True)
        graph.config.enable_auto_parallel_sbp_collector(
            False
        )  # crashes on CPU in 0.9.0 (notes 1.7)
        return
    graph.config.set_auto_parallel_planner(
        {"autoddl": "autoddl", "megatron": "megatron", "zero": "zero"}[args.plan]
    )
    if args.cluster:
        graph.config.set_auto_parallel_cluster(args.cluster)
    if args.ranks_per_node:
        graph.config.set_auto_parallel_ranks_per_node(args.ranks_per_node)
    if args.memory_per_device:
        graph.config.set_auto_parallel_memory_per_device(args.memory_per_device)
    if args.load_plan:
        graph.config.set_auto_parallel_plan(args.load_plan)
    if getattr(args, "no_plan_cache", False):
        graph.config.set_auto_parallel_plan_cache(False)


class TrainGraph(flow.nn.Graph):
    """loss_fn(model(x), y), backward, one optimizer; auto-parallel as `args.plan` says
    (`args` needs only `plan` when it is "dp")."""

    def __init__(self, model, loss_fn, optimizer, args):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.add_optimizer(optimizer)
        configure(self, args)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


# The flags `train_graph` passes on to `configure` (besides the plan).
GRAPH_FLAGS = ("cluster", "ranks_per_node", "memory_per_device", "load_plan", "plan_cache")


def replicate(net: flow.nn.Module, mesh: str) -> flow.nn.Module:
    """`net` on the CPUs of `mesh` ("2", "2x2"; "1" in one process), every parameter broadcast."""
    return net.to_global(placement("cpu", mesh), [flow.sbp.broadcast] * len(parse_mesh(mesh)))


def train_graph(net, loss_fn, optimizer, plan: str = "dp", **flags) -> TrainGraph:
    """TrainGraph of loss_fn(net(x), y) and `optimizer`, configured as the examples' flags would:
    `plan` and GRAPH_FLAGS (an unknown flag is a TypeError naming the known ones). The plan cache
    is off unless plan_cache=True: tests and benchmarks measure the search."""
    unknown = set(flags) - set(GRAPH_FLAGS)
    if unknown:
        raise TypeError(f"unknown flags {sorted(unknown)}; known: {', '.join(GRAPH_FLAGS)}")
    args = SimpleNamespace(
        plan=plan,
        no_plan_cache=not flags.get("plan_cache", False),
        **{f: flags.get(f) for f in GRAPH_FLAGS if f != "plan_cache"},
    )
    return TrainGraph(net, loss_fn, optimizer, args)


def batch_inputs(arrays: Sequence[np.ndarray], mesh: str):
    """Global tensors on the CPUs of `mesh`, each with its batch split over every mesh axis."""
    place, nd = placement("cpu", mesh), len(parse_mesh(mesh))
    bcast, split = [flow.sbp.broadcast] * nd, [flow.sbp.split(0)] * nd
    return [flow.tensor(a).to_global(place, bcast).to_global(sbp=split) for a in arrays]


def plan_json(graph, args, device: str):
    """The plan the graph runs, as plan_of(graph) JSON; for dp / native, OneFlow's own choice
    costed."""
    plan = oneflow_autoddl.plan_of(graph)
    if plan is None:
        cluster = args.cluster or ("cpu-local" if device == "cpu" else "dgx-a100")
        plan = describe(read_job(graph._full_graph_proto), cluster, args.ranks_per_node)
    return plan


def train(graph, batches, args, device: str) -> dict:
    """Run --steps steps; print the SBP tables after the first (the compile)."""
    rank0 = flow.env.get_rank() == 0
    losses, times = [], []
    bar = tqdm(
        range(args.steps),
        disable=not rank0 or args.quiet,
        desc=f"{args.plan} training",
        unit="step",
    )
    plan = None
    for step in bar:
        x, y = batches(step)
        start = time.perf_counter()
        loss = float(graph(x, y).numpy())
        times.append(time.perf_counter() - start)
        losses.append(loss)
        if step == 0:
            if rank0 and args.save_job:
                with open(args.save_job, "wb") as f:
                    f.write(graph._full_graph_proto.SerializeToString())
            plan = plan_json(graph, args, device)
            if rank0 and not args.quiet:
                tqdm.write(f"\n{summary(plan)}\n\n{plan.table(ops=args.op_table)}\n")
        bar.set_postfix(loss=f"{loss:.4f}", step_s=f"{times[-1]:.3f}")
    result = {"losses": losses, "step_times_s": times, "plan": plan.to_dict() if plan else None}
    if rank0 and args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result
