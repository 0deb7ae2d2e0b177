"""Apply a plan that recomputes modules: trace the graph again with OneFlow's activation
checkpointing on them, and carry the plan's signatures over to the new Job.

OneFlow 0.9.0 recomputes a module in backward when `activation_checkpointing` is set on its
GraphModule before the graph is built; its CheckpointingPass runs inside `build_graph`
(notes 1.1). The hook has already traced the graph once to plan it, so the graph is traced a
second time: every module's cached build scope, every parameter's lazy tensor and gradient,
and the optimizer confs the first trace wrote are reset (what `nn.Graph.build_graph` would
otherwise reuse or add twice), and the Job gets a new name (the first one stays registered in
the session). Checked on CPU ranks: the second trace trains, its losses those of the first.

The second Job numbers its ops afresh (OneFlow names an op `<module>-<type>-<counter>`) and
holds, besides the first Job's ops: an identity op at each checkpointed module's input and one
on that input's gradient, and the recomputed copies (oneflow_autoddl.recompute); the gradient
of a checkpointed module's input is also summed by one add_n of all its parts where the first
Job used two. An op is matched to the first Job's by its name without the counter and its place
among the ops of that name, and takes its signature where it has the same blobs; a copy takes
its original's; any other op the candidate that boxes least between its decided neighbours.
"""

from typing import Dict, List, Sequence, Tuple

import oneflow as flow
from oneflow.nn.graph.graph_block import GraphModule, GraphTensor
from oneflow.nn.graph.proxy import LazyBuilder

from ..cost.model import CostModel
from ..errors import PlanMismatch
from ..ir import CHECKPOINT_COPY_PREFIX, Graph
from ..recompute import original
from ..rules import candidates, get_rule, has_rule
from ..sbp import Signature

RETRACE_SUFFIX = "_recompute"


def _modules(graph) -> Dict[str, object]:
    """Module path (as op names carry it) -> the proxy of every module of the graph."""
    out = {}
    for top in graph._blocks.values():
        for proxy in top.modules():
            block = proxy.to(GraphModule)
            out[(block.name_prefix + block.name).rstrip(".")] = proxy
    return out


def reset_build_state(graph) -> None:
    """Forget what a first `build_graph` left on the graph's modules and parameters."""
    for top in graph._blocks.values():
        for proxy in top.modules():
            block = proxy.to(GraphModule)
            block._scope = block._prev_scope = None
        for proxy in list(top.parameters(recurse=True)) + list(top.buffers(recurse=True)):
            block = proxy.to(GraphTensor)
            block._scope = block._prev_scope = None
            proxy._lazy_origin_builder = LazyBuilder()
            proxy.build_finished = False
            tensor = proxy.to(flow.Tensor)
            if tensor.grad is not None:
                tensor.grad = None
    del graph.config.proto.train_conf.optimizer_conf[:]


def retrace(graph, scopes: Sequence[str], *args, **kwargs):
    """Trace `graph` again with activation checkpointing on the modules at `scopes`; returns
    build_graph's (Job, eager outputs). Raises PlanMismatch naming a scope the graph lacks."""
    modules = _modules(graph)
    missing = [s for s in scopes if s not in modules]
    if missing:
        raise PlanMismatch(
            f"the plan recomputes module(s) {missing}, which graph {graph.name} does not have "
            f"(it has e.g. {sorted(modules)[:4]})"
        )
    for scope in scopes:
        modules[scope].to(GraphModule).activation_checkpointing = True
    reset_build_state(graph)
    graph._name = graph._name + RETRACE_SUFFIX
    return graph.build_graph(*args, **kwargs)


def _key(name: str) -> Tuple[str, int]:
    """An op's name without OneFlow's counter, and the counter (the order the trace made it)."""
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def _by_key(graph: Graph) -> Dict[Tuple[str, int], str]:
    """(name without counter, its place among the ops of that name in the trace's order) -> op."""
    names = sorted(
        (n for n in graph.ops if not n.startswith((CHECKPOINT_COPY_PREFIX, "_"))), key=_key
    )  # not the copies, nor interface ops (named after the graph)
    seen: Dict[str, int] = {}
    out = {}
    for name in names:
        k = _key(name)[0]
        out[(k, seen.get(k, 0))] = name
        seen[k] = seen.get(k, 0) + 1
    return out


def match_ops(first: Graph, second: Graph) -> Dict[str, str]:
    """Op of the second trace -> the same op of the first (copies -> their original's match)."""
    old = _by_key(first)
    new = _by_key(second)
    matched = {name: old[k] for k, name in new.items() if k in old}
    for name in second.ops:
        if original(name) != name and original(name) in matched:
            matched[name] = matched[original(name)]
    return matched


def carry_signatures(
    first: Graph, second: Graph, signatures: Dict[str, Signature], model: CostModel
) -> Dict[str, Signature]:
    """The plan's signatures for the second trace. An op matched to one of the first trace with
    the same blobs takes its signature; any other (the checkpoint identities, a gradient
    accumulated in one add_n where the first trace used two) the candidate that boxes least
    between what is decided around it, in the graph's order (an identity: its input's SBP
    passed through)."""
    matched = match_ops(first, second)
    out = {}
    for name, old in matched.items():
        if old in signatures and set(signatures[old]) == set(second.op(name).bns):
            out[name] = signatures[old]
    mesh = second.main_placement()
    for name, op in second.ops.items():
        if name in out or op.placement != mesh or op.role in ("io", "system"):
            continue
        if not has_rule(op.type) or get_rule(op.type).fixed:
            continue
        out[name] = _best_fit(second, op, out, model)
    return out


def _best_fit(graph: Graph, op, decided: Dict[str, Signature], model: CostModel) -> Signature:
    """The candidate of `op` whose inputs and outputs box least from the decided producers and
    to the decided consumers; of those, the one boxing least on its inputs (an identity between
    a tensor and readers that take it in another SBP boxes after itself, as a phase copy does,
    oneflow_autoddl.regather); then the first, in OneFlow's order."""

    def sbp_of(name: str, bn: str):
        sig = decided.get(name) or graph.op(name).native
        return sig[bn] if sig is not None and bn in sig else None

    def cost(sig: Signature) -> Tuple[float, float]:
        inputs = outputs = 0.0
        for ibn, lbn in op.inputs.items():
            t = graph.tensor(lbn)
            src = sbp_of(t.producer, t.obn)
            if src is not None:
                inputs += model.transfer(src, sig[ibn], t.shape, t.dtype).time
        for obn, lbn in op.outputs.items():
            t = graph.tensor(lbn)
            for c, ibn in t.consumers:
                if c in decided:
                    outputs += model.transfer(sig[obn], decided[c][ibn], t.shape, t.dtype).time
        return inputs + outputs, inputs

    return min(candidates(graph, op), key=cost)


def unmatched(first: Graph, second: Graph) -> List[str]:
    """Ops of the second trace that are neither matched, copies nor checkpoint identities."""
    matched = match_ops(first, second)
    return [
        name
        for name, op in second.ops.items()
        if name not in matched
        and op.type != "identity"
        and op.role not in ("io", "system")
        and not name.startswith("_")
    ]
