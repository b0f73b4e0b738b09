"""Calibrate ETA ranges against the estimator's own past errors (online conformal prediction).

The forward runs' p10–p90 spread covers only the randomness the model draws (run times, arrivals); it says
nothing about the model being wrong, and on the simulator it held the actual start for 27–40 % of estimates
instead of 80 % (docs/eta.md). :class:`EtaCalibrator` remembers every estimate the planner made and, once the job
starts, how far off its p50 was, as a ratio on a log scale: ``r = log((actual + 1 min) / (p50 + 1 min))``.
A new estimate's range is then ``(p50 + 1 min) · exp(q) − 1 min`` for the 10th and 90th percentile ``q`` of the
past ratios (of its own queue once it has ``min_events`` outcomes, else of all queues), so it widens by as much
as the estimator has been missing on this cluster; the p50 stays the model's.

Jobs still waiting are right-censored residuals (their ratio is at least what it would be if they started now);
leaving them out would keep only the estimates that came true early and bias the range short on a backlogged
cluster. The residual distribution is therefore a Kaplan-Meier estimate over started (exact) and waiting
(censored) estimates. When it never falls to 10 % (most past estimates still waiting), the upper end is unknown
and reads "beyond the horizon". Before ``min_events`` estimates have an outcome the model's own range is kept and
the estimate says so (``range_basis``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from typing import Iterable, Optional

import numpy as np

from .report import EtaEstimate, EtaReport

OFFSET_S = 60.0
"""Added to waits before taking ratios, so a start at the next cycle is not an infinite relative error."""


@dataclass(frozen=True)
class ResidualQuantiles:
    """The log-ratio quantiles a calibrated range is built from, and how many outcomes they rest on."""

    low: float
    high: float          # inf: not reached yet (too many past estimates still waiting)
    events: int
    censored: int
    queue: Optional[str] = None   # whose estimates: None for all queues

    def range_s(self, p50_s: float) -> tuple[float, float]:
        """The calibrated (low, high) start, seconds from now, around a model p50 of ``p50_s`` (which it keeps:
        correcting the median by the past errors' median did not lower the error on the simulator, docs/eta.md)."""
        def scaled(q: float) -> float:
            return math.inf if math.isinf(q) else max(0.0, (p50_s + OFFSET_S) * math.exp(q) - OFFSET_S)
        return min(scaled(self.low), p50_s), max(scaled(self.high), p50_s)


def residual_quantiles(exact: Iterable[float], censored: Iterable[float], coverage: float = 0.8
                       ) -> Optional[ResidualQuantiles]:
    """Kaplan-Meier quantiles of log-ratio residuals: ``exact`` observed, ``censored`` known only as lower bounds.

    Returns the ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` quantiles (None without any exact residual).
    """
    exact = np.asarray(list(exact), dtype=float)
    censored = np.asarray(list(censored), dtype=float)
    if exact.size == 0:
        return None
    times = np.unique(exact)
    at_risk = (np.sum(exact[None, :] >= times[:, None], axis=1)
               + np.sum(censored[None, :] >= times[:, None], axis=1))
    deaths = np.sum(exact[None, :] == times[:, None], axis=1)
    survival = np.cumprod(1.0 - deaths / np.maximum(at_risk, 1))

    def quantile(q: float) -> float:
        below = np.nonzero(survival <= 1.0 - q + 1e-12)[0]   # first residual by which q of them have happened
        return float(times[below[0]]) if below.size else math.inf

    alpha = (1.0 - coverage) / 2.0
    return ResidualQuantiles(low=quantile(alpha), high=quantile(1.0 - alpha), events=int(exact.size),
                             censored=int(censored.size))


@dataclass
class _Open:
    job: str
    made_at: float
    p50_s: float
    queue: str


class EtaCalibrator:
    """Past estimates and their outcomes, and the ranges they calibrate (see the module doc).

    ``record(report)`` after each forward estimate, ``observe_started(job, time)`` when a job starts (or
    ``observe(snapshot)`` each tick to find them), ``calibrate(report)`` to widen a report's ranges.
    ``window``: most recent outcomes kept; ``max_age_s``: estimates older than this are forgotten.
    """

    def __init__(self, coverage: float = 0.8, *, min_events: int = 20, window: int = 2000,
                 max_age_s: float = 2 * 86400.0) -> None:
        if not 0.0 < coverage < 1.0:
            raise ValueError(f"EtaCalibrator: coverage must be in (0, 1), got {coverage}")
        self.coverage, self.min_events, self.window, self.max_age_s = coverage, min_events, window, max_age_s
        self._open: dict[str, list[_Open]] = {}
        self._exact: list[tuple[float, float, str]] = []   # (time the job started, residual, queue)
        self._lock = threading.Lock()

    def record(self, report: EtaReport) -> None:
        """Remember each finite, non-provisional p50 of ``report`` (made at ``report.time``)."""
        for e in report.estimates.values():
            if not (e.never or e.provisional):
                self.add(e.job, report.time, e.p50_s, e.queue)

    def add(self, job: str, made_at: float, p50_s: float, queue: str = "") -> None:
        """Remember one estimate: ``job`` (of ``queue``) expected to start ``p50_s`` after ``made_at``
        (non-finite: ignored)."""
        if not math.isfinite(p50_s):
            return
        with self._lock:
            self._open.setdefault(job, []).append(_Open(job, made_at, p50_s, queue))

    def observe_started(self, job: str, at: float) -> None:
        """``job`` started at ``at``: its open estimates become exact residuals."""
        with self._lock:
            self._close(job, at)

    def _close(self, job: str, at: float) -> None:
        """(Lock held.) ``job``'s open estimates become residuals of a start at ``at``, within the window."""
        for o in self._open.pop(job, []):
            actual = max(0.0, at - o.made_at)
            self._exact.append((at, math.log((actual + OFFSET_S) / (o.p50_s + OFFSET_S)), o.queue))
        if len(self._exact) > self.window:
            del self._exact[: len(self._exact) - self.window]

    def observe(self, snapshot) -> None:
        """Close the estimates of jobs no longer waiting in ``snapshot`` (started, or gone: those are dropped)."""
        from ..joblog import is_allocated, is_waiting   # local: joblog imports the model, not the ETA
        now = float(snapshot.time)
        waiting, started = set(), set()
        for job in snapshot.jobs:
            if is_waiting(job):
                waiting.add(job.key)
            elif is_allocated(job):
                started.add(job.key)
        with self._lock:
            for key in [k for k in self._open if k not in waiting]:
                if key in started:
                    self._close(key, now)
                else:
                    del self._open[key]
            horizon = now - self.max_age_s
            for key in list(self._open):
                kept = [o for o in self._open[key] if o.made_at >= horizon]
                if kept:
                    self._open[key] = kept
                else:
                    del self._open[key]
            self._exact = [x for x in self._exact if x[0] >= horizon]

    def quantiles(self, now: float, queue: Optional[str] = None) -> Optional[ResidualQuantiles]:
        """The residual quantiles as of ``now``, of ``queue``'s estimates when it has ``min_events`` outcomes,
        else of all queues (None below ``min_events`` outcomes in all)."""
        with self._lock:
            exact = [(r, q) for _, r, q in self._exact]
            censored = [(math.log((max(0.0, now - o.made_at) + OFFSET_S) / (o.p50_s + OFFSET_S)), o.queue)
                        for opens in self._open.values() for o in opens]
        if queue is not None:
            own = [r for r, q in exact if q == queue]
            if len(own) >= self.min_events:
                q = residual_quantiles(own, [r for r, q in censored if q == queue], self.coverage)
                return replace(q, queue=queue)
        if len(exact) < self.min_events:
            return None
        return residual_quantiles([r for r, _ in exact], [r for r, _ in censored], self.coverage)

    def calibrate(self, report: EtaReport) -> EtaReport:
        """``report`` with calibrated p10/p90 for every finite p50 (unchanged while too few outcomes)."""
        by_queue = {q: self.quantiles(report.time, q) for q in {e.queue for e in report.estimates.values()}}
        if all(q is None for q in by_queue.values()):
            return report
        return replace(report, estimates={k: _calibrated(e, by_queue[e.queue])
                                          for k, e in report.estimates.items()})

    @property
    def outcomes(self) -> int:
        """Past estimates whose job has started (the calibration's sample)."""
        return len(self._exact)


def _calibrated(e: EtaEstimate, q: Optional[ResidualQuantiles]) -> EtaEstimate:
    if q is None or e.never or not math.isfinite(e.p50_s):
        return e
    low, high = q.range_s(e.p50_s)
    scope = f"{e.queue}'s" if q.queue == e.queue else "all queues'"
    return replace(e, p10_s=low, p90_s=high,
                   range_basis=f"calibrated on {q.events} of {scope} past estimates")


__all__ = ["EtaCalibrator", "ResidualQuantiles", "residual_quantiles", "OFFSET_S"]
