"""Job lifecycles observed tick by tick: what a live loop remembers about jobs between snapshots.

A live source delivers snapshots, not events. :class:`JobLog` compares each snapshot with the last one it saw
and records, per job: arrival (its ``creation_time``), starts (no allocated task → some), interrupted runs
(allocated → none while the job stays: an eviction), completion (a job that was running disappears or all its
tasks succeeded) and deletion (a job that never ran disappears). It also keeps, per queue, the last jobs that
arrived as templates of what the queue submits, and an eviction list.

Its frames have the simulator's record columns (:mod:`scheduler.simulate.records`: ``JOB_COLUMNS``,
``EVICTION_COLUMNS``) plus a few, so the wait metrics (:mod:`scheduler.waits`) and the ETA's workload model
(:mod:`scheduler.eta.workload`) read a simulator's frames and a live log alike.

Which snapshot to observe: a simulated cluster applies the engine's decisions, so observe the state after them
(``result.snapshot``) and pass ``evictions=result.evicted``. A real cluster (the kube source) only does what KAI
does: observe the source's snapshot and leave ``evictions`` out; evictions are then derived from interrupted
runs (action ``""``: unknown).

Memory is bounded: finished jobs and evictions in deques (``max_rows``), templates ``templates_per_queue`` per
queue; jobs still present are one record each.
"""

from __future__ import annotations

import copy
import math
import re
from collections import deque
from typing import Iterable, Optional

import pandas as pd

from .fairshare import min_node_gpu_memory_mib
from .model import ALLOCATED_STATUSES, Job, Snapshot
from .simulate.records import EVICTION_COLUMNS, JOB_COLUMNS

LOG_JOB_COLUMNS = JOB_COLUMNS + ("priority", "gpus", "shape", "run_s", "start_known")
"""``JOB_COLUMNS`` plus: ``priority``, ``gpus`` (devices requested; a GPU-memory request as a fraction of the
smallest GPU, as KAI's queue accounting converts it), ``shape`` (e.g. ``"4x8 GPU"``), ``run_s`` (duration of
the last completed run: completion - last start; NaN otherwise) and ``start_known`` (False when the job was
already running when the log started and carried no ``last_start_time``: its ``run_s`` is then a lower
bound)."""


def job_shape(job: Job) -> str:
    """A label of what a job asks for: ``"4x8 GPU"``, ``"0.5 GPU"``, ``"10000 MiB"``, ``"cpu"``.

    Pods of one job usually ask for the same; the first GPU pod stands for all.
    """
    gpu_tasks = [t for t in job.tasks if t.is_gpu]
    n = len(job.tasks)
    if not gpu_tasks:
        return f"{n}x cpu" if n > 1 else "cpu"
    t = gpu_tasks[0]
    if t.gpu_memory_mib is not None:
        one = f"{t.gpu_memory_mib:g} MiB"
    else:
        one = f"{t.gpu:g} GPU"
    if t.gpu_devices > 1 and t.is_fractional:
        one += f" x{t.gpu_devices} devices"
    return f"{n}x{one}" if n > 1 else one


_SUFFIX = re.compile(r"([-_.](\d+|(?=[0-9a-f]*\d)[0-9a-f]{5,}))+$")


def name_stem(name: str) -> str:
    """A job name without its trailing counters and random suffixes: ``llm-train-0007`` and ``pg-bert-7f9c2``
    become ``llm-train`` and ``pg-bert`` (the same workload submitted again); a namespace prefix is dropped."""
    name = name.rsplit("/", 1)[-1]
    return _SUFFIX.sub("", name) or name


def job_gpus(job: Job, min_gpu_memory_mib: Optional[float]) -> float:
    """GPU devices a job requests; a GPU-memory request counts as that fraction of the smallest GPU."""
    return float(sum(t.gpus_on(min_gpu_memory_mib or 0.0) for t in job.tasks if t.is_gpu))


