"""The simulator's event queue: time order, stable ties, cancellable completions."""

import math

from scheduler.simulate.events import ARRIVAL, COMPLETION, EventQueue


def test_events_come_out_in_time_order_and_same_time_events_in_push_order():
    q = EventQueue()
    q.push_arrival(30, "c")
    q.push_arrival(10, "a")
    q.push_arrival(10, "b")
    q.schedule_completion(20, "job-x")
    assert q.next_time() == 10
    got = [(e.time, e.kind, e.payload) for e in q.pop_until(25)]
    assert got == [(10, ARRIVAL, "a"), (10, ARRIVAL, "b"), (20, COMPLETION, "job-x")]
    assert q.next_time() == 30
    assert [e.payload for e in q.pop_until(30)] == ["c"]
    assert q.next_time() == math.inf


def test_a_cancelled_completion_never_fires_and_a_rescheduled_one_fires_once():
    q = EventQueue()
    q.schedule_completion(100, "j")
    assert q.cancel_completion("j") and not q.has_completion("j")
    assert q.next_time() == math.inf and list(q.pop_until(1000)) == []
    q.schedule_completion(100, "k")
    q.schedule_completion(150, "k")          # restarted run replaces the first
    fired = [(e.time, e.payload) for e in q.pop_until(1000)]
    assert fired == [(150, "k")]
    assert not q.cancel_completion("k")      # already fired
