"""Cluster descriptions (JSON data, validated on load) and how a device mesh maps onto them.

A cluster is nodes of identical devices joined by two levels of links: within a node
(NVLink, or shared memory for CPU ranks) and across nodes (InfiniBand, Aries, ...).
Ranks fill nodes in order (rank r is on node r // devices per node), and a placement
lists its ranks row-major over the mesh, so with ranks 0..n-1 the last mesh axis is the
one that stays inside a node. Each mesh axis is costed on the slowest link its groups cross. See
presets/*.json for the schema by example, with the figures' sources.
"""

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ClusterError
from ..mesh import Mesh, format_mesh, mesh_size

log = logging.getLogger(__name__)

PRESET_DIR = os.path.join(os.path.dirname(__file__), "presets")
BACKENDS = ("nccl", "oneflow-cpu")
# Kernels that run far below memory bandwidth on some backend (OneFlow 0.9.0's CPU kernels,
# measured by `calibrate`): broadcasting an operand along the output's innermost axis (a
# LayerNorm's per-row statistics, bias_add over NCHW channels), reductions across a kept axis,
# activations with transcendental functions, and the optimizers' updates (a scalar loop an
# element). A cluster file may give each its own bandwidth (bytes the op reads and writes, per s).
# `im2col` and `conv_filter` are the passes of CPU convolutions on top of their roofline
# (cost.compute.pass_time): bytes of columns written per second, and bytes of the filter read per
# second, once a sample; the `conv_data_grad_*` and `conv_filter_grad_*` kinds are the same passes
# of the two gradients' kernels. A cluster that gives no rate for a kind has no such pass.
KERNEL_KINDS = (
    "inner_broadcast",
    "reduce",
    "transcendental",
    "sgd_update",
    "momentum_update",
    "adam_update",
    "im2col",
    "conv_filter",
    "conv_data_grad_columns",
    "conv_data_grad_filter",
    "conv_filter_grad_columns",
    "conv_filter_grad_filter",
)
# The forward pass whose rate a gradient's pass takes in a cluster file written before calibrate
# measured the gradients apart (what those files' plans were made with).
GRADIENT_PASS_FALLBACK = {
    "conv_data_grad_columns": "im2col",
    "conv_data_grad_filter": "conv_filter",
    "conv_filter_grad_columns": "im2col",
    "conv_filter_grad_filter": "conv_filter",
}
# The collectives behind SBP transitions (cost.boxing). A link level may give any of them its
# own bandwidth and latency: on CPU, OneFlow's boxing moves bytes at a rate that depends on the
# collective (its slicing, adding and socket work), measured by `calibrate`.
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes/s one device can send at once over this link level
    latency: float  # seconds per message (alpha)
    collectives: Tuple[Tuple[str, float, float], ...] = ()  # (COLLECTIVES kind, bandwidth, latency)

    def for_collective(self, kind: str) -> "Link":
        """This link as `kind` runs over it: its own figures where the cluster gives them."""
        for name, bandwidth, latency in self.collectives:
            if name == kind:
                return Link(bandwidth, latency)
        return self

    def to_json(self, bandwidth_key: str, devices: int) -> Dict[str, Any]:
        out: Dict[str, Any] = {bandwidth_key: self.bandwidth * devices, "latency": self.latency}
        if self.collectives:
            out["collectives"] = {
                k: {bandwidth_key: bw * devices, "latency": lat} for k, bw, lat in self.collectives
            }
        return out


