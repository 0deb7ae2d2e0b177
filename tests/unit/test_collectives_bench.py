"""benchmarks.collectives' ratios: each rank count's times over the first count's, per collective
and size, measured and predicted alike."""

import pytest

from benchmarks.collectives import against_first


def _row(ranks, kind, mib, measured, predicted):
    return {
        "ranks": ranks,
        "kind": kind,
        "mib": mib,
        "measured_ms": measured,
        "predicted_ms": predicted,
    }


def test_each_row_is_set_against_the_same_collective_and_size_on_the_first_count():
    rows = [
        _row(2, "all_gather", 4, 3.0, 2.0),
        _row(2, "all_reduce", 4, 6.0, 6.0),
        _row(4, "all_gather", 4, 6.0, 3.0),
        _row(4, "all_reduce", 4, 12.0, 9.0),
    ]
    against_first(rows, 2)
    gather4, reduce4 = rows[2], rows[3]
    assert gather4["measured_vs_first"] == pytest.approx(2.0)
    assert gather4["predicted_vs_first"] == pytest.approx(1.5)
    assert gather4["predicted_over_measured"] == pytest.approx(0.5)
    assert reduce4["measured_vs_first"] == pytest.approx(2.0)
    assert reduce4["predicted_vs_first"] == pytest.approx(1.5)
    assert rows[0]["measured_vs_first"] == rows[0]["predicted_vs_first"] == 1.0
