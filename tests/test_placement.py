"""Node placement strategies (binpack / spread) and GPU device order (pack / spread), §e.4–§e.5."""

import numpy as np
import pytest

from scheduler import model, placement
from scheduler.errors import EngineError
from scheduler.placement import binpack, gpu_order, spread


def test_binpack_formula_fullest_node_scores_nine():
    free = np.array([2.0, 8.0, 5.0, 0.0])
    total = np.array([8.0, 8.0, 8.0, 0.0])  # last node has no GPUs
    considered = np.ones(4, dtype=bool)
    s = binpack.score(free, total, considered)
    # min 0? no: the GPU-less node is excluded from min/max, so min=2, max=8
    assert s[0] == pytest.approx(9.0)
    assert s[1] == pytest.approx(0.0)
    assert s[2] == pytest.approx(9 * (1 - 3 / 6))
    assert s[3] == 0.0


def test_binpack_all_equal_scores_nine_and_all_full_scores_zero():
    ones = np.ones(3, dtype=bool)
    assert binpack.score(np.array([4.0, 4.0, 4.0]), np.full(3, 8.0), ones).tolist() == [9.0, 9.0, 9.0]
    assert binpack.score(np.zeros(3), np.full(3, 8.0), ones).tolist() == [0.0, 0.0, 0.0]


def test_spread_is_free_fraction():
    s = spread.score(np.array([2.0, 8.0, 3.0]), np.array([8.0, 8.0, 0.0]), np.ones(3, dtype=bool))
    assert s.tolist() == [0.25, 1.0, 0.0]


def test_gpu_order_pack_fills_fullest_shared_gpu_first_and_opens_new_last():
    order = gpu_order.order_candidates("pack", [(0, 0.25), (3, 0.75)], whole_count=2)
    assert order == [3, 0, gpu_order.WHOLE, gpu_order.WHOLE]


def test_gpu_order_spread_prefers_whole_then_emptiest_shared():
    order = gpu_order.order_candidates("spread", [(0, 0.25), (3, 0.75)], whole_count=1)
    assert order == [gpu_order.WHOLE, 0, 3]


def test_registry_extends_model_strategies_and_rejects_unknown():
    class Fewest:
        @staticmethod
        def score(free, total, considered):
            return np.zeros_like(free)

    placement.register("test-fewest", Fewest)
    try:
        assert "test-fewest" in model.PLACEMENT_STRATEGIES
        assert placement.get_strategy("test-fewest") is Fewest
    finally:
        placement.NODE_STRATEGIES.pop("test-fewest")
        model.PLACEMENT_STRATEGIES.remove("test-fewest")
    with pytest.raises(EngineError, match="unknown placement strategy 'nope'"):
        placement.get_strategy("nope")
