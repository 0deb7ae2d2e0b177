"""The rank harness: results per rank, a failing rank's stderr, timeouts that kill every child
and show where each rank waited."""

import pytest

from oneflow_autoddl.launch import RankFailure, alive_groups


@pytest.mark.ranks
def test_failing_rank_reports_its_stderr(ranks):
    with pytest.raises(RankFailure) as err:
        ranks("tests.ranks.rank_harness:fail_on_rank", 2, rank=1)
    assert "rank 1 refuses" in str(err.value)


@pytest.mark.ranks
def test_timeout_kills_every_child(ranks):
    with pytest.raises(RankFailure) as err:
        ranks("tests.ranks.rank_harness:sleep", 2, timeout=10, seconds=600)
    assert "timed out" in str(err.value)
    for rank in (0, 1):  # where each rank waited, from its stack written before the timeout
        assert f"rank {rank}'s stderr" in str(err.value)
    assert str(err.value).count("in sleep") == 2, str(err.value)
    assert alive_groups() == []
