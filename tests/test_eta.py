"""Pending ETA by forward simulation: the cycle grid, the run-time model, and estimates on clusters small enough
to work out by hand.

The main cluster: one node of 8 GPUs; ``a`` (8 GPUs) started 600 s before the snapshot and runs 1,800 s, so it
ends 1,200 s after it. The default grid has cycles every 30 s to 300 s, every 60 s to 900 s, then every 120 s,
so the first cycle at or after 1,200 s is at 1,260 s: that is when a waiting 8-GPU job starts.
"""

import math
import random

import pandas as pd
import pytest

from scheduler.eta import EtaConfig, EtaPlanner, WorkloadModel, estimate_eta, estimate_eta_whatif, format_duration
from scheduler.eta.forward import segment_plan
from scheduler.eta.planner import rebase
from scheduler.eta.workload import ASSUMED, RECORDED, DurationPool
from scheduler.snapshot_io import loads_snapshot

T0 = 1_767_225_600

CLUSTER = f"""
version: 1
time: {T0}
nodes:
  - {{name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi,
     labels: {{kai.scheduler/node-pool: h100}}}}
queues:
  - {{name: team, gpu: {{quota: 8, limit: 16}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
  - {{name: small, gpu: {{quota: 0, limit: 2}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
jobs:
  - {{name: a, queue: team, creation_time: {T0 - 900}, last_start_time: {T0 - 600}, duration_s: 1800,
     tasks: [{{name: a-0, gpu: 8, status: running, node: n1, gpu_index: [0, 1, 2, 3, 4, 5, 6, 7]}}]}}
  - {{name: b1, queue: team, creation_time: {T0 - 300}, duration_s: 600, tasks: [{{name: b1-0, gpu: 8}}]}}
  - {{name: b2, queue: team, creation_time: {T0 - 200}, duration_s: 600, tasks: [{{name: b2-0, gpu: 8}}]}}
  - {{name: huge, queue: team, creation_time: {T0 - 100}, tasks: [{{name: huge-0, gpu: 8}}, {{name: huge-1, gpu: 8}}],
     min_available: 2}}
  - {{name: capped, queue: small, creation_time: {T0 - 100}, tasks: [{{name: capped-0, gpu: 4}}]}}
"""


@pytest.fixture
def snap():
    return loads_snapshot(CLUSTER)


# ---------------------------------------------------------------------------------------------- the grid

def test_segment_plan_doubles_the_period_and_ends_at_the_horizon():
    plan = segment_plan(3600, 30, 10)
    assert [(s.start_s, s.period_s, s.cycles) for s in plan] == [(0, 30, 10), (300, 60, 10), (900, 120, 10),
                                                                  (2100, 240, 7)]
    last = plan[-1]
    assert last.start_s + (last.cycles - 1) * last.period_s < 3600 <= last.start_s + last.cycles * last.period_s
    assert sum(s.cycles for s in segment_plan(8 * 3600, 30, 10)) <= 70


# ---------------------------------------------------------------------------------------------- estimates

def test_recorded_durations_give_the_start_after_the_blocker_finishes(snap):
    report = estimate_eta(snap, config=EtaConfig(runs=5, arrivals=False))
    assert report.runs == 1                      # nothing random: one run is enough
    b1, b2 = report["b1"], report["b2"]
    assert (b1.p10_s, b1.p50_s, b1.p90_s) == (1260, 1260, 1260)
    assert b1.blocker == "after a finishes" and b1.blocker_job == "a" and b1.blocker_duration_source == RECORDED
    # b1 runs 600 s from 1,260 s: ends at 1,860 s, a cycle of the 120 s segment (900 + 8 x 120)
    assert b2.p50_s == 1860 and b2.blocker == "after b1 finishes"
    assert b1.text == "starts in ~21 min, after a finishes"     # one run: no range
    assert report.running["a"].end_p50_s == 1200 and report.running["a"].duration_source == RECORDED


def test_jobs_that_can_never_start_are_not_simulated(snap):
    report = estimate_eta(snap, config=EtaConfig(arrivals=False))
    huge, capped = report["huge"], report["capped"]
    assert huge.never and "16 GPUs, the cluster has 8" in huge.message and math.isinf(huge.p50_s)
    assert capped.never and "over queue small's GPU limit of 2" in capped.message
    assert huge.text.startswith("cannot start on this cluster")


def test_beyond_the_horizon_keeps_the_engines_reason(snap):
    report = estimate_eta(snap, config=EtaConfig(arrivals=False, horizon_s=900))
    b1 = report["b1"]
    assert math.isinf(b1.p50_s) and b1.started_runs == 0
    assert b1.reason == "PodSchedulingErrors" and b1.text.startswith("not within 15 min (PodSchedulingErrors")


