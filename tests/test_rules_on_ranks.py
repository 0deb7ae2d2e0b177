"""The rules checked against OneFlow itself: IR of traced Jobs, rule coverage, compile acceptance."""

import pytest

from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.rules import has_rule

MODELS = ["gpt", "gpt-fused", "vgg"]


@pytest.fixture(scope="session")
def jobs(ranks, tmp_path_factory):
    """Serialized training Jobs of the examples' models, traced on 2 ranks (1-D)."""
    out = {}
    for model in MODELS:
        path = str(tmp_path_factory.mktemp("jobs") / f"{model}.job")
        ranks("rank_acceptance:trace", 2, model=model, mesh="2", path=path)
        with open(path, "rb") as f:
            out[model] = f.read()
    return out


@pytest.mark.ranks
@pytest.mark.parametrize("model", MODELS)
def test_ir_has_every_op_and_shape_of_the_job(jobs, model):
    from oneflow.core.job import job_pb2
    job = job_pb2.Job()
    job.ParseFromString(jobs[model])
    graph = read_job(job)
    assert len(graph.ops) == len(job.net.op)
    for lbn, desc in job.helper.lbn2logical_blob_desc.items():
        assert graph.tensor(lbn).shape == tuple(desc.shape.dim), lbn
    roles = {op.role for op in graph.ops.values()}
    assert {"forward", "backward", "optimizer", "variable", "io", "system"} <= roles
    grads = [op for op in graph.ops.values() if op.role == "backward"]
    assert all(op.scope for op in grads)


@pytest.mark.ranks
@pytest.mark.parametrize("model", MODELS)
def test_rules_cover_every_op_type(jobs, model):
    types = sorted(read_job(jobs[model]).op_types())
    missing = [t for t in types if not has_rule(t)]
    print(f"\n{model}: {len(types)} op types: {', '.join(types)}")
    assert missing == []


ACCEPTANCE = [("gpt", "2", 2, 3), ("gpt-fused", "2", 2, 2), ("vgg", "2", 2, 3),
              ("gpt", "2x2", 4, 2), ("gpt-fused", "2x2", 4, 1), ("vgg", "2x2", 4, 2)]


@pytest.mark.ranks
@pytest.mark.parametrize("model,mesh,nproc,rounds", ACCEPTANCE)
def test_oneflow_compiles_every_candidate_as_written(ranks, model, mesh, nproc, rounds):
    """Each round writes a fresh candidate (preferring untried ones) into every op and compiles."""
    r = ranks("rank_acceptance:accept", nproc, timeout=600, model=model, mesh=mesh, rounds=rounds)[0]
    tried = sum(t for t, _ in r["types"].values())
    total = sum(n for _, n in r["types"].values())
    print(f"\n{model} on {mesh}: {r['signatures']} op signatures compiled in {rounds} Jobs; "
          f"{tried} distinct (type, signature) patterns tried of the {total} the rules give these shapes")
    assert r["rejected"] == []
    assert r["mismatched"] == []
