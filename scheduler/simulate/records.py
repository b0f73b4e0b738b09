"""What a simulation recorded, in bounded memory, and the pandas frames built from it.

- per queue per executed cycle: allocated (gpu, cpu, memory), fair share (gpu, cpu, memory), deserved and
  requested GPUs, normalised historical GPU usage, pending and running jobs;
- per cluster per executed cycle: GPUs allocatable/allocated, allocation ratio, pending/running jobs,
  cumulative arrivals and completions, evictions in that cycle, session time;
- evictions: time, task, job, queue, action, preemptor, cause;
- job lifecycle: arrival, first and last start, completion, wait, time spent pending, runs, evictions.

Tick series live in fixed-size numpy chunks; when more than ``max_ticks`` ticks were recorded the oldest chunk
is dropped, so memory stays bounded however long the run (the live loop runs for days). Evictions and finished
jobs are kept in ``deque(maxlen=...)``; the frames say how many rows were dropped in ``DataFrame.attrs``.
Between two recorded cycles nothing changed (cycles where nothing could change are skipped), so every tick
series is a step function: a row holds until the next row's time.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional, Sequence

import numpy as np
import pandas as pd

QUEUE_METRICS = ("allocated_gpu", "allocated_cpu", "allocated_memory",
                 "fair_share_gpu", "fair_share_cpu", "fair_share_memory",
                 "deserved_gpu", "requested_gpu", "usage_gpu", "pending_jobs", "running_jobs")
CLUSTER_METRICS = ("gpus_total", "gpus_allocated", "gpu_utilisation", "pending_jobs", "running_jobs",
                   "arrived", "completed", "evicted", "session_ms")
EVICTION_COLUMNS = ("time", "task", "job", "queue", "action", "preemptor", "cause")
JOB_COLUMNS = ("job", "queue", "arrival", "first_start", "last_start", "completion", "wait_s", "pending_s",
               "runs", "evictions", "status")


class ChunkedSeries:
    """Rows of a fixed shape appended one at a time into preallocated chunks; keeps the last ``max_rows``."""

    def __init__(self, row_shape: tuple[int, ...], max_rows: int, chunk_rows: int = 4096,
                 dtype=np.float64) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows: must be at least 1, got {max_rows}")
        self.row_shape = tuple(row_shape)
        self.max_rows = int(max_rows)
        self.chunk_rows = int(min(chunk_rows, max_rows))
        self.dtype = dtype
        self._chunks: list[np.ndarray] = []
        self._fill = 0              # rows used in the last chunk
        self.dropped = 0            # rows discarded from the front so far

    def __len__(self) -> int:
        if not self._chunks:
            return 0
        held = (len(self._chunks) - 1) * self.chunk_rows + self._fill
        return min(held, self.max_rows)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._chunks)

    def append(self, row) -> None:
        if not self._chunks or self._fill == self.chunk_rows:
            self._chunks.append(np.empty((self.chunk_rows, *self.row_shape), dtype=self.dtype))
            self._fill = 0
            # Drop the oldest chunk while the rest (with the row about to be written) still holds max_rows;
            # the partial excess is trimmed on read.
            while (len(self._chunks) - 2) * self.chunk_rows + 1 >= self.max_rows:
                self._chunks.pop(0)
                self.dropped += self.chunk_rows
        self._chunks[-1][self._fill] = row
        self._fill += 1

    def to_array(self) -> np.ndarray:
        """The kept rows, oldest first (a new array)."""
        if not self._chunks:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        parts = self._chunks[:-1] + [self._chunks[-1][: self._fill]]
        out = np.concatenate(parts)
        return out[-self.max_rows:]

    def total_dropped(self) -> int:
        held = (len(self._chunks) - 1) * self.chunk_rows + self._fill if self._chunks else 0
        return self.dropped + max(0, held - self.max_rows)


class JobRecord:
    """Lifecycle of one job in the simulation."""

    __slots__ = ("key", "queue", "arrival", "first_start", "last_start", "completion", "pending_since",
                 "pending_s", "runs", "evictions", "status")

    def __init__(self, key: str, queue: str, arrival: float, *, running_since: Optional[float] = None) -> None:
        self.key, self.queue, self.arrival = key, queue, arrival
        self.first_start: Optional[float] = running_since
        self.last_start: Optional[float] = running_since
        self.completion: Optional[float] = None
        self.pending_since: Optional[float] = None if running_since is not None else arrival
        self.pending_s = 0.0
        self.runs = 1 if running_since is not None else 0
        self.evictions = 0
        self.status = "running" if running_since is not None else "pending"

    def started(self, time: float) -> None:
        if self.first_start is None:
            self.first_start = time
        self.last_start = time
        if self.pending_since is not None:
            self.pending_s += time - self.pending_since
            self.pending_since = None
        self.runs += 1
        self.status = "running"

    def evicted(self, time: float) -> None:
        """The job lost its last running task: it waits again (restarted from scratch when placed again)."""
        self.pending_since = time
        self.status = "pending"

    def completed(self, time: float) -> None:
        self.completion = time
        self.status = "completed"

    def withdrawn(self, time: float) -> None:
        """Its owner gave up waiting and deleted it (it never ran)."""
        if self.pending_since is not None:
            self.pending_s += time - self.pending_since
            self.pending_since = None
        self.status = "withdrawn"

    def row(self, now: float) -> tuple:
        wait = (self.first_start - self.arrival) if self.first_start is not None else math.nan
        pending = self.pending_s + ((now - self.pending_since) if self.pending_since is not None else 0.0)
        return (self.key, self.queue, self.arrival, _nan(self.first_start), _nan(self.last_start),
                _nan(self.completion), wait, pending, self.runs, self.evictions, self.status)


def _nan(x: Optional[float]) -> float:
    return math.nan if x is None else x


class Recorder:
    """Bounded record of a simulation (see module doc). ``max_ticks`` caps the tick series, ``max_events``
    the eviction rows and the finished-job rows (each)."""

    def __init__(self, queue_names: Sequence[str], start_time: float, *, max_ticks: int = 86_400,
                 max_events: int = 100_000) -> None:
        self.queue_names = list(queue_names)
        self.start_time = float(start_time)
        self.times = ChunkedSeries((), max_ticks)
        self.queues = ChunkedSeries((len(self.queue_names), len(QUEUE_METRICS)), max_ticks, dtype=np.float32)
        self.cluster = ChunkedSeries((len(CLUSTER_METRICS),), max_ticks)
        self.evictions: deque[tuple] = deque(maxlen=max_events)
        self.evictions_total = 0
        self.active_jobs: dict[str, JobRecord] = {}
        self.finished_jobs: deque[JobRecord] = deque(maxlen=max_events)
        self.finished_total = 0

    # -- ticks
    def tick(self, time: float, queue_rows: np.ndarray, cluster_row: Sequence[float]) -> None:
        """Record one executed cycle: ``queue_rows`` is ``queues × len(QUEUE_METRICS)``."""
        self.times.append(time)
        self.queues.append(queue_rows)
        self.cluster.append(np.asarray(cluster_row, dtype=float))

    # -- events
    def eviction(self, time: float, task: str, job: str, queue: Optional[str], action: str,
                 preemptor: Optional[str], cause: str) -> None:
        self.evictions.append((time, task, job, queue, action, preemptor, cause))
        self.evictions_total += 1

    def job_arrived(self, key: str, queue: str, time: float, *, running_since: Optional[float] = None) -> JobRecord:
        rec = JobRecord(key, queue, time, running_since=running_since)
        self.active_jobs[key] = rec
        return rec

    def job_finished(self, key: str, time: float) -> None:
        self._close(key, time, JobRecord.completed)

    def job_withdrawn(self, key: str, time: float) -> None:
        """A job that never ran left the cluster (its owner gave up waiting)."""
        self._close(key, time, JobRecord.withdrawn)

    def _close(self, key: str, time: float, end) -> None:
        rec = self.active_jobs.pop(key, None)
        if rec is None:
            return
        end(rec, time)
        self.finished_jobs.append(rec)
        self.finished_total += 1

    # -- frames
    def frames(self, now: float) -> dict[str, pd.DataFrame]:
        """``{"queues", "cluster", "evictions", "jobs"}`` as DataFrames (new objects; safe to keep)."""
        times = self.times.to_array()
        elapsed = times - self.start_time
        q = self.queues.to_array().astype(np.float64)                 # ticks × queues × metrics
        nt, nq = len(times), len(self.queue_names)
        queues = pd.DataFrame(q.reshape(nt * nq, len(QUEUE_METRICS)), columns=list(QUEUE_METRICS))
        queues.insert(0, "queue", pd.Categorical(np.tile(np.array(self.queue_names, dtype=object), nt),
                                                 categories=self.queue_names))
        queues.insert(0, "elapsed_s", np.repeat(elapsed, nq))
        queues.insert(0, "time", np.repeat(times, nq))
        for col in ("pending_jobs", "running_jobs"):
            queues[col] = queues[col].astype(np.int64)
        queues.attrs["dropped_ticks"] = self.times.total_dropped()

        cluster = pd.DataFrame(self.cluster.to_array(), columns=list(CLUSTER_METRICS))
        cluster.insert(0, "elapsed_s", elapsed)
        cluster.insert(0, "time", times)
        for col in ("pending_jobs", "running_jobs", "arrived", "completed", "evicted"):
            cluster[col] = cluster[col].astype(np.int64)
        cluster.attrs["dropped_ticks"] = self.times.total_dropped()

        evictions = pd.DataFrame(list(self.evictions), columns=list(EVICTION_COLUMNS))
        evictions.insert(1, "elapsed_s", evictions["time"] - self.start_time if len(evictions) else [])
        evictions.attrs["dropped_rows"] = self.evictions_total - len(self.evictions)

        rows = [r.row(now) for r in self.finished_jobs] + [r.row(now) for r in self.active_jobs.values()]
        jobs = pd.DataFrame(rows, columns=list(JOB_COLUMNS))
        jobs.attrs["dropped_rows"] = self.finished_total - len(self.finished_jobs)
        return {"queues": queues, "cluster": cluster, "evictions": evictions, "jobs": jobs}
