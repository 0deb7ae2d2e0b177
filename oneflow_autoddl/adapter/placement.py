"""Meshes as OneFlow placements and SBP values as `flow.sbp` objects and protos."""

from typing import List, Sequence

import oneflow as flow
from oneflow.core.job import sbp_parallel_pb2

from ..errors import ConfigError
from ..mesh import Mesh, mesh_size, parse_mesh, rank_grid
from ..sbp import B, NdSbp, P, S, Sbp


def placement(device: str, mesh) -> "flow.placement":
    """`placement("cpu", "2x2")` -> flow.placement("cpu", ranks=[[0, 1], [2, 3]])."""
    shape: Mesh = parse_mesh(mesh) if isinstance(mesh, str) else tuple(mesh)
    world = flow.env.get_world_size()
    if mesh_size(shape) != world:
        raise ConfigError(
            f"mesh {'x'.join(map(str, shape))} has {mesh_size(shape)} devices but "
            f"{world} ranks were launched: pass --nproc_per_node/--nnodes to match"
        )
    return flow.placement(device, ranks=rank_grid(shape))


def to_flow_sbp(nd: NdSbp) -> List["flow.sbp.sbp"]:
    out = []
    for s in nd:
        if s.kind == "S":
            out.append(flow.sbp.split(s.axis))
        elif s.kind == "B":
            out.append(flow.sbp.broadcast)
        else:
            out.append(flow.sbp.partial_sum)
    return out


def from_flow_sbp(sbps: Sequence["flow.sbp.sbp"]) -> NdSbp:
    if not isinstance(sbps, (list, tuple)):
        sbps = (sbps,)
    out = []
    for s in sbps:
        text = str(s)
        if "split" in text:
            out.append(S(int(text.split("dim=")[1].rstrip(")"))))
        elif "broadcast" in text:
            out.append(B)
        elif "partial_sum" in text:
            out.append(P)
        else:
            raise ValueError(f"unknown SBP object {text}")
    return tuple(out)


def to_proto(s: Sbp) -> sbp_parallel_pb2.SbpParallel:
    p = sbp_parallel_pb2.SbpParallel()
    if s.kind == "S":
        p.split_parallel.axis = s.axis
    elif s.kind == "B":
        p.broadcast_parallel.SetInParent()
    else:
        p.partial_sum_parallel.SetInParent()
    return p


def from_proto(p: sbp_parallel_pb2.SbpParallel) -> Sbp:
    which = p.WhichOneof("parallel_type")
    if which == "split_parallel":
        return S(p.split_parallel.axis)
    if which == "broadcast_parallel":
        return B
    if which == "partial_sum_parallel":
        return P
    raise ValueError(f"SBP proto with no parallel type: {p}")
