"""The live state every dashboard session reads: the latest tick and a bounded history of past ticks.

No Panel import: :class:`LiveState` is a plain ``param.Parameterized`` that the live loop (one per server
process) writes and the views read. It works the same in a notebook, a test or a server.

A tick is immutable once published (:class:`Tick`): the loop builds a new one and swaps it in with one
assignment, so a session never sees half an update. When the source fails the last good tick stays
published and ``stale_since`` says since when the data has not been refreshed.
"""

from __future__ import annotations

import math
import threading
import time as _time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd
import param

from scheduler.model import ALLOCATED_STATUSES, Snapshot
from scheduler.queue_allocation import observed_allocations


@dataclass(frozen=True)
class Tick:
    """One published loop iteration: the cluster as scheduled at one moment.

    ``snapshot`` is what the source delivered (the session's input: the cluster as observed), from which the
    views compute counts, pending lists and allocations; ``result`` is the engine's ``ScheduleResult`` over it
    (``None`` when the engine is unavailable or failed); ``scheduled`` is the state after the decisions
    (``result.snapshot``): on a live cluster a prediction, shown as such ("KAI would bind ...").
    ``gpu_frame`` is the per-GPU DCGM frame (or ``None``), ``explanations`` the why-pending records by job key.
    """

    index: int
    wall_time: float
    snapshot: Snapshot
    result: Any = None
    gpu_frame: Optional[pd.DataFrame] = None
    explanations: dict = field(default_factory=dict)
    duration_ms: float = 0.0
    insight: Any = None
    """Waits, ETA and cost as of this tick (:class:`dashboard.insight.Insight`), or None."""
    tables: dict = field(default_factory=dict, compare=False, repr=False)
    """Per-GPU frames computed once for this tick (``slices``, ``gpus``): the history record and every view
    reuse them. A derived tick (a user's scoped view) must start with an empty dict."""

    @property
    def number(self) -> int:
        """How many ticks the loop has published, this one included (1 for the first): what a page shows as
        "tick N" (``index`` counts from 0, and "tick 0" after the first tick reads as "nothing happened yet")."""
        return self.index + 1

    @property
    def scheduled(self) -> Snapshot:
        """The snapshot after the engine's decisions, else the input snapshot."""
        snap = getattr(self.result, "snapshot", None)
        return snap if snap is not None else self.snapshot

    @property
    def cluster_time(self) -> float:
        """The moment the snapshot describes (seconds since the epoch, or scenario seconds)."""
        return float(self.snapshot.time)


def tick_allocations(tick: Tick) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """What each queue holds in the tick's observed snapshot, of all jobs and of the non-preemptible ones
    (:func:`scheduler.queue_allocation.observed_allocations`), computed once per tick: the history record, the
    Queues and Pending frames (per resource) and ``/metrics`` all read it."""
    held = tick.tables.get("observed_allocations")
    if held is None:
        held = tick.tables["observed_allocations"] = observed_allocations(tick.snapshot)
    return held


# --------------------------------------------------------------------------------------------- history

TOTAL_FIELDS = ("gpus_total", "gpus_allocated", "gpus_used", "gpus_idle_allocated", "pending_jobs",
                "running_jobs", "wait_mean_s", "wait_max_s", "evictions", "cycle_ms")
"""Cluster-wide numbers recorded per tick (``gpus_used`` is DCGM's, NaN when no GPU metrics)."""

QUEUE_FIELDS = ("allocated", "fair_share", "deserved", "requested", "pending_jobs")
"""Per-queue GPU numbers recorded per tick."""


@dataclass
class HistoryRecord:
    """One point of the timeline: cluster time, wall time, totals and per-queue GPU numbers."""

    time: float
    wall_time: float
    totals: dict[str, float]
    queues: dict[str, dict[str, float]]