def is_allocated(job: Job) -> bool:
    """Some task of the job holds resources as running or binding (KAI's allocated)."""
    return any(t.status in ALLOCATED_STATUSES for t in job.tasks)


def is_waiting(job: Job) -> bool:
    """Not started: some task pending and none allocated (pipelined tasks wait too)."""
    return not is_allocated(job) and any(t.status in ("pending", "pipelined") for t in job.tasks)


def is_finished(job: Job) -> bool:
    return bool(job.tasks) and all(t.status in ("succeeded", "failed") for t in job.tasks)


class _Record:
    __slots__ = ("key", "queue", "arrival", "priority", "gpus", "shape", "first_start", "last_start",
                 "completion", "pending_since", "pending_s", "runs", "evictions", "status", "run_s", "start_known",
                 "allocated")

    def __init__(self, job: Job, now: float, gpus: float) -> None:
        self.key, self.queue, self.priority = job.key, job.queue, job.priority
        self.arrival = min(job.creation_time, now)
        self.gpus, self.shape = gpus, job_shape(job)
        self.first_start: Optional[float] = None
        self.last_start: Optional[float] = None
        self.completion: Optional[float] = None
        self.pending_since: Optional[float] = self.arrival
        self.pending_s = 0.0
        self.runs = self.evictions = 0
        self.status = "pending"
        self.run_s = math.nan
        self.start_known = True
        self.allocated = False

    def start(self, at: float, known: bool = True) -> None:
        if self.first_start is None:
            self.first_start = at
        self.last_start, self.start_known = at, known
        if self.pending_since is not None:
            self.pending_s += max(0.0, at - self.pending_since)
            self.pending_since = None
        self.runs += 1
        self.status, self.allocated = "running", True

    def interrupt(self, at: float) -> None:
        self.evictions += 1
        self.pending_since = at
        self.status, self.allocated = "pending", False

    def finish(self, at: float) -> None:
        if self.allocated and self.last_start is not None:
            self.completion = at
            self.run_s = at - self.last_start
            self.status = "completed"
        else:
            self.status = "deleted"
            if self.pending_since is not None:
                self.pending_s += max(0.0, at - self.pending_since)
                self.pending_since = None
        self.allocated = False

    def row(self, now: float) -> tuple:
        wait = self.first_start - self.arrival if self.first_start is not None else math.nan
        pending = self.pending_s + (max(0.0, now - self.pending_since) if self.pending_since is not None else 0.0)
        return (self.key, self.queue, self.arrival, _nan(self.first_start), _nan(self.last_start),
                _nan(self.completion), wait, pending, self.runs, self.evictions, self.status,
                self.priority, self.gpus, self.shape, self.run_s, self.start_known)


def _nan(x: Optional[float]) -> float:
    return math.nan if x is None else float(x)