@dataclass(frozen=True)
class Cluster:
    name: str
    backend: str
    nodes: int
    devices_per_node: int
    device_name: str
    memory_bytes: float
    flops: Mapping[str, float]
    memory_bandwidth: float
    intra: Link
    inter: Link
    source: str
    # KERNEL_KINDS -> bytes/s; a kind not given runs at memory_bandwidth
    kernel_bandwidth: Mapping[str, float] = field(default_factory=dict)
    op_overhead: float = 0.0  # seconds every op costs, whatever its size (scheduling, launch)
    comm_overlap: float = (
        0.0  # fraction of a boxing's time the device computes through (cost.schedule)
    )
    # CPU cores of a node, where its devices are CPU ranks that share them (cost.sharing); the
    # figures above are then those of devices_per_node ranks on the node at once
    cores_per_node: Optional[int] = None

    @property
    def boxing_on_cpu(self) -> bool:
        """Whether boxing is the devices' own CPU work (OneFlow's CPU boxing: its waits on peers
        hold the rank, boxings do not queue) rather than a stream's (NCCL's: boxings queue on
        one stream, the compute free of them), as cost.schedule runs it."""
        return self.backend == "oneflow-cpu"

    @property
    def reuses_memory(self) -> bool:
        """Whether a device's buffers are shared by tensors alive at different times of a step.
        OneFlow 0.9.0 plans shared memory only for devices other than the CPU
        (intra_job_mem_sharing_util.cpp skips CPU tasks): on CPU ranks every blob a step uses is
        allocated once, for the whole run, and held."""
        return self.backend != "oneflow-cpu"

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    def flops_for(self, dtype: str) -> float:
        return self.flops.get(dtype) or self.flops["float32"]

    def bandwidth_for(self, kind: Optional[str]) -> float:
        return (kind and self.kernel_bandwidth.get(kind)) or self.memory_bandwidth

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "nodes": self.nodes,
            "devices_per_node": self.devices_per_node,
            **({"cores_per_node": self.cores_per_node} if self.cores_per_node else {}),
            "source": self.source,
            "device": {
                "name": self.device_name,
                "memory_bytes": self.memory_bytes,
                "flops": dict(self.flops),
                "memory_bandwidth": self.memory_bandwidth,
                "kernel_bandwidth": dict(self.kernel_bandwidth or {}),
                "op_overhead": self.op_overhead,
                "comm_overlap": self.comm_overlap,
            },
            "links": {
                "intra_node": self.intra.to_json("bandwidth_per_device", 1),
                "inter_node": self.inter.to_json("bandwidth_per_node", self.devices_per_node),
            },
        }


def _field(data: Mapping[str, Any], path: str, kind=float, positive: bool = True):
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise ClusterError(f"cluster field {path!r} is missing")
        node = node[key]
    if kind is float:
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            raise ClusterError(f"cluster field {path!r} must be a number, not {node!r}")
        if positive and not node > 0:
            raise ClusterError(f"cluster field {path!r} must be > 0, not {node!r}")
        if not node >= 0:
            raise ClusterError(f"cluster field {path!r} must be >= 0, not {node!r}")
        return float(node)
    if kind is int:
        if isinstance(node, bool) or not isinstance(node, int) or node < 1:
            raise ClusterError(f"cluster field {path!r} must be a whole number >= 1, not {node!r}")
        return node
    if not isinstance(node, kind):
        raise ClusterError(f"cluster field {path!r} must be a {kind.__name__}, not {node!r}")
    return node


def _link(data: Mapping[str, Any], path: str, bandwidth_key: str, devices: int) -> Link:
    """A link level; `bandwidth_key` is per device or per node (then shared by `devices`)."""
    kinds = (
        _field(data, f"{path}.collectives", Mapping)
        if "collectives" in _field(data, path, Mapping)
        else {}
    )
    for kind in kinds:
        if kind not in COLLECTIVES:
            raise ClusterError(
                f"cluster field '{path}.collectives.{kind}' is not a collective: "
                f"use {', '.join(COLLECTIVES)}"
            )
    collectives = tuple(
        (
            kind,
            _field(data, f"{path}.collectives.{kind}.{bandwidth_key}") / devices,
            _field(data, f"{path}.collectives.{kind}.latency", positive=False),
        )
        for kind in kinds
    )
    return Link(
        _field(data, f"{path}.{bandwidth_key}") / devices,
        _field(data, f"{path}.latency", positive=False),
        collectives,
    )