def test_frames_order_and_per_queue_waits(snap):
    report = estimate_eta(snap, config=EtaConfig(arrivals=False))
    frame = report.frame()
    assert list(frame["job"][:2]) == ["b1", "b2"]          # soonest first; never-starting jobs last
    assert frame.loc[frame["job"] == "b1", "start_p50"].item() == T0 + 1260
    q = report.queue_frame().set_index("queue")
    assert q.at["team", "pending_jobs"] == 3 and q.at["team", "never"] == 1
    assert q.at["team", "next_start_s"] == 1260 and q.at["team", "eta_p50_s"] == (1260 + 1860) / 2
    assert report.queue_wait_s("team") == (1260 + 1860) / 2 and report.queue_wait_s("nobody") == 0.0
    doc = report.to_dict()
    assert {p["job"] for p in doc["pending"]} == {"b1", "b2", "huge", "capped"}
    assert next(p for p in doc["pending"] if p["job"] == "huge")["p50_s"] is None   # inf is not JSON


def test_what_if_another_node_starts_the_waiting_job_now(snap):
    diff = estimate_eta_whatif(snap, {"nodes": {"h100": 1}}, config=EtaConfig(arrivals=False))
    assert diff.notes["nodes_added"] == ["h100-whatif-1"]
    frame = diff.frame().set_index("job")
    assert frame.at["b1", "eta_p50_before_s"] == 1260 and frame.at["b1", "eta_p50_after_s"] == 0
    assert frame.at["b1", "change_s"] == -1260
    assert diff.after["b1"].text == "starts at the next cycle"


def test_without_recorded_durations_the_history_decides(snap):
    # history: 10 completed runs of 8-GPU team jobs, 1,000-1,900 s; "a" has run 600 s
    history = pd.DataFrame({"queue": "team", "shape": "8 GPU", "run_s": [1000.0 + 100 * i for i in range(10)]})
    workload = WorkloadModel(runs=history)
    config = EtaConfig(runs=7, arrivals=False, use_recorded_durations=False)
    report = estimate_eta(snap, workload, config)
    assert report.runs == 7
    assert report.running["a"].duration_source == "history: team 8 GPU (n=10)"
    b1 = report["b1"]
    # a ends 400-1,300 s from now (1,000-1,900 s run, 600 s done): b1 starts at a grid cycle in that range
    assert 400 <= b1.p10_s <= b1.p50_s <= b1.p90_s <= 1380
    assert b1.blocker == "after a finishes" and b1.blocker_duration_source.startswith("history: team")
    same = estimate_eta(snap, workload, config)
    assert same["b1"].p50_s == b1.p50_s                                  # seeded: reproducible
    other = estimate_eta(snap, workload, EtaConfig(runs=7, arrivals=False, use_recorded_durations=False, seed=9))
    assert [o.p10_s for o in other.estimates.values()] != [e.p10_s for e in report.estimates.values()]


def test_the_run_budget_counts_work_not_time_the_caller_held_the_estimate_paused(snap):
    """A dashboard's estimate waits while a what-if computes (its session blocks); that wait is not simulation
    work and must not use up ``budget_s``: with the pause reported, every run is made; without, the pause alone
    spends the budget after the first run (and the report says so)."""
    import time

    from scheduler.engine import run_session

    config = EtaConfig(runs=3, arrivals=False, use_recorded_durations=False, budget_s=1.0)
    paused = [0.0]

    def session(s):
        if paused[0] == 0.0:                 # one long pause before the first engine session (a what-if)
            time.sleep(1.5)
            paused[0] = 1.5
        return run_session(s)

    report = estimate_eta(snap, None, config, session=session, paused_s=lambda: paused[0])
    assert report.runs == 3 and not any("budget" in n for n in report.notes)
    assert report.wall_ms >= 1500                                  # the report's wall time still includes it
    assert report["b1"].p50_s == estimate_eta(snap, None, config)["b1"].p50_s     # same runs, same answer
    paused[0] = 0.0
    unreported = estimate_eta(snap, None, config, session=session)
    assert unreported.runs == 1 and "1 of 3 runs within the 1 s budget" in unreported.notes


def test_no_history_at_all_is_said(snap):
    report = estimate_eta(snap, None, EtaConfig(runs=2, use_recorded_durations=False))
    assert report.running["a"].duration_source == ASSUMED
    assert any("run times assumed" in n for n in report.notes)
    assert any("arrivals not modelled" in n for n in report.notes)


