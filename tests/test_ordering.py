"""Queue order (all 8 keys of §b.6), job order (§c.1) and hierarchical selection re-evaluated in-session."""

import numpy as np

from scheduler.ordering import JobsOrderByQueues, dominant_resource_share, job_order_key, queue_key, queue_less
from tests._engine_helpers import session_from_yaml

NODES = """
nodes: [{name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 64Gi}]
"""


def _two_queues(a: str, b: str, jobs: str) -> str:
    return NODES + f"queues:\n  - {a}\n  - {b}\njobs:\n{jobs}"


def _first_queue(session):
    order = JobsOrderByQueues(session, [j.index for j in session.jobs if session.has_pending(j.index)])
    j = order.pop()
    return session.jobs[j].job.queue


PENDING = """  - {name: ja, queue: qa, tasks: [{name: ja-0, gpu: 1}]}
  - {name: jb, queue: qb, tasks: [{name: jb-0, gpu: 1}]}
"""


def test_key2_starved_queue_first_even_with_lower_priority():
    # qa: priority 200, deserved 0 → not starved with the job; qb: priority 100, deserved 4 (cpu/mem -1) → starved.
    s = session_from_yaml(_two_queues(
        "{name: qa, priority: 200, creation_time: 1, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, priority: 100, creation_time: 2, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}",
        PENDING))
    assert _first_queue(s) == "qb"


def test_key3_priority_when_both_starved():
    s = session_from_yaml(_two_queues(
        "{name: qa, priority: 100, creation_time: 1, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, priority: 200, creation_time: 2, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}",
        PENDING))
    assert _first_queue(s) == "qb"


def test_keys5_6_smaller_dominant_share():
    # Neither starved (quota 0), same priority; allocatable = fair share; qa already holds 2 GPUs.
    jobs = PENDING + "  - {name: run, queue: qa, tasks: [{name: run-0, gpu: 2, status: running, node: n1, gpu_index: [0, 1]}]}\n"
    s = session_from_yaml(_two_queues(
        "{name: qa, creation_time: 1, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, creation_time: 2, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}", jobs))
    assert _first_queue(s) == "qb"


def test_key8_older_queue_wins_a_full_tie():
    s = session_from_yaml(_two_queues(
        "{name: qa, creation_time: 5, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, creation_time: 3, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}", PENDING))
    assert _first_queue(s) == "qb"


def test_key1_over_utilised_needs_all_three_resources():
    s = session_from_yaml(_two_queues(
        "{name: qa, creation_time: 1, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, creation_time: 2, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}}", PENDING))
    q = s.queues.index["qa"]
    s.queues.fair_share[q] = [1.0, 1000.0, 1.0]
    s.queues.allocated_rows[q] = [2.0, 2000.0, 2.0]   # queue_key reads the plain rows
    assert queue_key(s, q, np.zeros(3))[0] is True
    s.queues.allocated_rows[q] = [2.0, 2000.0, 1.0]  # memory at fair share → not over-utilised
    assert queue_key(s, q, np.zeros(3))[0] is False


def test_key4_zero_allocatable_penalised_and_drf_multiplier():
    s = session_from_yaml(_two_queues(
        "{name: qa, creation_time: 1, gpu: {quota: 0, limit: 0}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, creation_time: 2, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}", PENDING))
    qa = s.queues.index["qa"]
    assert queue_key(s, qa, np.array([1.0, 0, 0]))[3] is True
    assert dominant_resource_share(np.array([2.0, 0, 0]), np.array([0.0, -1, -1]), np.array([8.0, 1, 1])) == 2000.0
    assert dominant_resource_share(np.array([2.0, 0, 0]), np.array([-1.0, -1, -1]), np.array([8.0, 1, 1])) == 0.25


def test_key7_componentwise_smaller_allocatable_share():
    s = session_from_yaml(_two_queues(
        "{name: qa, creation_time: 1, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}",
        "{name: qb, creation_time: 2, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}", PENDING))
    qa, qb = s.queues.index["qa"], s.queues.index["qb"]
    key = (False, False, -100.0, False, 0.0, 0.0)
    s.queues.allocatable[qa] = [4.0, -1, -1]
    s.queues.allocatable[qb] = [2.0, -1, -1]
    assert queue_less(s, qb, key, qa, key) is True   # smaller allocatable wins before creation time
    assert queue_less(s, qa, key, qb, key) is False


