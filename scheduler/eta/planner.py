"""When to re-estimate, and what to show in between: the ETA in a live loop.

A forward estimate costs seconds (docs/eta.md), a tick should not. :class:`EtaPlanner` keeps the last report and
re-bases it to each new snapshot (:meth:`current`: start times move closer by the time elapsed, jobs that started
drop out, jobs that arrived since get a provisional estimate behind their queue's waiting jobs). :meth:`due` says
when a new estimate is worth its cost: ``every_s`` after the last one, or sooner (not before
``min_interval_s``) when the waiting set changed by more than ``changed_fraction`` or a job is still waiting
past its p90. :meth:`refresh_in_background` runs one estimate at a time on a daemon thread, so the loop never
waits for it. An :class:`~scheduler.eta.calibration.EtaCalibrator` learns from the planner's own past
estimates (:meth:`observe` each tick tells it which jobs started) and :meth:`current` widens the ranges by as much
as the estimates have been missing.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from typing import Callable, Optional

from ..fairshare import min_node_gpu_memory_mib
from ..joblog import is_allocated, is_waiting, job_gpus, job_shape
from ..model import Snapshot
from .calibration import EtaCalibrator
from .estimate import EtaConfig, estimate_eta
from .report import EtaEstimate, EtaReport
from .workload import WorkloadModel


class EtaPlanner:
    """The last ETA report, re-based per snapshot, and the decision to make a new one (see the module doc)."""

    def __init__(self, config: Optional[EtaConfig] = None, *, every_s: float = 300.0, min_interval_s: float = 30.0,
                 changed_fraction: float = 0.25,
                 estimate: Callable[..., EtaReport] = estimate_eta,
                 calibrator: Optional[EtaCalibrator] = None) -> None:
        self.config = config or EtaConfig()
        self.calibrator = calibrator if calibrator is not None else EtaCalibrator()
        self.every_s, self.min_interval_s, self.changed_fraction = every_s, min_interval_s, changed_fraction
        self._estimate = estimate
        self.report: Optional[EtaReport] = None
        self.last_error: Optional[str] = None
        self.refreshes = 0
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        """An estimate is running in the background."""
        return self._thread is not None and self._thread.is_alive()

    def due(self, snapshot: Snapshot) -> bool:
        """True when a new estimate is worth making for ``snapshot`` (see the module doc)."""
        report = self.report
        if report is None:
            return True
        age = float(snapshot.time) - report.time
        if age >= self.every_s:
            return True
        if age < self.min_interval_s:
            return False
        waiting = {j.key for j in snapshot.jobs if is_waiting(j)}
        known = set(report.estimates)
        changed = len(waiting ^ known)
        if changed > self.changed_fraction * max(1, len(known)):
            return True
        return any(not e.never and not math.isinf(e.p90_s) and e.p90_s < age
                   for k, e in report.estimates.items() if k in waiting)

    def refresh(self, snapshot: Snapshot, workload: Optional[WorkloadModel] = None) -> EtaReport:
        """Make a new estimate now (blocking) and keep it."""
        report = self._estimate(snapshot, workload, self.config)
        self.calibrator.record(report)
        with self._lock:
            self.report = report
            self.refreshes += 1
            self.last_error = None
        return report

    def refresh_in_background(self, snapshot: Snapshot, workload: Optional[WorkloadModel] = None) -> bool:
        """Start :meth:`refresh` on a daemon thread unless one is running; True if it started."""
        with self._lock:
            if self.busy:
                return False
            self._thread = threading.Thread(target=self._run, args=(snapshot, workload), name="kaidash-eta",
                                            daemon=True)
            self._thread.start()
        return True

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for a background estimate to finish (tests, notebooks)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, snapshot: Snapshot, workload: Optional[WorkloadModel]) -> None:
        try:
            self.refresh(snapshot, workload)
        except Exception as exc:  # noqa: BLE001 — an estimate must never take the loop down
            self.last_error = f"{type(exc).__name__}: {exc}"

    def observe(self, snapshot: Snapshot) -> None:
        """Tell the calibrator which estimated jobs have started by ``snapshot`` (call once per tick)."""
        self.calibrator.observe(snapshot)

    def current(self, snapshot: Snapshot) -> Optional[EtaReport]:
        """The last report re-based to ``snapshot``, ranges calibrated (None before the first estimate)."""
        report = self.report
        if report is None:
            return None
        return self.calibrator.calibrate(rebase(report, snapshot))


def rebase(report: EtaReport, snapshot: Snapshot) -> EtaReport:
    """``report`` as of ``snapshot.time``: estimates shifted, started jobs dropped, new waiting jobs provisional
    (behind the waiting jobs of their queue: its longest p50; unknown when the queue had none)."""
    elapsed = max(0.0, float(snapshot.time) - report.time)
    min_mem = min_node_gpu_memory_mib(snapshot)
    estimates: dict[str, EtaEstimate] = {}
    for job in snapshot.jobs:
        if not is_waiting(job):
            continue
        old = report.estimates.get(job.key)
        if old is not None:
            estimates[job.key] = old.shifted(elapsed)
            continue
        queue_p50 = [e.p50_s for e in report.estimates.values() if e.queue == job.queue and not e.never]
        guess = max(0.0, max(queue_p50) - elapsed) if queue_p50 else math.nan
        estimates[job.key] = EtaEstimate(
            job=job.key, queue=job.queue, priority=job.priority, gpus=job_gpus(job, min_mem), shape=job_shape(job),
            waiting_s=max(0.0, float(snapshot.time) - job.creation_time), p10_s=guess, p50_s=guess, p90_s=guess,
            started_runs=0, runs=0, horizon_s=report.horizon_s,
            blocker="behind the queue's waiting jobs" if queue_p50 else "", provisional=True)
    allocated = {j.key for j in snapshot.jobs if is_allocated(j)}
    running = {k: replace(r, elapsed_s=r.elapsed_s + elapsed, end_p10_s=max(0.0, r.end_p10_s - elapsed),
                          end_p50_s=max(0.0, r.end_p50_s - elapsed), end_p90_s=max(0.0, r.end_p90_s - elapsed))
               for k, r in report.running.items() if k in allocated}
    return replace(report, time=float(snapshot.time), estimates=estimates, running=running)


__all__ = ["EtaPlanner", "rebase"]
