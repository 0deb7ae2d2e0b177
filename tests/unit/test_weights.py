import numpy as np
import pytest

from oneflow_autoddl.search.weights import NEAR, WIDEN, ItemWeights, items_over


def test_an_item_is_over_where_its_span_touches_a_step_over_the_limit():
    usage = np.array([1.0, 5.0, 2.0, 6.0])
    start = np.array([0, 0, 2, 2, 1])
    end = np.array([1, 2, 3, 4, 1])  # the last is never live
    assert items_over(start, end, usage, 4.0).tolist() == [False, True, False, True, False]


def test_weights_bisect_between_over_and_within():
    w = ItemWeights.start(2, 1.0)
    w.update(np.array([True, False]))
    assert w.weight[0] > 1.0 > w.weight[1]
    w.update(np.array([False, True]))  # each now brackets its threshold
    assert 1.0 < w.weight[0] < 2.0 and 0.5 < w.weight[1] < 1.0
    assert w.low[0] == 1.0 and w.high[1] == 1.0


def test_an_item_always_on_one_side_moves_past_its_first_bounds():
    w = ItemWeights.start(2, 1.0)
    for _ in range(30):
        w.update(np.array([True, False]))
        assert w.low[0] < w.weight[0] < w.high[0] and w.low[1] < w.weight[1] < w.high[1]
    assert w.weight[0] > WIDEN**2 and w.weight[1] < WIDEN**-2
    assert np.all(w.high / w.low > NEAR)


def test_falling_halves_the_weights_of_items_never_over_and_of_them_only():
    """With `fall`, an item never over halves every round; one that was over once bisects as
    without it; without `fall`, an item never over takes rounds to halve once."""
    falling, creeping = ItemWeights.start(2, 1.0), ItemWeights.start(2, 1.0)
    falling.update(np.array([False, True]), fall=True)
    creeping.update(np.array([False, True]))
    for _ in range(5):
        before = falling.weight.copy()
        falling.update(np.array([False, False]), fall=True)
        creeping.update(np.array([False, False]))
        assert falling.weight[0] == pytest.approx(before[0] / 2)
        assert falling.weight[1] > before[1] / 2
    assert falling.weight[1] == creeping.weight[1]
    assert falling.weight[0] < creeping.weight[0] / 8
