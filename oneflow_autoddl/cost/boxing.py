"""The cost of boxing one tensor from one n-D SBP to another on the same mesh.

What OneFlow 0.9.0 does, measured on CPU ranks and read in its source:
  - it first reduces the two n-D SBPs (drops mesh axes of size 1, merges adjacent axes that
    carry the same SBP on both sides), so (S0, S0) -> (B, B) is one 1-D all-gather over
    all devices;
  - a transition its lazy cost formula calls finite (one mesh axis differs, not S -> P, and
    not an axis-0 change next to an all-same split such as (S0, S0)) is done directly: a
    1-D transition inside each group of devices along the differing axis, on the slice the
    group holds (hierarchical boxing builders);
  - any other goes through middle nodes that its boxing collector picks from a table of
    cheapest paths under that same formula, computed on a virtual [4W, 4W] mesh
    (W = world size), ties going to the path whose middle nodes store least.
This module reproduces that choice of path (`oneflow_lazy_cost` is the formula of
sbp_infer_util.cpp, see ../shared/ONEFLOW_0.9_NOTES.md 3) and prices each hop with the
backend's own cost: NCCL ring collectives on CUDA, OneFlow's slice boxing over sockets on CPU.
"""

import functools
import itertools
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..sbp import B, NdSbp, P, S, Sbp, evenly_split, local_shape
from .cluster import AxisLinks, Link
from .collectives import FREE, Transfer, all_gather, all_reduce, all_to_all, reduce_scatter

# (src, dst, group bytes, group elements, group size, link, share across nodes) -> cost of one
# 1-D move in each group
AxisCost = Callable[[Sbp, Sbp, float, float, int, Link, float], Transfer]


def collective_of(src: Sbp, dst: Sbp) -> str:
    """The collective (cost.cluster.COLLECTIVES) a 1-D move other than from B or to itself is."""
    if src.kind == "S":
        return "all_to_all" if dst.kind == "S" else "all_gather"  # S -> B, and S -> P through B
    return "reduce_scatter" if dst.kind == "S" else "all_reduce"


COLLECTIVE_COSTS = {
    "all_gather": all_gather,
    "reduce_scatter": reduce_scatter,
    "all_reduce": all_reduce,
    "all_to_all": all_to_all,
}


def nccl_axis_cost(
    src: Sbp,
    dst: Sbp,
    group_bytes: float,
    group_elems: float,
    p: int,
    link: Link,
    across: float = 0.0,
) -> Transfer:
    """Ring collectives, as OneFlow's collective boxing runs them through NCCL; `across` of the
    bytes go to other nodes."""
    if src == dst or src.kind == "B":
        return FREE  # B -> S is a local slice, B -> P keeps one copy and zeros the rest
    kind = collective_of(src, dst)
    moved = COLLECTIVE_COSTS[kind](group_bytes, p, link.for_collective(kind))
    return Transfer(moved.bytes, moved.time, moved.latency, moved.bytes * across)


def _pad(b: float, align: int = 512) -> float:
    return math.ceil(b / align) * align


# Per message on OneFlow's epoll CommNet: 64-byte blob header, two 112-byte socket
# messages each way and eventfd kicks (strace and wchar on CPU ranks agree to the byte).
MESSAGE_OVERHEAD = 536
# Of it, the eventfd kicks (3 writes of 8 bytes): written by the process, never sent on a link.
EVENTFD_BYTES = 24


