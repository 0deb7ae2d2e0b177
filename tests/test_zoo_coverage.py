"""Every op of the zoo's training graphs has a rule: no model is planned around ops OneFlow places
by itself.

One plain process: each model of tests/zoo_models.py is traced on one device (build_graph
only, SGD with momentum and AdamW taking turns across models), moved onto a mesh of 2 and of
2 x 2, and the candidates of every distinct unit are filled (units alike in op types, roles,
attributes, shapes and dtypes have the same candidates: a repeated block is checked once).
Planning itself is left out: the search over densenet121 alone took 67 s on 2 and 483 s on
2 x 2 here (under load).
"""

import pytest

pytest.importorskip("flowvision")

import zoo_models  # noqa: E402

from oneflow_autoddl.adapter.job import read_job  # noqa: E402
from oneflow_autoddl.remesh import remesh  # noqa: E402
from oneflow_autoddl.rules import has_rule  # noqa: E402
from oneflow_autoddl.search.units import build_units, fill_candidates  # noqa: E402

MESHES = [(2,), (2, 2)]


def _form(graph, op):
    blobs = tuple(
        (bn, graph.tensor(lbn).shape, graph.tensor(lbn).dtype)
        for bn, lbn in {**op.inputs, **op.outputs}.items()
    )
    return op.type, op.role, repr(sorted(op.attrs.items())), blobs


def _distinct(graph, units):
    """One unit of each form (what a rule reads of its ops)."""
    forms = {}
    for unit in units:
        forms.setdefault(tuple(_form(graph, graph.op(n)) for n in unit.ops), unit)
    return list(forms.values())


@pytest.mark.parametrize("index, name", list(enumerate(zoo_models.ZOO)))
def test_every_op_of_the_zoo_has_a_rule_on_each_mesh(index, name):
    optimizer = zoo_models.OPTIMIZERS[index % len(zoo_models.OPTIMIZERS)]
    graph = read_job(zoo_models.trace(name, optimizer))
    assert sorted({op.type for op in graph.ops.values() if not has_rule(op.type)}) == []
    assert "dropout" not in graph.op_types(), "the zoo is built without dropout"
    for mesh in MESHES:
        planned = remesh(graph, mesh)
        units = _distinct(planned, build_units(planned))
        for unit in units:
            fill_candidates(planned, unit, planned.main_placement(), {})
        unruled = [u.fixed for u in units if u.fixed and "no SBP rule" in u.fixed]
        assert unruled == [], (name, mesh)
        searched = [u for u in units if u.fixed is None]
        assert searched and all(u.candidates for u in searched), (name, mesh)
