"""Waits, ETA and cost in the live loop (dashboard/insight.py): what the loop records, estimates in the
background and republishes, what a scoped user sees, what /metrics exports, and ``kaidash serve --prices``."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from dashboard.auth import scope_tick
from dashboard.insight import InsightTracker, with_eta
from dashboard.loop import LiveLoop
from dashboard.models import QueuesModel, pending_table
from dashboard.options import SourceOptions
from scheduler.eta import EtaConfig
from scheduler.joblog import is_waiting
from scheduler.waits import queue_status


@pytest.fixture(scope="module")
def sim_loop():
    """A 16-node simulated loop after a few ticks, its first ETA estimate made (one forward run: quick)."""
    loop = LiveLoop(SourceOptions(source="sim", nodes=16, seed=3), publish_metrics=True)
    loop.insight.config = EtaConfig(runs=1)
    loop.insight.cost_every_s = 0.0          # price every tick, so the ledger integrates between them
    for _ in range(6):
        loop.step(explain=False)
    loop.insight.wait(180)
    loop.step(explain=False)
    yield loop
    loop.stop()


def test_every_waiting_job_gets_its_estimate_and_the_tick_carries_it(sim_loop):
    tick = sim_loop.state.tick
    ins = tick.insight
    assert ins is not None and ins.eta is not None, ins.eta_note if ins else "no insight"
    waiting = {j.key for j in tick.scheduled.jobs if is_waiting(j)}
    assert waiting and set(ins.eta.estimates) == waiting       # re-based to this tick: no stale, none missing
    frame = pending_table(tick)
    for job, text in zip(frame["job"], frame["eta"]):
        est = ins.eta.estimates.get(job)
        if est is not None:
            assert text == est.text                             # the Pending column is the estimate's line
    assert "ETA estimated" in ins.eta_note and "forward run" in ins.eta_note


def test_queue_status_reads_the_same_log_eta_and_costs(sim_loop):
    tick = sim_loop.state.tick
    ins = tick.insight
    shown = QueuesModel(sim_loop.state).status().set_index("queue")
    direct = queue_status(tick.snapshot, ins.history, ins.eta, ins.costs).set_index("queue")   # as observed
    assert list(shown.index) == sorted(q.name for q in tick.snapshot.leaf_queues())
    assert shown["pending_jobs"].equals(direct["pending_jobs"])
    for q in shown.index:
        assert shown.at[q, "est_wait_s"] == pytest.approx(ins.eta.queue_wait_s(q)) or (
            math.isinf(shown.at[q, "est_wait_s"]) and math.isinf(ins.eta.queue_wait_s(q)))
        assert shown.at[q, "idle_cost_per_h"] == pytest.approx(ins.costs.total("idle_allocated", q))
    assert shown["started_24h"].sum() > 0                       # the log saw jobs start


def test_the_ledger_integrates_cost_between_ticks(sim_loop):
    hist = sim_loop.state.tick.insight.cost_history
    assert hist is not None and len(hist.series) >= 2
    capacity = float(hist.today.loc[hist.today["category"] == "capacity", "cost"].sum())
    assert capacity > 0
    # capacity cost = GPUs x price x hours observed (every node Ready in the demo, one GPU model per node)
    rates = sim_loop.state.tick.insight.costs
    assert capacity <= rates.total("capacity") * hist.today.attrs["covered_h"] * 1.0001
    assert "day,category,queue,gpu_hours,cost,covered_h" in hist.csv.splitlines()[0]


def test_a_static_snapshot_gets_its_eta_republished_when_ready(tmp_path):
    from scheduler.sources.synthetic import generate_scenario
    from dashboard.state import LiveState
    from dashboard.loop import publish_snapshot

    state = LiveState()
    snap = generate_scenario(seed=4, nodes=12).snapshot
    tick = publish_snapshot(state, snap, "test", insight=True)
    assert tick.insight is not None and tick.insight.costs is not None
    first = state.tick
    for _ in range(600):
        if state.tick is not first:
            break
        import time
        time.sleep(0.2)
    assert state.tick is not first, "no republish after the estimate"
    assert state.tick.insight.eta is not None
    assert state.tick.index == first.index                     # the same tick, now with its ETA


def test_a_scoped_user_sees_only_their_queues_and_no_other_queues_job_names(sim_loop):
    tick = sim_loop.state.tick
    eta = tick.insight.eta
    blocked = [e for e in eta.estimates.values() if e.blocker_job]
    queue = (blocked[0].queue if blocked else next(iter(eta.estimates.values())).queue)
    scoped = scope_tick(tick, frozenset({queue}))
    ins = scoped.insight
    assert ins.scoped and ins.cost_history is None and ins.ledger is None
    assert {e.queue for e in ins.eta.estimates.values()} <= {queue}
    visible_jobs = {j.key for j in scoped.scheduled.jobs}
    for e in ins.eta.estimates.values():
        assert e.blocker_job is None or e.blocker_job in visible_jobs
        if e.blocker_job is None and e.blocker:
            assert not any(k in e.blocker for k in {j.key for j in tick.scheduled.jobs} - visible_jobs)
    assert set(ins.costs.frame["queue"]) <= {"", queue}
    assert set(ins.history["jobs"]["queue"]) <= {queue}
    hidden = {j.key for j in tick.scheduled.jobs} - visible_jobs
    shown = pending_table(scoped)
    assert set(shown["queue"]) <= {queue}
    assert not any(k in text for text in shown["eta"] for k in hidden)


def test_metrics_export_estimated_waits_and_cost(sim_loop):
    body = sim_loop.own_metrics.exposition()[0].decode()
    for name in ("kaidash_queue_estimated_wait_seconds{", "kaidash_cost_per_hour{", "kaidash_cost_total{",
                 "kaidash_queue_wait_seconds{", "kaidash_queue_started_jobs{", "kaidash_eta_timestamp_seconds"):
        assert name in body, name


def test_pending_says_why_there_is_no_estimate_before_the_first():
    import pandas as pd
    from dashboard.insight import Insight

    df = with_eta(pd.DataFrame({"job": ["a/x"]}), Insight(eta=None, eta_note="first ETA estimate running"))
    assert df["eta"].iloc[0] == "no estimate yet (first ETA estimate running)" and math.isnan(df["eta_p50_s"][0])


def test_tracker_does_not_block_the_tick_on_the_estimate():
    """The estimate runs on its own thread: observe() returns while it is still running."""
    import threading
    from scheduler.sources.synthetic import generate_scenario

    gate = threading.Event()
    tracker = InsightTracker()
    snap = generate_scenario(seed=1, nodes=8).snapshot
    tracker.observe(snap, snap, None)                       # creates the planner and starts an estimate
    tracker.wait(120)
    tracker.planner._estimate = lambda *a, **k: (gate.wait(30), None)[1]   # the next one hangs until released
    tracker._eta_started = -math.inf
    ins = tracker.observe(snap, snap, None)
    assert tracker.estimating and ins.eta is not None        # the tick got the previous report at once
    gate.set()
    tracker.wait(30)


def test_serve_refuses_a_bad_price_file_before_it_starts(tmp_path):
    bad = tmp_path / "prices.yaml"
    bad.write_text("gpu_hour: {H100: -3}\n")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli", "serve", "--port", "0", "--prices", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert str(bad) in proc.stderr or "H100" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_live_cluster_is_priced_as_observed_not_with_the_engines_binds():
    """kube / snapshot sources: the engine binding b-serve this cycle is a prediction; the allocated cost is what
    the cluster holds (a's 4 GPUs), not 6 GPUs."""
    from scheduler.cost import GpuPrices, cost_rates
    from scheduler.engine import run_session
    from scheduler.snapshot_io import loads_snapshot
    from test_dashboard_models import SCENARIO

    from dashboard.insight import InsightTracker

    snap = loads_snapshot(SCENARIO)
    result = run_session(snap)
    prices = GpuPrices()
    ins = InsightTracker(prices, eta=False).observe(snap, result.snapshot, None, simulated=False)
    assert ins.costs.total("allocated") == pytest.approx(cost_rates(snap, prices).total("allocated"))
    assert ins.costs.total("allocated", "b") == 0
    assert cost_rates(result.snapshot, prices).total("allocated", "b") > 0      # what the old pricing billed
