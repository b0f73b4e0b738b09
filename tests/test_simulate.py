"""The simulator's own bookkeeping: event times, transitions, restarts, usage feed, deadlines, fast-forward,
bounded records. These tests drive the simulator with a tiny first-fit session defined here (whole GPUs,
gangs all-or-nothing, scripted evictions) so that every expected time can be worked out by hand; the real
engine is exercised in ``test_simulate_engine.py``."""

import pytest

from scheduler.decisions import Eviction, ScheduleResult
from scheduler.errors import SnapshotError
from scheduler.model import ACTIVE_USED_STATUSES, Job, Node, Queue, QueueResource, SchedulerConfig, Snapshot, Task
from scheduler.simulate import Simulator, UsageConfig


class FirstFit:
    """Test double for a session: binds each job's pending tasks on the first nodes with free GPUs (all or
    nothing), evicts the jobs scripted in ``evict_at[time]``, and remembers what it was given."""

    def __init__(self, evict_at=None):
        self.evict_at = evict_at or {}
        self.calls = []          # (time, usage, {job: stale_since})

    def __call__(self, snap: Snapshot) -> ScheduleResult:
        self.calls.append((snap.time, {q: dict(v) for q, v in snap.usage.items()},
                           {j.key: j.stale_since for j in snap.jobs}))
        out = snap.copy()
        free = {n.name: n.gpus for n in out.nodes}
        for _, t in out.iter_tasks():
            if t.status in ACTIVE_USED_STATUSES:
                free[t.node] -= t.gpu
        evicted = []
        for key in self.evict_at.get(snap.time, []):
            job = out.job_map()[key]
            for t in job.tasks:
                if t.status in ("running", "binding"):
                    t.status = "releasing"
                    evicted.append(Eviction(task=t.name, job=key, action="preempt", preemptor="someone",
                                            message="scripted"))
        for job in out.jobs:
            pending = [t for t in job.tasks if t.status == "pending"]
            if not pending:
                continue
            trial, placed = dict(free), []
            for t in pending:
                node = next((n for n in sorted(trial) if trial[n] >= t.gpu), None)
                if node is None:
                    break
                trial[node] -= t.gpu
                placed.append((t, node))
            if len(placed) == len(pending):
                free = trial
                for t, node in placed:
                    t.status, t.node = "binding", node
        return ScheduleResult(fair_share={}, tasks={}, jobs={}, evicted=evicted, snapshot=out)


def cluster(time=1000.0, jobs=(), gpus=8, queues=None, **config):
    queues = queues or [Queue("a", gpu=QueueResource(quota=4)), Queue("b", gpu=QueueResource(quota=4))]
    return Snapshot(nodes=[Node("n1", gpus=gpus, gpu_memory_mib=81920, cpu_millis=8000, memory_bytes=64e9)],
                    queues=queues, jobs=list(jobs), config=SchedulerConfig(**config), time=time)


def job(name, queue="a", gpus=1, n=1, duration=None, status="pending", node=None, min_available=None, **kw):
    tasks = [Task(f"{name}-{i}", gpu=gpus, cpu_millis=1000, status=status, node=node) for i in range(n)]
    return Job(name, queue=queue, tasks=tasks, duration_s=duration,
               min_available=n if min_available is None else min_available, **kw)


def test_arrival_start_and_completion_land_on_the_cycle_grid():
    ff = FirstFit()
    sim = Simulator(cluster(), [(25, job("j", gpus=2, duration=100))], period_s=10, usage=None, session=ff)
    sim.run(200)
    # arrival at 1025 is seen by the cycle at 1030 (bound, run starts), 1040 turns binding into running,
    # the run ends at 1030 + 100 = 1130 and that cycle sees the job gone; nothing else can change.
    assert [c[0] for c in ff.calls] == [1000, 1030, 1040, 1130]
    f = sim.frames()
    j = f["jobs"].set_index("job").loc["j"]
    assert (j["arrival"], j["first_start"], j["wait_s"], j["completion"], j["status"]) == (1025, 1030, 5, 1130,
                                                                                        "completed")
    c = f["cluster"].set_index("time")
    assert c.loc[1030, "gpus_allocated"] == 2 and c.loc[1030, "running_jobs"] == 1
    assert c.loc[1130, "gpus_allocated"] == 0 and c.loc[1130, "completed"] == 1
    assert sim.snapshot.jobs == []
    assert sim.cycles_run == 4 and sim.cycles_skipped == 21 - 4     # grid 1000..1200
    assert sim.time == 1200 and sim.next_cycle_time() == 1210