def oneflow_cpu_axis_cost(
    src: Sbp,
    dst: Sbp,
    group_bytes: float,
    group_elems: float,
    p: int,
    link: Link,
    across: float = 0.0,
) -> Transfer:
    """OneFlow's CPU slice boxing: one socket transfer per (sender, receiver, slice).

    Bytes per device match the ring collectives (S->B, P->S: (p-1)/p; P->B: 2(p-1)/p as
    P->S then S->B; S->S: (p-1)/p^2; B->S, B->P free), plus, per message, the body padded
    to 512 bytes and MESSAGE_OVERHEAD. A P->B of fewer elements than devices sends the
    whole tensor to each peer instead. Measured on 2, 3 and 4 ranks and a 2 x 2 mesh. Of what
    goes on the links, `across` (the share of the peers on other nodes) crosses nodes.
    """
    if src == dst or src.kind == "B":
        return FREE
    kind = collective_of(src, dst)
    if kind == "all_to_all":
        messages, piece = p - 1, group_bytes / (p * p)
    elif kind == "all_reduce":
        messages, piece = (
            (p - 1, group_bytes) if group_elems < p else (2 * (p - 1), group_bytes / p)
        )
    else:
        messages, piece = p - 1, group_bytes / p
    sent = messages * (_pad(piece) + MESSAGE_OVERHEAD)
    link = link.for_collective(kind)
    wire = messages * (_pad(piece) + MESSAGE_OVERHEAD - EVENTFD_BYTES)
    latency = messages * link.latency
    return Transfer(sent, latency + sent / link.bandwidth, latency, wire * across)


AXIS_COSTS: Dict[str, AxisCost] = {"nccl": nccl_axis_cost, "oneflow-cpu": oneflow_cpu_axis_cost}


def _group_share(state: NdSbp, axis: int, hierarchy: Sequence[int]) -> int:
    """How many groups along `axis` the other axes' splits cut the tensor into."""
    share = 1
    for k, s in enumerate(state):
        if k != axis and s.is_split:
            share *= hierarchy[k]
    return share


def _valid(shape: Sequence[int], nd: NdSbp, hierarchy: Sequence[int]) -> bool:
    """A state OneFlow can hold: 1-D splits may be uneven, n-D ones must be even (see rules)."""
    if len(hierarchy) > 1:
        return evenly_split(shape, nd, hierarchy)
    return local_shape(shape, nd, hierarchy) is not None


def _mergeable(shape: Sequence[int], s: Sbp, n: int) -> bool:
    """OneFlow's CanMergeSplit: [a, b]:(Si, Si) equals [a*b]:Si only for these remainders."""
    return not s.is_split or shape[s.axis] % n in (0, 1, n - 1)


def reduce_pair(src: NdSbp, dst: NdSbp, hierarchy: Sequence[int], shape: Sequence[int]):
    """OneFlow's InOutParallelDimReduce: (reduced hierarchy, src, dst), with groups of merged
    axes."""
    axes = [(h, [d], src[d], dst[d]) for d, h in enumerate(hierarchy) if h > 1]
    merged: List[tuple] = []
    for h, ds, a, b in axes:
        if merged and merged[-1][2] == a and merged[-1][3] == b:
            n = merged[-1][0] * h
            if _mergeable(shape, a, n) and _mergeable(shape, b, n):
                ph, pds, _, _ = merged.pop()
                merged.append((n, pds + ds, a, b))
                continue
        merged.append((h, ds, a, b))
    return merged


# OneFlow 0.9.0's flat transfer cost and partial-sum penalty (sbp_infer_util.cpp); only the
# choice of middle nodes depends on them, never a predicted byte.
_TC = 1.65e4
INF = math.inf


def _lazy_1d(a: Sbp, b: Sbp, t: float, n: int, two_d: bool) -> float:
    if a == b:
        return 0.0
    if a.kind == "S" and b.kind == "P":
        return INF
    if a.kind == "B":
        return 8 * n * t if b.kind == "P" else 1.0
    if a.kind == "S":
        return t * (n - 1) / n if b.kind == "S" else t * (n - 1)
    if b.kind == "P":
        return INF if two_d else 0.0
    return t * (n - 1) if b.kind == "S" else 2 * t * (n - 1)


