"""The Plan of an assignment: what the search chose, as OneFlow's signatures, with its costs.

`assemble` turns the search's numbers (one candidate index per variable of a
search.problem.Problem) into a Plan: every planned op's signature and shapes, each
parameter's SBP and bytes, what is left to OneFlow and why, the predicted costs beside the
baselines', and the costliest boxings.
"""

from typing import Dict, List, Optional, Sequence

from .cost.bounds import graph_bound_bytes
from .cost.compute import blob_bytes
from .mesh import format_mesh
from .plan import OpEntry, Plan, Predicted, signature_texts
from .rules import update_of
from .sbp import Signature, format_nd
from .search.memory import peak_memory
from .search.problem import Breakdown, Problem
from .search.units import NO_RULE, Unit
from .zero import stage_shares


def assemble(
    problem: Problem,
    x: Sequence[int],
    baselines: Dict[str, List[int]],
    search_time: float,
    memory_limit: Optional[float] = None,
    transfers_kept: int = 50,
    everything: bool = False,
) -> Plan:
    """The Plan of assignment x; `everything` lists held ops (but interface and train-step ops)
    as planned too, for describing a Job as OneFlow compiled it."""
    p, g = problem, problem.graph
    detail = p.evaluate(x)
    comm = detail.op_comm(g)
    ops, unplanned, variables, var_shapes, var_bytes = {}, {}, {}, {}, {}
    texts: Dict[Signature, Dict[str, str]] = {}  # tied ops share their signatures
    for unit in p.units:
        for name in unit.ops:
            op = g.op(name)
            sig = p.signature(name, x)
            if unit.fixed is not None and (not everything or op.role in ("io", "system")):
                unplanned[name] = {"type": op.type, "reason": unit.fixed}
                continue
            if sig not in texts:
                texts[sig] = signature_texts(sig)
            ops[name] = OpEntry(
                op.type,
                dict(texts[sig]),
                {bn: list(g.shape(op, bn)) for bn in op.bns},
                list(op.inputs),
                detail.op_compute.get(name, 0.0),
                comm.get(name, 0.0),
            )
            if op.role == "variable" and _is_parameter(problem, unit, name):
                variables[name] = ops[name].signature["out"]
                var_shapes[name] = list(g.shape(op, "out"))
                var_bytes[name] = blob_bytes(g, op, "out", sig["out"], op.placement.hierarchy)
    return Plan(
        graph=g.name,
        mesh=format_mesh(p.mesh.hierarchy),
        cluster=p.model.cluster.name,
        device=p.mesh.device,
        ops=ops,
        variables=variables,
        variable_shapes=var_shapes,
        variable_bytes=var_bytes,
        unplanned_ops=unplanned,
        predicted=_predicted(p, x),
        baselines={name: _predicted(p, y) for name, y in baselines.items()},
        lower_bound_bytes=graph_bound_bytes(g, p.mesh.size),
        memory_limit_bytes=memory_limit,
        transfers=transfers(problem, x, detail, transfers_kept),
        search_time_s=search_time,
        notes=notes(unplanned),
        precision=precision(g),
    )


def _predicted(problem: Problem, x: Sequence[int]) -> Predicted:
    """The costs of assignment x, its peak memory and its parameters' ZeRO stages."""
    shares = stage_shares(problem.graph, lambda name: problem.signature(name, x))
    return Predicted.of(problem.evaluate(x), peak_memory(problem, x), shares)


def precision(graph) -> str:
    """float32, or `mixed <dtype>` where some float tensors are in half precision."""
    halves = sorted({t.dtype for t in graph.tensors.values() if t.dtype in ("float16", "bfloat16")})
    return f"mixed {'/'.join(halves)}" if halves else "float32"


def notes(unplanned: Dict[str, Dict[str, str]]) -> List[str]:
    """One note per op type left without a rule, naming it once with how many ops it has: those
    ops keep the signature OneFlow's own inference gives them (the plan is built around them)."""
    counts: Dict[str, int] = {}
    for entry in unplanned.values():
        if NO_RULE in entry["reason"]:
            counts[entry["type"]] = counts.get(entry["type"], 0) + 1
    return [
        f"op type {t!r} has {NO_RULE}, {n} op{'s' if n > 1 else ''} left with OneFlow's own "
        "signature"
        for t, n in sorted(counts.items())
    ]


def _is_parameter(problem: Problem, unit: Unit, name: str) -> bool:
    """A model parameter or buffer, not an optimizer state (momentum, Adam's m and v)."""
    head = problem.graph.op(unit.ops[0])
    update = update_of(head)
    if head.name == name or update is None:
        return True
    return problem.graph.tensor(head.inputs[update.model]).producer == name


def transfers(problem: Problem, x: Sequence[int], detail: Breakdown, limit: int) -> List[Dict]:
    """The boxings that cost most: tensor, shape, SBP from and to, bytes and time per device."""
    p, g = problem, problem.graph
    out = []
    for lbn, tr in sorted(detail.tensor_comm.items(), key=lambda kv: -kv[1].time)[:limit]:
        t = g.tensor(lbn)
        src = p.signature(t.producer, x)[t.obn]
        dsts = sorted(
            {
                format_nd(p.signature(c, x)[ibn])
                for c, ibn in t.consumers
                if g.op(c).placement == g.op(t.producer).placement
            }
            - {format_nd(src)}
        )
        out.append(
            {
                "tensor": lbn,
                "shape": list(t.shape),
                "from": format_nd(src),
                "to": dsts,
                "bytes": tr.bytes,
                "inter_node_bytes": tr.inter_node_bytes,
                "time_s": tr.time,
            }
        )
    return out
