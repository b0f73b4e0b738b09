"""Bounded records: tick series in capped chunks, eviction and job rows in capped deques, frames shape."""

import math

import pytest

import numpy as np

from scheduler.simulate.records import CLUSTER_METRICS, QUEUE_METRICS, ChunkedSeries, Recorder


def test_chunked_series_keeps_exactly_the_last_max_rows_and_bounded_chunks():
    s = ChunkedSeries((), max_rows=10, chunk_rows=4)
    for i in range(25):
        s.append(float(i))
        assert len(s) == min(i + 1, 10)
        assert s.nbytes <= (10 + 2 * 4) * 8          # never more than max_rows + two chunks
    assert s.to_array().tolist() == [float(i) for i in range(15, 25)]
    assert s.total_dropped() == 15


def test_chunked_series_rows_may_be_matrices():
    s = ChunkedSeries((2, 3), max_rows=3, chunk_rows=2)
    for i in range(5):
        s.append(np.full((2, 3), i))
    arr = s.to_array()
    assert arr.shape == (3, 2, 3) and arr[:, 0, 0].tolist() == [2, 3, 4]


def _row(value):
    return np.full((2, len(QUEUE_METRICS)), value, dtype=float)


def test_recorder_frames_are_long_per_queue_and_one_row_per_tick_for_the_cluster():
    rec = Recorder(["a", "b"], start_time=1000, max_ticks=3, max_events=2)
    for k in range(5):
        rec.tick(1000 + 10 * k, _row(k), [float(k)] * len(CLUSTER_METRICS))
    for k in range(3):
        rec.eviction(1000 + k, f"t{k}", f"j{k}", "a", "reclaim", "p", "cause")
    f = rec.frames(now=1040)
    assert f["cluster"]["time"].tolist() == [1020, 1030, 1040]
    assert f["cluster"]["elapsed_s"].tolist() == [20, 30, 40]
    assert f["cluster"].attrs["dropped_ticks"] == 2
    q = f["queues"]
    assert len(q) == 6 and q["queue"].tolist() == ["a", "b"] * 3
    assert q["allocated_gpu"].tolist() == [2, 2, 3, 3, 4, 4]
    assert f["evictions"]["task"].tolist() == ["t1", "t2"]
    assert f["evictions"].attrs["dropped_rows"] == 1


def test_job_rows_give_wait_pending_time_and_completion():
    rec = Recorder(["a"], start_time=0, max_events=1)
    r = rec.job_arrived("j1", "a", 5)
    r.started(30)
    r.evicted(50)
    r.started(80)
    rec.job_finished("j1", 200)
    rec.job_arrived("j2", "a", 10)
    rec.job_arrived("j3", "a", 20)
    rec.job_finished("j3", 25)           # evicts j1 from the capped finished deque
    jobs = rec.frames(now=100)["jobs"].set_index("job")
    assert list(jobs.index) == ["j3", "j2"]
    assert jobs.attrs["dropped_rows"] == 1
    j2 = jobs.loc["j2"]
    assert j2["status"] == "pending" and math.isnan(j2["wait_s"]) and j2["pending_s"] == 90
    rec2 = Recorder(["a"], start_time=0)
    r = rec2.job_arrived("j1", "a", 5)
    r.started(30)
    r.evicted(50)
    r.started(80)
    rec2.job_finished("j1", 200)
    row = rec2.frames(now=300)["jobs"].iloc[0]
    # wait = first start - arrival = 25; pending = 25 + (80 - 50) = 55; two runs
    assert (row["wait_s"], row["pending_s"], row["runs"], row["completion"]) == (25, 55, 2, 200)


def test_queue_summary_weights_each_tick_by_how_long_it_held():
    import pandas as pd

    from scheduler.simulate.summary import queue_summary, time_weights

    assert time_weights(np.array([0.0, 10.0, 40.0]), 100.0).tolist() == [10, 30, 60]
    rec = Recorder(["a", "b"], start_time=0)
    rows = np.zeros((2, len(QUEUE_METRICS)))
    rows[0, QUEUE_METRICS.index("allocated_gpu")] = 4
    rows[0, QUEUE_METRICS.index("fair_share_gpu")] = 6
    rec.tick(0, rows, [0.0] * len(CLUSTER_METRICS))
    rows2 = rows.copy()
    rows2[0, QUEUE_METRICS.index("allocated_gpu")] = 8
    rec.tick(10, rows2, [0.0] * len(CLUSTER_METRICS))
    r = rec.job_arrived("j1", "a", 0)
    r.started(30)
    rec.job_arrived("j2", "a", 0).started(10)
    rec.job_arrived("j3", "b", 5)
    rec.eviction(12, "t", "j1", "a", "reclaim", "x", "")
    s = queue_summary(rec.frames(now=40), end_time=40).set_index("queue")
    # a held 4 GPUs for 10 s then 8 GPUs for 30 s: (40 + 240) / 40 = 7; fair share 6 throughout
    assert s.loc["a", "mean_allocated_gpu"] == pytest.approx(7.0)
    assert s.loc["a", "mean_fair_share_gpu"] == pytest.approx(6.0)
    assert (s.loc["a", "jobs_arrived"], s.loc["a", "jobs_started"], s.loc["a", "mean_wait_s"]) == (2, 2, 20)
    assert (s.loc["a", "evictions"], s.loc["b", "evictions"], s.loc["b", "jobs_started"]) == (1, 0, 0)
    assert isinstance(s, pd.DataFrame)
