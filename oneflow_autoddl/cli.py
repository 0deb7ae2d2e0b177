"""python -m oneflow_autoddl {plan, calibrate}: plan any cluster from a laptop; measure this one.

    python -m oneflow_autoddl plan --model gpt --layers 96 --hidden 12288 --heads 96 \\
        --seq-len 2048 --vocab 50257 --batch-size 128 --mesh 128x8 --cluster dgx-a100
    python -m oneflow_autoddl plan --job my_model.job --mesh 8 --cluster dgx-a100 --json plan.json
"""

import argparse
import logging
import math
import os
import re
import sys
from typing import List, Optional

from .cost.cluster import PRESET_DIR, load_cluster, preset_names
from .errors import AutoDDLError, ConfigError, GraphError
from .gc_pause import gc_paused
from .mesh import parse_mesh
from .planner import STRATEGIES, plan
from .report import op_table, parameter_table, summary, transfer_table
from .search.executor import Cores

MODEL_NAMES = ("gpt", "vgg11", "vgg13", "vgg16", "vgg19")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "t": 1e12,
    "tb": 1e12,
}


def parse_bytes(text: str) -> float:
    """`80e9`, `40GiB`, `512MB` -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 80e9, 40GiB, 512MB)")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def _graph(args):
    if args.job:
        from .remesh import remesh

        return remesh(_read_job_file(args.job), parse_mesh(args.mesh))
    from .models import build_gpt, build_vgg
    from .remesh import check_batch

    mesh = parse_mesh(args.mesh)
    if args.model == "gpt":
        graph = build_gpt(
            args.layers,
            args.hidden,
            args.heads,
            args.seq_len,
            args.vocab,
            args.batch_size,
            mesh,
            device=args.device,
        )
    else:
        graph = build_vgg(
            int(args.model[3:]),
            args.width_mult,
            args.image_size,
            args.num_classes,
            args.batch_size,
            mesh,
            device=args.device,
        )
    check_batch(graph)
    return graph


def _precision(graph, dtype: str):
    """The graph in the precision asked (oneflow_autoddl.amp for fp16 and bf16)."""
    if dtype == "fp32":
        return graph
    from .amp import amp_graph

    return amp_graph(graph, dtype)


def _read_job_file(path: str):
    """A serialized Job, read without OneFlow's runtime (its protobuf classes only)."""
    if not os.path.exists(path):
        raise GraphError(f"no Job file {path}")
    try:
        from .adapter.job import read_job
    except ImportError as e:
        raise GraphError(f"reading a Job file needs OneFlow's protobuf classes ({e})") from None
    with open(path, "rb") as f:
        return read_job(f.read())


@gc_paused()
def _plan(args) -> int:
    """The plan command: builds, plans and prints with Python's cyclic collector paused, as
    planner.plan pauses it (oneflow_autoddl.gc_pause); the command's objects die with it."""
    cluster = load_cluster(args.cluster)
    graph = _precision(_graph(args), args.dtype)
    memory = (
        math.inf
        if args.memory_per_device == "none"
        else (parse_bytes(args.memory_per_device) if args.memory_per_device else None)
    )
    result = plan(
        graph,
        cluster,
        memory_limit=memory,
        ranks_per_node=args.ranks_per_node,
        strategy=args.strategy,
        executor=Cores(),
    )
    print(summary(result))
    print()
    print(parameter_table(result))
    print()
    print(transfer_table(result, args.transfers))
    if args.op_table:
        print()
        print(op_table(result, args.op_table))
    if args.json:
        result.save(args.json)
        print(f"\nplan written to {args.json}")
    return 0


