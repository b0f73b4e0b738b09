"""What-if: overrides on a snapshot copy, fragmentation numbers, and the steady-state diff.

Expected numbers are worked out by hand in the comments from tiny snapshots.
"""

import pytest

from scheduler.errors import SnapshotError
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task
from scheduler.snapshot_io import load_snapshot, snapshot_to_dict
from scheduler.whatif import WhatIf, allocated_gpus, fragmentation, gpu_occupancy, pending_jobs


def node(name, gpus=4, pool="a", **kw):
    return Node(name=name, gpus=gpus, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=2**38,
                labels={"kai.scheduler/node-pool": pool}, **kw)


def job(name, queue, *tasks, **kw):
    return Job(name=name, queue=queue, tasks=list(tasks), **kw)


def base_snapshot():
    return Snapshot(
        nodes=[node("a1"), node("a2"), node("a3"), node("b1", pool="b")],
        queues=[Queue("q1", gpu=QueueResource(2, -1, 1)), Queue("q2")],
        jobs=[job("run", "q1", Task("run-0", gpu=1, status="running", node="a1", gpu_indices=[0])),
              *[job(f"p{i}", "q2", Task(f"p{i}-0", gpu=1), creation_time=i) for i in range(4)]])


# ---------------------------------------------------------------------------------------------- overrides

def test_queue_overrides_apply_to_a_copy():
    snap = base_snapshot()
    before = snapshot_to_dict(snap)
    w = WhatIf(queues={"q1": {"priority": 7, "gpu": {"quota": 5, "limit": 6, "over_quota_weight": 3}},
                       "q2": {"cpu": {"limit": -1}}}, k_value=0.5, placement_gpu="spread",
               gpu_device_order="spread")
    out = w.apply(snap)
    q1 = out.queue_map()["q1"]
    assert q1.priority == 7
    assert (q1.gpu.quota, q1.gpu.limit, q1.gpu.over_quota_weight) == (5, 6, 3)
    assert out.queue_map()["q2"].cpu.limit == -1
    assert out.config.k_value == 0.5
    assert out.config.placement.gpu == "spread" and out.config.placement.cpu == "binpack"
    assert out.config.gpu_device_order == "spread"
    assert snapshot_to_dict(snap) == before  # input untouched


def test_spread_placement_takes_consolidation_out_of_the_actions_as_kais_operator_does():
    snap = base_snapshot()
    out, notes = WhatIf(placement_gpu="spread").apply_with_notes(snap)
    assert "consolidation" not in out.config.actions and notes["actions_removed"] == ["consolidation"]
    assert out.config.actions == [a for a in snap.config.actions if a != "consolidation"]
    assert "consolidation" in snap.config.actions   # input untouched
    out, notes = WhatIf(placement_gpu="binpack").apply_with_notes(snap)
    assert "consolidation" in out.config.actions and notes["actions_removed"] == []


def test_add_nodes_clones_the_pools_first_node():
    out, notes = WhatIf(nodes={"a": 2}).apply_with_notes(base_snapshot())
    assert notes["nodes_added"] == ["a-whatif-1", "a-whatif-2"]
    added = [n for n in out.nodes if n.name.startswith("a-whatif")]
    assert [n.pool for n in added] == ["a", "a"] and all(n.gpus == 4 for n in added)
    assert len(out.nodes) == 6


def test_remove_nodes_takes_least_loaded_then_last_by_name():
    # a2 and a3 are empty (a3 goes first: last by name), a1 holds the running task.
    out, notes = WhatIf(nodes={"a": -1}).apply_with_notes(base_snapshot())
    assert notes["nodes_removed"] == ["a3"]
    out, notes = WhatIf(nodes={"a": -2}).apply_with_notes(base_snapshot())
    assert notes["nodes_removed"] == ["a2", "a3"] and notes["tasks_displaced"] == []
    out, notes = WhatIf(nodes={"a": -3}).apply_with_notes(base_snapshot())
    assert notes["tasks_displaced"] == ["run-0"]
    task = out.job_map()["run"].tasks[0]
    assert (task.status, task.node, task.gpu_indices) == ("pending", None, [])
    assert [n.name for n in out.nodes] == ["b1"]


