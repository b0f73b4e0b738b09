"""What-if progress: the per-cycle hook only observes, the background run delivers interim diffs in order and a
final diff equal to the synchronous one, a newer request supersedes an older one, finished diffs are cached per
override set until the next pin, and a failing run reports an error instead of leaving the page computing."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from dashboard.loop import publish_snapshot
from dashboard.models import WhatIfModel
from dashboard.state import LiveState
from dashboard.whatif_jobs import COMPUTING, ERROR, INTERIM, STEADY, LatestWins, ResultCache, WhatIfUpdate
from scheduler.sources.synthetic import generate_scenario
from scheduler.whatif import WhatIf, WhatIfRunner, run_to_steady_state

SLOW = {"queues": {"llm": {"gpu": {"quota": 0.0}}}}
"""On the seed-7 demo at its start: 4 cycles to steady state (3 interim ones), jobs change outcome."""


@pytest.fixture(scope="module")
def demo():
    return generate_scenario(seed=7, nodes=64).snapshot


@pytest.fixture
def state(demo):
    st = LiveState()
    publish_snapshot(st, demo, "demo")
    return st


def _same(a, b) -> bool:
    """Outcomes equal in everything but the wall time they took."""
    return dataclasses.replace(a, run_ms=0.0) == dataclasses.replace(b, run_ms=0.0)


def _collector():
    got: list[WhatIfUpdate] = []
    return got, got.append


# ----------------------------------------------------------------------------------------- engine hook

def test_on_cycle_sees_every_interim_cycle_in_order_and_changes_nothing(demo):
    modified = WhatIf.from_dict(SLOW).apply(demo)
    plain = run_to_steady_state(modified)
    seen = []
    hooked = run_to_steady_state(modified, on_cycle=lambda n, o: seen.append((n, o)))
    assert plain.cycles_run >= 3
    assert [n for n, _ in seen] == list(range(1, plain.cycles_run))       # the last cycle is the result
    assert all(o.cycles_run == n for n, o in seen)
    assert _same(hooked, plain)
    # an interim outcome is a state the run passed through: the first differs from the input's counts
    assert seen[0][1].snapshot is not modified and sum(seen[-1][1].started.values()) > 0


def test_on_cycle_raising_abandons_the_run_at_that_boundary(demo):
    modified = WhatIf.from_dict(SLOW).apply(demo)
    calls = []

    def stop(n, _):
        calls.append(n)
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run_to_steady_state(modified, on_cycle=stop)
    assert calls == [1]


def test_runner_reports_base_cycles_then_interim_diffs_and_the_same_final(demo):
    overrides = WhatIf.from_dict(SLOW)
    expected = WhatIfRunner(demo).run(overrides)
    progress = []
    got = WhatIfRunner(demo).run(overrides, on_cycle=progress.append)
    sides = [p.side for p in progress]
    assert sides == sorted(sides)                                 # "base" cycles first, then "modified"
    base = [p.cycle for p in progress if p.side == "base"]
    mod = [p for p in progress if p.side == "modified"]
    assert base == list(range(1, expected.before.cycles_run))
    assert [p.cycle for p in mod] == list(range(1, expected.after.cycles_run))
    assert all(p.diff is None for p in progress if p.side == "base")
    assert all(p.diff.before is got.before and p.diff.after.cycles_run == p.cycle for p in mod)
    assert [p.elapsed_ms for p in progress] == sorted(p.elapsed_ms for p in progress)
    assert _same(got.after, expected.after) and _same(got.before, expected.before)
    assert got.job_changes() == expected.job_changes() and got.job_changes()


# ----------------------------------------------------------------------------------------- the model

def _edit(m: WhatIfModel, queue: str, quota: float) -> None:
    m.queue = queue
    m.quota = quota


def _in_background(m: WhatIfModel, queue: str, quota: float) -> list[WhatIfUpdate]:
    """Edit ``queue``'s quota, submit, wait: the updates the run delivered (none accepted yet)."""
    got, notify = _collector()
    _edit(m, queue, quota)
    m.submit(notify)
    assert m.wait(60)
    return got


def test_submit_delivers_interim_diffs_in_order_and_the_synchronous_result(state):
    m = WhatIfModel(state)
    m.run()                                                   # base cached, as after the page's first run
    _edit(m, "llm", 0.0)
    got, notify = _collector()
    assert m.submit(notify) is None and m.phase == COMPUTING and m.running
    assert m.wait(60)
    phases = [u.phase for u in got]
    assert phases[-1] == STEADY and set(phases[:-1]) == {INTERIM}
    assert [u.cycle for u in got[:-1]] == list(range(1, got[-1].cycle))
    assert [u.seq for u in got] == list(range(1, len(got) + 1))
    accepted = [m.accept(u) for u in got]                         # in order: every one lands
    assert all(accepted) and m.phase == STEADY and not m.running
    final = m.diff
    sync = WhatIfModel(state)
    _edit(sync, "llm", 0.0)
    expected = sync.run()
    assert _same(final.after, expected.after) and final.job_changes() == expected.job_changes()
    assert m.cycle == expected.after.cycles_run


def test_an_older_update_never_lands_after_a_newer_one(state):
    m = WhatIfModel(state)
    m.run()
    got = _in_background(m, "llm", 0.0)
    steady, interim = got[-1], got[0]
    assert m.accept(steady)
    assert not m.accept(interim) and m.phase == STEADY            # arrived late (event loop reordering): dropped