def test_binding_turns_running_and_last_start_time_is_the_binding_cycle():
    ff = FirstFit()
    sim = Simulator(cluster(), [(0, job("j", duration=None))], period_s=10, usage=None, session=ff)
    first = sim.step()
    assert first.ran and first.arrived == 1
    task = sim.snapshot.jobs[0].tasks[0]
    assert task.status == "binding" and sim.snapshot.jobs[0].last_start_time == 1000
    second = sim.step()
    assert second.time == 1010 and sim.snapshot.jobs[0].tasks[0].status == "running"
    assert first.snapshot.jobs[0].tasks[0].status == "binding"    # earlier steps' state is never modified
    third = sim.step()
    assert not third.ran and third.result is second.result        # nothing could change: no session


def test_an_evicted_job_goes_back_to_pending_and_restarts_its_full_duration():
    ff = FirstFit(evict_at={1050: ["j"]})
    sim = Simulator(cluster(jobs=[job("j", gpus=2, duration=100, creation_time=1000)]), period_s=10, usage=None, session=ff,
                    fast_forward=False)
    sim.run(50)
    j = sim.snapshot.jobs[0]
    assert j.tasks[0].status == "releasing" and j.last_eviction_time == 1050
    sim.step()                                   # 1060: released -> pending (node cleared) -> placed again
    j = sim.snapshot.jobs[0]
    assert j.tasks[0].status == "binding" and j.last_start_time == 1060
    sim.run(300)
    f = sim.frames()
    row = f["jobs"].set_index("job").loc["j"]
    # restarted at 1060, so it ends at 1160 (not 1100, which kept-progress semantics would give)
    assert (row["first_start"], row["last_start"], row["completion"]) == (1000, 1060, 1160)
    assert (row["runs"], row["evictions"], row["pending_s"]) == (2, 1, 10)
    ev = f["evictions"]
    assert ev[["time", "task", "job", "queue", "action"]].values.tolist() == [[1050, "j-0", "j", "a", "preempt"]]


def test_releasing_and_pipelined_tasks_are_cleared_from_their_node_between_cycles():
    snap = cluster(jobs=[job("r", status="releasing", node="n1"), job("p", status="pipelined", node="n1")])
    snap.jobs[0].tasks[0].gpu_groups, snap.jobs[0].tasks[0].gpu_indices = ["g1"], [0]
    sim = Simulator(snap, period_s=10, usage=None, session=lambda s: FirstFit()(s))
    sim._transitions()
    for j in sim.snapshot.jobs:
        t = j.tasks[0]
        assert (t.status, t.node, t.gpu_groups, t.gpu_indices) == ("pending", None, [], [])


def test_usage_fed_to_the_session_sums_subtrees_and_is_normalised_by_capacity():
    queues = [Queue("dept"), Queue("a", parent="dept"), Queue("b", parent="dept")]
    ff = FirstFit()
    sim = Simulator(cluster(jobs=[job("j", gpus=4)], queues=queues), period_s=30, session=ff, fast_forward=False,
                    usage=UsageConfig(window_s=3600, resolution_s=60, fetch_interval_s=60))
    sim.run(120)
    by_time = {t: u for t, u, _ in ff.calls}
    assert by_time[1000]["a"]["gpu"] == 0.0           # nothing recorded yet at the first cycle
    # cycles at 1000, 1030, ...; usage re-read at 1000, 1060, 1120. At 1060 the one sample (1020) holds
    # what the cycle at 1000 allocated: 4 of 8 GPUs and 1000 of 8000 millicores to a, hence to dept
    assert by_time[1060]["a"] == pytest.approx({"gpu": 0.5, "cpu": 0.125, "memory": 0.0})
    assert by_time[1060]["dept"]["gpu"] == pytest.approx(0.5)
    assert by_time[1060]["b"]["gpu"] == 0.0
    # 1030 and 1090 fall between reads: the session sees the last value read
    assert by_time[1030]["a"]["gpu"] == 0.0 and by_time[1090]["a"]["gpu"] == pytest.approx(0.5)
    assert sim.frames()["queues"].query("queue == 'a'")["usage_gpu"].iloc[-1] == pytest.approx(0.5)