@pytest.mark.parametrize("scale, expected", [
    # Job i of the 4 pending jobs appears ceil((i+1)s) - ceil(is) times.
    (1.5, ["p0", "p0-x-1", "p1", "p2", "p2-x-1", "p3"]),   # 2, 1, 2, 1 copies
    (0.5, ["p0", "p2"]),                                   # 1, 0, 1, 0
    (2.0, ["p0", "p0-x-1", "p1", "p1-x-1", "p2", "p2-x-1", "p3", "p3-x-1"]),
    (0.0, []),
])
def test_demand_scaling_is_deterministic(scale, expected):
    out = WhatIf(demand_scale=scale).apply(base_snapshot())
    assert sorted(j.key for j in pending_jobs(out)) == expected
    assert "run" in out.job_map()  # running jobs are never scaled
    names = [t.name for _, t in out.iter_tasks()]
    assert len(names) == len(set(names))  # clones get unique task names


@pytest.mark.parametrize("overrides, path", [
    ({"queues": {"nope": {"priority": 1}}}, "whatif.queues[nope]"),
    ({"queues": {"q1": {"gpu": {"quota": -3}}}}, "whatif.queues[q1].gpu.quota"),
    ({"queues": {"q1": {"gpu": {"weight": 3}}}}, "whatif.queues[q1].gpu.weight"),
    ({"nodes": {"zzz": 1}}, "whatif.nodes[zzz]"),
    ({"nodes": {"b": -2}}, "whatif.nodes[b]"),
    ({"placement_gpu": "random"}, "whatif.placement_gpu"),
    ({"demand_scale": -1}, "whatif.demand_scale"),
    ({"colour": "red"}, "whatif.colour"),
])
def test_bad_overrides_name_the_field(overrides, path):
    with pytest.raises(SnapshotError) as info:
        WhatIf.from_dict(overrides).apply(base_snapshot())
    assert info.value.path == path


def test_describe_in_words():
    lines = WhatIf(queues={"q1": {"gpu": {"limit": -1}}}, nodes={"a": -2}, demand_scale=1.5).describe()
    assert lines == ["queue q1: gpu limit unlimited", "remove 2 nodes from pool a", "pending demand x1.5"]


# ---------------------------------------------------------------------------------------------- metrics

def test_fragmentation_and_allocation():
    # n1: 0.5 GPU on device 0, 2 GPUs on devices 1-2 -> device 3 idle, 0.5 free on a shared device.
    # n2: 2 idle devices. Idle 3, free on shared 0.5 -> shared fraction 0.5 / 3.5 = 1/7.
    # Pending shapes: 2 GPUs twice, 0.5 once -> common "2 GPUs"; n1 (1 idle device) cannot host it, n2 can.
    snap = Snapshot(
        nodes=[node("n1"), node("n2", gpus=2)],
        queues=[Queue("q")],
        jobs=[job("a", "q", Task("a0", gpu=0.5, status="running", node="n1", gpu_indices=[0], gpu_groups=["g1"])),
              job("b", "q", Task("b0", gpu=2, status="running", node="n1", gpu_indices=[1, 2])),
              job("p", "q", Task("p0", gpu=2), Task("p1", gpu=2), Task("p2", gpu=0.5))])
    assert gpu_occupancy(snap) == {"n1": [0.5, 1.0, 1.0, 0.0], "n2": [0.0, 0.0]}
    frag = fragmentation(snap)
    assert frag["idle_gpus"] == 3
    assert frag["free_on_shared_gpus"] == 0.5
    assert frag["shared_free_fraction"] == pytest.approx(1 / 7, abs=1e-6)
    assert frag["common_pending_shape"] == "2 GPUs"
    assert frag["nodes_unable_to_host"] == 1
    assert frag["largest_free_block"] == 2
    assert allocated_gpus(snap) == 2.5