def record_from_tick(tick: Tick) -> HistoryRecord:
    """The history point of a tick: totals and per-queue numbers of the cluster as observed (allocated, pending,
    waits: the session's input, as KAI accounts them), fair share, deserved and requested from the engine's
    result. The engine's binds and evictions of the tick are predictions and are not recorded as facts;
    ``evictions`` counts the evictions it decided."""
    snap = tick.snapshot
    gpus_total = float(sum(n.gpus for n in snap.nodes if n.ready))
    allocated = 0.0
    node_mem = {n.name: n.gpu_memory_mib for n in snap.nodes}
    pending_jobs = running_jobs = 0
    waits = []
    pending_by_queue: dict[str, int] = {}
    for job in snap.jobs:
        statuses = {t.status for t in job.tasks}
        if statuses & ALLOCATED_STATUSES:
            running_jobs += 1
        if "pending" in statuses:
            pending_jobs += 1
            waits.append(max(0.0, snap.time - job.creation_time))
            pending_by_queue[job.queue] = pending_by_queue.get(job.queue, 0) + 1
        for t in job.tasks:
            if t.status in ALLOCATED_STATUSES and t.is_gpu:
                allocated += t.gpus_on(node_mem.get(t.node, 0.0))
    used = idle = math.nan
    if tick.gpu_frame is not None and len(tick.gpu_frame):
        used, idle = gpu_totals(tick)
    totals = {
        "gpus_total": gpus_total, "gpus_allocated": allocated, "gpus_used": used, "gpus_idle_allocated": idle,
        "pending_jobs": float(pending_jobs), "running_jobs": float(running_jobs),
        "wait_mean_s": float(sum(waits) / len(waits)) if waits else 0.0,
        "wait_max_s": float(max(waits)) if waits else 0.0,
        "evictions": float(len(getattr(tick.result, "evicted", []) or [])),
        "cycle_ms": float(tick.duration_ms),
    }
    queues: dict[str, dict[str, float]] = {}
    stats = getattr(tick.result, "queue_stats", None) or {}
    held = tick_allocations(tick)[0]
    for q in snap.queues:
        gpu = stats.get(q.name, {}).get("gpu", {})
        queues[q.name] = {
            "allocated": float(held[q.name]["gpu"]),
            "fair_share": float(gpu.get("fair_share", math.nan)),
            "deserved": float(gpu.get("deserved", math.nan)),
            "requested": float(gpu.get("requested", math.nan)),
            "pending_jobs": float(pending_by_queue.get(q.name, 0)),
        }
    return HistoryRecord(tick.cluster_time, tick.wall_time, totals, queues)


def gpu_totals(tick: Tick) -> tuple[float, float]:
    """GPUs in use (sum of DCGM utilisation) and idle-but-allocated GPUs, from the tick's per-GPU table when a
    view already built it, else straight from the DCGM frame (the device columns repeat on every slice row of
    a GPU, so the first row of each GPU is the device): the history needs only these two numbers per tick."""
    if "gpus" in tick.tables:
        gpus = tick.tables["gpus"]
        if not gpus["gpu_util"].notna().any():
            return math.nan, math.nan
        return float(gpus["gpu_util"].fillna(0).sum() / 100.0), float(gpus["idle_allocated"].sum())
    frame = tick.gpu_frame
    if "idle_allocated" not in frame or "gpu_util" not in frame:
        return math.nan, math.nan
    devices = frame[frame["gpu_index"] >= 0]
    first = ~devices.duplicated(["node", "gpu_index"])
    util = devices.loc[first, "gpu_util"].astype(float)
    if not util.notna().any():
        return math.nan, math.nan
    idle_gpus = devices.loc[devices["idle_allocated"].astype(bool), ["node", "gpu_index"]].drop_duplicates()
    return float(util.fillna(0).sum()), float(len(idle_gpus))


def gpu_tables(tick: Tick) -> dict:
    """The tick's per-slice and per-GPU frames (:mod:`dashboard.frames`), computed on first use and kept on
    the tick: the loop's history record and the views' GPU tables are then one computation."""
    if "gpus" not in tick.tables:
        from . import frames

        snap = tick.snapshot   # as observed: the session's invented device indices are never drawn as holders
        slices = frames.gpu_slices_frame(snap, tick.gpu_frame)
        tick.tables["slices"] = slices
        tick.tables["gpus"] = frames.gpu_frame_from_slices(snap, slices, tick.gpu_frame)
    return tick.tables


