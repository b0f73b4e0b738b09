"""The simulator driving the real engine: fair-share convergence, time-based fair share, determinism,
fast-forward equivalence. Expected allocations are derived by hand from kai-semantics.md §b (division) and §b.6
(queue order) in each test's comments."""

import pandas as pd
import pytest

from scheduler.model import Job, Node, Queue, QueueResource, SchedulerConfig, Snapshot, Task
from scheduler.simulate import Simulator, UsageConfig


def one_gpu_job(name, queue, duration=None, **kw):
    return Job(name, queue=queue, duration_s=duration, tasks=[Task(f"{name}-0", gpu=1, cpu_millis=100)], **kw)


def queues(quota_a, quota_b):
    def q(name, quota, created):
        return Queue(name, creation_time=created, gpu=QueueResource(quota, -1, 1),
                     cpu=QueueResource(-1, -1, 1), memory=QueueResource(-1, -1, 1))
    return [q("a", quota_a, 1), q("b", quota_b, 2)]


def node(gpus):
    return Node("n1", gpus=gpus, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=256 * 2**30)


def at(frames, time, queue, column):
    q = frames["queues"]
    return q[(q["time"] == time) & (q["queue"] == queue)][column].item()


def test_allocation_converges_to_fair_share_as_the_borrower_finishes_jobs():
    """8 GPUs, quotas a=4 b=4. a holds all 8 (jobs finishing at 100, 200, ..., 800 s) and has 8 more pending;
    b has 4 pending. Fair share: a=min(4, 16)=4, b=min(4, 4)=4, nothing left over. With allocate only (no
    reclaim) every freed GPU goes first to b, which is under its deserved quota (queue order rule 2), until b
    reaches 4; after that a's pending jobs take what a frees: a=4, b=4 from t=400 on."""
    running = [one_gpu_job(f"a-run-{i}", "a", duration=100 * (i + 1), last_start_time=0) for i in range(8)]
    for i, j in enumerate(running):
        j.tasks[0].status, j.tasks[0].node = "running", "n1"
    pending_a = [one_gpu_job(f"a-wait-{i}", "a", duration=5000) for i in range(8)]
    pending_b = [one_gpu_job(f"b-wait-{i}", "b", duration=5000) for i in range(4)]
    snap = Snapshot(nodes=[node(8)], queues=queues(4, 4), jobs=running + pending_a + pending_b,
                    config=SchedulerConfig(actions=["allocate"], schedule_period_s=10), time=0)
    sim = Simulator(snap, usage=None).run(900)
    f = sim.frames()
    assert at(f, 0, "a", "fair_share_gpu") == 4 and at(f, 0, "b", "fair_share_gpu") == 4
    expected_b = {0: 0, 100: 1, 200: 2, 300: 3, 400: 4, 500: 4, 800: 4}
    for t, b in expected_b.items():
        assert at(f, t, "b", "allocated_gpu") == b, t
        assert at(f, t, "a", "allocated_gpu") == 8 - b, t
    assert len(f["evictions"]) == 0


def test_reclaim_takes_the_borrowed_gpus_back_at_once():
    """Same cluster with KAI's full action list: b (allocated 0 < fair share 4) reclaims from a (8 > 4) in the
    first cycle. Four of a's tasks are evicted by reclaim, b runs 4 jobs, and the state then stays put."""
    running = [one_gpu_job(f"a-run-{i}", "a", last_start_time=0) for i in range(8)]
    for j in running:
        j.tasks[0].status, j.tasks[0].node = "running", "n1"
    pending_b = [one_gpu_job(f"b-wait-{i}", "b") for i in range(4)]
    snap = Snapshot(nodes=[node(8)], queues=queues(4, 4), jobs=running + pending_b,
                    config=SchedulerConfig(schedule_period_s=10), time=0)
    sim = Simulator(snap, usage=None).run(300)
    f = sim.frames()
    ev = f["evictions"]
    assert len(ev) == 4 and set(ev["queue"]) == {"a"} and set(ev["action"]) == {"reclaim"}
    assert at(f, f["queues"]["time"].max(), "a", "allocated_gpu") == 4
    assert at(f, f["queues"]["time"].max(), "b", "allocated_gpu") == 4
    assert ev["time"].max() <= 20          # nothing evicted after the reclaim settled (no ping-pong)