def test_whole_gpu_tasks_without_device_index_take_free_devices():
    snap = Snapshot(nodes=[node("n1")], queues=[Queue("q")],
                    jobs=[job("a", "q", Task("a0", gpu=3, status="running", node="n1"))])
    assert sorted(gpu_occupancy(snap)["n1"]) == [0.0, 1.0, 1.0, 1.0]
    assert fragmentation(snap)["common_pending_shape"] is None


# ---------------------------------------------------------------------------------------------- steady state

from scheduler.decisions import Eviction, ScheduleResult  # noqa: E402
from scheduler.whatif import WhatIfRunner, run_whatif  # noqa: E402


def toy_cycle(snap):
    """A transparent one-cycle model standing in for the engine: pending jobs, oldest first, start whole on the
    first node with enough free devices (one job per cycle, so steady state takes several cycles); a queue whose
    GPU limit is 0 has its running jobs evicted."""
    out = snap.copy()
    occupied = {n.name: set() for n in out.nodes}
    for _, t in out.iter_tasks():
        if t.status == "running" and t.node in occupied:
            occupied[t.node].update(t.gpu_indices)
    evicted = []
    blocked = {q.name for q in out.queues if q.gpu.limit == 0}
    for job in out.jobs:
        if job.queue in blocked:
            for t in job.tasks:
                if t.status == "running":
                    evicted.append(Eviction(task=t.name, job=job.key, action="reclaim"))
                    occupied[t.node].difference_update(t.gpu_indices)
                    t.status, t.node, t.gpu_indices = "pending", None, []
    for job in sorted(out.jobs, key=lambda j: (j.creation_time, j.key)):
        if job.queue in blocked or not all(t.status == "pending" for t in job.tasks):
            continue
        for n in out.nodes:
            free = [i for i in range(n.gpus) if i not in occupied[n.name]]
            need = int(sum(t.gpu for t in job.tasks))
            if need <= len(free):
                for t in job.tasks:
                    k = int(t.gpu)
                    t.status, t.node, t.gpu_indices = "running", n.name, free[:k]
                    occupied[n.name].update(free[:k])
                    free = free[k:]
                break
        else:
            continue
        break  # one job per cycle
    return ScheduleResult(fair_share={}, tasks={}, jobs={}, evicted=evicted, snapshot=out)


def small():
    # One 4-GPU node in pool a running a 1-GPU job of q1; q2 has four 1-GPU jobs pending.
    return Snapshot(nodes=[node("a1")], queues=[Queue("q1", gpu=QueueResource(2, -1, 1)), Queue("q2")],
                    jobs=[job("run", "q1", Task("run-0", gpu=1, status="running", node="a1", gpu_indices=[0])),
                          *[job(f"p{i}", "q2", Task(f"p{i}-0", gpu=1), creation_time=i) for i in range(4)]])


def test_adding_a_node_starts_the_last_pending_job():
    # Base: 3 free GPUs -> p0, p1, p2 start (one per cycle), p3 waits; a 4th cycle changes nothing -> 4 cycles.
    # With a second 4-GPU node: all four start (4 cycles), a 5th changes nothing.
    snap = small()
    diff = run_whatif(snap, WhatIf(nodes={"a": 1}), run_cycle=toy_cycle)
    assert diff.before.started == {"q1": 0, "q2": 3} and diff.before.pending == {"q1": 0, "q2": 1}
    assert diff.after.started == {"q1": 0, "q2": 4} and diff.after.pending == {"q1": 0, "q2": 0}
    assert (diff.before.cycles_run, diff.after.cycles_run) == (4, 5)
    assert diff.before.gpu_utilisation == 1.0            # 4 of 4
    assert diff.after.gpu_utilisation == 5 / 8
    assert diff.job_changes() == [{"job": "p3", "queue": "q2", "before": "pending", "after": "started", "explanation": ""}]
    assert snap.job_map()["p0"].tasks[0].status == "pending"  # input untouched


def test_cycles_cap_and_evictions_are_counted():
    # q1's limit set to 0: the toy evicts its running job in cycle 1 and starts p0; cap at 2 cycles -> p0, p1.
    diff = run_whatif(small(), WhatIf(queues={"q1": {"gpu": {"limit": 0}}}), cycles=2, run_cycle=toy_cycle)
    assert diff.after.cycles_run == 2
    assert diff.after.evicted == {"q1": 1, "q2": 0}
    assert diff.after.started == {"q1": 0, "q2": 2}
    assert diff.summary()["tasks_evicted"] == (0, 1)


