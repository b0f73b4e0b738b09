"""The ETA's output: one :class:`EtaEstimate` per waiting job, one :class:`RunningEstimate` per running job, and
the :class:`EtaReport` holding them with frames for views, tables and CSV.

Times are seconds from the report's ``time`` (the snapshot's); ``math.inf`` means "not within the horizon".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

import pandas as pd


def format_duration(seconds: float) -> str:
    """``"<1 min"``, ``"40 min"``, ``"2.5 h"``, ``"3.0 d"``; ``"∞"`` for inf."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if math.isinf(seconds):
        return "∞"
    if seconds < 60:
        return "<1 min"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@dataclass
class EtaEstimate:
    """When a waiting job is expected to start: quantiles over the forward runs, and what it waits for.

    ``p10_s``/``p50_s``/``p90_s``: start, seconds after the report time (inf: not within the horizon in that
    share of runs). ``blocker``: the most common reason it could start across runs ("after llm/train-7
    finishes"); ``blocker_job`` the job named; ``blocker_duration_source`` where that job's run time came from.
    ``reason``/``message``: the engine's reason it waits now. ``never``: it cannot start on this cluster at all
    (``message`` says why), so it was not simulated. ``range_basis``: ``"model"`` when p10/p90 are the spread of
    the forward runs, else how they were calibrated (:mod:`scheduler.eta.calibration`).
    """

    job: str
    queue: str
    priority: int
    gpus: float
    shape: str
    waiting_s: float
    p10_s: float
    p50_s: float
    p90_s: float
    started_runs: int
    runs: int
    horizon_s: float
    blocker: str = ""
    blocker_job: Optional[str] = None
    blocker_duration_source: Optional[str] = None
    reason: Optional[str] = None
    message: str = ""
    never: bool = False
    provisional: bool = False
    range_basis: str = "model"

    @property
    def text(self) -> str:
        """One line for a person: ``"starts in ~40 min (20 min–1.5 h), after llm/train-7 finishes"``."""
        if self.never:
            return f"cannot start on this cluster: {self.message}"
        prefix = "likely " if self.provisional else ""   # provisional: rebased from its queue, not its own runs
        if math.isnan(self.p50_s):
            return "no estimate yet (at the next refresh)"
        if math.isinf(self.p50_s):
            why = f" ({self.reason}: {self.message})" if self.reason else ""
            return f"not within {format_duration(self.horizon_s)}{why}"
        if self.p90_s < 60:
            return f"{prefix}starts at the next cycle"
        hi = f">{format_duration(self.horizon_s)}" if math.isinf(self.p90_s) else format_duration(self.p90_s)
        lo = format_duration(self.p10_s)
        spread = f" ({lo}–{hi})" if lo != hi else ""      # every run agreed (or one run): no range to show
        text = f"{prefix}starts in ~{format_duration(self.p50_s)}{spread}"
        return f"{text}, {self.blocker}" if self.blocker else text

    def shifted(self, elapsed_s: float) -> "EtaEstimate":
        """The same estimate ``elapsed_s`` later (start times move closer, waits grow)."""
        def move(x: float) -> float:
            return x if math.isinf(x) else max(0.0, x - elapsed_s)
        return replace(self, waiting_s=self.waiting_s + elapsed_s, p10_s=move(self.p10_s), p50_s=move(self.p50_s),
                       p90_s=move(self.p90_s))


@dataclass
class RunningEstimate:
    """When a running job is expected to finish (the completions the forward runs assumed)."""

    job: str
    queue: str
    started: Optional[float]
    elapsed_s: float
    end_p10_s: float
    end_p50_s: float
    end_p90_s: float
    duration_source: str


ESTIMATE_COLUMNS = ["job", "queue", "priority", "gpus", "shape", "waiting_s", "eta_p10_s", "eta_p50_s", "eta_p90_s",
                    "start_p50", "started_runs", "runs", "blocker", "blocker_job", "blocker_duration_source",
                    "reason", "never", "provisional", "range_basis", "text"]
"""Columns of :meth:`EtaReport.frame` (``start_p50``: absolute time, seconds since the epoch; inf beyond)."""

QUEUE_COLUMNS = ["queue", "pending_jobs", "never", "next_start_s", "eta_p50_s", "eta_max_s", "beyond_horizon"]


