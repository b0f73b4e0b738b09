"""Background work (ETA estimate, why-pending searches) yields while a what-if runs: dashboard/interactive.py."""

from __future__ import annotations

import math
import threading
import time

import pytest
from scheduler.snapshot_io import loads_snapshot

from dashboard.feeds import Feed
from dashboard.insight import InsightTracker
from dashboard.interactive import InteractiveGate
from dashboard.loop import LiveLoop
from dashboard.options import SourceOptions
from dashboard.whatif_jobs import LatestWins, ResultCache

from test_dashboard_models import SCENARIO


def _until(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ------------------------------------------------------------------------------------------ the gate

def test_wait_idle_returns_at_once_when_nothing_interactive_runs():
    gate = InteractiveGate(linger_s=0.0)
    assert not gate.busy() and gate.in_flight() == ""
    assert gate.wait_idle() == 0.0 and gate.paused_s == 0.0


def test_background_waits_for_every_hold_to_end_then_the_linger():
    gate = InteractiveGate(linger_s=0.2)
    released = threading.Event()
    waited = []

    def background():
        waited.append(gate.wait_idle())
        waited.append(time.monotonic())

    with gate.hold("what-if"):
        with gate.hold("what-if"):                        # two sessions' what-ifs at once
            assert gate.in_flight() == "what-if ×2"
            t = threading.Thread(target=background)
            t.start()
            time.sleep(0.2)
        assert gate.busy() and t.is_alive()               # one still runs
        time.sleep(0.1)
        released.set()
        ended = time.monotonic()
    assert gate.busy()                                    # lingers: the page renders the result now
    t.join(10)
    assert not t.is_alive()
    assert waited[1] - ended >= 0.19                      # not before the linger ran out
    assert waited[0] >= 0.45 and gate.paused_s == pytest.approx(waited[0])
    assert not gate.busy() and gate.in_flight() == ""


def test_a_wait_never_lasts_longer_than_max_wait():
    gate = InteractiveGate(max_wait_s=0.2, linger_s=0.0)
    with gate.hold("what-if"):
        began = time.monotonic()
        waited = gate.wait_idle()
        assert gate.busy()
    assert 0.19 <= waited and time.monotonic() - began < 5


def test_a_hold_ends_even_when_its_work_raises():
    gate = InteractiveGate(linger_s=0.0)
    with pytest.raises(RuntimeError):
        with gate.hold("what-if"):
            raise RuntimeError("boom")
    assert not gate.busy()


# ------------------------------------------------------------------------------------------ what-if runs hold it

class _Runner:
    cycles = 10

    def __init__(self, gate):
        self.gate = gate
        self.busy_inside = None

    def run(self, overrides, on_cycle=None):
        self.busy_inside = self.gate.busy()

        class _After:
            cycles_run = 1

        class _Diff:
            after = _After()
        return _Diff()


def test_a_what_if_run_holds_the_gate_while_it_runs():
    gate = InteractiveGate(linger_s=0.0)
    jobs = LatestWins(gate=gate)
    runner = _Runner(gate)
    got = []
    jobs.submit(runner, {}, "k", ResultCache(), got.append)
    assert jobs.wait(30)
    assert runner.busy_inside is True and got[-1].phase == "steady"
    assert not gate.busy()


# ------------------------------------------------------------------------------------------ the ETA estimate pauses

def _eta_frame(tracker, snap):
    return tracker.planner.current(snap).frame()[["job", "eta_p10_s", "eta_p50_s", "eta_p90_s"]]


def test_the_eta_estimate_pauses_during_a_what_if_and_resumes_to_the_same_report():
    from scheduler.sources.synthetic import generate_scenario

    snap = generate_scenario(seed=1, nodes=8).snapshot
    free = InsightTracker(gate=InteractiveGate())
    free.observe(snap, snap, None)
    free.wait(120)
    assert free.planner.report is not None and free.eta_paused_s == 0.0

    gate = InteractiveGate(linger_s=0.0)
    tracker = InsightTracker(gate=gate)
    with gate.hold("what-if"):
        tracker.observe(snap, snap, None)                  # starts the estimate: it stops before its first session
        assert _until(lambda: tracker.eta_paused)
        time.sleep(0.5)
        assert tracker.estimating and tracker.planner.report is None
        note = tracker.eta_note()
        assert "paused while a what-if computes" in note, note
    tracker.wait(120)
    assert not tracker.estimating and not tracker.eta_paused
    assert tracker.eta_paused_s >= 0.45
    assert "paused for what-ifs" in tracker.eta_note()
    # nothing lost: the paused estimate is the estimate made without a pause (same seeds, same sessions)
    assert _eta_frame(tracker, snap).equals(_eta_frame(free, snap))
    assert tracker.planner.report.sessions == free.planner.report.sessions


def test_time_paused_for_a_what_if_does_not_spend_the_estimates_run_budget():
    """Above 300 nodes the estimate stops adding runs once its budget (90 s) is spent; a what-if session that
    holds it paused longer than that must not leave it with one run: the budget counts simulation work only."""
    from scheduler.eta import EtaConfig

    snap = loads_snapshot(SCENARIO)
    gate = InteractiveGate(linger_s=0.0)
    config = EtaConfig(runs=3, arrivals=False, use_recorded_durations=False, budget_s=1.0)
    tracker = InsightTracker(gate=gate, config=config)
    with gate.hold("what-if"):
        tracker.observe(snap, snap, None)
        assert _until(lambda: tracker.eta_paused)
        time.sleep(1.5)                                    # paused longer than the whole budget
    tracker.wait(120)
    report = tracker.planner.report
    assert tracker.eta_paused_s >= 1.45 and report.wall_ms >= 1450
    assert report.runs == 3, report.notes
    assert not any("budget" in n for n in report.notes)


def test_a_re_estimate_in_flight_says_it_is_paused_and_the_last_report_stays():
    from scheduler.sources.synthetic import generate_scenario

    snap = generate_scenario(seed=1, nodes=8).snapshot
    gate = InteractiveGate(linger_s=0.0)
    tracker = InsightTracker(gate=gate)
    tracker.observe(snap, snap, None)
    tracker.wait(120)
    first = tracker.planner.report
    with gate.hold("what-if"):
        tracker._eta_started = -math.inf                    # due again
        ins = tracker.observe(snap, snap, None)
        assert ins.eta is not None                          # the tick carries the last report meanwhile
        assert _until(lambda: tracker.eta_paused)
        assert tracker.planner.report is first
        assert "re-estimate paused while a what-if computes" in tracker.eta_note()
    tracker.wait(120)
    assert tracker.planner.report is not first


# ------------------------------------------------------------------------------------------ why-pending yields

class _StaticFeed(Feed):
    pass


class _BusyAfter(InteractiveGate):
    """Idle for the first ``n`` questions, busy after: a what-if arriving in the middle of a search."""

    def __init__(self, n):
        super().__init__(linger_s=0.0)
        self.n = n

    def busy(self):
        self.n -= 1
        return self.n < 0


def _loop():
    loop = LiveLoop(SourceOptions(source="snapshot"), feed=_StaticFeed(loads_snapshot(SCENARIO), "static"),
                    publish_metrics=False, insight=False)
    loop.step(explain=False)
    return loop


def test_no_why_pending_search_starts_while_a_what_if_runs_and_it_is_done_after():
    loop = _loop()
    loop.gate = gate = InteractiveGate(linger_s=0.0)
    with gate.hold("what-if"):
        assert loop.explain_between_ticks(time.monotonic() + 10) == 0
    assert loop.searches_yielded == 1 and "b-big" not in loop._explained
    assert loop.explain_between_ticks(time.monotonic() + 10) >= 1
    assert "b-big" in loop._explained
    assert loop.state.tick.explanations["b-big"].counterfactual is not None


def test_a_search_in_progress_is_abandoned_at_its_next_engine_run_and_redone_later():
    loop = _loop()
    loop.gate = _BusyAfter(1)                               # the loop's check passes, the search's first probe not
    assert loop.explain_between_ticks(time.monotonic() + 10) == 0
    assert loop.searches_yielded == 1
    assert "b-big" not in loop._explained                  # no half-searched answer kept
    loop.gate = InteractiveGate(linger_s=0.0)
    assert loop.explain_between_ticks(time.monotonic() + 10) >= 1
    assert loop._explained["b-big"][1].counterfactual is not None
