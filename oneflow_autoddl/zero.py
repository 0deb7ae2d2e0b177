"""Which ZeRO stage a plan's treatment of each parameter amounts to.

In the SBP space the planner searches, a parameter, its optimizer state and its update op take
one SBP (the update writes them in place: OneFlow never boxes a mutable input), and the
gradient is boxed to that SBP. A mesh axis is data parallel for a parameter when its gradient
comes out of the backward as a partial sum there (the samples are split over the axis, each
device holding its share of the sum; judged where the gradient is computed, before a cast to
float32 or an identity). Then, per parameter:
  - replicated (B) over every data-parallel axis: plain data parallelism, ZeRO stage 0; the
    gradient is all-reduced;
  - split over every data-parallel axis: ZeRO stage 3; the gradient is reduce-scattered to the
    shard (P -> S), the optimizer state and the update are sharded with it, and the parameter
    is all-gathered where the forward and backward read it whole;
  - split over some of them only: stage 3 over those axes, stage 0 over the others;
  - no data-parallel axis (replicated compute, or tensor parallel): no ZeRO.
Stages 1 (optimizer state sharded, parameter replicated) and 2 (gradient too) cannot be
expressed: the state takes the parameter's SBP, so sharding it shards the parameter, which
needs the update on the shard and an all-gather of the updated parameter into a replicated
variable, outside the SBP signatures of the ops (OneFlow's own ZeRO pass,
OptimizerPlacementOptimizationPass, rewrites the Job to do it).
"""

from typing import Callable, Dict

from .ir import Graph
from .rules import update_of
from .sbp import P, Signature

STAGES = ("zero-3", "zero-3 partial", "zero-0", "no data parallelism")
# Ops a gradient may pass through on its way to the update without being summed (a cast, an
# identity): the gradient is judged where it was computed.
PASS_THROUGH = ("cast", "identity")

SignatureOf = Callable[[str], Signature]


def parameter_stages(graph: Graph, signature_of: SignatureOf) -> Dict[str, str]:
    """Parameter (variable op) -> its stage (one of STAGES)."""
    out: Dict[str, str] = {}
    for op in graph.ops.values():
        update = update_of(op)
        if update is None or update.model not in op.inputs:
            continue
        param = graph.tensor(op.inputs[update.model])
        grad = graph.tensor(op.inputs[update.grad])
        while graph.op(grad.producer).type in PASS_THROUGH:  # AMP's cast back to float32
            grad = graph.tensor(graph.op(grad.producer).inputs["in_0"])
        sbp = signature_of(op.name)[update.model]
        produced = signature_of(grad.producer)[grad.obn]
        data_axes = [d for d, s in enumerate(produced) if s == P]
        split = [d for d in data_axes if sbp[d].is_split]
        if not data_axes:
            stage = "no data parallelism"
        elif len(split) == len(data_axes):
            stage = "zero-3"
        else:
            stage = "zero-3 partial" if split else "zero-0"
        out[param.producer] = stage
    return out


def stage_shares(graph: Graph, signature_of: SignatureOf) -> Dict[str, float]:
    """Stage -> the share of the parameters' bytes (logical, whole tensors) it covers; stages
    covering nothing are left out."""
    stages = parameter_stages(graph, signature_of)
    nbytes = {
        name: sum(graph.tensor(lbn).nbytes for lbn in graph.op(name).outputs.values())
        for name in stages
    }
    total = max(sum(nbytes.values()), 1)
    shares: Dict[str, float] = {}
    for name, stage in stages.items():
        shares[stage] = shares.get(stage, 0.0) + nbytes[name] / total
    return {s: shares[s] for s in STAGES if s in shares}


def describe(shares: Dict[str, float]) -> str:
    """`zero-3 62%, zero-0 38%` (a stage covering under half a percent: `<1%`)."""
    return (
        ", ".join(
            f"{stage} {100 * share:.0f}%" if share >= 0.005 else f"{stage} <1%"
            for stage, share in shares.items()
        )
        or "-"
    )
