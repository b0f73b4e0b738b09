"""Pending ETA by forward simulation: :func:`estimate_eta` and its what-if, :func:`estimate_eta_whatif`.

For every waiting job of a snapshot, ``runs`` forward simulations (:mod:`scheduler.eta.forward`) of the engine
from that snapshot, each with its own draw of run times (recorded ``duration_s`` where the job has one and
``use_recorded_durations`` is on, else from the history: :class:`~scheduler.eta.workload.WorkloadModel`) and of
arrivals (Poisson at the rates the history observed). The start time of each job over the runs gives the
estimate (p10, p50, p90) and the most common thing that let it start gives the blocking reason.

Jobs that can never start are not simulated: a GPU request larger than the queue's (or an ancestor's) GPU limit
or than the cluster's GPUs.

Cost: each run is at most ``cycles_per_segment × segments`` sessions (70 with the defaults and an 8 h horizon);
a run stops as soon as every waiting job has started. With nothing random (every duration recorded, no arrival
model) one run is enough and only one is made. ``budget_s`` stops adding runs once spent (at least one); time
the caller held the estimate paused (``paused_s``: a dashboard's estimate waits while a what-if computes) does
not count against it.
"""

from __future__ import annotations

import math
import random
import time as _wallclock
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Optional

from ..fairshare import cluster_total, min_node_gpu_memory_mib
from ..joblog import is_allocated, is_waiting, job_gpus, job_shape
from ..model import Job, Snapshot
from .forward import Blocker, forward_run, segment_plan
from .report import EtaEstimate, EtaReport, RunningEstimate, quantile
from .workload import RECORDED, WorkloadModel


@dataclass
class EtaConfig:
    """How far, how fine and how many times to simulate forward.

    ``runs``: forward runs (ranges are quantiles over them); ``horizon_s``: how far ahead; ``first_period_s`` and
    ``cycles_per_segment``: the geometric cycle grid (:func:`~scheduler.eta.forward.segment_plan`);
    ``arrivals``: model arrivals from the history; ``use_recorded_durations``: trust ``Job.duration_s`` where
    set (a simulated cluster has it; a real one does not); ``seed``: the draws; ``actions``: the engine's action
    list for forward sessions (None = the snapshot's; leaving out ``consolidation`` is 5x cheaper on 1,000
    nodes, see docs/eta.md); ``budget_s``: seconds of work after which no further run starts (wall clock, less
    the time the caller paused the estimate: :func:`estimate_eta`'s ``paused_s``).
    """

    runs: int = 5
    horizon_s: float = 8 * 3600.0
    first_period_s: float = 30.0
    cycles_per_segment: int = 10
    arrivals: bool = True
    use_recorded_durations: bool = True
    seed: int = 0
    actions: Optional[tuple[str, ...]] = None
    budget_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"runs: must be at least 1, got {self.runs}")
        if not (self.horizon_s > 0 and self.first_period_s > 0 and self.cycles_per_segment >= 1):
            raise ValueError("horizon_s and first_period_s must be positive, cycles_per_segment at least 1")


def never_reason(job: Job, snapshot: Snapshot, gpus: float) -> Optional[str]:
    """Why ``job`` can never start on this cluster (GPU request over a queue limit or the cluster), else None."""
    queues = snapshot.queue_map()
    name = job.queue
    while name in queues:
        q = queues[name]
        if q.gpu.limit >= 0 and gpus > q.gpu.limit + 1e-9:
            return f"requests {gpus:g} GPUs, over queue {name}'s GPU limit of {q.gpu.limit:g}"
        name = q.parent
    total = cluster_total(snapshot)["gpu"]
    if gpus > total + 1e-9:
        return f"requests {gpus:g} GPUs, the cluster has {total:g}"
    return None


