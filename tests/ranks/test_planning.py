"""Every rank plans: the same plan with 1, 2 and 4 ranks searching, and where one rank searches
for all; a second identical compile reads its plan from the cache, and a changed shape or cluster
does not."""

import pytest

from tests.ranks.cases import ALONE_CASE
from tests.ranks.cases import PLANNING_CASE as CASE
from tests.unit.test_pinned_plans import current


@pytest.fixture(scope="module")
def on_two(ranks, tmp_path_factory):
    """CASE planned by 2 ranks together, then the cache's compiles, in one launch."""
    directory = tmp_path_factory.mktemp("plan-cache")
    return directory, ranks(
        "tests.ranks.rank_planning:plan_together",
        2,
        timeout=600,
        case=CASE,
        cache_directory=str(directory),
    )


@pytest.mark.ranks
def test_one_two_and_four_ranks_plan_alike(on_two, two_by_two):
    """On 4 ranks in the shared launch on 2 x 2 (conftest's two_by_two)."""
    plans = {1: [current(CASE)], 2: on_two[1], 4: two_by_two["planned"]}
    digests = {r["digest"] for rows in plans.values() for r in rows}
    print({n: [round(r.get("seconds", 0.0), 2) for r in rows] for n, rows in plans.items()})
    assert len(digests) == 1, plans


@pytest.mark.ranks
def test_where_one_rank_searches_for_both_they_take_its_plan(ranks):
    """ALONE_CASE's descents are not worth splitting (planner.search): rank 0 searches, rank 1
    takes its result, and both write the plan one process makes."""
    rows = ranks("tests.ranks.rank_planning:plan_together", 2, timeout=600, case=ALONE_CASE)
    assert {r["digest"] for r in rows} == {current(ALONE_CASE)["digest"]}


@pytest.mark.ranks
def test_the_second_identical_compile_reads_the_cache(on_two):
    directory, rows = on_two
    first, again, other_shape, other_cluster = rows[0]["cache"]
    assert not first["cached"] and again["cached"]
    assert again["digest"] == first["digest"] and again["loss"] == first["loss"]
    assert not other_shape["cached"] and not other_cluster["cached"]
    assert len(list(directory.glob("*.json"))) == 3


@pytest.mark.ranks
def test_every_rank_traces_the_native_pass_as_often_as_rank_0(ranks):
    """The pass's timing stops after a budget of seconds; a rank whose own clock ran past it
    sooner stopped sooner and left the others waiting in their next collective (a benchmark
    launch hung for 20 minutes). Rank 0's clock decides for all."""
    rows = ranks("tests.ranks.rank_planning:native_pass_pairs", 2, timeout=300, pairs=3)
    assert [r["traces"] for r in rows] == [6, 6]
