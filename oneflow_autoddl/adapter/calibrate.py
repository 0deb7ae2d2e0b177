"""Measure a CPU cluster: the ranks of this machine, or of several nodes, through OneFlow's CommNet.

Run on N ranks of one machine (`python -m oneflow_autoddl calibrate --nproc N --out FILE`
launches them), or on every node of a multi-node launch (the same command with `--nnodes
--node-rank --master-addr --master-port` on each node; rank 0 writes the file). Everything is
measured the way a training step runs: inside compiled nn.Graphs, on all ranks at once (they
share the cores), as the median over many steps of chains of identical stages (chains.py).
Every figure read from two or more graphs (a difference, a ratio) is taken with those graphs
taking turns step by step, so that a drift in the machine's load does not land on one of them:
on this shared machine that moved comm_overlap from 0 to 0.4 between runs, and now reads 0 to
0.11.
  - compute: each stage a float32 matmul, FLOP/s from the step time;
  - the cost of any op: each stage an add of 16 floats, on the CPU clock (a few microseconds an
    op, which a loaded machine's preemptions bury on the wall clock);
  - memory bandwidth: each stage an elementwise add over arrays far larger than the caches;
  - kernel bandwidths (cost.cluster.KERNEL_KINDS): stages of the kernels OneFlow's CPU
    build runs far below that (an inner broadcast, a reduction, GELU), at a LayerNorm's size,
    in turns with the four above; the column and filter passes of a convolution and of its two
    gradients, from 3 x 3 convolutions at two shapes net of their matrix products at the matmul
    chain's rate (calibrate_convs.py); and each optimizer's update, from two train steps
    whose optimizers update all of their parameters or one;
  - links (calibrate_links.py): each collective of cost.cluster.COLLECTIVES along a mesh axis:
    on one machine all ranks, one level (written as both); across nodes the nodes x
    ranks-per-node mesh, its axis inside the nodes (links.intra_node) and its axis across them
    (links.inter_node, per node: all of a node's ranks send at once). OneFlow's CPU boxing runs
    the collectives at rates far apart (2026-12-03, 4 ranks, `--repeats 15`: a reduce-scatter
    at 232 MB/s per rank, an all-gather at 637);
  - overlap: the matmul chain beside an independent all-gather chain inside a node, against
    each alone;
  - cores_per_node: the cores this rank may run on; where all nodes are this one machine
    (emulated nodes), its cores divided among them (cost.sharing scales the figures to the
    ranks a plan runs on).
Rank 0 writes the cluster JSON, with the date, machine and command in its `source`.
"""

import json
import logging
import os
import platform
import sys
import time
from typing import Any, Dict, List, Sequence, Tuple

import oneflow as flow

from ..cost.cluster import cluster_from_json
from ..cost.sharing import ranks_per_core
from ..errors import ClusterError
from . import calibrate_convs as convs_module
from . import calibrate_links as links
from .chains import (
    REPEATS,
    STAGES,
    Chain,
    Holder,
    TrainStep,
    broadcast_ones,
    set_repeats,
    split_ones,
    step_times,
)
from .ranks import all_gather_bytes, broadcast_from_rank0, machine_id

log = logging.getLogger(__name__)

# Per kernel kind (cost.cluster.KERNEL_KINDS): a stage as the GPT and VGG graphs run it on
# rows x KERNEL_WIDTH floats per rank, and the bytes it reads and writes in units of that array.
KERNEL_WIDTH, KERNEL_ROWS = 512, 256
ADD_ELEMS = (
    1 << 22
)  # floats per rank of the add that gives the memory bandwidth: far larger than the caches
KERNEL_STAGES = {
    "inner_broadcast": (lambda h, x: x * h.col, 2.0),  # a LayerNorm's x * rstd, (n, d) by (n, 1)
    "reduce": (
        lambda h, x: x - x.sum(dim=0, keepdim=True),
        1.0,
    ),  # a bias gradient; the row subtract costs `plain`
    "transcendental": (lambda h, x: flow.nn.functional.gelu(x), 2.0),
}


def _add_chain(place, elems: int, stages: int = STAGES) -> Chain:
    return Chain(
        Holder(x=split_ones(place, elems), y=split_ones(place, elems)),
        lambda h, x: x + h.y,
        stages=stages,
    )