def test_frames_save_and_cached_base(tmp_path):
    runner = WhatIfRunner(small(), run_cycle=toy_cycle)
    diff = runner.run(WhatIf(queues={"q2": {"gpu": {"quota": 3}}}))
    frames = diff.to_frames()
    assert set(frames) == {"queues", "summary", "jobs"}
    q = frames["queues"]
    # Fair share from the (modified) input: 4 GPUs, requests q1 1, q2 4. Before: q1 quota 2 -> 1, q2 takes 3.
    # After: q2 quota 3 -> 3, q1 1; 0 left -> same 1 / 3.
    assert q.loc["q2", "fair_share_gpu_before"] == 3 and q.loc["q2", "fair_share_gpu_after"] == 3
    assert frames["summary"].loc["gpu_utilisation", "before"] == 1.0
    path = tmp_path / "modified.yaml"
    diff.save(path)
    assert load_snapshot(path).queue_map()["q2"].gpu.quota == 3
    assert runner.run(WhatIf()).after is runner.base  # no overrides: the cached base is reused


# ---------------------------------------------------------------------------------------------- real engine

def two_big_jobs():
    # One 4-GPU node in pool a; queue q has two pending 4-GPU jobs (p0 older). Only one fits.
    return Snapshot(nodes=[node("a1")], queues=[Queue("q")],
                    jobs=[job("p0", "q", Task("p0-0", gpu=4), creation_time=0),
                          job("p1", "q", Task("p1-0", gpu=4), creation_time=1)])


def test_engine_adding_a_node_starts_the_second_job():
    # Base: cycle 1 binds p0; cycle 2 (p0 running) changes nothing -> 2 cycles, 1 started, 1 pending, 4/4 GPUs.
    # One more node: cycle 1 binds both; cycle 2 changes nothing -> 2 started, 0 pending, 8/8 GPUs.
    snap = two_big_jobs()
    before = snapshot_to_dict(snap)
    diff = run_whatif(snap, WhatIf(nodes={"a": 1}))
    assert snapshot_to_dict(snap) == before  # neither side's cycles touched the input
    assert [n.name for n in diff.modified.nodes] == ["a1", "a-whatif-1"]
    assert (diff.before.cycles_run, diff.after.cycles_run) == (2, 2)
    assert (diff.before.started, diff.before.pending) == ({"q": 1}, {"q": 1})
    assert (diff.after.started, diff.after.pending) == ({"q": 2}, {"q": 0})
    assert diff.before.gpu_utilisation == 1.0 and diff.after.gpu_utilisation == 1.0
    assert diff.summary()["gpu_allocated"] == (4, 8)
    assert diff.job_changes() == [{"job": "p1", "queue": "q", "before": "pending", "after": "started", "explanation": ""}]
    assert diff.after.fragmentation["common_pending_shape"] is None
    assert diff.before.fragmentation["common_pending_shape"] == "4 GPUs"


def test_engine_demand_half_and_limit():
    # Demand x0.5 keeps p0 and drops p1: nothing left pending.
    diff = run_whatif(two_big_jobs(), WhatIf(demand_scale=0.5))
    assert diff.after.pending == {"q": 0} and diff.after.started == {"q": 1}
    assert diff.job_changes() == [{"job": "p1", "queue": "q", "before": "pending", "after": "absent", "explanation": ""}]
    # A GPU limit of 2 blocks both 4-GPU jobs (OverLimit): nothing starts, utilisation 0.
    diff = run_whatif(two_big_jobs(), WhatIf(queues={"q": {"gpu": {"limit": 2}}}))
    assert diff.after.started == {"q": 0} and diff.after.pending == {"q": 2}
    assert diff.after.gpu_utilisation == 0.0
    # Fair share follows the limit: requestable min(8, 2) = 2.
    assert diff.before.fair_share["q"]["gpu"] == 4 and diff.after.fair_share["q"]["gpu"] == 2