def cluster_from_json(data: Mapping[str, Any]) -> Cluster:
    """Validate a cluster description; every error names the offending field."""
    if not isinstance(data, Mapping):
        raise ClusterError("a cluster description must be a JSON object")
    backend = _field(data, "backend", str)
    if backend not in BACKENDS:
        raise ClusterError(f"cluster field 'backend' must be one of {BACKENDS}, not {backend!r}")
    flops = _field(data, "device.flops", Mapping)
    if "float32" not in flops:
        raise ClusterError("cluster field 'device.flops.float32' is missing")
    for dtype in flops:
        _field(data, f"device.flops.{dtype}")
    kernels = (
        _field(data, "device.kernel_bandwidth", Mapping)
        if "kernel_bandwidth" in data.get("device", {})
        else {}
    )
    for kind in kernels:
        if kind not in KERNEL_KINDS:
            raise ClusterError(
                f"cluster field 'device.kernel_bandwidth.{kind}' is not a kernel kind: "
                f"use {', '.join(KERNEL_KINDS)}"
            )
        _field(data, f"device.kernel_bandwidth.{kind}")
    overhead = (
        _field(data, "device.op_overhead", positive=False)
        if "op_overhead" in data.get("device", {})
        else 0.0
    )
    overlap = (
        _field(data, "device.comm_overlap", positive=False)
        if "comm_overlap" in data.get("device", {})
        else 0.0
    )
    if overlap > 1:
        raise ClusterError(
            "cluster field 'device.comm_overlap' is a fraction of the boxing time, 0 to 1, "
            f"not {overlap!r}"
        )
    kernels = _with_gradient_fallbacks(data, kernels)
    if backend == "oneflow-cpu":
        _warn_unmeasured_kernels(data, kernels)
    dpn = _field(data, "devices_per_node", int)
    cores = _field(data, "cores_per_node", int) if "cores_per_node" in data else None
    if cores is not None and backend != "oneflow-cpu":
        raise ClusterError(
            "cluster field 'cores_per_node' describes CPU ranks sharing a node's cores: "
            f"only for backend 'oneflow-cpu', not {backend!r}"
        )
    return Cluster(
        name=_field(data, "name", str),
        backend=backend,
        nodes=_field(data, "nodes", int),
        devices_per_node=dpn,
        device_name=_field(data, "device.name", str),
        memory_bytes=_field(data, "device.memory_bytes"),
        flops={k: float(v) for k, v in flops.items()},
        memory_bandwidth=_field(data, "device.memory_bandwidth"),
        intra=_link(data, "links.intra_node", "bandwidth_per_device", 1),
        inter=_link(data, "links.inter_node", "bandwidth_per_node", dpn),
        source=_field(data, "source", str),
        kernel_bandwidth={k: float(v) for k, v in kernels.items()},
        op_overhead=overhead,
        comm_overlap=overlap,
        cores_per_node=cores,
    )


def _with_gradient_fallbacks(data: Mapping[str, Any], kernels: Mapping[str, Any]) -> dict:
    """The kernel rates, each convolution gradient's pass not given taking its forward pass's
    rate (GRADIENT_PASS_FALLBACK), with a warning naming them: a file written before calibrate
    measured the gradients apart prices them as it always did."""
    borrowed = {
        kind: kernels[forward]
        for kind, forward in GRADIENT_PASS_FALLBACK.items()
        if kind not in kernels and forward in kernels
    }
    if borrowed:
        log.warning(
            "cluster %r gives no rate for %s: priced at the forward convolution's; run "
            "`python -m oneflow_autoddl calibrate` again to measure them",
            data.get("name"),
            ", ".join(borrowed),
        )
    return {**kernels, **borrowed}


def _warn_unmeasured_kernels(data: Mapping[str, Any], kernels: Mapping[str, Any]) -> None:
    """On CPU ranks every kernel kind runs far below memory bandwidth, where a kind not given is
    priced: a file `calibrate` wrote before it measured a kind (e.g. im2col and conv_filter,
    added in 0.2.0) prices those kernels as nearly free, and plans replicate them."""
    missing = [kind for kind in KERNEL_KINDS if kind not in kernels]
    if missing:
        log.warning(
            "cluster %r (oneflow-cpu) gives no rate for %s: those kernels are priced at memory "
            "bandwidth, far above what CPU ranks reach; run `python -m oneflow_autoddl calibrate` "
            "again to measure them",
            data.get("name"),
            ", ".join(missing),
        )


def preset_names() -> List[str]:
    return sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".json"))


def load_cluster(name_or_path: str) -> Cluster:
    """A preset by name (`dgx-a100`) or a JSON file by path."""
    path = name_or_path
    if not os.path.exists(path):
        path = os.path.join(PRESET_DIR, f"{name_or_path}.json")
        if not os.path.exists(path):
            raise ClusterError(
                f"unknown cluster {name_or_path!r}: give a JSON file or one of "
                f"{', '.join(preset_names())}"
            )
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ClusterError(f"cluster file {path} is not valid JSON: {e}") from None
    return cluster_from_json(data)


@dataclass(frozen=True)
class AxisLinks:
    """What one mesh axis' collectives run over."""

    size: int
    link: Link
    crosses_nodes: bool


