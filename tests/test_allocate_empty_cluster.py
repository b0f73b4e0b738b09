"""A cluster with no nodes (e.g. nodes not readable yet) places nothing and says why, without raising."""

from scheduler.engine import run_session
from scheduler.snapshot_io import loads_snapshot

EMPTY = """
version: 1
nodes: []
queues: [{name: q}]
jobs:
  - {name: gpu-job, queue: q, tasks: [{name: g, gpu: 1}]}
  - {name: cpu-job, queue: q, tasks: [{name: c, cpu_millis: 500}]}
"""


def test_pending_jobs_on_an_empty_cluster_stay_pending_with_a_reason():
    result = run_session(loads_snapshot(EMPTY))
    for job, task in (("gpu-job", "g"), ("cpu-job", "c")):
        assert result.tasks[task].status == "pending" and result.tasks[task].node is None
        decision = result.jobs[job]
        assert decision.status == "pending"
        assert decision.reason == "PodSchedulingErrors"
        assert "0/0 nodes fit" in decision.message
    assert result.evicted == []