def oneflow_lazy_cost(
    src: NdSbp, dst: NdSbp, hierarchy: Sequence[int], shape: Sequence[int], t: float
) -> float:
    """ComputeLazyCopyCostBetweenNdSbp on one placement: INF where OneFlow needs middle nodes."""
    axes = reduce_pair(src, dst, hierarchy, shape)
    if all(a == b for _, _, a, b in axes):
        return 0.0
    if len(axes) == 1:
        ((n, _, a, b),) = axes
        return _TC + _lazy_1d(a, b, t, n, False)
    if len(axes) != 2:
        return INF
    (h0, _, a0, b0), (h1, _, a1, b1) = axes
    if a0 != b0 and a1 != b1:
        return INF
    if a0 != b0 and ((a0 == a1 and a0.is_split) or (b0 == b1 and b0.is_split)):
        return INF  # "Splitting at the same dimension needs special cares"
    same, diff, h_same, h_diff = (a1, (a0, b0), h1, h0) if a0 != b0 else (a0, (a1, b1), h0, h1)
    t_eff = t if same.is_split else t * h_same
    return _TC + _lazy_1d(diff[0], diff[1], t_eff, h_diff, True)


# (mesh axes a move runs along, its collective) -> the share of its bytes sent across nodes
Crossing = Callable[[Tuple[int, ...], str], float]


def no_crossing(dims: Tuple[int, ...], kind: str) -> float:
    return 0.0


def _direct_cost(
    src: NdSbp,
    dst: NdSbp,
    shape: Sequence[int],
    nbytes: float,
    axes: Sequence[AxisLinks],
    axis_cost: AxisCost,
    crossing: Crossing = no_crossing,
    inside: Optional[Link] = None,
) -> Transfer:
    """One hop: a 1-D move on each (possibly merged) mesh axis that changes, last axis first.

    OneFlow does a hop with one changing axis as that 1-D move in every group; a hop that
    changes both axes only exists on CUDA (NCCL send/recv), costed as the two moves in turn.
    Each move's bytes across nodes are its `crossing` share. With `inside` (the link inside a
    node, where each device sends to each peer directly, as OneFlow's CPU boxing does), only
    that share goes at the pace of the slow link across nodes, the rest at `inside`'s; in a
    ring (NCCL) the slowest link paces every byte.
    """
    hierarchy = [a.size for a in axes]
    numel = math.prod(shape)
    state, total = list(src), FREE
    for n, ds, a, b in reversed(reduce_pair(src, dst, hierarchy, shape)):
        if a == b:
            continue
        share = math.prod(hierarchy[k] for k, s in enumerate(state) if k not in ds and s.is_split)
        link = min((axes[d].link for d in ds), key=lambda link: link.bandwidth)
        across = crossing(tuple(ds), collective_of(a, b)) if a.kind != "B" else 0.0
        move = axis_cost(a, b, nbytes / share, numel / share, n, link, across)
        if inside is not None and 0.0 < across < 1.0:
            near = axis_cost(a, b, nbytes / share, numel / share, n, inside, across)
            move = _split_pace(move, near, across)
        total = total + move
        for d in ds:
            state[d] = b
    return total


def _split_pace(far: Transfer, near: Transfer, across: float) -> Transfer:
    """A move whose `across` share of the bytes crosses nodes at `far`'s pace and the rest stays
    inside them at `near`'s: the same bytes, the time and latency of each share added."""
    return Transfer(
        far.bytes,
        across * far.time + (1.0 - across) * near.time,
        across * far.latency + (1.0 - across) * near.latency,
        far.inter_node_bytes,
    )


