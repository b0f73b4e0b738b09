"""Time-based fair share usage (kai-semantics.md §b.5): Σ alloc·decay / Σ capacity·decay over the window,
sampled every resolution step. Expected numbers are worked by hand in each test."""

import numpy as np
import pytest

from scheduler.simulate.usage import UsageConfig, UsageConfigError, UsageTracker

CAP8 = np.array([8.0, 8000.0, 80.0])


def alloc(*rows):
    return np.array(rows, dtype=float)


def test_sliding_window_normalises_by_capacity_over_the_recorded_samples():
    tr = UsageTracker(["a"], UsageConfig(window_s=600, resolution_s=60), start_time=0)
    tr.advance(300, alloc([4, 1000, 10]), CAP8)     # steps 60..300 (5 samples) hold 4 GPUs
    tr.advance(600, alloc([0, 0, 0]), CAP8)         # steps 360..600 (5 samples) hold 0
    u = tr.usage(600)
    # 5 samples of 4 over 10 samples of 8 GPUs = 20/80; cpu 5·1000/(10·8000); memory 5·10/(10·80)
    assert u[0].tolist() == pytest.approx([0.25, 0.0625, 0.0625])


def test_sliding_window_forgets_samples_older_than_the_window():
    tr = UsageTracker(["a"], UsageConfig(window_s=600, resolution_s=60), start_time=0)
    tr.advance(300, alloc([4, 0, 0]), CAP8)
    tr.advance(660, alloc([0, 0, 0]), CAP8)
    # window (60, 660]: samples 120..660 = 10; those holding 4 GPUs: 120, 180, 240, 300 -> 16/80
    assert tr.usage(660)[0, 0] == pytest.approx(0.2)
    tr.advance(900, alloc([0, 0, 0]), CAP8)
    assert tr.usage(900)[0, 0] == 0.0                 # window (300, 900]: nothing left


def test_early_in_a_run_usage_is_over_the_time_recorded_so_far():
    tr = UsageTracker(["a", "b"], UsageConfig(), start_time=0)   # 1-week window, only 10 min recorded
    tr.advance(600, alloc([8, 0, 0], [0, 0, 0]), CAP8)
    assert tr.usage(600)[:, 0].tolist() == [1.0, 0.0]


def test_half_life_decay_weights_both_allocation_and_capacity():
    tr = UsageTracker(["a"], UsageConfig(window_s=3600, resolution_s=60, half_life_s=60), start_time=0)
    tr.advance(60, alloc([4, 0, 0]), np.array([4.0, 1.0, 1.0]))   # sample at 60: 4 of 4
    tr.advance(120, alloc([0, 0, 0]), np.array([4.0, 1.0, 1.0]))  # sample at 120: 0 of 4
    # at 120: weights 0.5 (age 60) and 1 -> (4·0.5) / (4·0.5 + 4·1) = 2/6
    assert tr.usage(120)[0, 0] == pytest.approx(1 / 3)
    no_decay = UsageTracker(["a"], UsageConfig(window_s=3600, resolution_s=60), start_time=0)
    no_decay.advance(60, alloc([4, 0, 0]), np.array([4.0, 1.0, 1.0]))
    no_decay.advance(120, alloc([0, 0, 0]), np.array([4.0, 1.0, 1.0]))
    assert no_decay.usage(120)[0, 0] == pytest.approx(0.5)


def test_tumbling_window_resets_at_start_plus_multiples_of_the_window():
    tr = UsageTracker(["a"], UsageConfig(window_s=300, resolution_s=60, window_type="tumbling"), start_time=0)
    tr.advance(300, alloc([8, 0, 0]), CAP8)
    assert tr.usage(300)[0, 0] == pytest.approx(1.0)         # window [0, 300]: samples 60..300 all full
    tr.advance(360, alloc([0, 0, 0]), CAP8)
    # reset at 300: samples 300 (8) and 360 (0) -> 8/16
    assert tr.window_start(360) == 300
    assert tr.usage(360)[0, 0] == pytest.approx(0.5)
    tr.advance(600, alloc([0, 0, 0]), CAP8)
    assert tr.usage(600)[0, 0] == pytest.approx(8 / 48)      # samples 300..600: one full of six


def test_a_jump_longer_than_the_window_keeps_memory_fixed_and_the_latest_samples():
    tr = UsageTracker(["a"], UsageConfig(window_s=7 * 86400, resolution_s=60), start_time=0)
    before = tr.memory_bytes
    tr.advance(3600, alloc([8, 0, 0]), CAP8)
    tr.advance(10 * 86400, alloc([2, 0, 0]), CAP8)            # 10 days at 2 of 8 GPUs
    assert tr.memory_bytes == before
    assert tr.usage()[0, 0] == pytest.approx(0.25)


def test_fetch_rereads_only_every_fetch_interval():
    tr = UsageTracker(["a"], UsageConfig(window_s=600, resolution_s=60, fetch_interval_s=60), start_time=0)
    tr.advance(60, alloc([8, 0, 0]), CAP8)
    first, refreshed = tr.fetch(60)
    assert refreshed and first[0, 0] == 1.0
    tr.advance(120, alloc([0, 0, 0]), CAP8)
    again, refreshed = tr.fetch(90)
    assert not refreshed and again[0, 0] == 1.0               # last value kept between reads
    later, refreshed = tr.fetch(120)
    assert refreshed and later[0, 0] == pytest.approx(0.5)
    assert tr.next_fetch_time() == 180


def test_going_back_in_time_and_bad_parameters_are_errors():
    tr = UsageTracker(["a"], UsageConfig(), start_time=100)
    with pytest.raises(UsageConfigError):
        tr.advance(50, alloc([0, 0, 0]), CAP8)
    with pytest.raises(UsageConfigError, match="window_type"):
        UsageTracker(["a"], UsageConfig(window_type="cron"))
    with pytest.raises(UsageConfigError, match="half_life_s"):
        UsageTracker(["a"], UsageConfig(half_life_s=0))