def test_job_order_priority_elastic_state_creation_then_name():
    text = NODES + """queues: [{name: q, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: low, queue: q, priority: 10, creation_time: 1, tasks: [{name: low-0, gpu: 1}]}
  - {name: high-new, queue: q, priority: 90, creation_time: 9, tasks: [{name: hn-0, gpu: 1}]}
  - {name: high-old, queue: q, priority: 90, creation_time: 2, tasks: [{name: ho-0, gpu: 1}]}
  - name: high-grown
    queue: q
    priority: 90
    creation_time: 1
    min_available: 1
    tasks: [{name: hg-0, gpu: 1, status: running, node: n1, gpu_index: 0}, {name: hg-1, gpu: 1}]
"""
    s = session_from_yaml(text)
    keys = sorted((job_order_key(s, j.index), j.key) for j in s.jobs)
    # high-grown is at min_available (elastic state 1) so it goes after the below-min high-priority jobs
    assert [k for _, k in keys] == ["high-old", "high-new", "high-grown", "low"]


def test_selection_is_re_evaluated_after_each_allocation():
    # Two equal queues, each with two 1-GPU jobs: allocations alternate qa, qb, qa, qb because each allocation
    # raises that queue's dominant resource share (re-evaluated after every pop).
    text = NODES + """queues:
  - {name: qa, creation_time: 1, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: qb, creation_time: 2, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a1, queue: qa, creation_time: 1, tasks: [{name: a1-0, gpu: 1}]}
  - {name: a2, queue: qa, creation_time: 2, tasks: [{name: a2-0, gpu: 1}]}
  - {name: b1, queue: qb, creation_time: 1, tasks: [{name: b1-0, gpu: 1}]}
  - {name: b2, queue: qb, creation_time: 2, tasks: [{name: b2-0, gpu: 1}]}
"""
    from scheduler.actions.allocate import attempt_job
    s = session_from_yaml(text)
    order = JobsOrderByQueues(s, [j.index for j in s.jobs])
    seen = []
    while (j := order.pop()) is not None:
        seen.append(s.jobs[j].key)
        assert attempt_job(s, j)
    assert seen == ["a1", "b1", "a2", "b2"]


def test_hierarchy_descends_through_parents():
    text = NODES + """queues:
  - {name: d1, creation_time: 1, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d2, creation_time: 2, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d1-team, parent: d1, creation_time: 3, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d2-team, parent: d2, creation_time: 4, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: x, queue: d1-team, tasks: [{name: x-0, gpu: 1}]}
  - {name: y, queue: d2-team, tasks: [{name: y-0, gpu: 1}]}
"""
    # At the top level d2 is starved (deserved 4) and d1 is not (deserved 0): d2's subtree goes first
    # although within it d2-team has deserved 0.
    s = session_from_yaml(text)
    assert _first_queue(s) == "d2-team"


PUSH_ORDER = NODES + """queues:
  - {name: d1, priority: 150, creation_time: 1, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d2, priority: 100, creation_time: 2, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d1-a, parent: d1, priority: 200, creation_time: 3, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d1-b, parent: d1, priority: 100, creation_time: 4, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d2-t, parent: d2, creation_time: 5, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: big, queue: d1-b, creation_time: 1, tasks: [{name: big-0, gpu: 6}]}
  - {name: filler, queue: d1-b, creation_time: 2, tasks: [{name: filler-0, gpu: 10}]}
  - {name: small, queue: d1-a, creation_time: 3, tasks: [{name: small-0, gpu: 1}]}
  - {name: other, queue: d2-t, creation_time: 4, tasks: [{name: other-0, gpu: 1}]}
"""


def test_first_job_depends_on_push_order_as_in_kai():
    """KAI pushes the pending jobs in Go map order and re-places a queue only when it is met marked at the top
    of its heap, comparing a department by the top of its child heap as it stands. So the first job can depend
    on the push order (seeds 4155/4161, docs/engine.md): kaidash keeps that rule and pushes in snapshot order.

    Pushed big, filler, small, other: d1-b (big: 6 ≤ 8 starved) tops d1, d1 with big is not starved (6 > 4) and
    d2 (starved) goes first. Pushed filler first: d1-b (filler: 10 > 8) loses to d1-a (priority 200) and stays
    below it when big arrives, so d1 is compared by small (starved, priority 150) and goes first; inside d1 the
    marked top is then fixed and big is tried first."""
    s = session_from_yaml(PUSH_ORDER)
    idx = {j.key: j.index for j in s.jobs}

    def first(names):
        order = JobsOrderByQueues(s, [idx[n] for n in names])
        return s.jobs[order.pop()].key

    assert first(["big", "filler", "small", "other"]) == "other"
    assert first(["filler", "small", "big", "other"]) == "big"
