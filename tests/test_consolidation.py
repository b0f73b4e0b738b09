"""Consolidation (kai-semantics §c.3): readable scenarios plus the rule that nothing is ever lost."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import run_session
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task
from tests._scenario_runner import run_scenario, scenario_paths
from tests.test_packing import crowded_clusters

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


# ---------------------------------------------------------------------------------------------- early stop

def test_smallest_chunk_gpus_is_the_smallest_request_a_chunk_can_hold():
    from scheduler.actions.consolidation import smallest_chunk_gpus
    from scheduler.fairshare import compute_fair_share
    from scheduler.session import Session
    from scheduler.snapshot_io import loads_snapshot

    snap = loads_snapshot("""
nodes: [{name: n, gpus: 2, gpu_memory_mib: 40960, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q}]
jobs:
- {name: two, queue: q, tasks: [{name: two-0, gpu: 2}]}
- {name: mem, queue: q, tasks: [{name: mem-0, gpu_memory_mib: 20480}, {name: mem-1, gpu: 1, status: running, node: n}]}
- {name: cpu, queue: q, tasks: [{name: cpu-0, cpu_millis: 100}]}
""")
    s = Session(snap, compute_fair_share(snap))
    jobs = s.job_index
    assert smallest_chunk_gpus(s, [jobs["two"]]) == 2
    # 20480 of 40960 MiB = 0.5 GPU; the running task of the job is no chunk member
    assert smallest_chunk_gpus(s, [jobs["two"], jobs["mem"]]) == 0.5
    assert smallest_chunk_gpus(s, [jobs["two"], jobs["cpu"]]) == 0
    assert smallest_chunk_gpus(s, []) == float("inf")


@settings(max_examples=80, deadline=None)
@given(st.one_of(fragmented_clusters(), crowded_clusters()))
def test_stopping_when_no_job_can_start_changes_no_decision(snap):
    import scheduler.actions.consolidation as mod

    def contract(result):
        out = result.to_contract()
        out.pop("timings_ms")
        return out

    fast = contract(run_session(snap, ["allocate", "consolidation"]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "_none_can_start", lambda *a: False)
        assert contract(run_session(snap, ["allocate", "consolidation"])) == fast
