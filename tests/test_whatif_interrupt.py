"""Interrupting engine work (scheduler.interrupt): a check installed with ``interruptible`` is called before every
victim scenario, raising there abandons the run from inside its cycle and leaves nothing behind, checks are per
thread, and the dashboard's what-if worker stops a superseded run at such a point rather than at a cycle end."""

from __future__ import annotations

import threading
import time
import traceback
from types import SimpleNamespace

import pytest

from bench.whatif_latency import SLIDERS, cluster_64
from dashboard.whatif_jobs import STEADY, LatestWins, ResultCache, Superseded
from scheduler.interrupt import checkpoint, interruptible
from scheduler.whatif import WhatIfRunner, run_to_steady_state


class _Stop(Exception):
    pass


def _stop_after(n: int):
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] >= n:
            raise _Stop

    return check, calls


@pytest.fixture(scope="module")
def priority_case():
    """The 64-node demo with a queue's priority raised: its cycles run hundreds of failing reclaim scenarios."""
    return SLIDERS["queue priority"].apply(cluster_64())


def test_a_raising_check_stops_the_run_inside_an_eviction_search_and_leaves_nothing_behind(priority_case):
    clean = run_to_steady_state(priority_case, 10)
    before = priority_case.copy()
    check, calls = _stop_after(50)
    with pytest.raises(_Stop) as info:
        with interruptible(check):
            run_to_steady_state(priority_case, 10)
    assert calls["n"] == 50                                   # called at every checkpoint up to the raising one
    frames = [f.name for f in traceback.extract_tb(info.tb)]
    assert "_probe" in frames and "run_session" in frames     # inside a cycle's eviction search, not between cycles
    again = run_to_steady_state(priority_case, 10)            # the abandoned run changed nothing
    assert again.snapshot == clean.snapshot and again.cycles_run == clean.cycles_run
    assert again.evicted == clean.evicted and again.started == clean.started
    assert priority_case == before


def test_without_a_check_checkpoints_do_nothing_and_checks_nest_per_thread():
    checkpoint()                                              # nothing installed: no effect
    seen: list[str] = []
    with interruptible(lambda: seen.append("outer")):
        checkpoint()
        with interruptible(lambda: seen.append("inner")):
            checkpoint()
            other = threading.Thread(target=checkpoint)       # another thread has no check installed
            other.start()
            other.join()
        checkpoint()
    checkpoint()
    assert seen == ["outer", "inner", "outer"]


class _Spinner:
    """A runner whose run never reaches a cycle boundary: it only passes engine checkpoints, for up to 20 s."""

    cycles = 10

    def __init__(self):
        self.started = threading.Event()
        self.stopped_by = None

    def run(self, overrides, on_cycle=None):
        self.started.set()
        deadline = time.monotonic() + 20.0
        try:
            while time.monotonic() < deadline:
                checkpoint()
        except BaseException as exc:
            self.stopped_by = type(exc).__name__
            raise
        self.stopped_by = "finished"
        return SimpleNamespace(after=SimpleNamespace(cycles_run=1))


class _Quick:
    cycles = 10

    def run(self, overrides, on_cycle=None):
        return SimpleNamespace(after=SimpleNamespace(cycles_run=1))


def test_a_superseded_what_if_stops_at_the_engines_next_checkpoint():
    jobs = LatestWins(name="test-interrupt")
    spinner = _Spinner()
    old: list = []
    new: list = []
    jobs.submit(spinner, None, "old", ResultCache(), old.append)
    assert spinner.started.wait(10)
    jobs.submit(_Quick(), None, "new", ResultCache(), new.append)
    assert jobs.wait(30)
    assert spinner.stopped_by == Superseded.__name__          # not "finished": it never reached a cycle boundary
    assert old == []                                          # nothing of the superseded run was delivered
    assert [u.phase for u in new] == [STEADY]


def test_the_what_if_runner_result_is_the_same_under_a_check_that_never_raises():
    runner = WhatIfRunner(cluster_64())
    plain = runner.run(SLIDERS["queue priority"])
    check, calls = _stop_after(10**9)
    with interruptible(check):
        checked = runner.run(SLIDERS["queue priority"])
    assert calls["n"] > 100                                   # the heavy slider passes many checkpoints
    assert checked.after.snapshot == plain.after.snapshot and checked.after.evicted == plain.after.evicted
