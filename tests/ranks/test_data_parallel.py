"""Data parallel through the harness equals one process, on a 1-D and a 2-D mesh."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def single(ranks):
    return ranks("tests.ranks.rank_jobs:train_mlp", 1, mesh="1")[0]["losses"]


@pytest.mark.ranks
@pytest.mark.parametrize("mesh,nproc", [("2", 2), ("2x2", 4)])
def test_data_parallel_equals_single_process(ranks, single, mesh, nproc):
    out = ranks("tests.ranks.rank_jobs:train_mlp", nproc, mesh=mesh)
    assert [r["rank"] for r in out] == list(
        range(nproc)
    )  # the harness returns every rank's result, in order
    for r in out:
        np.testing.assert_allclose(r["losses"], single, rtol=1e-5)
    assert single[-1] < single[0]