def collector_paths(
    costs: np.ndarray, max_middle: int, sources: Optional[Sequence[int]] = None
) -> Dict[Tuple[int, int], List[List[int]]]:
    """OneFlow's BoxingCollector::GenerateCombination4SamePlacement on a matrix of hop costs,
    for the pairs from `sources` (every state by default).

    Middle nodes are added one at a time: a pair still infinite after m - 1 middle nodes
    takes the cheapest i -> (m - 1 middle nodes) -> k -> j with k -> j direct; every list
    within 1e-7 of that cost is kept (the caller breaks the tie by storage). A pair's lists
    depend only on pairs from the same source, so a subset of sources costs its share.
    """
    n = len(costs)
    rows = range(n) if sources is None else sources
    best = costs.copy()
    lists: Dict[Tuple[int, int], List[List[int]]] = {}
    for m in range(1, max_middle + 1):
        reach = np.full((n, n), INF)  # cost of i -> k with exactly m - 1 middle nodes
        if m == 1:
            reach = np.where(np.isfinite(costs), costs, INF)
            np.fill_diagonal(reach, INF)
        else:
            for i, k in [ik for ik, ls in lists.items() if len(ls[0]) == m - 1]:
                reach[i, k] = best[i, k]
        direct_kj = np.where(np.isfinite(costs), costs, INF)
        np.fill_diagonal(direct_kj, INF)
        todo = [(i, j) for i in rows for j in range(n) if i != j and not np.isfinite(best[i, j])]
        for i, j in todo:
            total = reach[i, :] + direct_kj[:, j]
            total[[i, j]] = INF
            low = float(total.min())
            if not np.isfinite(low):
                continue
            best[i, j] = low
            found = []
            for k in np.nonzero(total <= low * 1.0000001)[0]:
                found += [ls + [int(k)] for ls in lists[(i, int(k))]] if m > 1 else [[int(k)]]
            lists[(i, j)] = found
    return lists


class CollectorTable:
    """OneFlow's boxing collector over `states` under a matrix of hop costs: the middle-node lists
    of a pair (collector_paths), each source's row solved when first asked for (a tensor's
    transitions start from a few of the states)."""

    def __init__(self, states: Sequence[NdSbp], costs: np.ndarray, max_middle: int):
        self.states, self.costs, self.max_middle = list(states), costs, max_middle
        self.index = {st: i for i, st in enumerate(self.states)}
        self._rows: Dict[int, Dict[Tuple[int, int], List[List[int]]]] = {}

    def lists(self, src: NdSbp, dst: NdSbp) -> List[List[NdSbp]]:
        i = self.index[src]
        if i not in self._rows:
            self._rows[i] = collector_paths(self.costs, self.max_middle, [i])
        return [[self.states[k] for k in ls] for ls in self._rows[i].get((i, self.index[dst]), [])]


def collector_states(axes: int, mesh_dims: int) -> List[NdSbp]:
    """The n-D SBPs in the order of OneFlow's collector (CollectUniverse: B, S(0..axes-1), P;
    then every combination, the first mesh axis outermost): where middle-node lists tie on
    storage, the collector keeps the first in this order, which decides the mesh axis each hop
    runs along (and so which link it crosses)."""
    alphabet = [B] + [S(i) for i in range(axes)] + [P]
    return list(itertools.product(alphabet, repeat=mesh_dims))


@functools.lru_cache(maxsize=None)
def virtual_table(world: int) -> CollectorTable:
    """The collector's table on its virtual [4W, 4W] mesh over B, S(0..5), P."""
    h = 4 * world
    vshape = (h * h,) * 6
    t = float(h * h) ** 6
    states = collector_states(6, 2)
    costs = np.array([[oneflow_lazy_cost(a, b, (h, h), vshape, t) for b in states] for a in states])
    return CollectorTable(states, costs, 3)


def _all_same_split(nd: NdSbp) -> bool:
    return len(set(nd)) == 1 and nd[0].is_split


def cpu_hop_supported(
    src: NdSbp, dst: NdSbp, hierarchy: Sequence[int], shape: Sequence[int]
) -> bool:
    """Whether OneFlow 0.9.0 has a CPU boxing builder for this one hop.

    Its dispatcher (hierarchical_sub_task_graph_builder_impl.cpp) sends a hop that reduces to
    1-D to the flat builders, which handle everything; on 2-D it takes the intra-group builder
    when axis 0 agrees, the inter-group one when only axis 0 differs and neither side is an
    all-same split; anything else goes to the NCCL send/recv builder, which fails on CPU
    ("Partial SBP in the consumer or not running on CUDA"). Both group builders floor uneven
    pieces and fail to compile on them (slice_boxing_op.cpp:107, seen here). Compile errors of
    this stage happen on rank 0 only, where the plan is compiled, and leave the other ranks
    waiting forever: a plan must never need such a hop.
    """
    axes = reduce_pair(src, dst, hierarchy, shape)
    if len(axes) <= 1:
        return True
    if len(axes) != 2 or len(hierarchy) != 2:
        return False
    intra = src[0] == dst[0]
    inter = src[1] == dst[1] and not (_all_same_split(src) or _all_same_split(dst))
    return (
        (intra or inter)
        and evenly_split(shape, src, hierarchy)
        and evenly_split(shape, dst, hierarchy)
    )