def test_stale_gang_is_stamped_and_the_grace_period_deadline_wakes_the_simulator():
    gang = job("g", n=2, min_available=2)
    gang.tasks[0].status, gang.tasks[0].node = "running", "n1"
    gang.tasks[1].gpu = 16                            # can never fit: the gang stays below min available
    ff = FirstFit()
    sim = Simulator(cluster(jobs=[gang], stale_grace_period_s=60), period_s=10, usage=None, session=ff)
    sim.run(300)
    # stamped at the first cycle; the rule comes due at 1060 (and may compare with '>', hence 1070 too)
    assert [c[0] for c in ff.calls] == [1000, 1060, 1070]
    assert all(c[2]["g"] == 1000 for c in ff.calls)


def test_min_runtime_expiry_wakes_the_simulator_while_jobs_are_pending():
    running = job("r", gpus=8, status="running", node="n1", last_start_time=1000)
    waiting = job("w", queue="b", gpus=4)
    ff = FirstFit()
    sim = Simulator(cluster(jobs=[running, waiting], default_preempt_min_runtime_s=300), period_s=10,
                    usage=None, session=ff)
    sim.run(1000)
    assert [c[0] for c in ff.calls] == [1000, 1300, 1310]


def test_a_usage_reread_wakes_a_session_only_when_it_moves_fair_share():
    """8 GPUs, quotas 0, k=1. a runs 4 GPUs; b waits for 16 (never fits). Usage is re-read every 60 s.
    At 1000 usage is 0 for both: over-quota shares 8·1/2 = 4 each -> fair share a=4 (its whole request), b=4.
    At 1060 the one sample (1020) has a at 4 of 8: usage a=0.5, b=0; sw_a = 0.5+(0.5-0.5) = 0.5,
    sw_b = 0.5+0.5 = 1 -> shares 2.67 / 5.33 -> floor 2 / 5, the last GPU to a's larger remainder: a=3, b=5.
    A session runs. Later reads keep a at 0.5, fair share stays 3/5, so no further session is needed."""
    running = job("a-run", gpus=4, status="running", node="n1", last_start_time=1000)
    waiting = job("b-wait", queue="b", gpus=16)
    snap = cluster(jobs=[running, waiting], k_value=1.0,
                   queues=[Queue("a", creation_time=1), Queue("b", creation_time=2)])
    ff = FirstFit()
    sim = Simulator(snap, period_s=10, session=ff,
                    usage=UsageConfig(window_s=3600, resolution_s=60, fetch_interval_s=60)).run(600)
    assert [c[0] for c in ff.calls] == [1000, 1060]
    assert sim.snapshot.usage["a"]["gpu"] == pytest.approx(0.5)      # the skipped reads still updated it
    every = FirstFit()
    Simulator(snap, period_s=10, session=every, fast_forward=False,
              usage=UsageConfig(window_s=3600, resolution_s=60, fetch_interval_s=60)).run(600)
    assert len(every.calls) == 61


def test_fast_forward_gives_the_same_history_as_running_every_cycle():
    def scenario():
        arrivals = [(15 * k, job(f"j{k}", queue="ab"[k % 2], gpus=1 + k % 3, duration=40 + 17 * k)) for k in range(12)]
        return cluster(), arrivals

    runs = {}
    for ff in (True, False):
        snap, arrivals = scenario()
        sim = Simulator(snap, arrivals, period_s=10, usage=None, session=FirstFit(evict_at={1100: ["j5"]}),
                        fast_forward=ff).run(1500)
        runs[ff] = sim
    a, b = runs[True].frames(), runs[False].frames()
    assert a["jobs"].equals(b["jobs"]) and a["evictions"].equals(b["evictions"])
    assert runs[True].cycles_run < runs[False].cycles_run == 151
    # the skipped cycles changed nothing: the per-tick series agree wherever both ran
    merged = b["cluster"].merge(a["cluster"], on="time", suffixes=("_all", "_ff"))
    assert (merged["gpus_allocated_all"] == merged["gpus_allocated_ff"]).all()


