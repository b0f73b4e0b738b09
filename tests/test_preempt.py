"""Preempt (kai-semantics §c.5): readable scenarios in tests/scenarios/preempt/ plus victim-queue order."""

import pytest

from scheduler.actions.victims import JobFacts, VictimQueue
from scheduler.session import Statement
from tests._engine_helpers import session_from_yaml
from tests._scenario_runner import run_scenario, scenario_paths

SCENARIOS = scenario_paths("preempt")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path):
    run_scenario(path)


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 5


ORDER = """
nodes:
  - {name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: t, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: old-low, queue: t, priority: 10, creation_time: 1, tasks: [{name: old-low-0, gpu: 1, status: running, node: n1}]}
  - {name: young-low, queue: t, priority: 10, creation_time: 5, tasks: [{name: young-low-0, gpu: 1, status: running, node: n1}]}
  - {name: young-high, queue: t, priority: 30, creation_time: 9, tasks: [{name: young-high-0, gpu: 1, status: running, node: n1}]}
  - name: elastic
    queue: t
    priority: 30
    creation_time: 2
    min_available: 1
    tasks:
      - {name: elastic-0, gpu: 1, status: running, node: n1, creation_time: 1}
      - {name: elastic-1, gpu: 1, status: running, node: n1, creation_time: 2}
"""


def test_victim_order_lowest_priority_then_youngest_then_elastic_surplus_one_by_one():
    s = session_from_yaml(ORDER)
    facts = JobFacts(s)
    q = s.queues.index["t"]
    vq = VictimQueue(s, facts, {q: facts.leaf_order(q)})
    popped = []
    while (b := vq.pop()) is not None:
        popped.append([s.task_names[i] for i in b.tasks])
    # priority 10 first (youngest of them first); at priority 30 the elastic job is above its minimum, so it
    # comes before the younger non-elastic job, gives one pod (its youngest) and is pushed back at min.
    assert popped == [["young-low-0"], ["old-low-0"], ["elastic-1"], ["young-high-0"], ["elastic-0"]]


PIPELINED_VICTIM = """
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
  - {name: n2, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 3}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a1, queue: a, creation_time: 1, tasks: [{name: a1-0, gpu: 2, cpu_millis: 1000, status: running, node: n1}]}
  - {name: x, queue: a, creation_time: 2, tasks: [{name: x-0, gpu: 1, cpu_millis: 1000, status: releasing, node: n1}]}
  - {name: ap, queue: a, creation_time: 3, tasks: [{name: ap-0, gpu: 1, cpu_millis: 1000}]}
  - {name: b1, queue: b, creation_time: 4, tasks: [{name: b1-0, gpu: 1, cpu_millis: 1000, status: running, node: n1}]}
  - {name: b2, queue: b, creation_time: 5, tasks: [{name: b2-0, gpu: 1, cpu_millis: 1000, status: running, node: n2}]}
  - {name: b3, queue: b, creation_time: 6, tasks: [{name: b3-0, gpu: 1, cpu_millis: 1000, status: running, node: n2}]}
  - {name: b4, queue: b, creation_time: 7, tasks: [{name: b4-0, gpu: 1, cpu_millis: 1000, status: running, node: n2}]}
  - {name: b5, queue: b, creation_time: 8, tasks: [{name: b5-0, gpu: 1, cpu_millis: 1000, status: running, node: n2}]}
"""


def test_a_pipelined_victim_adds_nothing_to_what_its_queue_gives_up():
    """KAI compares victim queues by allocated minus the victims' ``AllocatedVector`` (plugins/proportion/
    queue_order/queue_order.go: calculateDominantResourceShareWithJob), and a job's AllocatedVector sums only
    tasks in an allocated status — Allocated, Bound, Binding, Running (api/podgroup_info/job_info.go,
    pod_status.AllocatedStatus) — so a task pipelined earlier in the session counts in its queue's allocated but
    not in what taking it gives up. Here a holds 3 GPUs (a1 running 2, ap pipelined 1) of its fair share 3 and b
    5 of 5: a with ap taken stays at 3 / 3 = 1.0 in KAI (0 taken) against b's (5 − 1) / 5 = 0.8 with b5 taken, so
    a's ap goes first; counting ap's GPU would give a (3 − 1) / 3 = 0.67 and b5 first (seen on the what-if
    over-quota-weight state, bench.kai_diff --whatif-states, where KAI's 10 runs agree with this order)."""
    s = session_from_yaml(PIPELINED_VICTIM)
    ap, n1 = s.task_index["ap-0"], s.nodes.names.index("n1")
    Statement(s).pipeline(ap, n1, indices=[3])          # onto x's releasing GPU, as allocate would
    assert s.status[ap] == "pipelined"
    qa, qb = s.queues.index["a"], s.queues.index["b"]
    assert list(s.queues.allocated[qa][:1]) == [3] and list(s.queues.fair_share[qa][:1]) == [3]
    assert list(s.queues.allocated[qb][:1]) == [5] and list(s.queues.fair_share[qb][:1]) == [5]
    facts = JobFacts(s)
    vq = VictimQueue(s, facts, {qa: facts.leaf_order(qa), qb: facts.leaf_order(qb)})
    popped = []
    while (b := vq.pop()) is not None:
        popped.append(s.task_names[b.tasks[0]])
    assert popped[:2] == ["ap-0", "b5-0"]