def test_a_newer_request_supersedes_a_running_one(state):
    m = WhatIfModel(state)
    m.run()
    first_cycle, go_on = threading.Event(), threading.Event()
    old: list[WhatIfUpdate] = []

    def old_notify(u):
        old.append(u)
        first_cycle.set()
        go_on.wait(10)                       # hold the old run at its first boundary until the new one is asked

    _edit(m, "llm", 0.0)
    m.submit(old_notify)
    assert first_cycle.wait(30)
    m.reset()
    _edit(m, "vision", 200.0)
    new, notify = _collector()
    m.submit(notify)
    go_on.set()
    assert m.wait(60)
    assert [u.phase for u in old] == [INTERIM]             # abandoned at its next boundary: no final, no more
    assert new[-1].phase == STEADY
    assert not m.accept(old[0])                              # the in-flight one is stale when it reaches the UI
    for u in new:
        m.accept(u)
    wanted = WhatIf.from_dict({"queues": {"vision": {"gpu": {"quota": 200.0}}}})
    assert m.diff.overrides == wanted and m.phase == STEADY
    assert not m.accept(old[0]) and m.diff.overrides == wanted


def test_moving_back_is_a_cache_hit_with_the_same_diff_until_the_next_pin(state):
    m = WhatIfModel(state)
    m.run()
    m.accept(_in_background(m, "llm", 0.0)[-1])
    first = m.diff
    m.accept(_in_background(m, "llm", 40.0)[-1])
    assert m.diff is not first
    _edit(m, "llm", 0.0)                                     # back
    got, notify = _collector()
    hit = m.submit(notify)
    assert hit is not None and hit.phase == STEADY and hit.cached
    assert got == [] and not m.running                       # nothing ran
    assert m.diff is first and m.cached and m.cycle == first.after.cycles_run
    m.pin()                                                  # a new base: the old results do not apply
    _edit(m, "llm", 0.0)
    assert m.submit(notify) is None and m.running
    assert m.wait(60) and got[-1].phase == STEADY and not got[-1].cached


def test_bad_overrides_and_a_crashing_run_end_in_an_error_not_a_spinner(state):
    m = WhatIfModel(state)
    m.run()
    m.queue_edits["no-such-queue"] = {"quota": 1}
    got, notify = _collector()
    assert m.submit(notify) is None and m.wait(30)
    assert [u.phase for u in got] == [ERROR] and m.accept(got[0])
    assert "no-such-queue" in m.error and m.diff is None and not m.running     # no stale tables under the banner

    class Crashing:
        cycles = 10

        def run(self, overrides, on_cycle=None):
            raise ValueError("boom")

    jobs = LatestWins()
    got, notify = _collector()
    jobs.submit(Crashing(), None, "k", ResultCache(), notify)
    assert jobs.wait(10)
    assert [u.phase for u in got] == [ERROR] and "ValueError: boom" in got[0].error
    jobs.submit(WhatIfRunner(state.tick.snapshot), WhatIf(), "empty", ResultCache(), notify)   # still works
    assert jobs.wait(60) and got[-1].phase == STEADY


def test_result_cache_drops_the_least_recently_used():
    cache = ResultCache(size=2)
    cache.put("a", "A", 1.0)
    cache.put("b", "B", 2.0)
    assert cache.get("a") == ("A", 1.0)                     # a is now the most recent
    cache.put("c", "C", 3.0)
    assert cache.get("b") is None and cache.get("a") == ("A", 1.0) and len(cache) == 2


# ----------------------------------------------------------------------------------------- the view

def test_view_marks_interim_and_steady_results(state):
    from dashboard.views import WhatIfView

    view = WhatIfView(state)                                  # no server: the first run is synchronous
    assert 'data-whatif="steady"' in view.status.object and "no edits yet" in view.status.object
    m = view.model
    _edit(m, "llm", 0.0)
    got, notify = _collector()
    m.submit(notify)
    view._render()
    assert 'data-whatif="computing"' in view.status.object and "cycle 1" in view.status.object
    assert view.cards.styles.get("opacity") == "0.45"        # the previous result, dimmed
    m.wait(60)
    assert m.accept(got[0]) and got[0].phase == INTERIM
    view._render()
    assert 'data-whatif="interim"' in view.status.object and "cycle 1 of up to 10, still settling" in view.status.object
    assert view.card_summary.title == "Cluster: before | after cycle 1, still settling | Δ"
    assert "so far" in view.summary.value["metric"].iloc[3] and view.cards.styles.get("opacity") == "1"
    assert view.outcome.object == ""                          # no "starts nothing" verdict before it settles
    assert m.accept(got[-1])
    view._render()
    assert f"Steady state after {got[-1].cycle} cycles" in view.status.object
    assert view.card_summary.title == "Cluster: before | after | Δ"
    after = dict(zip(view.summary.value["metric"], view.summary.value["after"]))
    assert after["jobs started"] == str(sum(got[-1].diff.after.started.values()))


def test_releasing_a_slider_where_it_was_released_before_pin_runs_again(state):
    import param

    from dashboard.views import WhatIfView

    view = WhatIfView(state)
    view.model.queue = "vision"
    start = view.model.quota

    def drag(value: float, released: bool) -> None:
        """What the browser sends: the value while sliding; on release ``value_throttled``, only when it
        differs from the last one it sent."""
        view.quota.value = value
        if released and view.quota.value_throttled != value:
            with param.edit_constant(view.quota):
                view.quota.value_throttled = value

    drag(start + 20, released=True)
    assert view.model.quota == start + 20 and view.model.diff.overrides.queues
    view._pin()                                               # edits gone, slider back at the queue's quota
    view.model.queue = "vision"
    assert view.model.quota == start and view.quota.value == start and view.model.diff.overrides.is_empty()
    drag(start + 20, released=True)                           # the same place as before the pin
    assert view.model.quota == start + 20 and view.model.diff.overrides.queues
    drag(start + 30, released=False)                          # sliding elsewhere runs nothing until released
    assert view.model.quota == start + 20
