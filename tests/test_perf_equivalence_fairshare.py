"""Vectorised ``queue_demand`` (and the engine's shared task table) against the task-by-task loop it replaced.

``reference_queue_demand`` is the task-by-task loop, with KAI's accounting (kai-semantics.md §b.1.3;
``plugins/proportion/proportion.go updateQueuesCurrentResourceUsage``): running / binding tasks are allocated, a
pending task — or one pipelined last cycle, a Pending pod to KAI — is requested, a pending gpu-memory request
counts count × memory / the smallest node GPU memory, not rounded. The vectorised one must give the same floats
(``==``, not approx: the sums are taken in the same order), the same queues in the same order.
"""

import random

import pytest

from scheduler.actions import get_action
from scheduler.engine import build_result, run_session
from scheduler.fairshare import TaskTable, compute_fair_share, min_node_gpu_memory_mib, queue_demand
from scheduler.model import (ALLOCATED_STATUSES, RESOURCES, TASK_STATUSES, Job, Node, Queue, QueueResource,
                             Snapshot, Task)
from scheduler.session import Session


def reference_queue_demand(snapshot):
    node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    min_mem = min_node_gpu_memory_mib(snapshot)
    out = {}
    for job in snapshot.jobs:
        ag = ac = am = pg = pc = pm = 0.0
        for t in job.tasks:
            if t.status in ALLOCATED_STATUSES:
                if t.gpu_memory_mib is not None:
                    ag += t.gpus_on(node_mem.get(t.node, min_mem or 0.0))
                elif t.gpu > 0:
                    ag += t.gpu if t.gpu >= 1 else t.gpu * t.gpu_devices
                ac += t.cpu_millis
                am += t.memory_bytes
            elif t.status in ("pending", "pipelined"):
                if t.gpu_memory_mib is not None:
                    pg += t.gpu_devices * (t.gpu_memory_mib / min_mem) if min_mem is not None else 0.0
                elif t.gpu > 0:
                    pg += t.gpu if t.gpu >= 1 else t.gpu * t.gpu_devices
                pc += t.cpu_millis
                pm += t.memory_bytes
        acc = out.setdefault(job.queue, {r: [0.0, 0.0, 0.0] for r in RESOURCES})
        for r, a, p in (("gpu", ag, pg), ("cpu", ac, pc), ("memory", am, pm)):
            acc[r][0] += a
            acc[r][1] += a if not job.is_preemptible else 0.0
            acc[r][2] += a + p
    return out


def random_snapshot(seed: int, jobs: int = 300) -> Snapshot:
    """Every branch of the accounting: all statuses, whole / fractional / multi-device / gpu-memory requests,
    zero and negative-free GPU values, unknown and missing nodes, a node with no GPU memory, unknown queues,
    empty jobs, explicit and priority-derived preemptibility, values that do not add exactly in binary."""
    rng = random.Random(seed)
    nodes = [Node(name=f"n{i}", gpus=8, gpu_memory_mib=rng.choice([81920, 40960, 23000, 0]),
                  cpu_millis=64000, memory_bytes=2**38) for i in range(12)]
    queues = [Queue(name="root"), Queue(name="a", parent="root"), Queue(name="b", parent="root"), Queue(name="c")]
    node_choices = [n.name for n in nodes] + [None, "gone"]
    out = []
    for j in range(jobs):
        tasks = []
        for k in range(rng.choice([0, 1, 1, 1, 2, 3, 5])):
            kind = rng.random()
            t = Task(name=f"j{j}-t{k}", status=rng.choice(TASK_STATUSES), node=rng.choice(node_choices),
                     cpu_millis=rng.choice([0, 100, 333.3, 4000]), memory_bytes=rng.choice([0, 2**30, 1e9 / 3]))
            if kind < 0.35:
                t.gpu = rng.choice([1, 2, 4, 8])
            elif kind < 0.6:
                t.gpu, t.gpu_devices = rng.choice([0.1, 0.2, 0.25, 0.3, 0.5, 0.7]), rng.choice([1, 1, 2, 3])
            elif kind < 0.8:
                t.gpu_memory_mib, t.gpu_devices = rng.choice([1000, 8000, 10000, 20480, 33333]), rng.choice([1, 2])
            tasks.append(t)
        out.append(Job(name=f"j{j}", queue=rng.choice(["a", "b", "c", "missing"]), tasks=tasks,
                       priority=rng.choice([50, 100, 125]), preemptible=rng.choice([None, None, True, False])))
    return Snapshot(nodes=nodes, queues=queues, jobs=out)


@pytest.mark.parametrize("seed", range(8))
def test_same_sums_as_the_task_loop_on_random_snapshots(seed):
    snap = random_snapshot(seed)
    expected = reference_queue_demand(snap)
    got = queue_demand(snap)
    assert list(got) == list(expected)
    assert got == expected
    assert queue_demand(snap, TaskTable.from_snapshot(snap)) == expected


def test_without_a_node_gpu_memory_gpu_memory_requests_are_not_counted_pending():
    """KAI's smallest node GPU memory counts nodes above its 100 MiB default only (issue 13 item 2)."""
    snap = random_snapshot(3, jobs=60)
    for n in snap.nodes:
        n.gpu_memory_mib = 100.0
    assert min_node_gpu_memory_mib(snap) is None
    assert queue_demand(snap) == reference_queue_demand(snap)


def test_empty_snapshot_and_jobs_without_tasks():
    assert queue_demand(Snapshot()) == {}
    snap = Snapshot(queues=[Queue(name="q")], jobs=[Job(name="j", queue="q")])
    assert queue_demand(snap) == {"q": {r: [0.0, 0.0, 0.0] for r in RESOURCES}}