def estimate_eta(snapshot: Snapshot, workload: Optional[WorkloadModel] = None,
                 config: Optional[EtaConfig] = None, *, session: Any = None,
                 paused_s: Optional[Callable[[], float]] = None) -> EtaReport:
    """Estimate when every waiting job of ``snapshot`` starts (see the module doc). ``snapshot`` is not modified.

    ``workload``: durations and arrivals from the history (``WorkloadModel.from_log(log)``); None = no history
    (recorded durations, else the assumed distribution; no arrivals). ``session`` replaces the engine call.
    ``paused_s``: the seconds ``session`` has spent paused so far in this estimate (waiting for interactive work,
    not simulating); ``config.budget_s`` counts the wall clock less them, so a long pause does not cost runs.
    """
    config = config or EtaConfig()
    workload = workload or WorkloadModel()
    t0 = _wallclock.perf_counter()
    now = float(snapshot.time)
    use_rec = config.use_recorded_durations
    if session is None and config.actions is not None:
        from ..engine import run_session
        session = partial(run_session, actions=list(config.actions))
    min_mem = min_node_gpu_memory_mib(snapshot)

    waiting = [j for j in snapshot.jobs if is_waiting(j)]
    running = [j for j in snapshot.jobs if is_allocated(j)]
    gpus = {j.key: job_gpus(j, min_mem) for j in waiting}
    never = {j.key: r for j in waiting if (r := never_reason(j, snapshot, gpus[j.key])) is not None}
    targets = {j.key for j in waiting} - set(never)
    elapsed = {j.key: _elapsed(j, now) for j in running}
    sources = {j.key: workload.duration_source(j, use_rec) for j in snapshot.jobs}
    random_runs = ((config.arrivals and bool(workload.rates_per_s))
                   or any(s != RECORDED for k, s in sources.items() if k not in never))
    n_runs = config.runs if random_runs else 1

    plan = segment_plan(config.horizon_s, config.first_period_s, config.cycles_per_segment)
    outcomes = []
    ends: dict[str, list[float]] = {j.key: [] for j in running}
    reasons: dict[str, tuple] = {}
    for r in range(n_runs):
        rng = random.Random(config.seed * 1_000_003 + r)
        jobs = []
        for job in snapshot.jobs:
            total = workload.sample_duration(job, elapsed.get(job.key, 0.0), rng, use_rec)
            if job.key in ends:
                start = job.last_start_time if job.last_start_time is not None else now
                ends[job.key].append(max(0.0, start + total - now))
            if total != job.duration_s:
                job = _with_duration(job, total)
            jobs.append(job)
        snap = _with_jobs(snapshot, jobs)
        arrivals = (workload.arrivals(config.horizon_s, rng, tag=str(r), use_recorded=use_rec)
                    if config.arrivals else [])
        outcome = forward_run(snap, arrivals, targets, plan, session=session,
                              reasons=reasons if r == 0 else None)
        outcomes.append(outcome)
        if config.budget_s is not None and _worked_s(t0, paused_s) > config.budget_s:
            break

    estimates = {}
    by_key = {j.key: j for j in snapshot.jobs}
    for job in sorted(waiting, key=lambda j: (j.creation_time, j.key)):
        key = job.key
        base = dict(job=key, queue=job.queue, priority=job.priority, gpus=gpus[key], shape=job_shape(job),
                    waiting_s=max(0.0, now - job.creation_time), runs=len(outcomes), horizon_s=config.horizon_s)
        if key in never:
            estimates[key] = EtaEstimate(**base, p10_s=math.inf, p50_s=math.inf, p90_s=math.inf, started_runs=0,
                                         never=True, message=never[key])
            continue
        starts = [o.starts.get(key, math.inf) for o in outcomes]
        blocker = _common_blocker([o.blockers[key] for o in outcomes if key in o.blockers])
        label = partial(_label, by_key=by_key)
        reason, message = reasons.get(key, (None, ""))
        estimates[key] = EtaEstimate(
            **base, p10_s=quantile(starts, 0.1), p50_s=quantile(starts, 0.5), p90_s=quantile(starts, 0.9),
            started_runs=sum(not math.isinf(s) for s in starts),
            blocker=blocker.text(label) if blocker else "", blocker_job=blocker.job if blocker else None,
            blocker_duration_source=sources.get(blocker.job) if blocker and blocker.job else None,
            reason=reason, message=message or "")
    running_est = {}
    for job in running:
        e = ends[job.key]
        running_est[job.key] = RunningEstimate(job.key, job.queue, job.last_start_time, elapsed[job.key],
                                               quantile(e, 0.1), quantile(e, 0.5), quantile(e, 0.9),
                                               sources[job.key])
    notes = []
    if not workload.rates_per_s or not config.arrivals:
        notes.append("arrivals not modelled (no history yet)" if config.arrivals else "arrivals not modelled")
    n_assumed = sum(s == "assumed" for s in sources.values())
    if n_assumed:
        notes.append(f"{n_assumed} jobs' run times assumed (no history of similar jobs)")
    if len(outcomes) < n_runs:
        notes.append(f"{len(outcomes)} of {n_runs} runs within the {config.budget_s:g} s budget")
    return EtaReport(time=now, estimates=estimates, running=running_est, runs=len(outcomes),
                     sessions=sum(o.sessions for o in outcomes), wall_ms=(_wallclock.perf_counter() - t0) * 1e3,
                     horizon_s=config.horizon_s,
                     arrivals_per_h={q: r * 3600 for q, r in workload.rates_per_s.items()} if config.arrivals else {},
                     notes=notes, made_at=_wallclock.time())


