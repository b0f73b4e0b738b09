"""Preempt (kai-semantics §c.5): readable scenarios in tests/scenarios/preempt/ plus victim-queue order."""

import pytest

from scheduler.actions.victims import JobFacts, VictimQueue
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
