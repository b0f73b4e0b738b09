"""Queue wait and depth metrics: pure functions over a snapshot and a job history.

The history is a ``{"jobs", "evictions"}`` frame pair with the simulator's record columns: a
:class:`~scheduler.joblog.JobLog`'s ``frames()`` on a live cluster, or ``Simulator.frames()``.

- :func:`pending_depth`: waiting jobs and their GPUs per queue or per priority class;
- :func:`wait_quantiles`: p50/p90/p99 of the wait (first start − arrival) of the jobs that started in a window;
- :func:`gang_status`: gangs running whole, running below their minimum (partially), or waiting;
- :func:`evictions_per_queue`: evicted pods and jobs per queue and action (reclaim, preempt, ...) in a window;
- :func:`queue_status` (one row per queue: the Queues view) and :func:`cluster_overview` (one dict: the
  Overview) put them together with the ETA's estimated wait and the cost rates.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from .fairshare import min_node_gpu_memory_mib
from .joblog import is_waiting, job_gpus
from .model import ALLOCATED_STATUSES, ACTIVE_USED_STATUSES, Job, Snapshot

PRIORITY_CLASSES = {50: "train", 75: "build-preemptible", 100: "build", 125: "inference"}
"""KAI's default priority classes by value; other priorities are named ``priority-<value>``."""
DAY_S = 86400.0
QUANTILES = (0.5, 0.9, 0.99)


def priority_class(priority: int) -> str:
    """KAI's priority class name for a priority value (``train``, ``build``, ...), else ``priority-<n>``."""
    return PRIORITY_CLASSES.get(int(priority), f"priority-{int(priority)}")


