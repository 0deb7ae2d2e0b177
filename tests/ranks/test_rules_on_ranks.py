"""The rules checked against OneFlow itself: IR of traced Jobs, rule coverage, compile acceptance.

Each round writes a fresh candidate (an untried one where there is one) into every op of
a traced training Job and compiles it; OneFlow must accept every signature and the
compiled Job must hold it. More rounds: benchmarks/rule_acceptance.py.
"""

import base64

import pytest

from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.rules import has_rule

MODELS = ["gpt", "gpt-fused", "vgg"]
RUNS = {"1-D": ("2", 2, MODELS, 2), "2x2": ("2x2", 4, ["gpt", "vgg"], 1)}


@pytest.fixture(scope="module", params=list(RUNS))
def accepted(request, ranks):
    mesh, nproc, models, rounds = RUNS[request.param]
    return mesh, ranks(
        "tests.ranks.rank_acceptance:accept_all",
        nproc,
        timeout=900,
        models=models,
        mesh=mesh,
        rounds=rounds,
    )[0]


@pytest.mark.ranks
def test_oneflow_compiles_every_candidate_as_written(accepted):
    mesh, out = accepted
    for model, r in out.items():
        tried = sum(t for t, _ in r["types"].values())
        total = sum(n for _, n in r["types"].values())
        print(
            f"\n{model} on {mesh}: {r['signatures']} op signatures compiled in {r['rounds']} Jobs; "
            f"{tried} distinct (type, signature) patterns tried of the {total} the rules give "
            "these shapes"
        )
        assert r["rejected"] == [], model
        assert r["mismatched"] == [], model


@pytest.mark.ranks
def test_ir_has_every_op_and_shape_of_the_job(accepted):
    from oneflow.core.job import job_pb2

    for model, r in accepted[1].items():
        job = job_pb2.Job()
        job.ParseFromString(base64.b64decode(r["job"]))
        graph = read_job(job)
        assert len(graph.ops) == len(job.net.op), model
        for lbn, desc in job.helper.lbn2logical_blob_desc.items():
            assert graph.tensor(lbn).shape == tuple(desc.shape.dim), lbn
        roles = {op.role for op in graph.ops.values()}
        assert {"forward", "backward", "optimizer", "variable", "io", "system"} <= roles
        assert all(op.scope for op in graph.ops.values() if op.role == "backward")


@pytest.mark.ranks
def test_rules_cover_every_op_type(accepted):
    for model, r in accepted[1].items():
        types = sorted(read_job(base64.b64decode(r["job"])).op_types())
        print(f"\n{model}: {len(types)} op types: {', '.join(types)}")
        assert [t for t in types if not has_rule(t)] == []