def test_modelled_arrivals_of_a_higher_priority_queue_delay_a_waiting_job():
    """Two queues share one 8-GPU node; ``hi`` (priority 200) submits 8-GPU jobs every ~10 min. With arrivals
    modelled, the ``lo`` job waiting behind the running one starts later than without."""
    snap = loads_snapshot(f"""
version: 1
time: {T0}
nodes: [{{name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}}]
queues:
  - {{name: hi, priority: 200, gpu: {{quota: 4}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
  - {{name: lo, gpu: {{quota: 4}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
jobs:
  - {{name: r, queue: lo, creation_time: {T0 - 100}, last_start_time: {T0 - 100}, duration_s: 400,
     tasks: [{{name: r-0, gpu: 8, status: running, node: n1, gpu_index: [0, 1, 2, 3, 4, 5, 6, 7]}}]}}
  - {{name: w, queue: lo, creation_time: {T0 - 50}, duration_s: 600, tasks: [{{name: w-0, gpu: 8}}]}}
""")
    template = loads_snapshot(f"""
version: 1
queues: [{{name: hi, gpu: {{quota: 4}}}}]
jobs: [{{name: h, queue: hi, creation_time: 0, duration_s: 900, priority: 50, tasks: [{{name: h-0, gpu: 8}}]}}]
""").jobs[0]
    quiet = estimate_eta(snap, WorkloadModel(), EtaConfig(runs=3))
    busy_model = WorkloadModel(rates_per_s={"hi": 1 / 600}, templates={"hi": [template]})
    busy = estimate_eta(snap, busy_model, EtaConfig(runs=6))
    assert quiet["w"].p50_s == 300                              # r ends at 300 s: a 30 s grid cycle
    assert busy.arrivals_per_h == {"hi": pytest.approx(6.0)}
    w = busy["w"]
    assert w.p10_s == 300                                       # some runs: w got the node when r ended
    assert w.started_runs < w.runs and w.p90_s > quiet["w"].p50_s  # others: hi's jobs kept taking it first
    assert w.blocker == "after r finishes"


# ---------------------------------------------------------------------------------------------- run times

def test_kaplan_meier_counts_runs_still_going():
    pool = DurationPool.fit("x", [1.0, 2.0, 3.0], [2.5])
    # at risk 4 at t=1 (1 ends), 3 at t=2 (1 ends): S = 3/4 * 2/3 = 0.5; at t=3 the only one at risk ends
    assert pool.survival_at(0.5) == 1.0 and pool.survival_at(1) == 0.75 and pool.survival_at(2.7) == 0.5
    assert pool.survival_at(3) == 0.0 and pool.median_s() == 2.0
    rng = random.Random(1)
    assert {pool.sample(2.5, rng) for _ in range(20)} == {3.0}       # conditioned on having run 2.5
    samples = [pool.sample(0.0, rng) for _ in range(4000)]
    assert samples.count(1.0) / 4000 == pytest.approx(0.25, abs=0.03)
    tail = DurationPool.fit("y", [1.0], [5.0, 6.0])                  # two runs outlived every finished one
    assert all(6.0 <= tail.sample(6.0, rng) <= 12.0 for _ in range(50))


def test_workload_from_frames_rates_fallbacks_and_templates():
    jobs = pd.DataFrame({
        "job": [f"j{i}" for i in range(8)], "queue": ["q"] * 6 + ["r", "r"],
        "arrival": [T0 - 7200, T0 - 3000, T0 - 2000, T0 - 1500, T0 - 1000, T0 - 500, T0 - 600, T0 - 300],
        "first_start": [T0 - 7000] * 8, "last_start": [T0 - 7000] * 6 + [T0 - 200, T0 - 100],
        "completion": [T0 - 6000 + 100 * i for i in range(6)] + [math.nan, math.nan],
        "status": ["completed"] * 6 + ["running", "running"], "shape": ["1 GPU"] * 5 + ["2 GPU"] + ["1 GPU"] * 2})
    wl = WorkloadModel.from_frames(jobs, T0, start_time=T0 - 3600, window_s=3600)
    # arrivals after the history's start, in the last hour: q has 5 (-3000 ... -500), r has 2
    assert wl.rates_per_s == {"q": pytest.approx(5 / 3600), "r": pytest.approx(2 / 3600)}
    assert wl.pool("q", "1 GPU").label == "history: q 1 GPU (n=5)"
    assert wl.pool("q", "2 GPU").label == "history: q (n=6)"             # one 2-GPU run: fall back to the queue
    assert wl.pool("r", "1 GPU").label == "history: all queues (n=6)"
    described = wl.describe().set_index("queue")
    assert described.at["r", "running"] == 2 and described.at["q", "arrivals_per_h"] == pytest.approx(5)
    short = WorkloadModel.from_frames(jobs, T0, start_time=T0 - 300)    # 5 minutes of history: no rates yet
    assert short.rates_per_s == {}


