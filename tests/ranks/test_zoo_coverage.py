"""Every op of the zoo's training graphs has a rule: no model is planned around ops OneFlow places
by itself.

One process (tests.ranks.rank_zoo:coverage on one rank): each model of examples/zoo.py is traced
on one device (build_graph only, SGD with momentum and AdamW taking turns across models), moved
onto a mesh of 2 and of 2 x 2, and the candidates of every distinct unit are filled (units alike
in op types, roles, attributes, shapes and dtypes have the same candidates: a repeated block is
checked once). Planning itself is left out: the search over densenet121 alone took minutes here.
"""

import pytest

from examples.zoo_names import MODELS

MESHES = [[2], [2, 2]]


@pytest.mark.ranks
def test_every_op_of_the_zoo_has_a_rule_on_each_mesh(ranks):
    out = ranks("tests.ranks.rank_zoo:coverage", 1, timeout=600, meshes=MESHES)[0]
    assert sorted(out) == sorted(MODELS)
    for name, r in out.items():
        assert r["unruled_types"] == [], name
        assert not r["dropout"], f"{name} is built without dropout"
        for mesh, m in r["meshes"].items():
            assert m["no_rule"] == [], (name, mesh)
            assert m["searched"] > 0 and m["no_candidates"] == [], (name, mesh)