def usage_scenario():
    """10 GPUs, quotas 0, weights 1. From t=6000 a runs 10 one-GPU jobs for 600 s; at 6590 both queues get
    20 pending jobs each. Allocate only, so the usage effect on fair share alone decides the split."""
    first = [one_gpu_job(f"a-first-{i}", "a", duration=600, creation_time=6000) for i in range(10)]
    later = [(590, one_gpu_job(f"{q}-later-{i}", q, duration=10_000)) for i in range(20) for q in "ab"]
    snap = Snapshot(nodes=[node(10)], queues=queues(0, 0), jobs=first,
                    config=SchedulerConfig(actions=["allocate"], schedule_period_s=10, k_value=1.0), time=6000)
    return snap, later


def test_time_based_fair_share_gives_the_heavy_past_user_less():
    """At 6600 a's first jobs end and usage is re-read (fetches at 6000, 6060, ...). Samples 6060..6600 (10 of
    them) all saw a holding 10 of 10 GPUs: usage a=1.0, b=0. Over-quota split (§b.3): nW=0.5 each,
    sw_a=max(0, 0.5+1·(0.5−1.0))=0, sw_b=0.5+1·(0.5−0)=1 -> b's share 10 (floor 10), a's 0: fair share a=0,
    b=10, and allocate fills the 10 free GPUs with b's jobs (b first in queue order, 20 pending)."""
    snap, later = usage_scenario()
    f = Simulator(snap, later, usage=UsageConfig()).run(700).frames()
    assert at(f, 6600, "a", "usage_gpu") == pytest.approx(1.0)
    assert at(f, 6600, "b", "usage_gpu") == 0
    assert (at(f, 6600, "a", "fair_share_gpu"), at(f, 6600, "b", "fair_share_gpu")) == (0, 10)
    assert (at(f, 6600, "a", "allocated_gpu"), at(f, 6600, "b", "allocated_gpu")) == (0, 10)


def test_without_usage_the_same_demand_splits_evenly():
    """Same scenario, usage off: sw = 0.5+1·(0.5−0) for both -> shares 5 and 5; allocate hands the 10 GPUs
    out one job at a time to the queue with the smaller dominant share, ending at a=5, b=5."""
    snap, later = usage_scenario()
    f = Simulator(snap, later, usage=None).run(700).frames()
    assert (at(f, 6600, "a", "fair_share_gpu"), at(f, 6600, "b", "fair_share_gpu")) == (5, 5)
    assert (at(f, 6600, "a", "allocated_gpu"), at(f, 6600, "b", "allocated_gpu")) == (5, 5)


def poisson_workload(seed):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.simulate_speed import workload
    return workload(nodes=8, hours=3, seed=seed)


def _without_timings(frames):
    out = {k: v.copy() for k, v in frames.items()}
    out["cluster"] = out["cluster"].drop(columns=["session_ms"])
    return out


def test_same_seed_same_history_and_fast_forward_changes_nothing():
    runs = []
    for fast_forward in (True, True, False):
        snap, arrivals = poisson_workload(seed=3)
        sim = Simulator(snap, arrivals, period_s=10, fast_forward=fast_forward).run(3 * 3600)
        runs.append((sim, _without_timings(sim.frames())))
    (sim1, a), (_, b), (sim3, c) = runs
    assert sim1.arrived_total > 20 and sim1.completed_total > 5        # the workload did something
    for name in ("queues", "cluster", "evictions", "jobs"):
        pd.testing.assert_frame_equal(a[name], b[name])
    pd.testing.assert_frame_equal(a["jobs"], c["jobs"])
    pd.testing.assert_frame_equal(a["evictions"], c["evictions"])
    assert sim1.cycles_run < sim3.cycles_run
    # every row the fast-forward run recorded matches the every-cycle run at the same time
    merged = c["queues"].merge(a["queues"], on=["time", "queue"], suffixes=("_all", "_ff"))
    assert len(merged) == len(a["queues"])
    assert (merged["allocated_gpu_all"] == merged["allocated_gpu_ff"]).all()
    assert (merged["fair_share_gpu_all"] == merged["fair_share_gpu_ff"]).all()
