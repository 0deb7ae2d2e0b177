"""Compute time and memory of one op under one signature, on one device's share of the data.

Time is a roofline: the larger of FLOPs / peak rate (matmul and conv families, whose
rules give their FLOPs) and bytes read + written / memory bandwidth (everything else),
the bandwidth of the op's kernel kind where the cluster gives one (OneFlow's CPU kernels
for inner broadcasts, reductions and GELU run far below a plain elementwise pass), plus the
cluster's fixed cost per op, plus the passes the op's rule says its kernel makes below that
roofline, each at its kernel kind's rate where the cluster gives one (CPU ranks: a convolution
lowers to columns, a strided pass far below memory bandwidth, and reads the filter again for
every sample's matrix product).
Work is taken on the local shapes, so an op under B does the full, replicated work.
Variables cost only the cost per op: their kernels move nothing.
"""

import math
from typing import Dict, Tuple

from ..ir import DTYPE_BYTES, Graph, Op
from ..rules import OpView, get_rule, has_rule, passes_of, update_of
from ..sbp import NdSbp, Signature
from .cluster import Cluster


def local_dims(shape, nd: NdSbp, hierarchy) -> Tuple[int, ...]:
    """The shape of the most loaded device's share (OneFlow gives the remainder of an uneven
    split to the first)."""
    dims = list(shape)
    for sbp, h in zip(nd, hierarchy):
        if sbp.is_split and sbp.axis < len(dims):
            dims[sbp.axis] = math.ceil(dims[sbp.axis] / h)
    return tuple(dims)


def local_numel(shape, nd: NdSbp, hierarchy) -> int:
    """Elements on the most loaded device."""
    return math.prod(local_dims(shape, nd, hierarchy))


def local_shapes(graph: Graph, op: Op, sig: Signature, hierarchy) -> Dict[str, Tuple[int, ...]]:
    return {bn: local_dims(graph.shape(op, bn), nd, hierarchy) for bn, nd in sig.items()}


def blob_bytes(graph: Graph, op: Op, bn: str, nd: NdSbp, hierarchy) -> float:
    lbn = op.inputs.get(bn) or op.outputs[bn]
    t = graph.tensor(lbn)
    return local_numel(t.shape, nd, hierarchy) * DTYPE_BYTES.get(t.dtype, 4)


class OpFacts:
    """What op_time reads of an op whatever its signature (its blobs' shapes and element bytes,
    its rule, its kernel's bandwidth and rate on the cluster), gathered once per op: the search
    costs every op under each of its candidates."""

    __slots__ = ("op", "variable", "blobs", "rule", "bandwidth", "dtype", "rate")

    def __init__(self, cluster: Cluster, graph: Graph, op: Op):
        self.op, self.variable = op, op.role == "variable"
        self.blobs: Dict[str, Tuple[Tuple[int, ...], int]] = {}
        for bn, lbn in list(op.inputs.items()) + list(op.outputs.items()):
            t = graph.tensor(lbn)
            self.blobs.setdefault(bn, (t.shape, DTYPE_BYTES.get(t.dtype, 4)))
        self.rule = get_rule(op.type) if has_rule(op.type) else None
        kind = (
            self.rule.kernel_kind(OpView(graph, op, 1))
            if self.rule is not None and self.rule.kernel is not None
            else None
        )
        self.bandwidth = cluster.bandwidth_for(kind)
        self.dtype = (
            graph.tensor(next(iter(op.outputs.values()))).dtype if op.outputs else "float32"
        )
        self.rate = cluster.flops_for(self.dtype)


def op_time(cluster: Cluster, graph: Graph, op: Op, sig: Signature) -> float:
    return time_under(cluster, OpFacts(cluster, graph, op), sig)


def time_under(cluster: Cluster, facts: OpFacts, sig: Signature) -> float:
    """The op's time under `sig` (the module doc's roofline), from its OpFacts."""
    if facts.variable:
        # A variable's kernel hands its buffer to its consumers and moves no bytes (on CPU
        # ranks its share of the step's samples under `perf` is nil, whatever its size).
        return cluster.op_overhead
    hierarchy = facts.op.placement.hierarchy
    local: Dict[str, Tuple[int, ...]] = {}
    io_bytes = 0
    for bn, nd in sig.items():
        shape, width = facts.blobs[bn]
        local[bn] = dims = local_dims(shape, nd, hierarchy)
        io_bytes += math.prod(dims) * width
    memory_time = io_bytes / facts.bandwidth
    rule = facts.rule
    if rule is None or rule.flops is None:
        return cluster.op_overhead + memory_time
    flops = rule.flops(facts.op.attrs, local)
    compute = max(flops / facts.rate, memory_time)
    return cluster.op_overhead + compute + pass_time(cluster, facts.op, local, facts.dtype)


def pass_time(cluster: Cluster, op: Op, local: Dict[str, Tuple[int, ...]], dtype: str) -> float:
    """Seconds the op's kernel passes below its roofline take on one device (a CPU convolution's
    columns and filter): none for a kind the cluster gives no rate (GPU kernels compute from the
    image itself and keep the filter in fast memory)."""
    width = DTYPE_BYTES.get(dtype, 4)
    total = 0.0
    for kind, elements in passes_of(op):
        rate = cluster.kernel_bandwidth.get(kind)
        if rate is not None:
            total += elements(op.attrs, local) * width / rate
    return total


def op_memory(graph: Graph, op: Op, sig: Signature) -> float:
    """Bytes this op keeps alive per device across a step.

    Variables: the parameter or optimizer state itself. Update ops: the gradient they
    consume. Forward ops: outputs a backward op reads (activations kept for backward).
    Transient buffers (boxing, workspaces) are not counted.
    """
    hierarchy = op.placement.hierarchy
    if op.role == "variable":
        return sum(blob_bytes(graph, op, bn, sig[bn], hierarchy) for bn in op.outputs)
    update = update_of(op)
    if update is not None:
        return blob_bytes(graph, op, update.grad, sig[update.grad], hierarchy)
    if op.role == "forward":
        kept = 0.0
        for obn, lbn in op.outputs.items():
            if any(graph.op(c).role == "backward" for c, _ in graph.tensor(lbn).consumers):
                kept += blob_bytes(graph, op, obn, sig[obn], hierarchy)
        return kept
    return 0.0
