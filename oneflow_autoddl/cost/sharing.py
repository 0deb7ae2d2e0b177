"""CPU ranks sharing a node's cores: a calibrated cluster's figures for the ranks in use.

Where a cluster's devices are CPU ranks (`cores_per_node` given), what a rank computes is CPU
work: its kernels and its cost per op. `calibrate` measures them with devices_per_node ranks at
once; while ranks outnumber cores each gets cores / ranks of one, so its compute takes longer by
    share(r) = max(1, r / cores_per_node)
for r ranks on a node. A plan for r ranks is costed with the calibration's compute figures times
share(r) / share(devices_per_node): on a 2-core machine, a calibration of 4 ranks predicts 2
ranks' kernels twice as fast. The links keep their calibrated figures per byte a rank sends and
per message at any rank count: measured (`benchmarks.collectives`, docs/results.md "Plans for
the rank count in use"), a collective's time between rank counts follows the bytes and messages
per rank far more closely than with a core share on top of them. The link across nodes is taken
as measured as well: its figures are the wire's where the wire is the slower part (an emulated
node's token bucket, a network).
"""

import dataclasses

from .cluster import Cluster


def share(cluster: Cluster, ranks_on_node: int) -> float:
    """How many ranks a core runs (at least 1) with `ranks_on_node` ranks on each node (1 where
    the cluster does not say how many cores a node has)."""
    if not cluster.cores_per_node:
        return 1.0
    return ranks_per_core(ranks_on_node, cluster.cores_per_node)


def ranks_per_core(ranks_on_node: int, cores_per_node: int) -> float:
    """How many ranks a core runs (at least 1) with `ranks_on_node` ranks on `cores_per_node`
    cores: how much longer a rank's CPU work takes on the wall clock while every rank works."""
    return max(1.0, ranks_on_node / cores_per_node)


def for_ranks(cluster: Cluster, ranks_on_node: int) -> Cluster:
    """`cluster` as it runs with `ranks_on_node` ranks on each node (itself where it has no
    cores_per_node, or runs as many ranks as it was calibrated with)."""
    if not cluster.cores_per_node or ranks_on_node == cluster.devices_per_node:
        return cluster
    slower = share(cluster, ranks_on_node) / share(cluster, cluster.devices_per_node)
    if slower == 1.0:
        return cluster
    return dataclasses.replace(
        cluster,
        flops={dtype: rate / slower for dtype, rate in cluster.flops.items()},
        memory_bandwidth=cluster.memory_bandwidth / slower,
        kernel_bandwidth={k: bw / slower for k, bw in (cluster.kernel_bandwidth or {}).items()},
        op_overhead=cluster.op_overhead * slower,
    )
