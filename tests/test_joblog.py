"""JobLog: job lifecycles from consecutive snapshots, checked by hand and against the simulator's own records."""

import copy
import math

import pytest

from scheduler.joblog import JobLog, is_waiting, job_gpus, job_shape
from scheduler.model import Job, Node, Queue, Snapshot, Task
from scheduler.simulate import Simulator
from scheduler.sources.synthetic import generate_scenario

T0 = 1000.0


def snap(t, *jobs):
    return Snapshot(nodes=[Node("n1", gpus=8, gpu_memory_mib=40000)], queues=[Queue("q")], jobs=list(jobs), time=t)


def job(name, status="pending", created=T0, last_start=None, gpu=2.0, n=1):
    return Job(name, "q", creation_time=created, last_start_time=last_start,
               tasks=[Task(f"{name}-{i}", gpu=gpu, status=status, node="n1" if status == "running" else None)
                      for i in range(n)])


def row(frame, key):
    return frame.set_index("job").loc[key]


def test_a_job_waits_starts_is_evicted_restarts_and_completes():
    log = JobLog()
    log.observe(snap(T0, job("a")))
    log.observe(snap(T0 + 60, job("a", "running")))
    log.observe(snap(T0 + 100, job("a")))                       # running pods gone, job still there: evicted
    log.observe(snap(T0 + 160, job("a", "running", last_start=T0 + 150)))   # the PodGroup's stamp is used
    log.observe(snap(T0 + 400))                                 # gone while running: completed
    a = row(log.jobs_frame(), "a")
    assert (a.arrival, a.first_start, a.last_start, a.completion) == (T0, T0 + 60, T0 + 150, T0 + 400)
    assert (a.wait_s, a.pending_s, a.runs, a.evictions, a.status) == (60, 60 + 50, 2, 1, "completed")
    assert a.run_s == 250 and a.start_known
    ev = log.evictions_frame()
    assert list(ev["job"]) == ["a"] and list(ev["time"]) == [T0 + 100] and list(ev["action"]) == [""]


def test_jobs_seen_first_running_deleted_or_finished():
    log = JobLog()
    log.observe(snap(T0, job("known", "running", last_start=T0 - 500), job("unknown", "running"), job("gone")))
    done = job("known", "running", last_start=T0 - 500)
    for t in done.tasks:
        t.status = "succeeded"
    log.observe(snap(T0 + 100, done, job("unknown", "running")))
    log.observe(snap(T0 + 200))
    f = log.jobs_frame()
    assert row(f, "known").status == "completed" and row(f, "known").run_s == 600
    assert row(f, "unknown").status == "completed" and row(f, "unknown").run_s == 200
    assert not row(f, "unknown").start_known                   # running before the log, no stamp: a lower bound
    assert row(f, "gone").status == "deleted" and math.isnan(row(f, "gone").run_s)
    assert row(f, "gone").pending_s == 100
    assert f.attrs["start_time"] == T0 and log.span_s == 200


def test_templates_are_later_arrivals_only_and_evictions_can_be_given():
    from scheduler.decisions import Eviction

    log = JobLog(templates_per_queue=2)
    log.observe(snap(T0, job("old")))
    for i in range(3):
        log.observe(snap(T0 + 10 * (i + 1), job("old"), *[job(f"new{k}", created=T0 + 10 * (k + 1))
                                                          for k in range(i + 1)]))
    assert [j.name for j in log.templates["q"]] == ["new1", "new2"]      # the last two; "old" predates the log
    log.observe(snap(T0 + 50, job("x", "running")))
    log.observe(snap(T0 + 60, job("x")), evictions=[Eviction("x-0", "x", "reclaim", preemptor="y")])
    ev = log.evictions_frame()
    assert list(ev["action"]) == ["reclaim"] and list(ev["queue"]) == ["q"]     # given, not derived


def test_the_log_agrees_with_the_simulators_records():
    """Observing every executed cycle's state gives the simulator's own arrival and first start; a completion
    (exact time between cycles in the simulator) is seen at the next cycle, within one period."""
    sc = generate_scenario(3, nodes=12, horizon_s=3 * 3600)
    sim = Simulator(sc.snapshot, sc.arrivals, period_s=60)
    log = JobLog()
    log.observe(sim.snapshot)
    while sim.next_cycle_time() <= sim.start_time + 3 * 3600:
        step = sim.step()
        if step.ran:
            log.observe(step.snapshot, step.result.evicted)
    ours = log.jobs_frame().set_index("job")
    theirs = sim.frames()["jobs"].set_index("job")
    new = theirs[theirs["arrival"] > sim.start_time]
    assert len(new) > 20
    for key, r in new.iterrows():
        o = ours.loc[key]
        assert o.arrival == pytest.approx(r.arrival)
        assert (math.isnan(o.first_start) and math.isnan(r.first_start)) or o.first_start == r.first_start
        if math.isnan(r.completion):
            assert math.isnan(o.completion)
        else:
            assert r.completion <= o.completion < r.completion + 60
    assert (ours["evictions"].sum() >= 0) and len(log.evictions_frame()) == len(sim.frames()["evictions"])


def test_shape_and_gpus():
    j = job("g", gpu=8, n=4)
    assert job_shape(j) == "4x8 GPU" and job_gpus(j, 40000) == 32
    mem = Job("m", "q", tasks=[Task("m-0", gpu_memory_mib=10000)])
    assert job_shape(mem) == "10000 MiB" and job_gpus(mem, 40000) == 0.25
    assert job_shape(Job("c", "q", tasks=[Task("c-0", cpu_millis=1000)])) == "cpu"
    assert is_waiting(job("w")) and not is_waiting(job("r", "running"))
    copy.deepcopy(j)
