"""The launch several test modules read: one on a 2 x 2 mesh (tests.ranks.rank_four)."""

import pytest


@pytest.fixture(scope="session")
def two_by_two(ranks):
    """rank_four's results on rank 0, "planned" of every rank (test_planning), "hook" (test_hook's
    2 x 2 case) and the memory checks (test_memory)."""
    results = ranks("tests.ranks.rank_four:run", 4, timeout=900)
    return dict(results[0], planned=[r["planned"] for r in results])