def pending_depth(snapshot: Snapshot, by: str = "queue") -> pd.DataFrame:
    """Waiting jobs (nothing allocated, some pod pending) and their GPUs, per ``queue`` or ``priority_class``.

    Every leaf queue appears (0 when none waits) when ``by="queue"``; columns ``<by>, pending_jobs,
    pending_gpus, oldest_wait_s``.
    """
    if by not in ("queue", "priority_class"):
        raise ValueError(f"by: expected 'queue' or 'priority_class', got {by!r}")
    min_mem = min_node_gpu_memory_mib(snapshot)
    now = float(snapshot.time)
    rows: dict[str, list[float]] = {}
    if by == "queue":
        rows = {q.name: [0, 0.0, 0.0] for q in snapshot.leaf_queues()}
    for job in snapshot.jobs:
        if not is_waiting(job):
            continue
        key = job.queue if by == "queue" else priority_class(job.priority)
        acc = rows.setdefault(key, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += job_gpus(job, min_mem)
        acc[2] = max(acc[2], now - job.creation_time)
    frame = pd.DataFrame([(k, int(v[0]), float(v[1]), float(v[2])) for k, v in sorted(rows.items())],
                         columns=[by, "pending_jobs", "pending_gpus", "oldest_wait_s"])
    return frame


def wait_quantiles(jobs: pd.DataFrame, now: float, window_s: float = DAY_S, by_queue: bool = True,
                   quantiles: tuple[float, ...] = QUANTILES) -> pd.DataFrame:
    """Wait quantiles of the jobs whose first start fell in ``(now − window_s, now]``.

    Columns ``queue`` (``"(all)"`` when ``by_queue`` is False), ``started``, ``p50_s``, ``p90_s``, ``p99_s``
    (one per quantile), ``max_s``. Queues with no start in the window are absent.
    """
    names = [f"p{round(q * 100):d}_s" for q in quantiles]
    cols = ["queue", "started", *names, "max_s"]
    if jobs is None or jobs.empty:
        return pd.DataFrame(columns=cols)
    started = jobs[jobs["first_start"].notna() & (jobs["first_start"] > now - window_s)
                   & (jobs["first_start"] <= now)]
    wait = (started["first_start"] - started["arrival"]).clip(lower=0.0)
    groups = [("(all)", wait)] if not by_queue else [(str(q), w) for q, w in wait.groupby(started["queue"],
                                                                                         observed=True)]
    rows = []
    for queue, w in groups:
        if len(w) == 0:
            continue
        values = np.quantile(w.to_numpy(dtype=float), quantiles)
        rows.append([queue, int(len(w)), *map(float, values), float(w.max())])
    return pd.DataFrame(rows, columns=cols)


def _placed(job: Job, statuses) -> int:
    return sum(1 for t in job.tasks if t.status in statuses)


def gang_status(snapshot: Snapshot) -> pd.DataFrame:
    """Per queue, gangs (jobs whose ``min_available`` is above 1) in each state.

    ``whole``: allocated pods reach ``min_available`` (started as one); ``partial``: some pods hold resources
    but fewer than ``min_available`` (a gang that lost pods: stale, waiting for the rest or for eviction);
    ``waiting``: none placed. Columns ``queue, gangs, whole, partial, waiting``; every leaf queue appears.
    """
    rows = {q.name: [0, 0, 0, 0] for q in snapshot.leaf_queues()}
    for job in snapshot.jobs:
        need = max(1, min(job.min_available, len(job.tasks)))
        if need <= 1 and not job.subgroups:
            continue
        acc = rows.setdefault(job.queue, [0, 0, 0, 0])
        allocated = _placed(job, ALLOCATED_STATUSES)
        active = _placed(job, ACTIVE_USED_STATUSES)
        acc[0] += 1
        if allocated >= need:
            acc[1] += 1
        elif active > 0:
            acc[2] += 1
        elif any(t.status in ("pending", "pipelined") for t in job.tasks):
            acc[3] += 1
    return pd.DataFrame([(q, *v) for q, v in sorted(rows.items())],
                        columns=["queue", "gangs", "whole", "partial", "waiting"])


def evictions_per_queue(evictions: pd.DataFrame, now: float, window_s: float = DAY_S) -> pd.DataFrame:
    """Evicted pods and distinct jobs per (queue, action) in ``(now − window_s, now]``.

    Columns ``queue, action, pods, jobs``; ``action`` is the engine's (``reclaim``, ``preempt``,
    ``consolidation``, ``stalegangeviction``) or ``""`` when derived from a vanished run.
    """
    cols = ["queue", "action", "pods", "jobs"]
    if evictions is None or evictions.empty:
        return pd.DataFrame(columns=cols)
    ev = evictions[(evictions["time"] > now - window_s) & (evictions["time"] <= now)].copy()
    if ev.empty:
        return pd.DataFrame(columns=cols)
    ev["queue"] = ev["queue"].fillna("").astype(str)
    ev["action"] = ev["action"].fillna("").astype(str)
    out = ev.groupby(["queue", "action"], as_index=False).agg(pods=("job", "size"), jobs=("job", "nunique"))
    return out[cols]


# ------------------------------------------------------------------------------------------ view tables

QUEUE_STATUS_COLUMNS = ["queue", "pending_jobs", "pending_gpus", "oldest_wait_s", "est_wait_s", "started_24h",
                        "wait_p50_s", "wait_p90_s", "wait_p99_s", "gangs_whole", "gangs_partial", "gangs_waiting",
                        "reclaimed_24h", "preempted_24h", "evicted_24h", "idle_cost_per_h", "unused_quota_cost_per_h"]


def queue_status(snapshot: Snapshot, history: Optional[dict[str, pd.DataFrame]] = None, eta: Any = None,
                 costs: Any = None, *, window_s: float = DAY_S) -> pd.DataFrame:
    """One row per leaf queue (:data:`QUEUE_STATUS_COLUMNS`): the Queues view's wait, depth and waste columns.

    ``history``: ``{"jobs", "evictions"}`` frames (JobLog or simulator); ``eta``: an
    :class:`~scheduler.eta.EtaReport` (``est_wait_s`` = median expected wait of the queue's waiting jobs, NaN
    without one); ``costs``: :class:`~scheduler.cost.CostRates`. Evictions are pods over ``window_s``.
    """
    now = float(snapshot.time)
    depth = pending_depth(snapshot).set_index("queue")
    gangs = gang_status(snapshot).set_index("queue")
    jobs = (history or {}).get("jobs")
    waits = wait_quantiles(jobs, now, window_s).set_index("queue") if jobs is not None else pd.DataFrame()
    ev = evictions_per_queue((history or {}).get("evictions"), now, window_s)
    rows = []
    for q in depth.index:
        w = waits.loc[q] if q in waits.index else None
        e = ev[ev["queue"] == q]
        rows.append([q, int(depth.at[q, "pending_jobs"]), float(depth.at[q, "pending_gpus"]),
                     float(depth.at[q, "oldest_wait_s"]),
                     eta.queue_wait_s(q) if eta is not None else math.nan,
                     int(w["started"]) if w is not None else 0,
                     float(w["p50_s"]) if w is not None else math.nan,
                     float(w["p90_s"]) if w is not None else math.nan,
                     float(w["p99_s"]) if w is not None else math.nan,
                     int(gangs.at[q, "whole"]) if q in gangs.index else 0,
                     int(gangs.at[q, "partial"]) if q in gangs.index else 0,
                     int(gangs.at[q, "waiting"]) if q in gangs.index else 0,
                     int(e.loc[e["action"] == "reclaim", "pods"].sum()),
                     int(e.loc[e["action"] == "preempt", "pods"].sum()),
                     int(e["pods"].sum()),
                     costs.total("idle_allocated", q) if costs is not None else math.nan,
                     costs.total("unused_quota", q) if costs is not None else math.nan])
    return pd.DataFrame(rows, columns=QUEUE_STATUS_COLUMNS)


def cluster_overview(snapshot: Snapshot, history: Optional[dict[str, pd.DataFrame]] = None, eta: Any = None,
                     costs: Any = None, ledger: Any = None, *, window_s: float = DAY_S) -> dict[str, Any]:
    """The Overview's numbers in one dict: waiting jobs (total, per priority class), expected wait (median over
    waiting jobs, from the ETA), waits of jobs started in the window (p50/p90/p99), gangs whole/partial/waiting,
    evictions in the window per action, cost per hour per category and (with a ledger) today's and the last 30
    days' waste."""
    now = float(snapshot.time)
    by_class = pending_depth(snapshot, by="priority_class")
    jobs = (history or {}).get("jobs")
    waits = wait_quantiles(jobs, now, window_s, by_queue=False) if jobs is not None else pd.DataFrame()
    gangs = gang_status(snapshot)[["gangs", "whole", "partial", "waiting"]].sum()
    ev = evictions_per_queue((history or {}).get("evictions"), now, window_s)
    est = []
    if eta is not None:
        # a job that arrived after the estimate in a queue without one has no estimate (NaN): left out, not NaN
        est = sorted(e.p50_s for e in eta.estimates.values() if not e.never and not math.isnan(e.p50_s))
    out: dict[str, Any] = {
        "time": now,
        "pending_jobs": int(by_class["pending_jobs"].sum()),
        "pending_gpus": float(by_class["pending_gpus"].sum()),
        "pending_by_priority_class": dict(zip(by_class["priority_class"], by_class["pending_jobs"].astype(int))),
        "est_wait_median_s": float(np.median(est)) if est and not math.isinf(est[len(est) // 2]) else (
            math.inf if est else math.nan),
        "started_in_window": int(waits["started"].iloc[0]) if len(waits) else 0,
        "wait_p50_s": float(waits["p50_s"].iloc[0]) if len(waits) else math.nan,
        "wait_p90_s": float(waits["p90_s"].iloc[0]) if len(waits) else math.nan,
        "wait_p99_s": float(waits["p99_s"].iloc[0]) if len(waits) else math.nan,
        "gangs": int(gangs["gangs"]), "gangs_whole": int(gangs["whole"]), "gangs_partial": int(gangs["partial"]),
        "gangs_waiting": int(gangs["waiting"]),
        "evictions_by_action": {a: int(n) for a, n in ev.groupby("action")["pods"].sum().items()} if len(ev) else {},
        "window_s": window_s,
    }
    if costs is not None:
        out["cost_per_h"] = costs.cluster()
        out["currency"] = costs.currency
    if ledger is not None:
        for days, key in ((1, "cost_today"), (30, "cost_30d")):
            t = ledger.totals(days, now)
            out[key] = {c: float(v) for c, v in zip(t["category"], t["cost"])} if len(t) else {}
            out[key + "_covered_h"] = float(t.attrs.get("covered_h", 0.0))
    return out


__all__ = ["priority_class", "pending_depth", "wait_quantiles", "gang_status", "evictions_per_queue",
           "queue_status", "cluster_overview", "PRIORITY_CLASSES", "QUEUE_STATUS_COLUMNS", "DAY_S"]