def _calibrate(args) -> int:
    from .launch import run_module

    multinode = args.nnodes > 1
    if multinode and not (args.master_addr and args.master_port):
        raise ConfigError(
            "calibrate across nodes: give every node the same --master-addr (node 0's address, "
            "reachable from the others) and --master-port"
        )
    if not 0 <= args.node_rank < args.nnodes:
        raise ConfigError(f"--node-rank {args.node_rank}: give 0 to {args.nnodes - 1}")
    command = f"python -m oneflow_autoddl calibrate --nproc {args.nproc}"
    if multinode:
        command += f" --nnodes {args.nnodes}"
    command += f" --out {os.path.basename(args.out)}"
    command += f" --repeats {args.repeats}" if args.repeats else ""
    name = os.path.splitext(os.path.basename(args.out))[0]
    launch = (
        dict(
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            master_addr=args.master_addr,
            port=args.master_port,
        )
        if multinode
        else {}
    )
    return run_module(
        "oneflow_autoddl.adapter.calibrate",
        args.nproc,
        [os.path.abspath(args.out), str(args.repeats or ""), name, command],
        **launch,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m oneflow_autoddl",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "plan", help="plan a built-in model or a traced Job for a mesh and a cluster"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", choices=MODEL_NAMES, help="the examples' models")
    what.add_argument(
        "--job",
        help="a Job file (oneflow_autoddl.adapter.trace.save_job, or an example's --save-job)",
    )
    p.add_argument("--mesh", required=True, help="e.g. 8, 2x4, 128x8")
    p.add_argument(
        "--cluster",
        default="dgx-a100",
        help=f"a preset ({', '.join(preset_names())}) or a JSON file",
    )
    p.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="for --model: the graph OneFlow traces on this device (LayerNorm fused on cuda)",
    )
    p.add_argument(
        "--memory-per-device",
        default=None,
        help="bytes a device may hold (e.g. 40GiB; default: the cluster's device memory; "
        "none: no limit)",
    )
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "fp16", "bf16"],
        help="fp16 / bf16: cost the graph in mixed precision as OneFlow's AMP pass makes it on "
        "GPUs (graph.config.enable_amp); master weights and optimizer state stay float32",
    )
    p.add_argument("--ranks-per-node", type=int, default=None)
    p.add_argument(
        "--strategy",
        default="autoddl",
        choices=STRATEGIES,
        help="search, or apply a baseline as is",
    )
    p.add_argument("--json", default=None, help="write the plan JSON here")
    p.add_argument(
        "--op-table", type=int, default=0, metavar="N", help="also print the first N ops' SBP"
    )
    p.add_argument(
        "--transfers", type=int, default=10, metavar="N", help="print the N costliest boxings"
    )
    gpt = p.add_argument_group("--model gpt")
    gpt.add_argument("--layers", type=int, default=12)
    gpt.add_argument("--hidden", type=int, default=768)
    gpt.add_argument("--heads", type=int, default=12)
    gpt.add_argument("--seq-len", type=int, default=1024)
    gpt.add_argument("--vocab", type=int, default=50257)
    vgg = p.add_argument_group("--model vgg*")
    vgg.add_argument("--width-mult", type=float, default=1.0)
    vgg.add_argument("--image-size", type=int, default=224)
    vgg.add_argument("--num-classes", type=int, default=1000)
    p.add_argument(
        "--batch-size", type=int, default=None, help="global batch (default: 8 per device)"
    )
    p.set_defaults(run=_plan)
    cal = sub.add_parser(
        "calibrate",
        help="measure CPU ranks of this machine (or of every node: run it on each) and write a "
        "cluster JSON",
    )
    cal.add_argument("--nproc", type=int, default=4, help="ranks to measure at once, per node")
    cal.add_argument(
        "--out",
        default=os.path.join(PRESET_DIR, "cpu-local.json"),
        help="the cluster file (rank 0 writes it); its name is the cluster's",
    )
    node = cal.add_argument_group("across nodes (OneFlow's launcher's flags, on every node)")
    node.add_argument("--nnodes", type=int, default=1)
    node.add_argument("--node-rank", type=int, default=0)
    node.add_argument("--master-addr", default=None, help="node 0's address")
    node.add_argument("--master-port", type=int, default=None)
    cal.add_argument(
        "--repeats",
        type=int,
        help="steps timed per measurement, the median kept (fewer: quicker, noisier)",
    )
    cal.set_defaults(run=_calibrate)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if getattr(args, "command", None) == "plan" and args.batch_size is None:
        try:
            devices = math.prod(parse_mesh(args.mesh))
        except ConfigError as e:
            parser.error(str(e))
        args.batch_size = 8 * devices
    try:
        return args.run(args)
    except AutoDDLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
