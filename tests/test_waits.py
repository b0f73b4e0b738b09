"""Queue wait and depth metrics over a snapshot and a job history, with the numbers worked out by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from scheduler.cost import cost_rates
from scheduler.eta import EtaReport
from scheduler.eta.report import EtaEstimate
from scheduler.snapshot_io import loads_snapshot
from scheduler.waits import (
    cluster_overview,
    evictions_per_queue,
    gang_status,
    pending_depth,
    priority_class,
    queue_status,
    wait_quantiles,
)

T0 = 1_767_225_600.0

SNAP = f"""
version: 1
time: {T0}
nodes: [{{name: n1, gpus: 8, gpu_memory_mib: 40000, cpu_millis: 64000, memory_bytes: 256Gi}}]
queues:
  - {{name: dept, gpu: {{quota: 8}}}}
  - {{name: a, parent: dept, gpu: {{quota: 4}}}}
  - {{name: b, parent: dept, gpu: {{quota: 4}}}}
jobs:
  - {{name: whole, queue: a, min_available: 2, tasks: [{{name: w0, gpu: 1, status: running, node: n1, gpu_index: 0}},
     {{name: w1, gpu: 1, status: running, node: n1, gpu_index: 1}}]}}
  - {{name: partial, queue: a, min_available: 2, tasks: [{{name: p0, gpu: 1, status: running, node: n1, gpu_index: 2}},
     {{name: p1, gpu: 1}}]}}
  - {{name: gangwait, queue: b, min_available: 2, priority: 125, creation_time: {T0 - 600},
     tasks: [{{name: g0, gpu: 2}}, {{name: g1, gpu: 2}}]}}
  - {{name: single, queue: b, priority: 50, creation_time: {T0 - 60}, tasks: [{{name: s0, gpu_memory_mib: 10000}}]}}
"""


@pytest.fixture
def snap():
    return loads_snapshot(SNAP)


def test_pending_depth_by_queue_and_priority_class(snap):
    by_queue = pending_depth(snap).set_index("queue")
    assert list(by_queue.index) == ["a", "b"]                  # leaf queues only, each listed
    assert by_queue.at["a", "pending_jobs"] == 0              # "partial" holds a GPU: it is not waiting
    assert by_queue.at["b", "pending_jobs"] == 2 and by_queue.at["b", "pending_gpus"] == pytest.approx(4.25)
    assert by_queue.at["b", "oldest_wait_s"] == 600
    by_class = pending_depth(snap, by="priority_class").set_index("priority_class")
    assert by_class["pending_jobs"].to_dict() == {"inference": 1, "train": 1}
    assert priority_class(75) == "build-preemptible" and priority_class(7) == "priority-7"
    with pytest.raises(ValueError):
        pending_depth(snap, by="node")


def test_gang_status(snap):
    g = gang_status(snap).set_index("queue")
    assert g.loc["a"].to_dict() == {"gangs": 2, "whole": 1, "partial": 1, "waiting": 0}
    assert g.loc["b"].to_dict() == {"gangs": 1, "whole": 0, "partial": 0, "waiting": 1}   # "single" is no gang


def history():
    jobs = pd.DataFrame({
        "job": ["j1", "j2", "j3", "old", "never", "k1"], "queue": ["a", "a", "a", "a", "a", "b"],
        "arrival": [T0 - 1000, T0 - 2000, T0 - 5000, T0 - 200_000, T0 - 300, T0 - 100],
        "first_start": [T0 - 940, T0 - 1880, T0 - 4400, T0 - 199_000, math.nan, T0 - 100],
        "last_start": [T0 - 940, T0 - 1880, T0 - 4400, T0 - 199_000, math.nan, T0 - 100],
        "completion": math.nan, "status": "running"})
    evictions = pd.DataFrame({"time": [T0 - 100, T0 - 200, T0 - 300, T0 - 100_000],
                              "task": ["x0", "x1", "y0", "z0"], "job": ["x", "x", "y", "z"],
                              "queue": ["a", "a", "b", "a"], "action": ["reclaim", "reclaim", "preempt", "preempt"],
                              "preemptor": None, "cause": ""})
    return {"jobs": jobs, "evictions": evictions}


def test_wait_quantiles_over_the_window():
    h = history()
    w = wait_quantiles(h["jobs"], T0).set_index("queue")
    # a: waits 60, 120, 600 started within 24 h ("old" is outside, "never" has not started)
    assert w.at["a", "started"] == 3 and w.at["a", "p50_s"] == 120 and w.at["a", "max_s"] == 600
    assert w.at["a", "p90_s"] == pytest.approx(np.quantile([60, 120, 600], 0.9))
    assert w.at["b", "p99_s"] == 0
    total = wait_quantiles(h["jobs"], T0, by_queue=False)
    assert list(total["queue"]) == ["(all)"] and total["started"].item() == 4
    assert wait_quantiles(h["jobs"], T0, window_s=1000).set_index("queue").at["a", "started"] == 1


def test_evictions_per_queue_in_the_window():
    e = evictions_per_queue(history()["evictions"], T0)
    assert e.to_dict("records") == [{"queue": "a", "action": "reclaim", "pods": 2, "jobs": 1},
                                    {"queue": "b", "action": "preempt", "pods": 1, "jobs": 1}]
    assert evictions_per_queue(pd.DataFrame(), T0).empty


def estimates():
    def est(job, queue, p50):
        return EtaEstimate(job, queue, 50, 1.0, "1 GPU", 0.0, p50, p50, p50, 1, 1, 8 * 3600)
    return EtaReport(T0, {"gangwait": est("gangwait", "b", 1200.0), "single": est("single", "b", 0.0)}, {}, 1, 1,
                     1.0, 8 * 3600)


def test_queue_status_puts_the_views_columns_together(snap):
    table = queue_status(snap, history(), estimates(), cost_rates(snap)).set_index("queue")
    assert table.at["b", "pending_jobs"] == 2 and table.at["b", "est_wait_s"] == 600      # median of 1,200 and 0
    assert table.at["a", "est_wait_s"] == 0                                               # nothing waits in a
    assert table.at["a", "started_24h"] == 3 and table.at["a", "wait_p50_s"] == 120
    assert table.at["a", "reclaimed_24h"] == 2 and table.at["b", "preempted_24h"] == 1
    assert table.at["a", "gangs_partial"] == 1 and table.at["b", "gangs_waiting"] == 1
    assert table.at["b", "unused_quota_cost_per_h"] == pytest.approx(4 * 2.0)   # default price: model unknown
    bare = queue_status(snap).set_index("queue")
    assert math.isnan(bare.at["b", "est_wait_s"]) and bare.at["a", "started_24h"] == 0


def test_cluster_overview(snap):
    o = cluster_overview(snap, history(), estimates(), cost_rates(snap))
    assert o["pending_jobs"] == 2 and o["pending_by_priority_class"] == {"inference": 1, "train": 1}
    assert o["est_wait_median_s"] == 600 and o["started_in_window"] == 4
    assert o["wait_p50_s"] == 90                                     # waits 0, 60, 120, 600
    assert (o["gangs"], o["gangs_whole"], o["gangs_partial"], o["gangs_waiting"]) == (3, 1, 1, 1)
    assert o["evictions_by_action"] == {"preempt": 1, "reclaim": 2}
    assert o["cost_per_h"]["capacity"] == pytest.approx(8 * 2.0) and o["currency"] == "USD"