class _Bucket:
    """Running sums of the records falling into one downsampled point."""

    def __init__(self) -> None:
        self.count = 0
        self.totals: dict[str, list[float]] = {}
        self.queues: dict[str, dict[str, list[float]]] = {}
        self.last: Optional[HistoryRecord] = None

    def add(self, rec: HistoryRecord) -> None:
        self.count += 1
        self.last = rec
        for k, v in rec.totals.items():
            _accumulate(self.totals, k, v)
        for q, vals in rec.queues.items():
            acc = self.queues.setdefault(q, {})
            for k, v in vals.items():
                _accumulate(acc, k, v)

    def mean(self) -> HistoryRecord:
        assert self.last is not None
        return HistoryRecord(self.last.time, self.last.wall_time,
                             {k: _mean(v) for k, v in self.totals.items()},
                             {q: {k: _mean(v) for k, v in vals.items()} for q, vals in self.queues.items()})


def _accumulate(acc: dict[str, list[float]], key: str, value: float) -> None:
    s = acc.setdefault(key, [0.0, 0])
    if not math.isnan(value):
        s[0] += value
        s[1] += 1


def _mean(s: list[float]) -> float:
    return s[0] / s[1] if s[1] else math.nan


class TickHistory:
    """Bounded timeline: full detail for the last ``fine_ticks`` ticks, then one averaged point per
    ``coarse_every`` ticks for the last ``coarse_points`` such points.

    Defaults keep 30 min of 1 s ticks in full and 24 h at one point a minute: memory stays constant however
    long the loop runs (3,240 records at most).
    """

    def __init__(self, fine_ticks: int = 1800, coarse_every: int = 60, coarse_points: int = 1440):
        if fine_ticks < 1 or coarse_every < 1 or coarse_points < 0:
            raise ValueError("history sizes must be positive")
        self.fine: deque[HistoryRecord] = deque(maxlen=fine_ticks)
        self.coarse: deque[HistoryRecord] = deque(maxlen=coarse_points)
        self.coarse_every = coarse_every
        self._bucket = _Bucket()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.fine) + len(self.coarse)

    def append(self, rec: HistoryRecord) -> None:
        with self._lock:
            self.fine.append(rec)
            self._bucket.add(rec)
            if self._bucket.count >= self.coarse_every:
                self.coarse.append(self._bucket.mean())
                self._bucket = _Bucket()

    def records(self) -> list[HistoryRecord]:
        """Coarse points older than the oldest fine record, then every fine record, oldest first."""
        with self._lock:
            fine = list(self.fine)
            start = fine[0].time if fine else math.inf
            return [r for r in self.coarse if r.time < start] + fine

    def totals_frame(self) -> pd.DataFrame:
        """One row per point: ``time``, ``wall_time`` and every field of :data:`TOTAL_FIELDS`."""
        recs = self.records()
        rows = [{"time": r.time, "wall_time": r.wall_time, **r.totals} for r in recs]
        return pd.DataFrame(rows, columns=["time", "wall_time", *TOTAL_FIELDS])

    def queues_frame(self) -> pd.DataFrame:
        """Long format: one row per point and queue with the fields of :data:`QUEUE_FIELDS`."""
        rows = [{"time": r.time, "queue": q, **vals} for r in self.records() for q, vals in r.queues.items()]
        return pd.DataFrame(rows, columns=["time", "queue", *QUEUE_FIELDS])

    def clear(self) -> None:
        with self._lock:
            self.fine.clear()
            self.coarse.clear()
            self._bucket = _Bucket()


# ------------------------------------------------------------------------------------------ live state

SOURCE_STATUSES = ("starting", "ok", "degraded", "stale", "error", "static")


