"""Communication lower bounds of matrix multiplication, the yardstick for "near-optimal bandwidth".

For an m x k x n product on p devices that share the work evenly, each device must
move at least (in elements; d1 >= d2 >= d3 are the sorted dimensions)
    d2*d3 * (1 - 1/p)                              if p <= d1/d2
    2*sqrt(d1*d2*d3^2/p) - (d1*d3 + d2*d3)/p       if d1/d2 <= p <= d1*d2/d3^2
    3*(d1*d2*d3/p)^(2/3) - (d1*d2 + d1*d3 + d2*d3)/p  otherwise
(the tight memory-independent bounds of Al Daas, Ballard, Grigori, Kumar and Rouse,
SPAA 2022). A plan that replicates the work (B everywhere) is not load-balanced and
can move less; the ratio bytes / bound is meant for plans that split the work.
"""

import math

from ..ir import DTYPE_BYTES, Graph
from ..rules import contraction_of


def matmul_bound(m: int, k: int, n: int, p: int) -> float:
    """Elements one device must send or receive for an m x k x n product on p devices."""
    if p <= 1:
        return 0.0
    d1, d2, d3 = sorted((m, k, n), reverse=True)
    if p <= d1 / d2:
        return d2 * d3 * (1 - 1 / p)
    if p <= d1 * d2 / (d3 * d3):
        return max(0.0, 2 * math.sqrt(d1 * d2 * d3 * d3 / p) - (d1 * d3 + d2 * d3) / p)
    return max(0.0, 3 * (d1 * d2 * d3 / p) ** (2 / 3) - (d1 * d2 + d1 * d3 + d2 * d3) / p)


def graph_bound_bytes(graph: Graph, devices: int) -> float:
    """Sum over the graph's matmuls of the per-device bound, in bytes.

    Independent products of a batched matmul need nothing when there are at least as
    many as devices; otherwise each product is bounded on its share of the devices.
    """
    total = 0.0
    for op in graph.ops.values():
        c = contraction_of(graph, op)
        if c is None:
            continue
        batch, m, k, n = c.batch, c.m, c.k, c.n
        if batch >= devices:
            continue
        elem = DTYPE_BYTES.get(graph.tensor(op.outputs["out_0"]).dtype, 4)
        total += matmul_bound(m, k, n, devices // batch) * elem
    return total
