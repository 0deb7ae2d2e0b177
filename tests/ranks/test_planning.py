"""Every rank plans: the same plan with 1, 2 and 4 ranks searching; a second identical compile
reads its plan from the cache, and a changed shape or cluster does not."""

import pytest


@pytest.mark.ranks
def test_one_two_and_four_ranks_plan_alike(ranks):
    """The examples' GPT on 2 x 2 (tied layers, every objective, the flat seed)."""
    plans = {
        n: ranks("tests.ranks.rank_planning:plan_together", n, model="gpt", mesh=[2, 2])
        for n in (1, 2, 4)
    }
    digests = {r["digest"] for rows in plans.values() for r in rows}
    print({n: [round(r["seconds"], 2) for r in rows] for n, rows in plans.items()})
    assert len(digests) == 1, plans


@pytest.mark.ranks
def test_the_second_identical_compile_reads_the_cache(ranks, tmp_path):
    first, again, other_shape, other_cluster = ranks(
        "tests.ranks.rank_planning:cache_hits", 2, timeout=600, directory=str(tmp_path)
    )[0]
    assert not first["cached"] and again["cached"]
    assert again["digest"] == first["digest"] and again["loss"] == first["loss"]
    assert not other_shape["cached"] and not other_cluster["cached"]
    assert len(list(tmp_path.glob("*.json"))) == 3