@dataclass
class EtaReport:
    """All estimates of one forward simulation (see :func:`scheduler.eta.estimate_eta`).

    ``runs``: forward runs made; ``sessions``: engine sessions over all runs; ``wall_ms``: what it cost;
    ``arrivals_per_h``: the arrival rates the runs drew from (empty: arrivals not modelled); ``notes``: what the
    estimate could not know.
    """

    time: float
    estimates: dict[str, EtaEstimate]
    running: dict[str, RunningEstimate]
    runs: int
    sessions: int
    wall_ms: float
    horizon_s: float
    arrivals_per_h: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    made_at: Optional[float] = None

    def __getitem__(self, key: str) -> EtaEstimate:
        return self.estimates[key]

    def __len__(self) -> int:
        return len(self.estimates)

    def frame(self) -> pd.DataFrame:
        """One row per waiting job (:data:`ESTIMATE_COLUMNS`), soonest first: the Pending view's table."""
        rows = []
        for e in self.estimates.values():
            rows.append([e.job, e.queue, e.priority, e.gpus, e.shape, e.waiting_s, e.p10_s, e.p50_s, e.p90_s,
                         self.time + e.p50_s, e.started_runs, e.runs, e.blocker, e.blocker_job,
                         e.blocker_duration_source, e.reason, e.never, e.provisional, e.range_basis, e.text])
        frame = pd.DataFrame(rows, columns=ESTIMATE_COLUMNS)
        return frame.sort_values(["eta_p50_s", "waiting_s"], ascending=[True, False], kind="stable",
                                 ignore_index=True)

    def running_frame(self) -> pd.DataFrame:
        """One row per running job: expected end (seconds from the report time) and where its run time came from."""
        frame = pd.DataFrame([asdict(r) for r in self.running.values()],
                             columns=["job", "queue", "started", "elapsed_s", "end_p10_s", "end_p50_s", "end_p90_s",
                                      "duration_source"])
        return frame.sort_values("end_p50_s", kind="stable", ignore_index=True)

    def queue_frame(self) -> pd.DataFrame:
        """Per queue with waiting jobs: how many, the next expected start, the median and the longest expected
        wait (p50 of each job; seconds from now), and how many are not expected within the horizon."""
        rows = []
        by_queue: dict[str, list[EtaEstimate]] = {}
        for e in self.estimates.values():
            by_queue.setdefault(e.queue, []).append(e)
        for queue in sorted(by_queue):
            es = by_queue[queue]
            p50 = sorted(e.p50_s for e in es if not e.never)
            rows.append([queue, len(es), sum(e.never for e in es), p50[0] if p50 else math.nan,
                         _median(p50), p50[-1] if p50 else math.nan, sum(math.isinf(x) for x in p50)])
        return pd.DataFrame(rows, columns=QUEUE_COLUMNS)

    def queue_wait_s(self, queue: str) -> float:
        """The median expected wait of ``queue``'s waiting jobs (seconds; 0 when none waits; NaN when none of
        them has an estimate yet: jobs that arrived after the estimate in a queue it had no waiting job of)."""
        mine = [e.p50_s for e in self.estimates.values() if e.queue == queue and not e.never]
        known = sorted(p for p in mine if not math.isnan(p))
        return _median(known) if known else (math.nan if mine else 0.0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready document (inf written as null)."""
        def clean(v):
            return None if isinstance(v, float) and (math.isinf(v) or math.isnan(v)) else v
        return {"time": self.time, "runs": self.runs, "sessions": self.sessions, "wall_ms": round(self.wall_ms, 1),
                "horizon_s": self.horizon_s, "arrivals_per_h": self.arrivals_per_h, "notes": self.notes,
                "pending": [{k: clean(v) for k, v in {**asdict(e), "text": e.text}.items()}
                            for e in self.estimates.values()],
                "running": [{k: clean(v) for k, v in asdict(r).items()} for r in self.running.values()]}


def _median(values: list[float]) -> float:
    if not values:
        return math.nan
    n = len(values)
    mid = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return mid if not math.isnan(mid) else math.inf


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile that treats inf as larger than everything (inf if a neighbour is inf)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if math.isinf(xs[hi]) or math.isinf(xs[lo]):
        return xs[hi] if pos - lo > 1e-12 or math.isinf(xs[lo]) else xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


__all__ = ["EtaEstimate", "RunningEstimate", "EtaReport", "format_duration", "quantile", "ESTIMATE_COLUMNS",
           "QUEUE_COLUMNS"]
