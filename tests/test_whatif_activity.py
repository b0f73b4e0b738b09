"""What a running what-if is doing (scheduler.progress): the engine tells a listener when each eviction search
starts (with its live record) and ends, only on the listening thread and without changing a decision; the
what-if worker keeps the current search for its latest request, and the What-if view's status line names it
("reclaim is searching victims for …: N scenarios tried") while the run computes."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from types import SimpleNamespace

import pytest

from bench.whatif_latency import SLIDERS, cluster_64
from dashboard.loop import publish_snapshot
from dashboard.state import LiveState
from dashboard.whatif_jobs import LatestWins, ResultCache
from scheduler.progress import Search, observing, searching
from scheduler.whatif import run_to_steady_state


@pytest.fixture(scope="module")
def priority_case():
    """The 64-node what-if bench cluster with a queue's priority raised: each heavy cycle has one reclaim search
    of about 200 failing scenarios."""
    return SLIDERS["queue priority"].apply(cluster_64())


def test_the_engine_reports_each_eviction_search_start_and_end_and_decides_the_same(priority_case):
    events: list = []
    with observing(events.append):
        watched = run_to_steady_state(priority_case, 10)
    plain = run_to_steady_state(priority_case, 10)
    assert dataclasses.replace(watched, run_ms=0.0) == dataclasses.replace(plain, run_ms=0.0)
    assert events and events[0] is not None
    assert events[1::2] == [None] * (len(events) // 2) and all(e is not None for e in events[::2])  # start, end, …
    searches = [e for e in events if e is not None]
    jobs = {j.key: j for j in priority_case.jobs}
    for sr in searches:
        assert sr.action in ("reclaim", "preempt", "consolidation") and sr.job in jobs
        assert sr.pods >= 1 and sr.tried == sr.record.tried
    longest = max(searches, key=lambda sr: sr.tried)
    assert longest.action == "reclaim" and longest.tried >= 100      # the heavy part the status line explains
    assert jobs[longest.job].queue == "llm" and longest.pods == 1
    text = longest.describe()
    assert text.startswith(f"reclaim is searching victims for {longest.job}: {longest.tried:,} scenarios tried")


def test_nobody_listening_costs_nothing_and_listeners_are_per_thread():
    rec = SimpleNamespace(tried=0)
    with searching("reclaim", "q/a", 2, rec):                # no listener: a shared do-nothing context
        pass
    seen: list = []
    with observing(seen.append):
        with searching("preempt", "q/a", 2, rec):
            rec.tried = 7
            other = threading.Thread(target=lambda: searching("reclaim", "q/b", 1, rec).__enter__())
            other.start()
            other.join()
        with observing(lambda s: seen.append(("inner", s))):
            with searching("reclaim", "q/c", 1, rec):
                pass
    with searching("reclaim", "q/d", 1, rec):                # restored: nobody listens again
        pass
    assert [type(x).__name__ if not isinstance(x, tuple) else x[0] for x in seen] == \
        ["Search", "NoneType", "inner", "inner"]
    assert seen[0].job == "q/a" and seen[0].tried == 7 and seen[0].describe().startswith(
        "preempt is searching victims for q/a (2 pods): 7 scenarios tried")
    assert seen[2][1].job == "q/c" and seen[3] == ("inner", None)


class _Searcher:
    """A runner that enters one eviction search and stays in it until released."""

    cycles = 10

    def __init__(self):
        self.inside, self.release = threading.Event(), threading.Event()
        self.record = SimpleNamespace(tried=0)

    def run(self, overrides, on_cycle=None):
        with searching("reclaim", "team/train-7", 38, self.record):
            self.inside.set()
            self.release.wait(20)
        return SimpleNamespace(after=SimpleNamespace(cycles_run=1))


def test_the_worker_keeps_the_latest_requests_current_search_and_drops_it_after():
    jobs = LatestWins(name="test-activity")
    runner = _Searcher()
    gen = jobs.submit(runner, None, "k", ResultCache(), lambda u: None)
    assert runner.inside.wait(10)
    runner.record.tried = 412
    now = jobs.activity()
    assert now is not None and now.job == "team/train-7" and now.tried == 412 and jobs.activity(gen) is now
    assert now.describe().startswith("reclaim is searching victims for team/train-7 (38 pods): 412 scenarios tried")
    jobs.cancel()                                             # a newer request: the old run's search is not shown
    assert jobs.activity() is None and jobs.activity(gen) is None
    runner.release.set()
    assert jobs.wait(10) and jobs.activity() is None


def test_the_view_names_the_search_while_a_heavy_what_if_computes(priority_case):
    from dashboard.views import WhatIfView

    state = LiveState()
    publish_snapshot(state, cluster_64(), "bench cluster")
    view = WhatIfView(state)                                  # no server: the first (base) run is synchronous
    m = view.model
    m.activity_after_ms = 0.0                                 # every search, however short (a fast machine)
    m.queue = "prod"
    m.priority = 200
    m.submit(lambda u: None)                                  # the updates are not accepted: it stays "computing"
    shown: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and m._jobs.busy():
        status = view._status_html()
        if "Now: reclaim is searching victims for" in status:
            shown.append(status)
        time.sleep(0.002)
    assert m.wait(120) and shown
    assert all('data-whatif="computing"' in s and 'data-whatif="activity"' in s for s in shown)
    llm = {j.key for j in cluster_64().jobs if j.queue == "llm"}
    named = {s.split("searching victims for ")[1].split(":")[0] for s in shown}
    assert named & llm                                         # the heavy searches are llm preemptors'
    tried = [int(re.search(r"(\d[\d,]*) scenarios? tried", s).group(1).replace(",", "")) for s in shown]
    assert max(tried) >= 50                                    # watched while its scenarios failed one by one
    assert 'data-whatif="activity"' not in view._status_html()   # the run ended: no search to name


def test_a_search_is_named_only_once_it_has_lasted():
    from dashboard.models import WhatIfModel

    state = LiveState()
    publish_snapshot(state, cluster_64(), "bench cluster")
    m = WhatIfModel(state)
    runner = _Searcher()
    m._prepare = lambda: (runner, None, "k")                  # a run that sits in one search until released
    m.activity_after_ms = 300.0
    assert m.submit(lambda u: None) is None and runner.inside.wait(10)
    assert m.running and m.activity() == ""                   # just started: not named yet
    time.sleep(0.35)
    assert m.activity().startswith("reclaim is searching victims for team/train-7 (38 pods): 0 scenarios tried")
    runner.release.set()
    assert m.wait(10)
