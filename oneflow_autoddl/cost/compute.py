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


def local_numel(shape, nd: NdSbp, hierarchy) -> int:
    """Elements on the most loaded device (OneFlow gives the remainder of an uneven split to the
    first)."""
    dims = list(shape)
    for sbp, h in zip(nd, hierarchy):
        if sbp.is_split and sbp.axis < len(dims):
            dims[sbp.axis] = math.ceil(dims[sbp.axis] / h)
    n = 1
    for d in dims:
        n *= d
    return n


def local_shapes(graph: Graph, op: Op, sig: Signature, hierarchy) -> Dict[str, Tuple[int, ...]]:
    out = {}
    for bn, nd in sig.items():
        dims = list(graph.shape(op, bn))
        for sbp, h in zip(nd, hierarchy):
            if sbp.is_split and sbp.axis < len(dims):
                dims[sbp.axis] = math.ceil(dims[sbp.axis] / h)
        out[bn] = tuple(dims)
    return out


def blob_bytes(graph: Graph, op: Op, bn: str, nd: NdSbp, hierarchy) -> float:
    lbn = op.inputs.get(bn) or op.outputs[bn]
    t = graph.tensor(lbn)
    return local_numel(t.shape, nd, hierarchy) * DTYPE_BYTES.get(t.dtype, 4)


def op_time(cluster: Cluster, graph: Graph, op: Op, sig: Signature) -> float:
    if op.role == "variable":
        # A variable's kernel hands its buffer to its consumers and moves no bytes (on CPU
        # ranks its share of the step's samples under `perf` is nil, whatever its size).
        return cluster.op_overhead
    hierarchy = op.placement.hierarchy
    io_bytes = sum(blob_bytes(graph, op, bn, nd, hierarchy) for bn, nd in sig.items())
    rule = get_rule(op.type) if has_rule(op.type) else None
    kind = (
        rule.kernel_kind(OpView(graph, op, 1))
        if rule is not None and rule.kernel is not None
        else None
    )
    memory_time = io_bytes / cluster.bandwidth_for(kind)
    if rule is None or rule.flops is None:
        return cluster.op_overhead + memory_time
    dtype = graph.tensor(next(iter(op.outputs.values()))).dtype if op.outputs else "float32"
    local = local_shapes(graph, op, sig, hierarchy)
    flops = rule.flops(op.attrs, local)
    compute = max(flops / cluster.flops_for(dtype), memory_time)
    return cluster.op_overhead + compute + pass_time(cluster, op, local, dtype)


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
