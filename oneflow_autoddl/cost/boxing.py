"""The cost of boxing one tensor from one n-D SBP to another on the same mesh.

OneFlow carries an n-D transition out one mesh axis at a time (hierarchical boxing
builders, measured on CPU ranks): changing axis d while the others hold is a 1-D
transition inside each group of devices along d, on the slice that group holds. A move
on axis d is only group-local when no later axis splits the tensor axis it moves (later
axes subdivide the pieces earlier axes cut); OneFlow has no builder for the others and
routes them through middle nodes. States with the same SBP on every axis, like (S0, S0),
are reduced to 1-D over the whole mesh first, so moving between two of them is one 1-D
transition over all devices. The cost of a transition is the cheapest path of such
moves (shortest paths over the n-D SBPs valid for the shape); on a 2 x 2 mesh it reproduces
the middle nodes OneFlow's boxing collector picks. What one move costs is the
backend's: NCCL ring collectives on CUDA, OneFlow's slice boxing over sockets on CPU.
"""
import itertools
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..sbp import B, NdSbp, P, S, Sbp, evenly_split, local_shape
from .cluster import AxisLinks, Link
from .collectives import FREE, Transfer, all_gather, all_reduce, all_to_all, reduce_scatter

# (src, dst, group bytes, group elements, group size, link) -> cost of one 1-D move in each group
AxisCost = Callable[[Sbp, Sbp, float, float, int, Link], Transfer]


def nccl_axis_cost(src: Sbp, dst: Sbp, group_bytes: float, group_elems: float, p: int, link: Link) -> Transfer:
    """Ring collectives, as OneFlow's collective boxing runs them through NCCL."""
    if src == dst or src.kind == "B":
        return FREE  # B -> S is a local slice, B -> P keeps one copy and zeros the rest
    if src.kind == "S":
        if dst.kind == "S":
            return all_to_all(group_bytes, p, link)
        return all_gather(group_bytes, p, link)  # S -> B, and S -> P through B
    if dst.kind == "S":
        return reduce_scatter(group_bytes, p, link)
    return all_reduce(group_bytes, p, link)  # P -> B


def _pad(b: float, align: int = 512) -> float:
    return math.ceil(b / align) * align


# Per message on OneFlow's epoll CommNet: 64-byte blob header, two 112-byte socket
# messages each way and eventfd kicks (strace and wchar on CPU ranks agree to the byte).
MESSAGE_OVERHEAD = 536


def oneflow_cpu_axis_cost(src: Sbp, dst: Sbp, group_bytes: float, group_elems: float, p: int,
                          link: Link) -> Transfer:
    """OneFlow's CPU slice boxing: one socket transfer per (sender, receiver, slice).

    Bytes per device match the ring collectives (S->B, P->S: (p-1)/p; P->B: 2(p-1)/p as
    P->S then S->B; S->S: (p-1)/p^2; B->S, B->P free), plus, per message, the body padded
    to 512 bytes and MESSAGE_OVERHEAD. A P->B of fewer elements than devices sends the
    whole tensor to each peer instead. Measured on 2, 3 and 4 ranks and a 2 x 2 mesh.
    """
    if src == dst or src.kind == "B":
        return FREE
    if src.kind == "S" and dst.kind == "S":
        messages, piece = p - 1, group_bytes / (p * p)
    elif src.kind == "P" and dst.kind == "B":
        messages, piece = (p - 1, group_bytes) if group_elems < p else (2 * (p - 1), group_bytes / p)
    else:  # S->B, S->P (through B), P->S
        messages, piece = p - 1, group_bytes / p
    sent = messages * (_pad(piece) + MESSAGE_OVERHEAD)
    return Transfer(sent, messages * link.latency + sent / link.bandwidth)


AXIS_COSTS: Dict[str, AxisCost] = {"nccl": nccl_axis_cost, "oneflow-cpu": oneflow_cpu_axis_cost}


def _group_share(state: NdSbp, axis: int, hierarchy: Sequence[int]) -> int:
    """How many groups along `axis` the other axes' splits cut the tensor into."""
    share = 1
    for k, s in enumerate(state):
        if k != axis and s.is_split:
            share *= hierarchy[k]
    return share


