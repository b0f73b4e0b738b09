"""ETA ranges calibrated against the estimator's own past errors (scheduler/eta/calibration.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scheduler.eta import EtaConfig, EtaPlanner, estimate_eta
from scheduler.eta.calibration import OFFSET_S, EtaCalibrator, residual_quantiles
from scheduler.snapshot_io import loads_snapshot

from test_eta import CLUSTER, T0


def test_without_censoring_the_quantiles_are_the_empirical_ones():
    rng = np.random.default_rng(3)
    exact = rng.normal(0.4, 0.5, size=400)
    q = residual_quantiles(exact, [], coverage=0.8)
    # Kaplan-Meier without censoring is the empirical distribution: its quantiles are order statistics
    assert q.low == pytest.approx(np.quantile(exact, 0.1, method="inverted_cdf"))
    assert q.high == pytest.approx(np.quantile(exact, 0.9, method="inverted_cdf"))
    assert q.events == 400 and q.censored == 0


def test_jobs_still_waiting_push_the_upper_end_out():
    exact = np.linspace(-1.0, 1.0, 50)
    plain = residual_quantiles(exact, [])
    # 50 more estimates whose jobs still wait, each already later than any exact outcome
    waiting = residual_quantiles(exact, np.full(50, 1.5))
    # the waiting estimates are half of all estimates: the 10th percentile is the 10th of 100, not of 50
    assert waiting.low == pytest.approx(np.sort(exact)[9]) and plain.low < waiting.low
    assert math.isinf(waiting.high)             # the 90th percentile is not reached: "beyond" is the honest answer
    # waiting jobs only a little late move the upper quantile up, not to infinity
    some = residual_quantiles(exact, np.full(10, 0.5))
    assert plain.high < some.high < math.inf


def test_no_outcome_no_quantiles():
    assert residual_quantiles([], [0.3]) is None


def _biased_estimator_history(cal: EtaCalibrator, rng: random.Random, n: int, t0: float) -> float:
    """``n`` estimates whose true wait is 2x the p50 times log-normal noise; each job starts before the next."""
    t = t0
    for i in range(n):
        p50 = rng.uniform(300, 7200)
        actual = 2.0 * (p50 + OFFSET_S) * math.exp(rng.gauss(0.0, 0.4)) - OFFSET_S
        cal.add(f"j{i}", t, p50)
        cal.observe_started(f"j{i}", t + actual)
        t += 60
    return t


def test_a_biased_estimator_gets_ranges_that_hold_80_percent_of_starts():
    rng = random.Random(7)
    cal = EtaCalibrator(coverage=0.8, min_events=20)
    t = _biased_estimator_history(cal, rng, 300, T0)
    q = cal.quantiles(t)
    inside = 0
    for _ in range(2000):                         # fresh estimates from the same estimator
        p50 = rng.uniform(300, 7200)
        actual = 2.0 * (p50 + OFFSET_S) * math.exp(rng.gauss(0.0, 0.4)) - OFFSET_S
        lo, hi = q.range_s(p50)
        inside += lo <= actual <= hi
    assert 0.80 <= inside / 2000 <= 0.92     # the range always holds the p50: a little over 80 % here
    # the estimator is always late by 2x: the range starts at its p50 and reaches about 3.3x past it
    lo, hi = q.range_s(3600)
    assert lo == 3600 and 2.6 * 3600 < hi < 4 * 3600


def test_too_few_outcomes_keep_the_models_range_and_old_estimates_are_forgotten():
    cal = EtaCalibrator(min_events=20, max_age_s=3600)
    t = _biased_estimator_history(cal, random.Random(1), 19, T0)
    assert cal.quantiles(t) is None
    _biased_estimator_history(cal, random.Random(2), 1, t)
    assert cal.quantiles(t + 60) is not None


def test_planner_calibrates_its_ranges_from_jobs_that_started():
    snap = loads_snapshot(CLUSTER)
    cal = EtaCalibrator(min_events=2)
    planner = EtaPlanner(EtaConfig(arrivals=False), calibrator=cal)
    report = planner.refresh(snap)
    first = planner.current(snap)
    assert first["b1"].range_basis == "model" and first["b1"].p10_s == report["b1"].p10_s
    # b1 and b2 start much later than estimated (p50 1,260 s and 1,860 s): 3 h after the estimate
    started = CLUSTER.replace("tasks: [{name: b1-0, gpu: 8}]", "tasks: [{name: b1-0, gpu: 8, status: running, node: n1}]")
    started = started.replace("tasks: [{name: b2-0, gpu: 8}]", "tasks: [{name: b2-0, gpu: 8, status: running, node: n1}]")
    assert started.count("status: running") == 3
    later = loads_snapshot(started)
    later.time = T0 + 3 * 3600
    planner.observe(later)
    assert cal.outcomes == 2
    calibrated = planner.current(snap)
    b1 = calibrated["b1"]
    assert b1.range_basis == "calibrated on 2 of team's past estimates"
    # both past estimates were ~6-9x too early, so the range now reaches well past the model's p90
    assert b1.p90_s > 5 * report["b1"].p90_s and b1.p10_s <= b1.p50_s <= b1.p90_s
    assert "(" in b1.text


def test_estimates_of_jobs_that_vanished_are_dropped():
    snap = loads_snapshot(CLUSTER)
    cal = EtaCalibrator(min_events=1)
    cal.record(estimate_eta(snap, None, EtaConfig(arrivals=False)))
    gone = snap.copy()
    gone.jobs = [j for j in gone.jobs if j.name not in ("b1", "b2", "huge", "capped")]
    cal.observe(gone)
    assert cal.outcomes == 0 and cal.quantiles(T0) is None


def test_coverage_must_be_a_probability():
    with pytest.raises(ValueError, match="coverage"):
        EtaCalibrator(coverage=1.5)


def test_a_queue_with_enough_outcomes_is_calibrated_on_its_own_estimates():
    cal = EtaCalibrator(min_events=20)
    t = T0
    for i in range(40):                               # "fast": on time; "slow": 4x late
        for queue, factor in (("fast", 1.0), ("slow", 4.0)):
            job = f"{queue}-{i}"
            cal.add(job, t, 1200.0, queue)
            cal.observe_started(job, t + factor * (1200.0 + OFFSET_S) - OFFSET_S)
        t += 60
    cal.add("rare-0", t, 1200.0, "rare")
    cal.observe_started("rare-0", t + 600)
    fast, slow, rare = (cal.quantiles(t, q) for q in ("fast", "slow", "rare"))
    assert fast.queue == "fast" and slow.queue == "slow" and rare.queue is None   # rare: too few, all queues
    assert fast.range_s(1200) == pytest.approx((1200, 1200))
    assert slow.range_s(1200)[1] == pytest.approx(4 * 1260 - 60)
    assert rare.events == 81