DeviceFigures = Tuple[float, float, float, Dict[str, float]]
LONGER = 48  # the longer add chain has (1 + LONGER) x STAGES ops


def _device(place, rows: int, width: int, sharing: float) -> DeviceFigures:
    """(FLOP/s, seconds per op, memory bandwidth, bytes/s per kernel kind) of one rank, all ranks
    at once, the chains taking turns: the kinds' figures are read against one another (a kind's
    bandwidth is net of the cost per op, the reduction's also of its row subtract), so they must
    not be taken at different loads. Matmuls of rows x width by width x width per rank, adds of 16
    and of ADD_ELEMS floats, the kinds on KERNEL_ROWS x KERNEL_WIDTH. A step costs something
    whatever its stages (starting it, fetching its output: across emulated nodes, tens of ms), so
    every stage's work is its time net of a short add chain's stage, which carries that share (a
    convolution's passes also net of its matrix product at the matmul chain's rate); the cost per
    op is _cost_per_op's, with the ranks `sharing` a core."""
    n = flow.env.get_world_size()
    holder = Holder(
        x=split_ones(place, KERNEL_ROWS * n, KERNEL_WIDTH),
        col=split_ones(place, KERNEL_ROWS * n, 1),
        row=broadcast_ones(place, 1, KERNEL_WIDTH),
    )
    matmul = Chain(
        Holder(x=split_ones(place, rows * n, width), w=broadcast_ones(place, width, width)),
        lambda h, x: flow.matmul(x, h.w),
    )
    kinds = list(KERNEL_STAGES)
    convs = [convs_module.conv_graphs(place, shape) for shape in convs_module.CONV_SHAPES]
    short = _add_chain(place, 16 * n)
    chains = [
        matmul,
        short,
        _add_chain(place, ADD_ELEMS * n),
        Chain(holder, lambda h, x: x - h.row),
    ]
    kind_chains = [Chain(holder, KERNEL_STAGES[k][0]) for k in kinds]
    conv_steps = [g for graphs in convs for g in graphs]
    times = step_times(*chains, *kind_chains, *conv_steps)
    matmul_s, empty, add, plain, *timed = (t / STAGES for t in times[: -len(conv_steps)])
    array = 4 * KERNEL_ROWS * KERNEL_WIDTH
    kernels = {
        kind: KERNEL_STAGES[kind][1] * array / max(t - (plain if kind == "reduce" else empty), 1e-9)
        for kind, t in zip(kinds, timed)
    }
    flops = 2 * rows * width * width / max(matmul_s - empty, 1e-9)
    per_op = _cost_per_op(short, _add_chain(place, 16 * n, (1 + LONGER) * STAGES), sharing)
    conv_times = iter(times[-len(conv_steps) :])
    stages = [
        convs_module.stage_seconds([next(conv_times) for _ in graphs], empty, per_op)
        for graphs in convs
    ]
    kernels.update(convs_module.pass_rates(stages, flops))
    return flops, per_op, 3 * 4 * ADD_ELEMS / max(add - empty, 1e-9), kernels


def _cost_per_op(short: Chain, longer: Chain, sharing: float) -> float:
    """Seconds an op of no size costs a rank while every rank works, `sharing` ranks to a core:
    the CPU time a step of the `longer` add chain takes more than one of the `short` (LONGER
    more ops a stage), per op, times `sharing`. The CPU clock, because a loaded machine
    preempts ranks for milliseconds at a time, and a few microseconds an op do not stand out of
    that on the wall clock even over hundreds of ops; its least step, because what a step is
    charged beyond its own work (another process's interrupts, a thread's wake-up) only adds."""
    short_s, longer_s = step_times(short, longer, clock=time.process_time, pick=min)
    return max((longer_s - short_s) / (LONGER * STAGES), 1e-9) * sharing


class _Scaled(flow.nn.Module):
    """STAGES stages x = x * w_i from a learning input, each w_i a parameter of the input's shape
    and split like it (every rank updates its own share, and no gradient crosses ranks); the
    loss sums the output."""

    def __init__(self, place, elems: int):
        super().__init__()
        n = flow.env.get_world_size()
        self.x = flow.nn.Parameter(split_ones(place, elems * n))
        for i in range(STAGES):
            setattr(self, f"w{i}", flow.nn.Parameter(split_ones(place, elems * n)))

    def forward(self):
        x = self.x
        for i in range(STAGES):
            x = x * getattr(self, f"w{i}")
        return x.sum()


