"""The blobs a boxing allocates on one device: the memory side of cost.boxing's transitions.

A transition runs as cost.boxing routes it (its hops through OneFlow's middle nodes, each hop a
1-D move per changing mesh axis inside each group of devices); here each move lists the blobs it
leaves on a device, in bytes, for a tensor of `group_bytes` as the group sees it over `p`
devices. Every middle node is also held once more, by the identity op OneFlow puts there.

On CPU ranks OneFlow 0.9.0's slice boxing works through the CommNet (read from the compiled plans
of the examples on 2 x 2 and 4 ranks, blob by blob, by tests/ranks/test_memory.py):
  - S -> B: the p - 1 pieces received, and the whole tensor they are concatenated into;
  - P -> S: the p pieces its partial sum is sliced into (its own included), the p - 1 received,
    their sum and the sum's scratch buffer, a piece each;
  - P -> B: P -> S then S -> B;
  - S -> S: the local piece sliced p ways, the p - 1 slices received, the new piece;
  - B -> S: the local slice; B -> P: the local copy (zeros on the other devices).
On CUDA a move is one NCCL collective writing into its output: the tensor in its new SBP.
"""

import math
from typing import Callable, Dict, List, Sequence

from ..sbp import NdSbp, Sbp
from .boxing import reduce_pair

# (src, dst, group bytes, devices in the group) -> bytes of each blob the move holds on a device
MoveBlobs = Callable[[Sbp, Sbp, float, int], List[float]]


def _pieces(n: int, nbytes: float) -> List[float]:
    return [nbytes] * n


def oneflow_cpu_move_blobs(src: Sbp, dst: Sbp, g: float, p: int) -> List[float]:
    """OneFlow's CPU slice boxing (see the module doc)."""
    if src == dst:
        return []
    piece = math.ceil(g / p)
    if src.kind == "B":
        return [piece] if dst.kind == "S" else [g]
    if src.kind == "S" and dst.kind == "B":
        return _pieces(p - 1, piece) + [g]
    if src.kind == "S":  # S -> S
        small = math.ceil(piece / p)
        return _pieces(p, small) + _pieces(p - 1, small) + [piece]
    reduced = _pieces(p, piece) + _pieces(p - 1, piece) + [piece, piece]  # P -> S
    if dst.kind == "S":
        return reduced
    return reduced + _pieces(p - 1, piece) + [g]  # P -> B


def nccl_move_blobs(src: Sbp, dst: Sbp, g: float, p: int) -> List[float]:
    """One collective into its output regst: the tensor in its new SBP on this device."""
    if src == dst:
        return []
    return [math.ceil(g / p) if dst.kind == "S" else g]


MOVE_BLOBS: Dict[str, MoveBlobs] = {"nccl": nccl_move_blobs, "oneflow-cpu": oneflow_cpu_move_blobs}


def state_bytes(shape: Sequence[int], nd: NdSbp, hierarchy: Sequence[int], elem: int) -> float:
    """Bytes of the most loaded device's share of a tensor in `nd`."""
    dims = list(shape)
    for s, h in zip(nd, hierarchy):
        if s.is_split and s.axis < len(dims):
            dims[s.axis] = math.ceil(dims[s.axis] / h)
    return float(math.prod(dims) * elem)


def hop_blobs(
    src: NdSbp,
    dst: NdSbp,
    shape: Sequence[int],
    nbytes: float,
    hierarchy: Sequence[int],
    move_blobs: MoveBlobs,
) -> List[float]:
    """The blobs of one direct hop: its 1-D moves, last mesh axis first (as cost.boxing runs
    them), each on the tensor as its group holds it."""
    state, blobs = list(src), []
    for n, ds, a, b in reversed(reduce_pair(src, dst, hierarchy, shape)):
        if a == b:
            continue
        share = math.prod(hierarchy[k] for k, s in enumerate(state) if k not in ds and s.is_split)
        blobs += move_blobs(a, b, math.ceil(nbytes / share), n)
        for d in ds:
            state[d] = b
    return blobs


def path_blobs(
    path: Sequence[NdSbp],
    shape: Sequence[int],
    elem: int,
    hierarchy: Sequence[int],
    move_blobs: MoveBlobs,
) -> List[float]:
    """Every blob of a transition along `path` (source, middle nodes, destination) on one
    device: each hop's, and each middle node's identity copy."""
    nbytes = float(math.prod(shape) * elem)
    blobs: List[float] = []
    for a, b in zip(path, path[1:]):
        blobs += hop_blobs(a, b, shape, nbytes, hierarchy, move_blobs)
    for middle in path[1:-1]:
        blobs.append(state_bytes(shape, middle, hierarchy, elem))
    return blobs
