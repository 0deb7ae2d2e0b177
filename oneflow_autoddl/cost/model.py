"""The analytical cost model the search minimises: a cluster, a mesh on it, a backend.

Everything is per device and per training step: boxing bytes and time of each tensor
transition (cost.boxing over the links of each mesh axis, cost.cluster), compute time
and memory of each op under a signature (cost.compute).
"""

import math
from typing import Dict, Optional, Sequence, Tuple

from ..ir import DTYPE_BYTES, Graph, Op
from ..mesh import mesh_size
from ..sbp import B, NdSbp, Signature
from . import compute
from .boxing import AXIS_COSTS, TransitionTable
from .buffers import MOVE_BLOBS, path_blobs
from .cluster import Cluster, MeshMapping, map_mesh
from .collectives import Transfer
from .sharing import for_ranks

INFEASIBLE = 1e30  # seconds: a transition OneFlow cannot perform
NO_TRANSFER = Transfer(0.0, 0.0)


class CostModel:
    def __init__(
        self,
        cluster: Cluster,
        mesh: Sequence[int],
        ranks: Optional[Sequence[int]] = None,
        ranks_per_node: Optional[int] = None,
    ):
        self.ranks_per_node = ranks_per_node
        on_node = min(mesh_size(tuple(mesh)), ranks_per_node or cluster.devices_per_node)
        self.cluster = for_ranks(cluster, on_node)  # the figures for this many ranks on a node
        self.mapping: MeshMapping = map_mesh(self.cluster, mesh, ranks, ranks_per_node)
        self.mesh = tuple(mesh)
        self.axis_cost = AXIS_COSTS[cluster.backend]
        self._tables: Dict[Tuple, TransitionTable] = {}
        self._cache: Dict[Tuple, Transfer] = {}
        self._blobs: Dict[Tuple, Tuple[float, ...]] = {}
        self._shares: Dict[Tuple, float] = {}
        self._facts: Dict[int, compute.OpFacts] = {}

    def crossing(self, dims: Tuple[int, ...], kind: str) -> float:
        """The share of a collective's bytes along mesh axes `dims` that crosses nodes: NCCL runs
        all but the all-to-all as rings, OneFlow's CPU boxing sends to each peer directly."""
        ring = self.cluster.backend == "nccl" and kind != "all_to_all"
        key = (dims, ring)
        if key not in self._shares:
            self._shares[key] = self.mapping.crossing_share(dims, ring)
        return self._shares[key]

    def _canonical(self, nd: NdSbp) -> NdSbp:
        """SBP on a mesh axis of one device is meaningless: call it B."""
        return tuple(B if h == 1 else s for s, h in zip(nd, self.mesh))

    def _table(self, shape: Sequence[int], dtype: str) -> TransitionTable:
        key = (tuple(shape), dtype)
        table = self._tables.get(key)
        if table is None:
            nbytes = math.prod(shape) * DTYPE_BYTES.get(dtype, 4)
            cpu = self.cluster.backend == "oneflow-cpu"  # boxing sends each peer its piece
            table = self._tables[key] = TransitionTable(
                tuple(shape),
                nbytes,
                self.mapping.axes,
                self.axis_cost,
                cpu_builders=cpu,
                crossing=self.crossing,
                inside=self.cluster.intra if cpu else None,
            )
        return table

    def transfer(self, src: NdSbp, dst: NdSbp, shape: Sequence[int], dtype: str) -> Transfer:
        """Boxing from src to dst of one tensor on the planned mesh, per device."""
        if src == dst:
            return NO_TRANSFER
        key = (src, dst, tuple(shape), dtype)
        hit = self._cache.get(key)
        if hit is None:
            found = self._table(shape, dtype).cost(self._canonical(src), self._canonical(dst))
            hit = self._cache[key] = found if found is not None else Transfer(math.inf, INFEASIBLE)
        return hit

    def boxing_blobs(
        self, src: NdSbp, dst: NdSbp, shape: Sequence[int], dtype: str
    ) -> Tuple[float, ...]:
        """Bytes of each blob the boxing from src to dst holds on a device (cost.buffers); none
        for a transition OneFlow cannot perform."""
        if src == dst:
            return ()
        key = (src, dst, tuple(shape), dtype)
        hit = self._blobs.get(key)
        if hit is None:
            path = self.path(src, dst, shape, dtype)
            hierarchy = [a.size for a in self.mapping.axes]
            hit = self._blobs[key] = (
                ()
                if path is None
                else tuple(
                    path_blobs(
                        [self._canonical(nd) for nd in path],
                        shape,
                        DTYPE_BYTES.get(dtype, 4),
                        hierarchy,
                        MOVE_BLOBS[self.cluster.backend],
                    )
                )
            )
        return hit

    def path(self, src: NdSbp, dst: NdSbp, shape: Sequence[int], dtype: str):
        """The n-D SBPs the transition goes through (for reports and tests)."""
        return self._table(shape, dtype).path(self._canonical(src), self._canonical(dst))

    def remote_transfer(self, src: NdSbp, shape: Sequence[int], dtype: str) -> Transfer:
        """To an op on another placement (the train-step ops): the whole tensor, once."""
        nbytes = math.prod(shape) * DTYPE_BYTES.get(dtype, 4)
        link = self.cluster.intra
        return Transfer(nbytes, link.latency + nbytes / link.bandwidth, link.latency)

    def op_time(self, graph: Graph, op: Op, sig: Signature) -> float:
        """cost.compute.op_time, with what it reads of the op whatever the signature gathered once
        per op (the facts hold the op, so its id stays its own while they are kept)."""
        facts = self._facts.get(id(op))
        if facts is None or facts.op is not op:
            facts = self._facts[id(op)] = compute.OpFacts(self.cluster, graph, op)
        return compute.time_under(self.cluster, facts, sig)

    def op_memory(self, graph: Graph, op: Op, sig: Signature) -> float:
        return compute.op_memory(graph, op, sig)