@dataclass(frozen=True, eq=False)
class MeshMapping:
    cluster: Cluster
    mesh: Mesh
    axes: Tuple[AxisLinks, ...]
    node_of: np.ndarray  # the node of each mesh position

    @property
    def nodes_used(self) -> int:
        return -(-mesh_size(self.mesh) // self.cluster.devices_per_node)

    def crossing_share(self, dims: Sequence[int], ring: bool) -> float:
        """Of the bytes a device sends in one collective over the groups along mesh axes `dims`
        (merged, as OneFlow merges axes that change alike), the share sent to other nodes,
        averaged over devices. Where each device sends a piece to each peer (OneFlow's CPU
        boxing, NCCL's all-to-all), a device sends to the peers on other nodes their share of
        its peers; in a ring (NCCL's other collectives) the pieces cross nodes on the edges
        between a node's ranks and the next node's, one per node the group spans."""
        dims = sorted(dims)
        size = math.prod(self.mesh[d] for d in dims)
        if size < 2:
            return 0.0
        moved = np.moveaxis(self.node_of, dims, list(range(-len(dims), 0)))
        shares = []
        for group in moved.reshape(-1, size):
            counts = np.unique(group, return_counts=True)[1]
            if len(counts) == 1:
                shares.append(0.0)
            elif ring:
                shares.append(len(counts) / size)
            else:
                shares.append(float(sum(c * (size - c) for c in counts)) / (size * (size - 1)))
        return float(np.mean(shares))


def map_mesh(
    cluster: Cluster,
    mesh: Sequence[int],
    ranks: Optional[Sequence[int]] = None,
    ranks_per_node: Optional[int] = None,
) -> MeshMapping:
    """Place the mesh's ranks (row-major; default 0..n-1) on nodes of `ranks_per_node` ranks
    (default: the cluster's devices per node) and find the links each mesh axis crosses.

    All groups along an axis must spread over nodes alike (each inside one node, or each
    over the same number of nodes); an axis that crosses nodes is limited by the
    inter-node link, its slowest.
    """
    mesh = tuple(mesh)
    total = mesh_size(mesh)
    ranks = list(range(total)) if ranks is None else list(ranks)
    per_node = ranks_per_node or cluster.devices_per_node
    if len(ranks) != total:
        raise ClusterError(
            f"mesh {format_mesh(mesh)} has {total} positions but {len(ranks)} ranks were given"
        )
    if total > cluster.devices:
        raise ClusterError(
            f"mesh {format_mesh(mesh)} needs {total} devices but cluster {cluster.name!r} "
            f"has {cluster.devices} ({cluster.nodes} nodes x {cluster.devices_per_node})"
        )
    if per_node > cluster.devices_per_node:
        raise ClusterError(
            f"{per_node} ranks per node, but cluster {cluster.name!r} has "
            f"{cluster.devices_per_node} devices per node"
        )
    grid = np.array(ranks).reshape(mesh) // per_node
    axes = []
    for d, size in enumerate(mesh):
        groups = np.moveaxis(grid, d, -1).reshape(-1, size)
        spread = {tuple(sorted(np.unique(g, return_counts=True)[1].tolist())) for g in groups}
        if len(spread) > 1:
            raise ClusterError(
                f"mesh axis {d} ({size} devices) of {format_mesh(mesh)} puts its groups on nodes "
                f"of {per_node} devices unevenly (some inside one node, some across): make the "
                f"axis divide the devices per node, or span whole nodes"
            )
        crosses = len(next(iter(spread))) > 1
        axes.append(AxisLinks(size, cluster.inter if crosses else cluster.intra, crosses))
    return MeshMapping(cluster, mesh, tuple(axes), grid)


def check_launch(
    cluster: Cluster, nodes: int, ranks_per_node: int, asked: Optional[int] = None
) -> int:
    """The ranks per node to plan a launch of `nodes` nodes of `ranks_per_node` ranks with on
    `cluster`: the launch's, or on one node those `asked` for (which groups its ranks into
    nodes to plan for). Refused, with both figures named: a cluster with fewer nodes or devices
    per node than the launch, or ranks per node asked for that differ from a multi-node
    launch's. A launch on part of a cluster is fine."""
    if asked is not None:
        if nodes > 1 and asked != ranks_per_node:
            raise ClusterError(
                f"ranks per node {asked} was asked for, but the launch runs {ranks_per_node} "
                f"ranks on each of its {nodes} nodes: leave it out, or give {ranks_per_node}"
            )
        return asked
    if ranks_per_node > cluster.devices_per_node or nodes > cluster.nodes:
        raise ClusterError(
            f"the launch runs {nodes} node(s) x {ranks_per_node} ranks, but cluster "
            f"{cluster.name!r} describes {cluster.nodes} node(s) x {cluster.devices_per_node} "
            f"devices: give a cluster file with at least {nodes} node(s) of {ranks_per_node} "
            "devices (on CPU ranks, `python -m oneflow_autoddl calibrate` with the launch's "
            "--nproc and --nnodes writes one)"
        )
    return ranks_per_node