def route_class(shape: Sequence[int], hierarchy: Sequence[int]) -> Tuple[int, ...]:
    """The shape as the choice of middle nodes sees it: a dimension that is a positive multiple
    of the mesh size stands for all such. Which states are valid, which axes merge, which hops
    OneFlow can do and which middle nodes store least (a ratio the even dimensions cancel out
    of) are the same for every shape of one class; what each hop costs is not."""
    world = math.prod(hierarchy)
    return tuple(world if d > 0 and d % world == 0 else d for d in shape)


class Routes:
    """The states and paths of every transition on one mesh for one route_class of shapes.

    A direct transition is one hop; any other follows the middle nodes OneFlow's boxing
    collector would insert (fewest middle nodes first, cheapest by its formula, least storage on
    the shape). Only the customized collector (when the virtual table's middle nodes do not fit
    the shape) weighs hops by the tensor's bytes: its paths are kept per byte count."""

    def __init__(self, shape: Tuple[int, ...], hierarchy: Tuple[int, ...]):
        self.shape, self.hierarchy = shape, hierarchy
        self.states = [
            st
            for st in collector_states(len(shape), len(hierarchy))
            if _valid(shape, st, hierarchy)
        ]
        self.index = {st: i for i, st in enumerate(self.states)}
        self._paths: Dict[Tuple[NdSbp, NdSbp], Optional[List[NdSbp]]] = {}
        self._custom: Dict[float, CollectorTable] = {}
        self._supported: Dict[Tuple[NdSbp, NdSbp], bool] = {}

    def _direct(self, src: NdSbp, dst: NdSbp) -> bool:
        return oneflow_lazy_cost(src, dst, self.hierarchy, self.shape, 1.0) < INF

    def _storage(self, middle: Sequence[NdSbp]) -> float:
        total = 0.0
        for st in middle:
            # OneFlow's Storage4NdSbp: floored splits, so a middle node may split unevenly
            local = local_shape(self.shape, st, self.hierarchy)
            if local is None:
                return INF
            total += math.prod(local)
        return total

    @property
    def _collected(self) -> bool:
        """Whether OneFlow's boxing collector inserts the middle nodes (2-D meshes, at most 6
        dimensions); elsewhere a transition that is not direct has no path."""
        return len(self.hierarchy) == 2 and len(self.shape) <= 6

    def _through(self, src: NdSbp, options: List[List[NdSbp]], dst: NdSbp) -> Optional[List[NdSbp]]:
        """The path through the middle nodes of `options` that store least (None if none)."""
        return [src] + min(options, key=self._storage) + [dst] if options else None

    def _virtual_options(self, src: NdSbp, dst: NdSbp) -> List[List[NdSbp]]:
        """Middle nodes from the collector's virtual table that fit the shape."""
        options = virtual_table(math.prod(self.hierarchy)).lists(src, dst)
        return [ls for ls in options if self._storage(ls) < INF]

    def _custom_options(self, src: NdSbp, dst: NdSbp, nbytes: float) -> List[List[NdSbp]]:
        """The customized collector's middle nodes, its table built on the shape's states for a
        tensor of `nbytes` (kept per byte count)."""
        if nbytes not in self._custom:
            costs = np.array(
                [
                    [
                        oneflow_lazy_cost(a, b, self.hierarchy, self.shape, nbytes)
                        for b in self.states
                    ]
                    for a in self.states
                ]
            )
            self._custom[nbytes] = CollectorTable(self.states, costs, 5)
        return self._custom[nbytes].lists(src, dst)

    def path(self, src: NdSbp, dst: NdSbp, nbytes: float) -> Optional[List[NdSbp]]:
        """The n-D SBPs the transition of a tensor of `nbytes` goes through; None where OneFlow
        has no path."""
        if src not in self.index or dst not in self.index:
            return None
        key = (src, dst)
        if key not in self._paths:
            self._paths[key] = self._shape_path(src, dst)
        found = self._paths[key]
        if found is not None or not self._collected:
            return found
        return self._through(src, self._custom_options(src, dst, nbytes), dst)

    def _shape_path(self, src: NdSbp, dst: NdSbp) -> Optional[List[NdSbp]]:
        """The path where the shape alone decides it: direct, S -> P through B, or middle nodes
        from the virtual table; None where the customized collector must decide (or none can)."""
        if src == dst:
            return [src]
        if self._direct(src, dst):
            return [src, dst]
        if len(reduce_pair(src, dst, self.hierarchy, self.shape)) == 1:
            return [src, (B,) * len(self.hierarchy), dst]  # S -> P: OneFlow inserts B (1-D rule)
        if not self._collected:
            return None
        return self._through(src, self._virtual_options(src, dst), dst)

    def cpu_hop_supported(self, a: NdSbp, b: NdSbp) -> bool:
        key = (a, b)
        if key not in self._supported:
            self._supported[key] = cpu_hop_supported(a, b, self.hierarchy, self.shape)
        return self._supported[key]