def _worked_s(t0: float, paused_s: Optional[Callable[[], float]]) -> float:
    """Wall-clock seconds since ``t0`` less the seconds the caller's session spent paused."""
    return _wallclock.perf_counter() - t0 - (paused_s() if paused_s is not None else 0.0)


def _elapsed(job: Job, now: float) -> float:
    return max(0.0, now - job.last_start_time) if job.last_start_time is not None else 0.0


def _with_duration(job: Job, duration_s: float) -> Job:
    new = object.__new__(Job)
    new.__dict__.update(job.__dict__)
    new.duration_s = float(duration_s)
    return new


def _with_jobs(snapshot: Snapshot, jobs: list[Job]) -> Snapshot:
    new = object.__new__(Snapshot)
    new.__dict__.update(snapshot.__dict__)
    new.jobs = jobs
    return new


def _common_blocker(blockers: list[Blocker]) -> Optional[Blocker]:
    """The blocker seen in most runs (ties: the first run's)."""
    if not blockers:
        return None
    counts = Counter((b.kind, b.job, b.action) for b in blockers)
    best = max(counts.values())
    return next(b for b in blockers if counts[(b.kind, b.job, b.action)] == best)


def _label(key: Optional[str], by_key: Mapping[str, Job]) -> str:
    if key is None:
        return "another job"
    if key in by_key:
        return key
    queue = key.split("/", 1)[0] if "/" in key else ""   # a modelled arrival (synthetic name)
    return f"a later {queue} job" if queue else "a later job"


# ---------------------------------------------------------------------------------------------- what-if

@dataclass
class EtaWhatIf:
    """ETA before and after a what-if change; :meth:`frame` sets them side by side per job."""

    before: EtaReport
    after: EtaReport
    notes: dict[str, list[str]]

    def frame(self):
        """Per waiting job: p50 before and after (seconds from now) and the change (negative = sooner)."""
        import pandas as pd

        keys = list(dict.fromkeys([*self.before.estimates, *self.after.estimates]))
        rows = []
        for k in keys:
            b, a = self.before.estimates.get(k), self.after.estimates.get(k)
            pb = b.p50_s if b else math.nan
            pa = a.p50_s if a else math.nan
            delta = pa - pb if not (math.isinf(pa) and math.isinf(pb)) else 0.0
            rows.append({"job": k, "queue": (a or b).queue, "eta_p50_before_s": pb, "eta_p50_after_s": pa,
                         "change_s": delta, "text_before": b.text if b else "", "text_after": a.text if a else ""})
        return pd.DataFrame(rows, columns=["job", "queue", "eta_p50_before_s", "eta_p50_after_s", "change_s",
                                           "text_before", "text_after"])


def estimate_eta_whatif(snapshot: Snapshot, overrides: Any, workload: Optional[WorkloadModel] = None,
                        config: Optional[EtaConfig] = None, *, before: Optional[EtaReport] = None) -> EtaWhatIf:
    """Re-estimate with the cluster changed by ``overrides`` (a :class:`scheduler.whatif.WhatIf` or its dict:
    queue quotas/limits/priorities, nodes added or removed, placement, k-value, demand scale).

    ``before``: a report already made for ``snapshot`` with the same workload and config (not recomputed).
    The same seeds are used on both sides, so the difference is the change's, not the draw's.
    """
    from ..whatif import WhatIf

    if not isinstance(overrides, WhatIf):
        overrides = WhatIf.from_dict(overrides)
    modified, notes = overrides.apply_with_notes(snapshot)
    before = before if before is not None else estimate_eta(snapshot, workload, config)
    after = estimate_eta(modified, workload, config)
    return EtaWhatIf(before=before, after=after, notes=notes)


def pending_keys(snapshot: Snapshot) -> Iterable[str]:
    """Keys of the jobs an ETA is made for (waiting: nothing allocated, some task pending)."""
    return [j.key for j in snapshot.jobs if is_waiting(j)]


__all__ = ["EtaConfig", "estimate_eta", "estimate_eta_whatif", "EtaWhatIf", "never_reason", "pending_keys"]
