"""Predicted peak memory per rank within 15% of what OneFlow allocates, on a 2 x 2 mesh of CPU
ranks, for data parallel, Megatron-style and AutoDDL plans of the examples' GPT and VGG."""

import pytest


@pytest.fixture(scope="module")
def rows():
    from benchmarks.memory_check import check

    return check(["2x2"], ["gpt", "vgg"])


@pytest.mark.ranks
def test_predicted_peak_memory_within_15_percent(rows):
    assert len(rows) == 6
    for r in rows:
        print(
            f"\n{r['model']} {r['mesh']} {r['plan']}: predicted {r['predicted_bytes']:.0f}, "
            f"measured {r['measured_bytes']:.0f} bytes on the fullest rank "
            f"({100 * r['error']:+.2f}%)"
        )
        assert abs(r["error"]) <= 0.15, r


@pytest.mark.ranks
def test_parameters_and_optimizer_state_are_the_variables_allocated(rows):
    """What the peak holds of parameters and optimizer state is what OneFlow's variables take."""
    for r in rows:
        variables = r["predicted_by_kind"]["parameters"] + r["predicted_by_kind"]["optimizer_state"]
        measured = max(rank["variables"] for rank in r["measured_by_rank"].values())
        assert variables == pytest.approx(measured, rel=0.15), r
