"""Predicted bytes per rank per step within 5% of what OneFlow sent (wchar), on real CPU ranks."""

import pytest


@pytest.mark.ranks
def test_predicted_bytes_match_measured_on_two_ranks():
    """The subset of benchmarks/bytes_check.py that runs in one launch: GPT, 2 ranks, three
    plans."""
    from benchmarks.bytes_check import check

    rows = check(["2"], ["gpt"], plans=["dp", "megatron", "autoddl"], steps=3)
    for r in rows:
        print(
            f"\n{r['model']} {r['mesh']} {r['plan']}: predicted {r['predicted_bytes']:.0f}, "
            f"measured {r['measured_bytes']:.0f} bytes/rank/step ({100 * r['error']:+.2f}%)"
        )
        assert abs(r["error"]) <= 0.05, r