class JobLog:
    """Bounded lifecycle record of the jobs seen in consecutive snapshots (see the module doc).

    ``observe(snapshot)`` once per tick; ``frames(now)`` for the records. The first snapshot seeds the log: jobs
    already running then count as started at their ``last_start_time`` (or the snapshot time, marked unknown).
    """

    def __init__(self, *, max_rows: int = 50_000, templates_per_queue: int = 50) -> None:
        self.max_rows = max_rows
        self.templates_per_queue = templates_per_queue
        self.start_time: Optional[float] = None
        self.time: Optional[float] = None
        self.active: dict[str, _Record] = {}
        self.finished: deque[_Record] = deque(maxlen=max_rows)
        self.finished_total = 0
        self.evictions: deque[tuple] = deque(maxlen=max_rows)
        self.evictions_total = 0
        self.templates: dict[str, deque[Job]] = {}
        self._seen: dict[str, Job] = {}     # the job object last observed per key

    def __len__(self) -> int:
        return len(self.active) + len(self.finished)

    @property
    def span_s(self) -> float:
        """Seconds of cluster time the log has observed."""
        return 0.0 if self.start_time is None else float(self.time - self.start_time)

    def observe(self, snapshot: Snapshot, evictions: Optional[Iterable] = None) -> None:
        """Record what changed since the last snapshot.

        ``evictions``: the :class:`~scheduler.decisions.Eviction` objects that really happened since the last
        call (a simulated cluster's ``result.evicted``); ``None`` derives one eviction row per interrupted run.
        """
        now = float(snapshot.time)
        first = self.start_time is None
        if first:
            self.start_time = now
        self.time = now
        min_mem = min_node_gpu_memory_mib(snapshot)
        present: set[str] = set()
        queue_of: dict[str, str] = {}
        for job in snapshot.jobs:
            key = job.key
            present.add(key)
            queue_of[key] = job.queue
            rec = self.active.get(key)
            if rec is not None and self._seen.get(key) is job:
                continue   # the same object as last tick: copy-on-write sources replace changed jobs
            self._seen[key] = job
            allocated = is_allocated(job)
            if rec is None:
                rec = self.active[key] = _Record(job, now, job_gpus(job, min_mem))
                if allocated:
                    known = job.last_start_time is not None
                    rec.start(job.last_start_time if known else now, known=known or not first)
                elif not first and not is_finished(job):
                    self._template(job)
            elif allocated and not rec.allocated:
                stamped = job.last_start_time
                fresh = stamped is not None and stamped > (rec.last_start or -math.inf) and stamped <= now
                rec.start(stamped if fresh else now)
            elif not allocated and rec.allocated and not is_finished(job):
                rec.interrupt(now)
                if evictions is None:
                    self._eviction(now, "", key, job.queue, "", None, "all running pods gone, job still present")
            if is_finished(job):
                self._finish(key, now)
        for key in [k for k in self.active if k not in present]:
            self._finish(key, now)
        for ev in evictions or ():
            self._eviction(now, ev.task, ev.job, queue_of.get(ev.job), ev.action, ev.preemptor, ev.message)

    def _finish(self, key: str, now: float) -> None:
        rec = self.active.pop(key, None)
        self._seen.pop(key, None)
        if rec is None:
            return
        rec.finish(now)
        self.finished.append(rec)
        self.finished_total += 1

    def _eviction(self, now, task, job, queue, action, preemptor, cause) -> None:
        self.evictions.append((now, task, job, queue, action, preemptor, cause))
        self.evictions_total += 1

    def _template(self, job: Job) -> None:
        if self.templates_per_queue <= 0:
            return
        q = self.templates.setdefault(job.queue, deque(maxlen=self.templates_per_queue))
        q.append(copy.deepcopy(job))

    # ------------------------------------------------------------------------------------------ frames
    def jobs_frame(self, now: Optional[float] = None) -> pd.DataFrame:
        """One row per job (finished first, then present), columns :data:`LOG_JOB_COLUMNS`."""
        now = self.time if now is None else now
        rows = [r.row(now) for r in self.finished] + [r.row(now) for r in self.active.values()]
        frame = pd.DataFrame(rows, columns=list(LOG_JOB_COLUMNS))
        frame.attrs["dropped_rows"] = self.finished_total - len(self.finished)
        frame.attrs["start_time"] = self.start_time
        return frame

    def evictions_frame(self) -> pd.DataFrame:
        """One row per eviction, columns ``EVICTION_COLUMNS`` (``action`` empty when derived)."""
        frame = pd.DataFrame(list(self.evictions), columns=list(EVICTION_COLUMNS))
        frame.attrs["dropped_rows"] = self.evictions_total - len(self.evictions)
        return frame

    def frames(self, now: Optional[float] = None) -> dict[str, pd.DataFrame]:
        """``{"jobs", "evictions"}``, the same keys and columns as the simulator's ``frames()`` has."""
        return {"jobs": self.jobs_frame(now), "evictions": self.evictions_frame()}


__all__ = ["JobLog", "LOG_JOB_COLUMNS", "job_shape", "name_stem", "job_gpus", "is_allocated", "is_waiting",
           "is_finished"]