def test_step_by_step_and_run_agree():
    def make():
        arrivals = [(30 * k, job(f"j{k}", gpus=3, duration=95)) for k in range(6)]
        return Simulator(cluster(), arrivals, period_s=10, usage=None, session=FirstFit())

    stepped = make()
    while stepped.next_cycle_time() <= 1600:
        stepped.step()
    ran = make().run(600)
    assert stepped.frames()["jobs"].equals(ran.frames()["jobs"])


def test_jobs_created_after_the_snapshot_time_arrive_later():
    future = job("later", duration=10, creation_time=1042)
    ff = FirstFit()
    sim = Simulator(cluster(jobs=[future]), period_s=10, usage=None, session=ff).run(100)
    assert [c[0] for c in ff.calls][:3] == [1000, 1050, 1060]
    assert sim.frames()["jobs"].set_index("job").loc["later", "arrival"] == 1042


def test_arrivals_may_be_pairs_objects_with_an_offset_or_jobs_with_a_creation_time():
    from types import SimpleNamespace

    from scheduler.simulate import normalise_arrivals

    got = normalise_arrivals([(30, job("p")), SimpleNamespace(job=job("o"), offset_s=10, duration_s=77),
                              job("c", creation_time=1020)], start_time=1000)
    assert [(o, j.name) for o, j in got] == [(10, "o"), (20, "c"), (30, "p")]
    assert got[0][1].duration_s == 77            # an arrival's own duration when the job has none


def test_records_stay_bounded_in_a_long_run():
    sim = Simulator(cluster(jobs=[job("j")]), period_s=1, usage=UsageConfig(), session=FirstFit(),
                    fast_forward=False, max_ticks=500)
    sim.run(3000)
    f = sim.frames()
    assert sim.cycles_run == 3001
    assert len(f["cluster"]) == 500 and f["cluster"].attrs["dropped_ticks"] == 2501
    assert f["cluster"]["time"].iloc[-1] == 4000
    assert sim.recorder.cluster.nbytes <= (500 + 2 * 500) * 9 * 8


def test_bad_arrivals_are_reported_by_name():
    with pytest.raises(SnapshotError, match=r"arrivals\[j\]"):
        Simulator(cluster(jobs=[job("j")]), [(5, job("j"))], usage=None, session=FirstFit())
    with pytest.raises(SnapshotError, match=r"arrivals\[x\]\.tasks\[x-0\]\.status"):
        Simulator(cluster(), [(5, job("x", status="running", node="n1"))], usage=None, session=FirstFit())
    with pytest.raises(SnapshotError, match="offset"):
        Simulator(cluster(), [(-1, job("y"))], usage=None, session=FirstFit())


def test_a_job_that_never_fits_is_withdrawn_after_the_patience_and_a_running_one_is_not():
    """``patience_s``: owners delete jobs stuck pending. A 16-GPU gang on an 8-GPU cluster waits from 1000 and
    leaves at 1000 + 300 (the cycle at 1300, even when fast-forwarding: the withdrawal is a deadline); a job
    that started stays, whatever its age."""
    ff = FirstFit()
    snap = cluster(jobs=[job("big", gpus=8, n=2, creation_time=1000.0), job("small", gpus=1, creation_time=900.0)])
    sim = Simulator(snap, [], period_s=10, usage=None, session=ff, patience_s=300)
    sim.run(400)
    assert [j.name for j in sim.snapshot.jobs] == ["small"]
    assert sim.withdrawn_total == 1
    assert 1300 in [c[0] for c in ff.calls]                       # woken up for the withdrawal
    jobs = sim.frames()["jobs"].set_index("job")
    assert jobs.loc["big", "status"] == "withdrawn" and jobs.loc["big", "pending_s"] == 300
    assert jobs.loc["small", "status"] == "running"
    without = Simulator(cluster(jobs=[job("big", gpus=8, n=2, creation_time=1000.0)]), [], period_s=10,
                        usage=None, session=FirstFit())
    without.run(400)
    assert [j.name for j in without.snapshot.jobs] == ["big"] and without.withdrawn_total == 0
