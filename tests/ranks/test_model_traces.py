"""The model builders equal, op for op, live traces of the examples' graphs on 2 ranks."""

import base64
import re

import pytest

from oneflow_autoddl.ir import Graph
from oneflow_autoddl.models import build_gpt, build_vgg

SCHEDULER = re.compile(r"Scheduler_\d+$")  # OneFlow numbers it process-wide


def _ops(graph: Graph):
    """Per op what a trace and a build must share: type, role, scope, wiring by producer
    position, output blob names, shapes and dtypes, and the placement's mesh."""
    position = {name: i for i, name in enumerate(graph.ops)}
    out = []
    for op in graph.ops.values():
        wiring = [
            (ibn, position[graph.tensor(lbn).producer], graph.tensor(lbn).obn)
            for ibn, lbn in op.inputs.items()
        ]
        outputs = [
            (obn, graph.tensor(lbn).shape, graph.tensor(lbn).dtype)
            for obn, lbn in op.outputs.items()
        ]
        out.append(
            (
                op.type,
                op.role,
                op.scope,
                wiring,
                outputs,
                op.placement.hierarchy,
                op.placement.ranks,
            )
        )
    return out


def _compare(built: Graph, live: Graph):
    assert len(built) == len(live)
    for i, (b, t, x, y) in enumerate(
        zip(built.ops.values(), live.ops.values(), _ops(built), _ops(live))
    ):
        assert x == y, f"op {i}: built {b.name} {x}\n traced {t.name} {y}"
        # names and attrs too, but for the scheduler's process-wide number and the float
        # operands of scalar_mul (1/sqrt(head_dim), 1/hidden), which templates keep as traced
        assert SCHEDULER.sub("Scheduler", b.name) == SCHEDULER.sub("Scheduler", t.name)
        skip = ("float_operand",) if b.type == "scalar_mul" else ()
        assert {k: v for k, v in b.attrs.items() if k not in skip} == {
            k: v for k, v in t.attrs.items() if k not in skip
        }, f"op {i} {t.name} attrs"


def _live(ranks, target, **kwargs) -> Graph:
    from oneflow_autoddl.adapter.job import read_job

    out = ranks(target, 2, mesh="2", **kwargs)
    return read_job(base64.b64decode(out[0]["job"]))


@pytest.mark.ranks
def test_gpt_equals_a_live_trace_on_two_ranks(ranks):
    sizes = dict(layers=2, hidden=32, heads=4, seq_len=8, vocab=64, batch=4)
    _compare(
        build_gpt(**sizes, mesh=(2,), device="cpu"),
        _live(ranks, "tests.ranks.rank_trace:trace_gpt", **sizes),
    )


@pytest.mark.ranks
def test_vgg_equals_a_live_trace_on_two_ranks(ranks):
    sizes = dict(depth=16, width_mult=0.125, image_size=32, num_classes=10, batch=4)
    _compare(
        build_vgg(**sizes, mesh=(2,), device="cpu"),
        _live(ranks, "tests.ranks.rank_trace:trace_vgg", **sizes),
    )
