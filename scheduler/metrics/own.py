"""kaidash's own Prometheus metrics, so ops can alert on fair share, pending and GPU waste from their Prometheus.

Every name starts with ``kaidash_`` and is documented, with example alerts, in ``docs/metrics.md``. The live
loop calls :meth:`KaidashMetrics.update` once per tick; the dashboard server mounts :meth:`exposition` at
``/metrics``. Metrics live in their own :class:`~prometheus_client.CollectorRegistry` (no process/GC
collectors, no clash with anything else in the process).

Gauges are rebuilt completely on each update and swapped in atomically, so a queue or node that disappears
stops being reported and a scrape never sees half a tick. The cycle-latency histogram accumulates.

Wait, depth, ETA and cost series (:mod:`scheduler.waits`, :mod:`scheduler.eta`, :mod:`scheduler.cost`) are
computed here from what the loop passes in: ``history`` (the job log's frames), ``eta`` (the current
:class:`~scheduler.eta.EtaReport`), ``costs`` (:class:`~scheduler.cost.CostRates`) and ``ledger``
(:class:`~scheduler.cost.CostLedger`); a series whose input is not given is not reported.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Iterable, Mapping, Optional

import pandas as pd
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..decisions import ScheduleResult
from ..joblog import is_waiting
from ..model import RESOURCES, Snapshot
from ..queue_allocation import observed_allocation
from ..waits import DAY_S, evictions_per_queue, gang_status, pending_depth, wait_quantiles

QUEUE_STAT_GAUGES = {
    "deserved": "Deserved quota of the queue (KAI quota; GPUs in devices, CPU in millicores, memory in bytes).",
    "fair_share": "Fair share the scheduler computed for the queue this tick (same units as deserved).",
    "allocated": "Resources KAI has allocated to the queue's running/binding pods now, descendants included "
                 "(observed, before the engine's next-cycle decisions; same units as deserved).",
    "requested": "Resources requested by the queue's pods, allocated or pending (same units as deserved).",
    "limit": "Maximum the queue may use (-1 = unlimited; same units as deserved).",
}
"""``kaidash_queue_<stat>{queue, parent, resource}`` gauges and their help text."""

SHADOW_ALLOCATED_HELP = ("Resources the queue would hold after the engine's next-cycle decisions (the shadow "
                         "session's hypothetical placements; same units as deserved).")

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _waiting_jobs(snapshot: Snapshot) -> Iterable[tuple[str, float]]:
    """``(queue, creation_time)`` for every job waiting in ``snapshot`` (nothing allocated, a pod pending: the
    rule of ``kaidash_queue_pending_gpus``)."""
    for job in snapshot.jobs:
        if is_waiting(job):
            yield job.queue, job.creation_time


def _pending_after_session(result: ScheduleResult, snapshot: Snapshot) -> Iterable[tuple[str, float]]:
    """``(queue, creation_time)`` for every job the session leaves pending (its decisions applied)."""
    for job in snapshot.jobs:
        decision = result.jobs.get(job.key) if result.jobs else None
        if decision is not None:
            pending = decision.status == "pending"
        else:
            pending = bool(job.tasks) and all(t.status == "pending" for t in job.tasks)
        if pending:
            yield job.queue, job.creation_time


class KaidashMetrics:
    """kaidash's own metrics (see ``docs/metrics.md``)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._families: list = []
        self._ticks = 0
        self.cycle_latency = Histogram("kaidash_cycle_latency_seconds",
                                       "Duration of each part (action) of a scheduling cycle.", ["action"],
                                       buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.registry.register(self)
        # process_resident_memory_bytes, process_cpu_seconds_total, ... (docs/deploy.md section 5)
        self.process = ProcessCollector(registry=self.registry)

    # prometheus_client custom-collector protocol
    def describe(self):
        return []

    def collect(self):
        with self._lock:
            families = list(self._families)
        yield from families

    def update(self, result: ScheduleResult, gpu_frame: Optional[pd.DataFrame] = None, *,
               snapshot: Optional[Snapshot] = None, sources: Optional[Mapping[str, Mapping[str, bool]]] = None,
               gpu_metrics_age_s: Optional[float] = None, now: Optional[float] = None,
               observed: Optional[Snapshot] = None, allocated: Optional[Mapping[str, Mapping[str, float]]] = None,
               history: Optional[Mapping[str, pd.DataFrame]] = None, eta: Any = None, costs: Any = None,
               ledger: Any = None, window_s: float = DAY_S) -> None:
        """Refresh every metric from one tick.

        ``result``: the tick's :class:`ScheduleResult` (queue stats, fair share, job decisions, timings);
        ``gpu_frame``: the DCGM per-GPU frame (flags); ``snapshot``: the state to measure pending waits in
        (default ``result.snapshot``); ``sources``: ``{source: {resource: up}}``;
        ``gpu_metrics_age_s``: age of the GPU frame (0 fresh, larger when stale); ``now``: tick wall time.
        ``history``: ``{"jobs", "evictions"}`` frames (``JobLog.frames()``) for waits of started jobs, last
        starts and evictions over ``window_s``; ``eta``: an ``EtaReport`` for estimated waits; ``costs``:
        ``CostRates``; ``ledger``: ``CostLedger`` for today's and 30-day totals. ``observed``: the source's
        snapshot before the session (default: ``snapshot``, else ``result.snapshot``), from which
        ``kaidash_queue_allocated`` is computed as KAI accounts it, and the pending series
        (``kaidash_queue_pending_*``, waiting jobs by priority class, gangs): a job the engine binds this cycle
        waits until the cluster runs it. The session's own figures are
        ``kaidash_queue_allocated_after_session`` and ``kaidash_queue_pending_jobs_after_session``.
        ``allocated``: ``observed_allocation(observed)`` when the caller has it already.
        """
        now = time.time() if now is None else now
        snap = snapshot if snapshot is not None else result.snapshot
        families: list = []

        queues = snap.queue_map() if snap is not None else {}
        parents = {name: (q.parent or "") for name, q in queues.items()}
        stat_families = {stat: GaugeMetricFamily(f"kaidash_queue_{stat}", help_,
                                                 labels=["queue", "parent", "resource"])
                         for stat, help_ in QUEUE_STAT_GAUGES.items()}
        shadow = GaugeMetricFamily("kaidash_queue_allocated_after_session", SHADOW_ALLOCATED_HELP,
                                   labels=["queue", "parent", "resource"])
        base = observed if observed is not None else snap
        held = (allocated if allocated is not None else observed_allocation(base) if base is not None else {})
        names = sorted(set(queues) | set(result.queue_stats or {}) | set(result.fair_share or {}))
        for name in names:
            stats = (result.queue_stats or {}).get(name, {})
            for resource in RESOURCES:
                values: dict[str, Any] = dict(stats.get(resource, {}))
                if values.get("allocated") is not None:
                    shadow.add_metric([name, parents.get(name, ""), resource], float(values["allocated"]))
                values["allocated"] = held.get(name, {}).get(resource)
                if "fair_share" not in values and resource in (result.fair_share or {}).get(name, {}):
                    values["fair_share"] = result.fair_share[name][resource]
                if name in queues:
                    q = queues[name].resource(resource)
                    values.setdefault("deserved", q.quota)
                    values.setdefault("limit", q.limit)
                for stat, family in stat_families.items():
                    if values.get(stat) is not None:
                        family.add_metric([name, parents.get(name, ""), resource], float(values[stat]))
        families.extend(stat_families.values())
        families.append(shadow)

        pending_count = GaugeMetricFamily("kaidash_queue_pending_jobs", "Jobs (pod groups) waiting to be scheduled.",
                                          labels=["queue"])
        oldest = GaugeMetricFamily("kaidash_queue_pending_wait_oldest_seconds",
                                   "Wait of the queue's longest-pending job (0 when none is pending).",
                                   labels=["queue"])
        mean = GaugeMetricFamily("kaidash_queue_pending_wait_mean_seconds",
                                 "Mean wait of the queue's pending jobs (0 when none is pending).", labels=["queue"])
        after = GaugeMetricFamily("kaidash_queue_pending_jobs_after_session",
                                  "Jobs (pod groups) the engine's next-cycle decisions would leave pending (the "
                                  "shadow session; hypothetical).", labels=["queue"])
        waits: dict[str, list[float]] = {name: [] for name in queues}
        left: dict[str, int] = dict.fromkeys(queues, 0)
        if base is not None:
            for queue, created in _waiting_jobs(base):
                waits.setdefault(queue, []).append(max(0.0, base.time - created))
        if snap is not None:
            for queue, _ in _pending_after_session(result, snap):
                left[queue] = left.get(queue, 0) + 1
        for queue in sorted(waits):
            w = waits[queue]
            pending_count.add_metric([queue], float(len(w)))
            oldest.add_metric([queue], max(w) if w else 0.0)
            mean.add_metric([queue], sum(w) / len(w) if w else 0.0)
        for queue in sorted(left):
            after.add_metric([queue], float(left[queue]))
        families += [pending_count, oldest, mean, after]

        last_latency = GaugeMetricFamily("kaidash_cycle_last_latency_seconds",
                                         "Duration of each part (action) of the last scheduling cycle.",
                                         labels=["action"])
        for action, ms in sorted((result.timings_ms or {}).items()):
            seconds = float(ms) / 1000.0
            self.cycle_latency.labels(action=action).observe(seconds)
            last_latency.add_metric([action], seconds)
        families.append(last_latency)

        families.extend(self._gpu_families(gpu_frame, queues))
        if base is not None:
            families.extend(wait_families(base, history, eta, window_s))
        families.extend(cost_families(costs, ledger, snap.time if snap is not None else None))
        if gpu_metrics_age_s is not None:
            families.append(GaugeMetricFamily("kaidash_gpu_metrics_age_seconds",
                                              "Age of the DCGM data behind the GPU metrics (0 = fresh).",
                                              value=float(gpu_metrics_age_s)))

        up = GaugeMetricFamily("kaidash_source_up", "1 if the source delivered this resource on the last tick.",
                               labels=["source", "resource"])
        for source, resources in sorted((sources or {}).items()):
            for resource, ok in sorted(resources.items()):
                up.add_metric([source, resource], 1.0 if ok else 0.0)
        families.append(up)
        families.append(GaugeMetricFamily("kaidash_last_tick_timestamp_seconds",
                                          "Unix time of the last live-loop tick.", value=float(now)))
        with self._lock:
            self._ticks += 1
            ticks = CounterMetricFamily("kaidash_ticks", "Live-loop ticks since kaidash started.", value=self._ticks)
            self._families = families + [ticks]

    def source_down(self, source: str, resources: Iterable[str] = ("snapshot",)) -> None:
        """Report ``kaidash_source_up{source, resource} 0`` now (a failed tick publishes no update)."""
        with self._lock:
            families = [f for f in self._families if f.name != "kaidash_source_up"]
            old = next((f for f in self._families if f.name == "kaidash_source_up"), None)
            up = GaugeMetricFamily("kaidash_source_up", "1 if the source delivered this resource on the last tick.",
                                   labels=["source", "resource"])
            down = {(source, r) for r in resources}
            for sample in (old.samples if old is not None else []):
                key = (sample.labels["source"], sample.labels["resource"])
                if key not in down:
                    up.add_metric(list(key), 0.0 if key[0] == source else sample.value)
            for key in sorted(down):
                up.add_metric(list(key), 0.0)
            self._families = families + [up]

    @staticmethod
    def _gpu_families(frame: Optional[pd.DataFrame], queues: Mapping) -> list:
        over = GaugeMetricFamily("kaidash_over_share_pods",
                                 "Pods using more GPU memory than their share (KAI does not isolate: neighbours "
                                 "risk OOM).", labels=["queue"])
        idle = GaugeMetricFamily("kaidash_idle_allocated_gpus",
                                 "GPUs allocated to pods but idle (utilisation below threshold) for the window.")
        unalloc = GaugeMetricFamily("kaidash_unallocated_in_use_gpus",
                                    "GPUs in use (memory or utilisation) with nothing allocated on them.")
        unknown = GaugeMetricFamily("kaidash_holder_unknown_gpus",
                                    "GPUs in use with no known holder while a pod on their node holds GPUs whose "
                                    "device no evidence gives (maybe that pod's; not counted as unallocated).")
        counts = {name: 0 for name in queues}
        if frame is not None and not frame.empty:
            flagged = frame[frame["over_share"]].drop_duplicates(["task"])
            for queue, n in flagged.groupby("queue")["task"].count().items():
                counts[queue] = int(n)
            gpus = frame.drop_duplicates(["node", "gpu_index"])
            idle_n = int(frame.loc[frame["idle_allocated"], ["node", "gpu_index"]].drop_duplicates().shape[0])
            unalloc_n = int(gpus["unallocated_in_use"].sum())
            unknown_n = int(frame.loc[frame["holder_unknown"].astype(bool), ["node", "gpu_index"]]
                            .drop_duplicates().shape[0]) if "holder_unknown" in frame else 0
        else:
            idle_n = unalloc_n = unknown_n = 0
        for queue in sorted(counts):
            over.add_metric([queue], float(counts[queue]))
        idle.add_metric([], float(idle_n))
        unalloc.add_metric([], float(unalloc_n))
        unknown.add_metric([], float(unknown_n))
        return [over, idle, unalloc, unknown]

    def exposition(self) -> tuple[bytes, str]:
        """``(body, content_type)`` for a ``/metrics`` route."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# ------------------------------------------------------------------------------ waits, ETA and cost series

def wait_families(snap: Snapshot, history: Optional[Mapping[str, pd.DataFrame]], eta: Any,
                  window_s: float) -> list:
    """Depth by priority class, pending GPUs, gangs; with ``history`` waits, starts and evictions over the
    window; with ``eta`` the estimated wait per queue."""
    now = float(snap.time)
    out = []
    depth = pending_depth(snap)
    gpus = GaugeMetricFamily("kaidash_queue_pending_gpus", "GPUs requested by the queue's waiting jobs.",
                             labels=["queue"])
    for q, v in zip(depth["queue"], depth["pending_gpus"]):
        gpus.add_metric([q], float(v))
    by_class = GaugeMetricFamily("kaidash_pending_jobs_by_priority_class",
                                 "Waiting jobs per KAI priority class (train, build, inference, ...).",
                                 labels=["priority_class"])
    classes = pending_depth(snap, by="priority_class")
    for c, v in zip(classes["priority_class"], classes["pending_jobs"]):
        by_class.add_metric([str(c)], float(v))
    gangs = GaugeMetricFamily("kaidash_queue_gangs", "Gangs (min available > 1) by state: whole (started as one), "
                              "partial (fewer pods than the minimum hold resources), waiting.",
                              labels=["queue", "state"])
    for row in gang_status(snap).itertuples(index=False):
        for state in ("whole", "partial", "waiting"):
            gangs.add_metric([row.queue, state], float(getattr(row, state)))
    out += [gpus, by_class, gangs]
    if history is not None and history.get("jobs") is not None:
        jobs = history["jobs"]
        window = GaugeMetricFamily("kaidash_history_window_seconds",
                                   "Window of the wait, start and eviction series (they cover at most what "
                                   "kaidash has observed since it started).", value=float(window_s))
        waits = GaugeMetricFamily("kaidash_queue_wait_seconds",
                                  "Wait (first start - arrival) of the queue's jobs that started in the window.",
                                  labels=["queue", "quantile"])
        started = GaugeMetricFamily("kaidash_queue_started_jobs", "Jobs of the queue that started in the window.",
                                    labels=["queue"])
        table = wait_quantiles(jobs, now, window_s).set_index("queue")
        for q in depth["queue"]:
            started.add_metric([q], float(table.at[q, "started"]) if q in table.index else 0.0)
            if q in table.index:
                for quantile, col in (("0.5", "p50_s"), ("0.9", "p90_s"), ("0.99", "p99_s")):
                    waits.add_metric([q, quantile], float(table.at[q, col]))
        last = GaugeMetricFamily("kaidash_queue_last_start_age_seconds",
                                 "Seconds since a job of the queue last started (since kaidash started, when none "
                                 "has).", labels=["queue"])
        since = float(jobs.attrs.get("start_time") or now)
        starts = jobs.dropna(subset=["last_start"]).groupby("queue", observed=True)["last_start"].max()
        for q in depth["queue"]:
            last.add_metric([q], max(0.0, now - float(starts.get(q, since))))
        evicted = GaugeMetricFamily("kaidash_queue_evicted_pods", "Pods of the queue evicted in the window, by "
                                    "action (reclaim, preempt, consolidation, stalegangeviction; empty: observed, "
                                    "cause unknown).", labels=["queue", "action"])
        for row in evictions_per_queue(history.get("evictions"), now, window_s).itertuples(index=False):
            evicted.add_metric([row.queue, row.action], float(row.pods))
        out += [window, waits, started, last, evicted]
    if eta is not None:
        est = GaugeMetricFamily("kaidash_queue_estimated_wait_seconds",
                                "Median expected wait of the queue's waiting jobs (ETA by forward simulation; "
                                "+Inf beyond the horizon; 0 when none waits; absent while none of its waiting "
                                "jobs has an estimate yet).", labels=["queue"])
        for q in depth["queue"]:
            wait = float(eta.queue_wait_s(q))
            if not math.isnan(wait):
                est.add_metric([q], wait)
        out.append(est)
        made = getattr(eta, "made_at", None)
        if made is not None:
            out.append(GaugeMetricFamily("kaidash_eta_timestamp_seconds",
                                         "Unix time the current ETA estimate was made.", value=float(made)))
        out.append(GaugeMetricFamily("kaidash_eta_duration_seconds", "Wall time the current ETA estimate took.",
                                     value=float(eta.wall_ms) / 1000.0))
    return out


def cost_families(costs: Any, ledger: Any, now: Optional[float]) -> list:
    """Cost per hour per category and queue; with a ledger, today's and the last 30 days' totals."""
    out = []
    if costs is not None:
        rate = GaugeMetricFamily("kaidash_cost_per_hour", "Cost per hour of GPUs by category (capacity, allocated, "
                                 "idle_allocated, stranded, free, unavailable, unused_quota) at the configured prices; "
                                 "queue is empty for cluster-wide categories.",
                                 labels=["category", "queue", "currency"])
        sums = costs.frame.groupby(["category", "queue"])["cost_per_h"].sum()
        for (category, queue), v in sums.items():
            rate.add_metric([category, queue, costs.currency], float(v))
        out.append(rate)
    if ledger is not None and now is not None:
        total = GaugeMetricFamily("kaidash_cost_total", "Cost by category over a period of UTC days: 1d = today, "
                                  "30d = the last 30 days, today included (what kaidash observed).",
                                  labels=["category", "period", "currency"])
        for days, period in ((1, "1d"), (30, "30d")):
            t = ledger.totals(days, now)
            for category, v in zip(t["category"], t["cost"]):
                total.add_metric([category, period, ledger.currency], float(v))
        out.append(total)
    return out