# Per optimizer update kind (cost.cluster.KERNEL_KINDS): the optimizer (lr 0: every step alike),
# and the bytes its update op reads and writes an element as cost.compute counts them
# (parameter, gradient, state).
UPDATE_KINDS = {
    "sgd_update": (lambda params: flow.optim.SGD(params, lr=0.0), 8.0),
    "momentum_update": (lambda params: flow.optim.SGD(params, lr=0.0, momentum=0.9), 12.0),
    "adam_update": (lambda params: flow.optim.Adam(params, lr=0.0), 16.0),
}
UPDATE_ELEMS = 1 << 18  # floats per rank of each parameter


def _update_bandwidths(place, per_op: float, kinds: Sequence[str] = ()) -> Dict[str, float]:
    """Bytes/s of each optimizer's update (of `kinds`, all where empty) as a train step runs it:
    two train steps of the same _Scaled stages (every gradient computed in both), one whose
    optimizer updates every parameter, one the input only, taking turns; their difference is
    STAGES updates of UPDATE_ELEMS floats a rank, each net of the cost per op. The updates are
    timed inside a step's backward because that is where they run: timed apart (a loss that
    only sums the parameters) they take longer than they do there."""
    out = {}
    for kind, (make, nbytes) in UPDATE_KINDS.items():
        if kinds and kind not in kinds:
            continue
        every, input_only = _Scaled(place, UPDATE_ELEMS), _Scaled(place, UPDATE_ELEMS)
        both, one = step_times(
            TrainStep(every, make(every.parameters())),
            TrainStep(input_only, make([input_only.x])),
        )
        update = (both - one) / STAGES - per_op
        out[kind] = nbytes * UPDATE_ELEMS / max(update, 1e-12)
    return out


def _updates_until_told(place, per_op: float) -> Dict[str, float]:
    """_update_bandwidths, each update rank 0 finds lost in the noise measured again (up to
    DEVICE_TRIES times in all), as _device_until_told does for the device's figures: an update
    is a few nanoseconds an element, which a loaded machine's drift can swallow once and not the
    next time."""
    rates = _update_bandwidths(place, per_op)
    for _ in range(1, DEVICE_TRIES):
        lost = _lost_rates_on_rank0(rates)
        if not lost:
            break
        log.warning("calibrate: %s lost in the noise; measuring again", ", ".join(lost))
        rates.update(_update_bandwidths(place, per_op, lost))
    return rates


def _lost_rates_on_rank0(rates: Dict[str, float]) -> List[str]:
    """The rates rank 0 finds lost in the noise (above IMPLAUSIBLE), as rank 0 says."""
    return _as_rank0_says(_implausible(rates))


def _as_rank0_says(names: List[str]) -> List[str]:
    """Rank 0's `names` (figures' names, no commas in them) on every rank, so that every rank
    measures again what rank 0 found lost and their collectives stay in step."""
    said = broadcast_from_rank0(("!" + ",".join(names)).encode()).decode()[1:]
    return said.split(",") if said else []  # the "!" keeps the payload from being empty


# Across nodes, the tensors of the chains are this many times smaller than inside a node: a
# node's link may be 50 times slower than its loopback (200 Mbit/s emulated), and the chains
# must still take seconds, not minutes.
INTER_NODE_DIVISOR = 8


def _one_machine() -> bool:
    """Whether every rank runs on this machine (emulated nodes): the same boot id everywhere."""
    return len(set(all_gather_bytes(machine_id().encode()))) == 1


