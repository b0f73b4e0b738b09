"""A short soak: the live loop's tick function driven for 2 simulated hours keeps every buffer at its cap.

Structural, not timing: the history (fine ring, coarse ring, open bucket) and the per-tick frame cache stay at
their configured sizes however many ticks run, and the coarse points are the means of the ticks they cover.
The 24-hour memory curve is ``bench/soak.py`` (docs/operations.md).
"""

from __future__ import annotations

import pytest

from dashboard import models
from dashboard.loop import LiveLoop, MetricsReader
from dashboard.options import SourceOptions
from dashboard.state import LiveState, TickHistory

SIM_STEP_S = 300.0           # cluster seconds per tick
HOURS = 2.0
TICKS = int(HOURS * 3600 / SIM_STEP_S)   # 24
FINE, EVERY, COARSE = 6, 3, 4


@pytest.fixture(scope="module")
def soaked():
    state = LiveState(history=TickHistory(fine_ticks=FINE, coarse_every=EVERY, coarse_points=COARSE))
    loop = LiveLoop(SourceOptions(source="sim", nodes=4, seed=3, period_s=1.0, sim_step_s=SIM_STEP_S), state=state)
    loop.metrics = MetricsReader(simulated=False)   # GPU metrics are not what this test is about; keep it fast
    loop.explain_jobs = 1
    seen = []             # (cluster time, pending jobs counted by hand) per tick
    cache_sizes = []

    def observe(tick):
        snap = tick.snapshot          # the history records the cluster as observed (the engine's binds are predictions)
        seen.append((tick.cluster_time, sum(1 for j in snap.jobs if any(t.status == "pending" for t in j.tasks))))
        # what sessions on three views do with every new tick: frames cached per tick in the process
        models.queue_table(tick), models.pending_table(tick), models.jobs_table(tick)
        cache_sizes.append(len(models._CACHE))

    loop.on_tick.append(observe)
    failed = [i for i in range(TICKS) if loop.step() is None]
    yield state, seen, cache_sizes, failed
    loop.stop()


def test_every_tick_succeeded_and_cluster_time_advanced_two_hours(soaked):
    state, seen, _, failed = soaked
    assert failed == []
    assert len(seen) == TICKS == 24
    times = [t for t, _ in seen]
    assert all(b - a == SIM_STEP_S for a, b in zip(times, times[1:]))
    assert times[-1] - times[0] == HOURS * 3600 - SIM_STEP_S
    assert state.tick.index == TICKS - 1 and state.source_status == "ok"


def test_history_rings_stay_at_their_caps(soaked):
    state, seen, _, _ = soaked
    h = state.history
    assert len(h.fine) == FINE                      # ticks 19..24 (1-based)
    assert len(h.coarse) == COARSE                  # 8 buckets of 3 ticks, the last 4 kept: ends 15, 18, 21, 24
    assert h._bucket.count == 0                     # 24 is a multiple of 3: no open bucket
    times = [t for t, _ in seen]
    assert [r.time for r in h.coarse] == [times[14], times[17], times[20], times[23]]
    # records(): coarse points older than the oldest fine record, then the fine ones
    assert [r.time for r in h.records()] == [times[14], times[17]] + times[18:]
    assert len(h.totals_frame()) == 8


def test_coarse_points_are_means_of_their_ticks(soaked):
    state, seen, _, _ = soaked
    pending = [p for _, p in seen]
    by_end = {r.time: r for r in state.history.coarse}
    for end in (14, 17, 20, 23):                    # 0-based index of the bucket's last tick
        expected = sum(pending[end - 2:end + 1]) / 3
        assert by_end[seen[end][0]].totals["pending_jobs"] == pytest.approx(expected)


def test_frame_cache_stays_at_its_cap(soaked):
    _, _, cache_sizes, _ = soaked
    # three frames per tick: the cache reaches its cap (64) after 22 ticks and never passes it
    assert max(cache_sizes) == models._CACHE_ITEMS == 64
    assert cache_sizes[-1] == 64