def test_hand_derived_accounting():
    # Nodes: big 80000 MiB, small 40000 MiB -> smallest GPU memory 40000.
    # j1 (priority 100: non-preemptible): running 1 GPU (1) + binding 0.5 x 2 devices (1.0) = 2 allocated;
    #     pending 2 GPUs requested.
    # j2 (preemptible): running 20000 MiB on big = ceil(25)/100 = 0.25 allocated; pending 10000 MiB with the
    #     smallest memory = 0.25 requested; the task pipelined last cycle is a Pending pod to KAI: 1 requested;
    #     the releasing task counts for nothing.
    # Queue q: allocated 2 + 0.25 = 2.25, non-preemptible 2, requested 2.25 + 2 + 0.25 + 1 = 5.5.
    # CPU: allocated 1000 + 500 + 250 = 1750 (np 1500), requested 1750 + 2000 + 100 + 7 = 3857.
    snap = Snapshot(
        nodes=[Node(name="big", gpus=8, gpu_memory_mib=80000), Node(name="small", gpus=8, gpu_memory_mib=40000)],
        queues=[Queue(name="q")],
        jobs=[Job(name="j1", queue="q", priority=100, tasks=[
                  Task(name="a", gpu=1, cpu_millis=1000, status="running", node="big"),
                  Task(name="b", gpu=0.5, gpu_devices=2, cpu_millis=500, status="binding", node="big"),
                  Task(name="c", gpu=2, cpu_millis=2000, status="pending")]),
              Job(name="j2", queue="q", tasks=[
                  Task(name="d", gpu_memory_mib=20000, cpu_millis=250, status="running", node="big"),
                  Task(name="e", gpu_memory_mib=10000, cpu_millis=100, status="pending"),
                  Task(name="f", gpu=1, cpu_millis=7, status="pipelined", node="small"),
                  Task(name="g", gpu=1, cpu_millis=7, status="releasing", node="small")])])
    q = queue_demand(snap)["q"]
    assert q["gpu"] == [2.25, 2.0, 5.5]
    assert q["cpu"] == [1750.0, 1500.0, 3857.0]


@pytest.mark.parametrize("seed", range(3))
def test_fair_share_with_the_shared_table_equals_without(seed):
    snap = random_snapshot(seed)
    plain = compute_fair_share(snap)
    shared = compute_fair_share(snap, tasks=TaskTable.from_snapshot(snap))
    assert {q: {r: s.as_dict() for r, s in per.items()} for q, per in shared.items()} == \
        {q: {r: s.as_dict() for r, s in per.items()} for q, per in plain.items()}


def _valid_for_engine(snap):
    """Only what the engine accepts: nodes with GPU memory, known queues, every task pending (no placements)."""
    snap.nodes = [n for n in snap.nodes if n.gpu_memory_mib > 0]
    snap.queues = [Queue(name="root"), Queue(name="a", parent="root", gpu=QueueResource(quota=4)),
                   Queue(name="b", parent="root"), Queue(name="c")]
    for job in snap.jobs:
        job.queue = job.queue if job.queue in ("a", "b", "c") else "c"
        for t in job.tasks:
            t.status, t.node = "pending", None
    return snap


def test_session_columns_from_the_table_are_the_task_objects_values():
    """The session's task and job columns, now adopted from the table, hold what the task objects say."""
    snap = _valid_for_engine(random_snapshot(5, jobs=120))
    snap.jobs[0].tasks[0].status, snap.jobs[0].tasks[0].node = "pipelined", snap.nodes[0].name
    session = Session(snap, compute_fair_share(snap), tasks=TaskTable.from_snapshot(snap))
    tasks = [t for job in snap.jobs for t in job.tasks]
    assert session.task_objs == tasks
    assert session.task_job == [j for j, job in enumerate(snap.jobs) for _ in job.tasks]
    assert session.job_start[-1] == len(tasks) and len(session.job_start) == len(snap.jobs) + 1
    assert session.job_queue == [session.queues.index[job.queue] for job in snap.jobs]
    assert session.job_non_preemptible == [not job.is_preemptible for job in snap.jobs]
    assert session.gpu.tolist() == [t.gpu for t in tasks]
    assert session.dev.tolist() == [t.gpu_devices for t in tasks]
    assert session.cpu.tolist() == [t.cpu_millis for t in tasks]
    assert session.mem.tolist() == [t.memory_bytes for t in tasks]
    assert [None if g != g else g for g in session.gmem.tolist()] == [t.gpu_memory_mib for t in tasks]
    # the session's own status list changes (a pipelined pod becomes pending with a nominated node) ...
    assert session.status[0] == "pending" and session.nominated == {0: session.nodes.index[snap.nodes[0].name]}
    # ... but never the snapshot's tasks
    assert snap.jobs[0].tasks[0].status == "pipelined"


def test_engine_decisions_unchanged_by_the_shared_table():
    snap = _valid_for_engine(random_snapshot(6, jobs=150))
    result = run_session(snap, ["allocate"])
    shares = compute_fair_share(snap)  # the engine's steps without the shared table
    session = Session(snap, shares)
    get_action("allocate")(session)
    before = build_result(session, shares)
    assert result.fair_share == before.fair_share
    assert {k: vars(d) for k, d in result.tasks.items()} == {k: vars(d) for k, d in before.tasks.items()}
    assert {k: vars(d) for k, d in result.jobs.items()} == {k: vars(d) for k, d in before.jobs.items()}
    assert any(d.status == "binding" for d in result.tasks.values())  # the scenario really schedules