class LiveState(param.Parameterized):
    """What the live loop publishes and every view reads.

    ``tick`` is the latest good :class:`Tick` (``None`` before the first); ``revision`` increases with each
    publish so sessions can poll cheaply. When the source fails, ``error`` holds the message,
    ``source_status`` becomes ``stale`` and ``stale_since`` the wall time of the first failure; the last good
    tick stays.
    """

    tick = param.Parameter(default=None, doc="latest published Tick (None before the first)")
    revision = param.Integer(default=0, doc="increments on every publish, error or status change")
    source_kind = param.String(default="sim", doc="sim | kube | snapshot | trace")
    source_label = param.String(default="", doc="human description of the source (file, context, seed)")
    source_status = param.Selector(default="starting", objects=list(SOURCE_STATUSES))
    source_detail = param.String(default="", doc="status line from the source (e.g. watch state)")
    metrics_status = param.String(default="", doc="status of the GPU metrics reader (DCGM / simulated)")
    error = param.String(default="", doc="last error message; empty when the last tick succeeded")
    stale_since = param.Number(default=None, allow_None=True, doc="wall time of the first failed tick")
    last_tick_wall = param.Number(default=None, allow_None=True, doc="wall time of the last good tick")
    period_s = param.Number(default=2.0, bounds=(0.05, None))
    errors_total = param.Integer(default=0)
    announcement = param.Dict(default=None, allow_None=True,
                              doc="the last change of the shared source: {id, text, by, wall_time}; every session "
                                  "shows it")

    def __init__(self, history: Optional[TickHistory] = None, **params):
        super().__init__(**params)
        self.history = history if history is not None else TickHistory()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------ writers

    def publish(self, tick: Tick, record: bool = True, fresh: bool = True) -> None:
        """Make ``tick`` the latest; clear any error; append its point to the history. ``fresh=False``: the same
        tick with something added later (a background ETA estimate): it replaces the tick on screen and leaves
        the source's status alone, so a failing source stays marked stale."""
        if record:
            self.history.append(record_from_tick(tick))
        with self._lock:
            if not fresh:
                self.param.update(tick=tick, revision=self.revision + 1)
                return
            self.param.update(tick=tick, last_tick_wall=tick.wall_time, error="", stale_since=None,
                              source_status="static" if self.source_kind == "snapshot" else "ok",
                              revision=self.revision + 1)

    def fail(self, message: str, when: Optional[float] = None) -> None:
        """Record a failed tick: keep the last good tick on screen and mark the data stale."""
        when = _time.time() if when is None else when
        with self._lock:
            self.param.update(error=message, stale_since=self.stale_since or when,
                              source_status="stale" if self.tick is not None else "error",
                              errors_total=self.errors_total + 1, revision=self.revision + 1)

    def reset(self, source_kind: str, source_label: str = "") -> None:
        """Forget everything: a new source is about to publish."""
        self.history.clear()
        with self._lock:
            self.param.update(tick=None, error="", stale_since=None, last_tick_wall=None,
                              source_status="starting", source_kind=source_kind, source_label=source_label,
                              source_detail="", revision=self.revision + 1)

    def announce(self, text: str, by: str = "", when: Optional[float] = None) -> dict:
        """Tell every session something changed for all of them (the shared source was switched)."""
        with self._lock:
            prev = self.announcement["id"] if self.announcement else 0
            note = {"id": prev + 1, "text": text, "by": by, "wall_time": _time.time() if when is None else when}
            self.param.update(announcement=note, revision=self.revision + 1)
        return note

    # ------------------------------------------------------------------------------------ readers

    def data_age_s(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds since the last good tick (``None`` before the first)."""
        if self.last_tick_wall is None:
            return None
        return max(0.0, (_time.time() if now is None else now) - self.last_tick_wall)

    def health(self, now: Optional[float] = None) -> dict:
        """Loop health for the overview and ``/healthz``: status, last tick, data age, error."""
        age = self.data_age_s(now)
        return {"status": self.source_status, "source": self.source_kind, "label": self.source_label,
                "detail": self.source_detail, "metrics": self.metrics_status,
                "last_tick_wall": self.last_tick_wall, "data_age_s": age, "stale_since": self.stale_since,
                "error": self.error, "errors_total": self.errors_total,
                "tick_index": self.tick.index if self.tick is not None else None,
                "ticks": self.tick.number if self.tick is not None else 0}
