"""Consolidation (kai-semantics §c.3): readable scenarios plus the rule that nothing is ever lost."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import run_session
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task
from tests._scenario_runner import run_scenario, scenario_paths

SCENARIOS = scenario_paths("consolidation")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path):
    run_scenario(path)


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 4


@st.composite
def fragmented_clusters(draw):
    """Small clusters where every node runs some 1- or 2-GPU jobs and a pending job may not fit anywhere."""
    nodes, jobs = [], []
    k = 0
    for n in range(draw(st.integers(2, 4))):
        gpus = draw(st.integers(1, 4))
        nodes.append(Node(name=f"n{n}", gpus=gpus, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=2**40))
        used = 0
        while used < gpus and draw(st.booleans()):
            size = draw(st.integers(1, min(2, gpus - used)))
            jobs.append(Job(name=f"r{k}", queue="q", creation_time=k,
                            tasks=[Task(name=f"r{k}-0", gpu=size, status="running", node=f"n{n}")]))
            used += size
            k += 1
    need = draw(st.integers(1, 4))
    jobs.append(Job(name="new", queue="q", creation_time=100, tasks=[Task(name="new-0", gpu=need)]))
    queue = Queue(name="q", gpu=QueueResource(quota=-1), cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1))
    return Snapshot(nodes=nodes, queues=[queue], jobs=jobs)


@settings(max_examples=60)
@given(fragmented_clusters())
def test_consolidation_never_loses_a_job(snap):
    result = run_session(snap, ["allocate", "consolidation"])
    out = result.to_contract()["tasks"]
    for e in result.evicted:
        assert e.action == "consolidation"
        assert out[e.task]["status"] == "pipelined" and e.moved_to == out[e.task]["node"], e
    running_before = {t.name for j in snap.jobs for t in j.tasks if t.status == "running"}
    for name in running_before:  # every running pod still runs or was moved (pipelined), none releasing
        assert out[name]["status"] in ("running", "pipelined"), (name, out[name])
    if result.evicted:  # a move happens only for the pending job, which is then placed
        assert out["new-0"]["status"] == "pipelined"
