"""What the forward simulation assumes about the future: how long jobs run and what arrives.

:class:`WorkloadModel` is built from a job history (a :class:`~scheduler.joblog.JobLog` on a live cluster, or a
simulator's ``frames()["jobs"]``):

- **durations**: for the most specific group of similar jobs with at least ``min_samples`` runs, two of them
  completed (same queue, name stem and shape; queue and stem; queue and shape; queue; all; the *stem* is the
  name without its trailing counter or random suffix, :func:`~scheduler.joblog.name_stem`), a Kaplan-Meier
  estimate of the run time in which runs still going count as censored observations (a
  history of finished runs alone under-represents long jobs: they have not finished yet). A running job that has
  already run ``e`` seconds draws from the distribution conditioned on ``> e``. Beyond the longest observed run
  the tail is ``t_max · (1 + U)``. With no history at all a job is *assumed* to run a log-normal time with median
  :data:`ASSUMED_MEDIAN_S` (σ = 1).
- **arrivals**: per queue, a Poisson process at the rate observed over the last ``window_s`` (only arrivals after
  the history started count), each arrival a copy of one of the queue's recent jobs (the log's templates).

Every draw comes from the caller's ``random.Random``: the same seed gives the same future.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import numpy as np
import pandas as pd

from ..joblog import JobLog, job_shape, name_stem
from ..model import Job

ASSUMED_MEDIAN_S = 3600.0
"""Median run time assumed for a job when the history has no runs at all (log-normal, σ = 1)."""

RECORDED = "recorded"
ASSUMED = "assumed"


@dataclass
class DurationPool:
    """A Kaplan-Meier run-time distribution: ``times`` (ascending) and survival ``S(t)`` just after each."""

    label: str
    times: np.ndarray
    survival: np.ndarray
    events: int

    @classmethod
    def fit(cls, label: str, finished: np.ndarray, running: np.ndarray) -> "DurationPool":
        """Kaplan-Meier over ``finished`` run times (events) and ``running`` elapsed times (censored)."""
        finished = np.asarray(finished, dtype=float)
        running = np.asarray(running, dtype=float)
        times = np.unique(finished)
        at_risk = (np.sum(finished[None, :] >= times[:, None], axis=1)
                   + np.sum(running[None, :] >= times[:, None], axis=1))
        deaths = np.sum(finished[None, :] == times[:, None], axis=1)
        survival = np.cumprod(1.0 - deaths / np.maximum(at_risk, 1))
        return cls(label, times, survival, int(len(finished)))

    def survival_at(self, t: float) -> float:
        """``S(t)``: the share of runs still going after ``t`` seconds."""
        i = int(np.searchsorted(self.times, t, side="right"))
        return 1.0 if i == 0 else float(self.survival[i - 1])

    def sample(self, elapsed_s: float, rng: random.Random) -> float:
        """A total run time ``> elapsed_s`` drawn from the distribution conditioned on surviving ``elapsed_s``."""
        s_e = self.survival_at(elapsed_s)
        u = rng.random() * s_e       # S(T) <= u  <=>  T beyond the point where survival falls to u
        i = int(np.searchsorted(-self.survival, -u, side="left"))   # first index with survival <= u
        if s_e <= 0 or i >= len(self.times):
            t_max = max(float(self.times[-1]) if len(self.times) else 0.0, elapsed_s, 1.0)
            return t_max * (1.0 + rng.random())
        return max(float(self.times[i]), elapsed_s)

    def median_s(self) -> float:
        i = int(np.searchsorted(-self.survival, -0.5, side="left"))
        return float(self.times[i]) if i < len(self.times) else math.inf


@dataclass
class WorkloadModel:
    """Durations and arrivals the forward simulation draws from (see the module doc).

    ``runs``: a frame with ``queue``, ``stem``, ``shape``, ``run_s`` (completed runs); ``running``: one row per
    run still going with ``queue``, ``stem``, ``shape``, ``elapsed_s`` (``stem``/``shape`` may be missing);
    ``rates_per_s``: arrivals per second per queue;
    ``templates``: recent jobs per queue (copied for each synthetic arrival).
    """

    runs: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["queue", "stem", "shape", "run_s"]))
    running: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["queue", "stem", "shape",
                                                                                "elapsed_s"]))
    rates_per_s: dict[str, float] = field(default_factory=dict)
    templates: dict[str, list[Job]] = field(default_factory=dict)
    window_s: float = 0.0
    min_samples: int = 5
    _pools: dict = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------------------------ building
    @classmethod
    def from_frames(cls, jobs: pd.DataFrame, now: float, *, start_time: Optional[float] = None,
                    window_s: float = 6 * 3600.0, templates: Optional[Mapping[str, Iterable[Job]]] = None,
                    min_span_s: float = 600.0, min_samples: int = 5) -> "WorkloadModel":
        """From a job-history frame (``JobLog.jobs_frame()`` or a simulator's ``frames()["jobs"]``).

        ``start_time``: when the history began (default: the frame's ``attrs["start_time"]``, else its first
        arrival); only arrivals after it count toward rates, and with less than ``min_span_s`` of history no
        arrival rate is estimated. A frame without ``shape`` groups durations per queue only.
        """
        jobs = jobs.copy()
        if "shape" not in jobs:
            jobs["shape"] = ""
        if "start_known" not in jobs:
            jobs["start_known"] = True
        done = jobs[(jobs["status"] == "completed") & jobs["completion"].notna() & jobs["last_start"].notna()
                    & jobs["start_known"].astype(bool)]
        runs = pd.DataFrame({"queue": done["queue"].astype(str), "stem": done["job"].map(name_stem),
                             "shape": done["shape"].astype(str),
                             "run_s": (done["completion"] - done["last_start"]).astype(float)})
        going = jobs[(jobs["status"] == "running") & jobs["last_start"].notna()]
        running = pd.DataFrame({"queue": going["queue"].astype(str), "stem": going["job"].map(name_stem),
                                "shape": going["shape"].astype(str),
                                "elapsed_s": (now - going["last_start"]).clip(lower=0).astype(float)})
        if start_time is None:
            start_time = jobs.attrs.get("start_time")
        if start_time is None:
            start_time = float(jobs["arrival"].min()) if len(jobs) else now
        since = max(float(start_time), now - window_s)
        span = now - since
        rates: dict[str, float] = {}
        if span >= min_span_s:
            arrived = jobs[(jobs["arrival"] > since) & (jobs["arrival"] > float(start_time))]
            rates = {str(q): n / span for q, n in arrived.groupby("queue", observed=True).size().items() if n}
        return cls(runs=runs, running=running, rates_per_s=rates,
                   templates={q: list(t) for q, t in (templates or {}).items()}, window_s=span,
                   min_samples=min_samples)

    @classmethod
    def from_log(cls, log: JobLog, now: Optional[float] = None, **options) -> "WorkloadModel":
        """From a :class:`~scheduler.joblog.JobLog`: its jobs frame and its templates."""
        now = log.time if now is None else now
        if now is None:
            return cls()
        return cls.from_frames(log.jobs_frame(now), now, start_time=log.start_time, templates=log.templates,
                               **options)

    # ------------------------------------------------------------------------------------ durations
    def pool(self, queue: str, shape: str, stem: str = "") -> Optional[DurationPool]:
        """The run-time distribution of the most specific group of similar jobs with at least ``min_samples``
        runs (finished or going), two of them finished; None when even the whole history has too few."""
        key = (queue, stem, shape)
        if key not in self._pools:
            self._pools[key] = self._fit(queue, stem, shape)
        return self._pools[key]

    def _fit(self, queue: str, stem: str, shape: str) -> Optional[DurationPool]:
        runs, running = self.runs, self.running

        def match(frame: pd.DataFrame, q: bool, st: bool, sh: bool) -> np.ndarray:
            m = np.ones(len(frame), bool)
            for use, col, value in ((q, "queue", queue), (st, "stem", stem), (sh, "shape", shape)):
                if use:
                    m &= (frame[col] == value).to_numpy() if col in frame else False
            return m

        levels = [(f"{queue} {stem} {shape}", True, True, True), (f"{queue} {stem}", True, True, False),
                  (f"{queue} {shape}", True, False, True), (queue, True, False, False),
                  ("all queues", False, False, False)]
        for label, q, st, sh in levels:
            if st and not stem:
                continue
            finished = runs.loc[match(runs, q, st, sh), "run_s"].to_numpy(dtype=float)
            going = running.loc[match(running, q, st, sh), "elapsed_s"].to_numpy(dtype=float)
            if len(finished) >= 2 and len(finished) + len(going) >= self.min_samples:
                pool = DurationPool.fit(label, finished, going)
                return DurationPool(f"history: {label} (n={pool.events})", pool.times, pool.survival, pool.events)
        return None

    def duration_source(self, job: Job, use_recorded: bool = True) -> str:
        """Where a job's run time comes from: ``recorded``, ``history: ...`` or ``assumed``."""
        if use_recorded and job.duration_s is not None:
            return RECORDED
        pool = self.pool(job.queue, job_shape(job), name_stem(job.name))
        return pool.label if pool is not None else ASSUMED

    def sample_duration(self, job: Job, elapsed_s: float, rng: random.Random, use_recorded: bool = True) -> float:
        """A total run time for ``job`` that has run ``elapsed_s`` seconds so far (0 when it has not started)."""
        if use_recorded and job.duration_s is not None:
            return float(job.duration_s)
        pool = self.pool(job.queue, job_shape(job), name_stem(job.name))
        if pool is not None:
            return pool.sample(elapsed_s, rng)
        for _ in range(32):   # the assumed log-normal conditioned on the time already run
            d = ASSUMED_MEDIAN_S * math.exp(rng.gauss(0.0, 1.0))
            if d > elapsed_s:
                return d
        return max(elapsed_s, 1.0) * (1.0 + rng.random())

    # ------------------------------------------------------------------------------------ arrivals
    def arrivals(self, horizon_s: float, rng: random.Random, tag: str,
                 use_recorded: bool = True) -> list[tuple[float, Job]]:
        """``[(offset_s, Job)]`` over ``horizon_s``: Poisson per queue, each a renamed copy of a template.

        Names get ``~<tag>-<n>`` so they cannot clash with real jobs; tasks are reset to pending.
        """
        out: list[tuple[float, Job]] = []
        n = 0
        for queue in sorted(self.rates_per_s):
            rate, templates = self.rates_per_s[queue], self.templates.get(queue)
            if rate <= 0 or not templates:
                continue
            t = rng.expovariate(rate)
            while t <= horizon_s:
                template = rng.choice(templates)
                job = _fresh_copy(template, f"~{tag}-{n}")
                job.duration_s = self.sample_duration(template, 0.0, rng, use_recorded)
                out.append((t, job))
                n += 1
                t += rng.expovariate(rate)
        out.sort(key=lambda p: p[0])
        return out

    def describe(self) -> pd.DataFrame:
        """Per queue: completed runs, runs going, median run time, arrivals per hour, templates."""
        queues = sorted(set(self.runs["queue"]) | set(self.running["queue"]) | set(self.rates_per_s)
                        | set(self.templates))
        rows = []
        for q in queues:
            pool = self.pool(q, "\0")   # no shape matches: the queue's (or cluster's) distribution
            rows.append({"queue": q, "completed_runs": int((self.runs["queue"] == q).sum()),
                         "running": int((self.running["queue"] == q).sum()),
                         "median_run_s": pool.median_s() if pool is not None else math.nan,
                         "duration_source": pool.label if pool is not None else ASSUMED,
                         "arrivals_per_h": self.rates_per_s.get(q, 0.0) * 3600.0,
                         "templates": len(self.templates.get(q, []))})
        return pd.DataFrame(rows, columns=["queue", "completed_runs", "running", "median_run_s", "duration_source",
                                           "arrivals_per_h", "templates"])


def _fresh_copy(template: Job, suffix: str) -> Job:
    job = copy.deepcopy(template)
    job.name += suffix
    job.last_start_time = job.stale_since = job.last_eviction_time = None
    for t in job.tasks:
        t.name += suffix
        t.status, t.node, t.gpu_groups, t.gpu_indices, t.usage = "pending", None, [], [], None
    return job


__all__ = ["WorkloadModel", "DurationPool", "ASSUMED_MEDIAN_S", "RECORDED", "ASSUMED"]