def test_modelled_arrivals_are_renamed_pending_copies(snap):
    template = snap.job_map()["a"]
    wl = WorkloadModel(rates_per_s={"team": 1 / 60}, templates={"team": [template]})
    arrivals = wl.arrivals(3600, random.Random(3), tag="0")
    assert 40 < len(arrivals) < 90                                      # Poisson, mean 60
    offsets = [o for o, _ in arrivals]
    assert offsets == sorted(offsets) and 0 < offsets[0] and offsets[-1] <= 3600
    names = [j.name for _, j in arrivals]
    assert len(set(names)) == len(names) and all("~0-" in n for n in names)
    job = arrivals[0][1]
    assert job.last_start_time is None and job.duration_s == 1800
    assert all(t.status == "pending" and t.node is None and not t.gpu_indices for t in job.tasks)
    assert template.tasks[0].status == "running"                        # the template is not touched


# ---------------------------------------------------------------------------------------------- planner

def test_planner_rebases_between_estimates_and_knows_when_to_refresh(snap):
    planner = EtaPlanner(EtaConfig(arrivals=False), every_s=300, min_interval_s=30, changed_fraction=0.2)
    assert planner.due(snap) and planner.current(snap) is None
    planner.refresh(snap)
    assert not planner.due(snap)
    later = snap.copy()
    later.time = T0 + 100
    current = planner.current(later)
    assert current["b1"].p50_s == 1160 and current["b1"].waiting_s == 400
    assert not planner.due(later)
    # a new waiting job arrives in team: provisional, behind the queue's waiting jobs (the longest p50, 1,860 s)
    arrived = loads_snapshot(CLUSTER.replace("jobs:\n", f"jobs:\n  - {{name: new, queue: team, creation_time: "
                                                        f"{T0 + 50}, tasks: [{{name: new-0, gpu: 8}}]}}\n"))
    arrived.time = T0 + 100
    new = planner.current(arrived)["new"]
    assert new.provisional and new.p50_s == 1760 and new.text.startswith("likely starts in ~29 min")
    assert planner.due(arrived)                    # 1 of 4 waiting jobs changed: over 20 %
    much_later = snap.copy()
    much_later.time = T0 + 1300                    # b1 still waiting past its p90 (1,260 s)
    assert planner.due(much_later)
    assert rebase(planner.report, much_later)["b1"].p50_s == 0


def test_a_job_that_arrived_after_the_estimate_is_unknown_not_beyond_the_horizon(snap):
    """A job arriving after the estimate in a queue that had no estimated waiting job has no estimate yet (NaN):
    its queue's expected wait is unknown (NaN, "no estimate yet"), not +Inf ("beyond 8 h", which fires a
    ``kaidash_queue_estimated_wait_seconds > 4 h`` alert), and the other jobs' estimates still count."""
    from scheduler.waits import cluster_overview

    planner = EtaPlanner(EtaConfig(arrivals=False))
    planner.refresh(snap)
    arrived = loads_snapshot(CLUSTER.replace("jobs:\n", f"jobs:\n  - {{name: late, queue: small, creation_time: "
                                                        f"{T0 + 50}, tasks: [{{name: late-0, gpu: 1}}]}}\n"))
    arrived.time = T0 + 100
    current = planner.current(arrived)
    assert math.isnan(current["late"].p50_s) and current["late"].provisional
    assert math.isnan(current.queue_wait_s("small"))
    assert current.queue_wait_s("team") == (1160 + 1760) / 2                    # b1, b2; huge never starts
    overview = cluster_overview(arrived, eta=current)
    assert overview["est_wait_median_s"] == (1160 + 1760) / 2                  # was NaN: "no estimate yet"


def test_planner_runs_in_the_background_once_at_a_time(snap):
    calls = []

    def slow(snapshot, workload, config):
        import time
        calls.append(snapshot.time)
        time.sleep(0.2)
        return estimate_eta(snapshot, workload, config)

    planner = EtaPlanner(EtaConfig(arrivals=False), estimate=slow)
    assert planner.refresh_in_background(snap)
    assert not planner.refresh_in_background(snap)          # one at a time
    planner.wait(10)
    assert planner.report is not None and planner.refreshes == 1 and calls == [T0]


def test_format_duration():
    assert [format_duration(x) for x in (10, 60, 89 * 60, 2.5 * 3600, 3 * 86400, math.inf)] == [
        "<1 min", "1 min", "89 min", "2.5 h", "3.0 d", "∞"]
