"""On ranks: write the rules' candidate signatures into traced Jobs and check OneFlow accepts
them."""

import base64
import importlib
import random
from collections import defaultdict

import numpy as np
import oneflow as flow

from oneflow_autoddl.adapter.job import read_job, signatures_of
from oneflow_autoddl.adapter.writeback import write_signatures
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.cost.model import INFEASIBLE, CostModel
from oneflow_autoddl.rules import same_sbp_inputs
from oneflow_autoddl.sbp import format_signature
from oneflow_autoddl.search.units import build_units, fill_candidates


def _pattern(op, sig):
    return (op.type, format_signature(sig))


def _feasible(graph, model, unit, joint, chosen):
    """No edge to an op already chosen needs a boxing OneFlow's CPU builders lack (it would
    hang the other ranks); a same-SBP input must see its producer's SBP unchanged."""
    mine = dict(zip(unit.ops, joint))
    for name, sig in mine.items():
        op = graph.op(name)
        for ibn, lbn in op.inputs.items():
            t = graph.tensor(lbn)
            src = mine.get(t.producer) or chosen.get(t.producer)
            if src is None or graph.op(t.producer).placement != op.placement:
                continue
            if ibn in same_sbp_inputs(op) and src[t.obn] != sig[ibn]:
                return False
            if model.transfer(src[t.obn], sig[ibn], t.shape, t.dtype).time >= INFEASIBLE:
                return False
        for obn, lbn in op.outputs.items():
            for consumer, ibn in graph.tensor(lbn).consumers:
                dst = chosen.get(consumer)
                if (
                    dst is not None
                    and graph.op(consumer).placement == op.placement
                    and model.transfer(
                        sig[obn], dst[ibn], graph.tensor(lbn).shape, graph.tensor(lbn).dtype
                    ).time
                    >= INFEASIBLE
                ):
                    return False
    return True


def _choose(graph, units, tried, rng):
    """One signature per op: per unit an untried (type, signature) pattern where there is one."""
    model = CostModel(load_cluster("cpu-local"), graph.main_placement().hierarchy)
    chosen = {}
    for unit in units:
        head = graph.op(unit.ops[0])
        options = [c for c in unit.candidates if _feasible(graph, model, unit, c, chosen)] or list(
            unit.candidates
        )
        fresh = [c for c in options if _pattern(head, c[0]) not in tried[head.type]]
        pick = rng.choice(fresh or options)
        for name, sig in zip(unit.ops, pick):
            chosen[name] = sig
    return chosen


def accept_all(models, mesh: str, rounds: int, builder: str = "examples.models", steps: int = 0):
    """`accept` for several models in one launch; the first traced Job of each comes back too."""
    return {model: accept(model, mesh, rounds, builder=builder, steps=steps) for model in models}


def _losses(graph, inputs, steps: int):
    return [float(graph(*inputs).numpy()) for _ in range(steps)]


def accept(
    model: str,
    mesh: str,
    rounds: int,
    seed: int = 0,
    builder: str = "examples.models",
    steps: int = 0,
):
    """Compile `rounds` Jobs with freshly drawn signatures; report rejections and mismatches.

    `builder`: the module whose `build(model, mesh)` gives (graph, inputs): examples.models,
    examples.zoo or examples.op_zoo. With `steps`,
    each compiled Job also trains that many steps and its losses are checked against data
    parallel's (rtol 1e-4): a signature OneFlow accepts may still compute something else.
    """
    build = importlib.import_module(builder).build
    reference = _losses(*build(model, mesh), steps) if steps else []
    rng = random.Random(seed)
    first_job = None
    tried = defaultdict(set)
    compiled_ops, rejected, mismatched, diverged = 0, [], [], []
    for round_ in range(rounds):
        graph, inputs = build(model, mesh)
        job, _ = graph.build_graph(*inputs)
        first_job = first_job or base64.b64encode(job.SerializeToString()).decode()
        ir = read_job(job)
        units = build_units(ir)
        for unit in units:
            fill_candidates(ir, unit, ir.main_placement(), {})
        chosen = _choose(ir, units, tried, rng)
        graph._full_graph_proto = write_signatures(job, chosen)
        try:
            graph.finish_complie_and_init_runtime()
        except Exception as e:  # noqa: BLE001 - every rejection is a finding
            rejected.append(str(e).splitlines()[0][:300])
            continue
        compiled = signatures_of(graph._compiled_graph_proto)
        for name, sig in chosen.items():
            op = ir.op(name)
            if op.role in ("io", "system"):
                continue
            tried[op.type].add(_pattern(op, sig))
            compiled_ops += 1
            got = compiled.get(name)
            if got is None or any(got.get(bn) != nd for bn, nd in sig.items()):
                mismatched.append(
                    f"{name} ({op.type}): wrote {format_signature(sig)}, "
                    f"compiled {format_signature(got) if got else 'nothing'}"
                )
        losses = _losses(graph, inputs, steps)
        if not np.allclose(losses, reference, rtol=1e-4, atol=0):
            diverged.append({"round": round_, "losses": losses, "data_parallel": reference})
    coverage = {}
    ir_units = build_units(ir)
    for unit in ir_units:
        fill_candidates(ir, unit, ir.main_placement(), {})
        head = ir.op(unit.ops[0])
        if unit.fixed is None:
            coverage.setdefault(head.type, set()).update(
                _pattern(head, c[0]) for c in unit.candidates
            )
    return {
        "rounds": rounds,
        "signatures": compiled_ops,
        "rejected": rejected,
        "mismatched": mismatched[:20],
        "diverged": diverged,
        "types": {t: [len(tried[t]), len(all_)] for t, all_ in coverage.items()},
        "job": first_job if flow.env.get_rank() == 0 else None,
    }