@functools.lru_cache(maxsize=4096)
def _routes(shape_class: Tuple[int, ...], hierarchy: Tuple[int, ...]) -> Routes:
    return Routes(shape_class, hierarchy)


def routes_for(shape: Sequence[int], hierarchy: Sequence[int]) -> Routes:
    """The Routes of `shape`'s route_class on the mesh, shared by every shape of that class."""
    return _routes(route_class(shape, hierarchy), tuple(hierarchy))


class TransitionTable:
    """Every transition between the SBPs one tensor can hold on the mesh, priced per hop along
    the path its Routes give."""

    def __init__(
        self,
        shape: Sequence[int],
        nbytes: float,
        axes: Sequence[AxisLinks],
        axis_cost: AxisCost,
        cpu_builders: bool = False,
        crossing: Crossing = no_crossing,
        inside: Optional[Link] = None,
    ):
        self.shape, self.nbytes, self.axes, self.axis_cost = (
            tuple(shape),
            nbytes,
            tuple(axes),
            axis_cost,
        )
        self.cpu_builders, self.crossing, self.inside = cpu_builders, crossing, inside
        self.hierarchy = tuple(a.size for a in axes)
        self.routes = routes_for(self.shape, self.hierarchy)
        self._hops: Dict[Tuple[NdSbp, NdSbp], Optional[Transfer]] = {}

    def path(self, src: NdSbp, dst: NdSbp) -> Optional[List[NdSbp]]:
        return self.routes.path(src, dst, self.nbytes)

    def _hop(self, a: NdSbp, b: NdSbp) -> Optional[Transfer]:
        """One direct move (None where the backend has no builder for it); paths share hops."""
        key = (a, b)
        if key not in self._hops:
            if self.cpu_builders and not self.routes.cpu_hop_supported(a, b):
                self._hops[key] = None
            else:
                self._hops[key] = _direct_cost(
                    a,
                    b,
                    self.shape,
                    self.nbytes,
                    self.axes,
                    self.axis_cost,
                    self.crossing,
                    self.inside,
                )
        return self._hops[key]

    def cost(self, src: NdSbp, dst: NdSbp) -> Optional[Transfer]:
        path = self.path(src, dst)
        if path is None:
            return None
        total = FREE
        for a, b in zip(path, path[1:]):
            hop = self._hop(a, b)
            if hop is None:
                return None
            total = total + hop
        return total