def _local_move(state: NdSbp, axis: int, new: Sbp) -> bool:
    moved = {s.axis for s in (state[axis], new) if s.is_split}
    return not any(s.is_split and s.axis in moved for s in state[axis + 1:])


def _valid(shape: Sequence[int], nd: NdSbp, hierarchy: Sequence[int]) -> bool:
    """A state OneFlow can hold: 1-D splits may be uneven, n-D ones must be even (see rules)."""
    if len(hierarchy) > 1:
        return evenly_split(shape, nd, hierarchy)
    return local_shape(shape, nd, hierarchy) is not None


def _mergeable(shape: Sequence[int], s: Sbp, n: int) -> bool:
    """OneFlow's CanMergeSplit: [a, b]:(Si, Si) equals [a*b]:Si only for these remainders."""
    return not s.is_split or shape[s.axis] % n in (0, 1, n - 1)


def _moves(state: NdSbp, shape: Sequence[int], nbytes: float, axes: Sequence[AxisLinks],
           alphabet: Sequence[Sbp], axis_cost: AxisCost):
    """(next state, cost) of every move OneFlow performs directly from `state`."""
    hierarchy = [a.size for a in axes]
    numel = math.prod(shape)
    for axis, new in itertools.product(range(len(axes)), alphabet):
        if new == state[axis] or axes[axis].size == 1 or not _local_move(state, axis, new):
            continue
        nxt = state[:axis] + (new,) + state[axis + 1:]
        if _valid(shape, nxt, hierarchy):
            share = _group_share(state, axis, hierarchy)
            yield nxt, axis_cost(state[axis], new, nbytes / share, numel / share, axes[axis].size, axes[axis].link)
    if len(axes) > 1 and len(set(state)) == 1:
        n = math.prod(hierarchy)
        slowest = min((a.link for a in axes), key=lambda link: link.bandwidth)
        for new in alphabet:
            nxt = (new,) * len(axes)
            if new != state[0] and _mergeable(shape, new, n) and _mergeable(shape, state[0], n) \
                    and _valid(shape, nxt, hierarchy):
                yield nxt, axis_cost(state[0], new, nbytes, numel, n, slowest)


class TransitionTable:
    """All-pairs cheapest transitions between the SBPs one tensor can hold on the mesh.

    Built once per (shape, dtype): the direct moves as an edge list, then Floyd-Warshall
    on time; bytes are read along the chosen path.
    """

    def __init__(self, shape: Sequence[int], nbytes: float, axes: Sequence[AxisLinks], axis_cost: AxisCost):
        hierarchy = [a.size for a in axes]
        alphabet = [B, P] + [S(i) for i in range(len(shape))]
        self.states = [st for st in itertools.product(alphabet, repeat=len(axes)) if _valid(shape, st, hierarchy)]
        self.index = {st: i for i, st in enumerate(self.states)}
        n = len(self.states)
        self.hop: Dict[Tuple[int, int], Transfer] = {}
        time = np.full((n, n), np.inf)
        np.fill_diagonal(time, 0.0)
        for i, st in enumerate(self.states):
            for nxt, cost in _moves(st, shape, nbytes, axes, alphabet, axis_cost):
                j = self.index[nxt]
                if (i, j) not in self.hop or cost.time < self.hop[(i, j)].time:
                    self.hop[(i, j)] = cost
                    time[i, j] = cost.time
        succ = np.tile(np.arange(n), (n, 1))
        for k in range(n):
            through = time[:, k:k + 1] + time[k:k + 1, :]
            better = through < time - 1e-30
            time = np.where(better, through, time)
            succ = np.where(better, succ[:, k:k + 1], succ)
        self.time, self.succ = time, succ

    def path(self, src: NdSbp, dst: NdSbp) -> Optional[List[NdSbp]]:
        i, j = self.index.get(src), self.index.get(dst)
        if i is None or j is None or not np.isfinite(self.time[i, j]):
            return None
        path = [i]
        while path[-1] != j:
            path.append(int(self.succ[path[-1], j]))
        return [self.states[k] for k in path]

    def cost(self, src: NdSbp, dst: NdSbp) -> Optional[Transfer]:
        path = self.path(src, dst)
        if path is None:
            return None
        total = FREE
        for a, b in zip(path, path[1:]):
            total = total + self.hop[(self.index[a], self.index[b])]
        return total