def _topology() -> Tuple[int, int, int, bool]:
    """(nodes, ranks per node, cores per node, all on one machine) of this launch."""
    n, nodes = flow.env.get_world_size(), flow.env.get_node_size()
    if n < 2:
        raise SystemExit("calibrate needs at least 2 ranks")
    if n % nodes:
        raise SystemExit(f"{n} ranks on {nodes} nodes: launch the same ranks on every node")
    per_node = n // nodes
    if nodes > 1 and per_node < 2:
        raise SystemExit(
            "calibrate across nodes needs at least 2 ranks per node, to measure the link inside "
            "one: give --nproc 2 or more"
        )
    cores = len(os.sched_getaffinity(0))
    one = nodes == 1 or _one_machine()
    return nodes, per_node, max(1, cores // nodes) if one else cores, one


def _levels(nodes: int, per_node: int, width: int, small: int, big: int):
    """(links.intra_node, links.inter_node, the axis inside a node) as the cluster file holds
    them: on one node, one level measured over all ranks and written as both."""
    if nodes == 1:
        inside = links.flat(per_node)
        intra = links.collectives(inside, width, small, big)
        return intra, _level(intra, per_node), inside
    inside, across = links.node_mesh(nodes, per_node)
    intra = links.collectives(inside, width, small, big)
    inter = links.collectives(across, width, small, big // INTER_NODE_DIVISOR)
    return intra, _level(inter, per_node), inside


DEVICE_TRIES = 3  # measurements of the device before a figure lost in the noise is refused
COST_PER_OP = "the cost per op"  # the figure's name when rank 0 says it was lost


def _device_until_told(place, rows: int, width: int, sharing: float) -> DeviceFigures:
    """_device's figures, measured again (up to DEVICE_TRIES times in all) while rank 0's cost
    per op or a rate is lost in the noise (a difference of step times at or below zero): a
    loaded machine's drift can swallow a difference once and not the next time. Every rank
    measures as often as rank 0 says, so that their collectives stay in step."""
    figures = _device(place, rows, width, sharing)
    for _ in range(1, DEVICE_TRIES):
        lost = _lost_on_rank0(figures)
        if not lost:
            break
        log.warning("calibrate: %s was lost in the noise; measuring again", lost)
        figures = _device(place, rows, width, sharing)
    return figures


def _lost_on_rank0(figures: DeviceFigures) -> str:
    """Which of rank 0's figures is lost in the noise ("" where none), as rank 0 says."""
    flops, overhead, membw, kernels = figures
    rates = {"FLOP/s": flops, "the memory bandwidth": membw, **kernels}
    return (_as_rank0_says(_lost(rates, overhead, COST_PER_OP)) or [""])[0]


def _level(collectives: Dict[str, Dict[str, float]], per_node: int) -> Dict[str, Any]:
    """A links.inter_node entry: bandwidth per node (every rank of a node sending at once)."""

    def entry(c):
        return {"bandwidth_per_node": c["bandwidth_per_device"] * per_node, "latency": c["latency"]}

    return dict(
        entry(collectives["all_gather"]), collectives={k: entry(c) for k, c in collectives.items()}
    )


def measure(out: str, command: str, repeats: int = REPEATS, name: str = "cpu-local") -> dict:
    set_repeats(repeats)
    nodes, per_node, cores, one_machine = _topology()
    n = nodes * per_node
    place = flow.placement("cpu", ranks=list(range(n)))
    width, big, small = 256, 1024 * n, 16 * n
    sharing = ranks_per_core(per_node, cores)
    flops, overhead, membw, kernels = _device_until_told(place, big // n, width, sharing)
    kernels.update(_updates_until_told(place, overhead))
    intra, inter, inside = _levels(nodes, per_node, width, small, big)
    gather = intra["all_gather"]
    overlap = links.overlap(inside, big, width, gather["latency"])
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    data = {
        "name": name,
        "backend": "oneflow-cpu",
        "nodes": nodes,
        "devices_per_node": per_node,
        "cores_per_node": cores,
        "device": {
            "name": f"CPU rank ({platform.machine()}, {cores} cores shared by {per_node} ranks "
            f"a node)",
            "memory_bytes": float(mem_total // (n if one_machine else per_node)),
            "flops": {"float32": flops},
            "memory_bandwidth": membw,
            "kernel_bandwidth": kernels,
            "op_overhead": overhead,
            "comm_overlap": overlap,
        },
        "links": {"intra_node": dict(gather, collectives=intra), "inter_node": inter},
        "source": _source(command, repeats, nodes, per_node, one_machine, width, small, big),
    }
    if flow.env.get_rank() == 0:  # its figures are the ones written (each rank timed its own)
        _check(data)
        with open(out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return data


def _check(data: Dict[str, Any]) -> None:
    unusable = _unmeasured(data)
    try:
        cluster_from_json(data)
    except ClusterError as e:
        unusable.append(str(e))
    if unusable:
        raise SystemExit(
            f"calibrate could not tell {', '.join(unusable)} from noise (a difference of step "
            "times at or below zero): run it again with more --repeats, or on a quieter machine"
        )


# Bytes per second no CPU rank reaches: a rate above it comes from a difference of step times
# the noise made zero or negative (the measurements floor it at 1e-9 s).
IMPLAUSIBLE = 1e13


def _unmeasured(data: Dict[str, Any]) -> List[str]:
    """The fields of a calibration whose rate is implausibly high."""
    device, links = data["device"], data["links"]
    rates = {"device.memory_bandwidth": device["memory_bandwidth"]}
    rates.update({f"device.flops.{k}": v for k, v in device["flops"].items()})
    rates.update({f"device.kernel_bandwidth.{k}": v for k, v in device["kernel_bandwidth"].items()})
    for level, key in (
        ("intra_node", "bandwidth_per_device"),
        ("inter_node", "bandwidth_per_node"),
    ):
        for kind, c in links[level]["collectives"].items():
            rates[f"links.{level}.collectives.{kind}"] = c[key]
    return _lost(rates, device["op_overhead"], "device.op_overhead")


def _lost(rates: Dict[str, float], op_overhead: float, overhead_name: str) -> List[str]:
    """The names of the figures lost in the noise: the cost per op first (at or below the 1e-9 s
    floor, so under 0.1 us), then each rate above IMPLAUSIBLE."""
    return ([overhead_name] if op_overhead < 1e-7 else []) + _implausible(rates)


def _implausible(rates: Dict[str, float]) -> List[str]:
    """The names of the rates above IMPLAUSIBLE: lost in the noise."""
    return [name for name, rate in rates.items() if rate > IMPLAUSIBLE]


def _source(command, repeats, nodes, per_node, one_machine, width, small, big) -> str:
    n = nodes * per_node
    where = (
        f"{n} OneFlow {flow.__version__} CPU ranks at once on one machine"
        if nodes == 1
        else f"{nodes} nodes x {per_node} OneFlow {flow.__version__} CPU ranks"
        + (" (emulated nodes: network namespaces of one machine)" if one_machine else "")
    )
    levels = (
        f"chains of each collective over all ranks on {small}x{width} and {big}x{width} floats "
        "against the chains without it (links; one machine, so inter-node = intra-node)"
        if nodes == 1
        else f"chains of each collective along the mesh axis inside the nodes ({small}x{width} and "
        f"{big}x{width} floats) and across them ({small}x{width} and "
        f"{big // INTER_NODE_DIVISOR}x{width}), against the chains without it (links)"
    )
    return (
        f"measured {time.strftime('%Y-%m-%d')} on {platform.node()} by `{command}`: {where}, in "
        f"nn.Graphs of {STAGES} stages (median of {repeats} steps, the graphs a figure is read "
        f"from taking turns): float32 matmuls ({big // n}x{width} by {width}x{width} per rank), "
        f"elementwise adds of {ADD_ELEMS} floats (and of 16, the cost per op: the least CPU "
        f"time of a step, chains of 1 and {1 + LONGER} adds a stage, times the ranks a core "
        "runs), on "
        f"{KERNEL_ROWS}x{KERNEL_WIDTH} floats x * ({KERNEL_ROWS}, 1), x - x.sum(0) and gelu(x), "
        "3x3 convolutions of "
        + " and ".join(f"{b}x{c}x{s}x{s}" for b, c, s in convs_module.CONV_SHAPES)
        + " floats per rank, forward and in train steps for each gradient, net of their matrix "
        "products (the columns and filter passes of conv2d, conv_data_grad, conv_filter_grad), "
        f"train steps of SGD, momentum and Adam over {STAGES} stages x * w of {UPDATE_ELEMS} "
        "floats per rank updating every w or none (kernel_bandwidth), "
        f"{levels}; the base figures of a "
        "level are its all-gather's; the matmul chain beside an all-gather chain inside a node "
        "(comm_overlap)."
    )


if __name__ == "__main__":
    measure(
        sys.argv[1],
        " ".join(sys.argv[4:]),
        int(sys.argv[2]) if sys.argv[2] else REPEATS,
        sys.argv[3],
    )
