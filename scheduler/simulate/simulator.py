"""Discrete-event simulation of a KAI-scheduled cluster: arrivals, completions, a scheduling cycle every period.

Each executed cycle at time ``t`` does, in this order:

1. **events** up to ``t``: job completions (at their exact time: the job and all its tasks leave the cluster)
   and arrivals (the job joins as pending, ``creation_time`` = its arrival time);
2. **transitions** of the previous cycle's decisions, as KAI's cluster would have done in between
   (kai-semantics.md §k): ``binding → running``; ``releasing → pending`` and ``pipelined → pending`` with
   node and GPU cleared (an evicted pod is deleted and recreated by its controller);
3. **stale gangs**: ``stale_since`` is stamped on a job first seen with some active pod while a pod set is below
   its ``min_available``, and cleared once it is not (``actions/stalegangeviction``);
4. **usage**: with time-based fair share on, ``snapshot.usage`` is what KAI's usage DB would return
   (:mod:`scheduler.simulate.usage`, re-read every fetch interval);
5. the **session**: ``run_session(snapshot)``; its ``result.snapshot`` becomes the cluster state;
6. **bookkeeping**: a job going from no allocated task to some gets ``last_start_time = t`` (KAI stamps the
   PodGroup when it allocates it) and its completion is scheduled at ``t + duration_s``; a job whose last
   allocated task was evicted gets ``last_eviction_time = t`` and its completion is cancelled. **Evicted jobs
   restart from scratch**: KAI deletes the pods, so when placed again the job runs its full ``duration_s``.

**Fast-forward.** A cycle can be skipped when nothing can change: no task in flight (binding, pipelined,
releasing), the last session decided nothing, no arrival or completion since, and no time-dependent rule has
come due. The rules that depend on the clock alone are stale-gang grace periods, min-runtime protection
(``last_start + preempt/reclaim min runtime``), preemption delay, and the usage re-read (only with pending jobs
and ``k_value > 0``; it runs a session only if it changes some queue's fair share, KAI's only use of usage).
The next cycle that must run is the first cycle time at or after the earliest of those and the next event. Since a session is a function of the snapshot and the clock,
a skipped cycle would have decided nothing, so skipping is exact; ``fast_forward=False`` runs every cycle.
"""

from __future__ import annotations

import copy
import math
import time as _wallclock
from typing import Any, Callable, Iterable, NamedTuple, Optional

import numpy as np

from ..decisions import ScheduleResult
from ..errors import EngineError, SnapshotError
from ..fairshare import cluster_total
from ..model import ALLOCATED_STATUSES, ACTIVE_USED_STATUSES, Job, Snapshot
from .accounting import QueueIndex, node_capacity
from .events import ARRIVAL, COMPLETION, EventQueue
from .records import CLUSTER_METRICS, QUEUE_METRICS, Recorder
from .usage import UsageConfig, UsageTracker

SessionFn = Callable[[Snapshot], ScheduleResult]
IN_FLIGHT = frozenset({"binding", "pipelined", "releasing"})
_EPS = 1e-9


class Step(NamedTuple):
    """One cycle of :meth:`Simulator.step`.

    ``ran`` is False when nothing could change and no session ran (``result`` is then the last one).
    ``snapshot`` is the state after the cycle; later steps never modify it (they replace jobs, copy-on-write),
    so a reader on another thread may keep it.
    """

    time: float
    result: Optional[ScheduleResult]
    snapshot: Snapshot
    ran: bool
    arrived: int
    completed: int
    evicted: int


def _default_session() -> SessionFn:
    try:
        from ..engine import run_session
    except ImportError as exc:   # the engine is a separate module; say what is missing
        raise EngineError(f"scheduler.engine.run_session is not available: {exc}") from exc
    return run_session


def normalise_arrivals(arrivals: Iterable[Any], start_time: float = 0.0) -> list[tuple[float, Job]]:
    """``[(offset_s, Job)]`` sorted by offset, from ``(offset_s, Job)`` pairs, objects with ``job`` and
    ``offset_s`` / ``time_s`` / ``arrival_s`` / ``time`` (seconds after the simulation start), or plain Jobs
    (arriving at their absolute ``creation_time``)."""
    out = []
    for i, item in enumerate(arrivals):
        if isinstance(item, tuple) and len(item) == 2:
            offset, job = item
        elif isinstance(item, Job):
            offset, job = item.creation_time - start_time, item
        else:
            job = getattr(item, "job", None)
            offset = next((getattr(item, a) for a in ("offset_s", "time_s", "arrival_s", "time")
                           if getattr(item, a, None) is not None), None)
        if not isinstance(job, Job) or offset is None:
            raise SnapshotError(f"arrivals[{i}]", f"expected (offset_s, Job), got {type(item).__name__}")
        duration = getattr(item, "duration_s", None)
        if job.duration_s is None and duration is not None:     # e.g. synthetic Arrival(offset_s, job, duration_s)
            job = copy.copy(job)
            job.duration_s = float(duration)
        offset = float(offset)
        if not math.isfinite(offset) or offset < 0:
            raise SnapshotError(f"arrivals[{job.key}]", f"arrival offset must be >= 0 seconds, got {offset}")
        out.append((offset, job))
    out.sort(key=lambda pair: pair[0])   # stable: same-time arrivals keep their given order
    return out


class Simulator:
    """Runs a snapshot forward in time (see the module doc for what one cycle does).

    ``arrivals``: ``(offset_s, Job)`` pairs, offsets in seconds after ``snapshot.time`` (see
    :func:`normalise_arrivals` for the other accepted shapes). Jobs already in the
    snapshot whose ``creation_time`` lies after ``snapshot.time`` (all tasks pending) are treated as arrivals
    too. ``period_s`` defaults to ``snapshot.config.schedule_period_s``. ``usage``: a :class:`UsageConfig`
    for time-based fair share (the default), or ``None`` to leave ``snapshot.usage`` as given.
    ``session`` runs one scheduling session (default :func:`scheduler.engine.run_session`).
    ``max_ticks`` / ``max_events`` bound the records (see :class:`~scheduler.simulate.records.Recorder`).

    The input snapshot and jobs are never modified.
    """

    def __init__(self, snapshot: Snapshot, arrivals: Iterable[Any] = (), *, period_s: Optional[float] = None,
                 usage: Optional[UsageConfig] = UsageConfig(), fast_forward: bool = True,
                 max_ticks: int = 86_400, max_events: int = 100_000,
                 session: Optional[SessionFn] = None, patience_s: Optional[float] = None) -> None:
        snap = snapshot.copy()
        self.start_time = float(snap.time)
        self.period_s = float(period_s if period_s is not None else snap.config.schedule_period_s)
        if not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise SnapshotError("config.schedule_period_s", f"period must be positive seconds, got {self.period_s}")
        self.fast_forward = fast_forward
        self._session = session
        self.patience_s = patience_s
        self.index = QueueIndex(snap)
        self.usage_tracker = (UsageTracker(self.index.names, usage, self.start_time)
                              if usage is not None else None)
        self.recorder = Recorder(self.index.names, self.start_time, max_ticks=max_ticks, max_events=max_events)
        self.events = EventQueue()

        future = [j for j in snap.jobs if j.creation_time > self.start_time
                  and all(t.status == "pending" for t in j.tasks)]
        if future:
            keys = {j.key for j in future}
            snap.jobs = [j for j in snap.jobs if j.key not in keys]
        pending_arrivals = [(j.creation_time - self.start_time, j) for j in future]
        pending_arrivals += [(o, copy.deepcopy(j)) for o, j in normalise_arrivals(arrivals, self.start_time)]
        self._check_arrivals(snap, pending_arrivals)
        for offset, job in sorted(pending_arrivals, key=lambda p: p[0]):
            self.events.push_arrival(self.start_time + offset, job)

        self.snapshot = snap
        self.time = self.start_time
        self._node_gpu_memory = {n.name: n.gpu_memory_mib for n in snap.nodes}
        self._capacity = node_capacity(snap)
        self._gpus_allocatable = cluster_total(snap)["gpu"]
        self._deserved_gpu = np.array([np.nan if q.gpu.quota < 0 else q.gpu.quota for q in snap.queues])
        self._min_runtimes = self._distinct_min_runtimes(snap)
        self._alloc, _ = self.index.demand(snap)
        self._usage = np.zeros((len(self.index), 3))
        for i, q in enumerate(self.index.names):       # until the first usage read: what the snapshot says
            self._usage[i] = [snap.usage.get(q, {}).get(r, 0.0) for r in ("gpu", "cpu", "memory")]

        for job in snap.jobs:
            running = any(t.status in ALLOCATED_STATUSES for t in job.tasks)
            since = (job.last_start_time if job.last_start_time is not None else self.start_time) if running else None
            self.recorder.job_arrived(job.key, job.queue, min(job.creation_time, self.start_time),
                                      running_since=since)
            if running and job.duration_s is not None:
                self.events.schedule_completion(max(since + job.duration_s, self.start_time), job.key)

        self._cycle = 0                  # index of the next cycle on the grid start + n·period
        self._dirty = True               # the next cycle must run (first cycle, events, decisions in flight)
        self._deadline = math.inf        # next cycle a clock-only rule or a usage re-read is due
        self._rule_deadline = math.inf   # next cycle a clock-only rule (not usage) is due
        self._usage_matters = False      # jobs pending and k > 0: a usage re-read may move fair share
        self._fair_share_seen: Optional[np.ndarray] = None   # fair share under the last session's usage
        self._allocated_before: dict[str, int] = {}
        self.cycles_run = 0
        self.arrived_total = 0
        self.completed_total = 0
        self.withdrawn_total = 0
        self.evicted_total = 0
        self.last_result: Optional[ScheduleResult] = None

    # ------------------------------------------------------------------------------------------ public
    @property
    def elapsed_s(self) -> float:
        """Simulated seconds since the start."""
        return self.time - self.start_time

    @property
    def cycles_skipped(self) -> int:
        """Cycles on the grid that passed without a session because nothing could change."""
        return self._cycle - self.cycles_run

    def next_cycle_time(self) -> float:
        """Time of the next cycle on the grid (what :meth:`step` runs next)."""
        return self.start_time + self._cycle * self.period_s

    def step(self) -> Step:
        """Advance to the next cycle time and run the cycle (or skip the session if nothing can change)."""
        t = self.next_cycle_time()
        self._cycle += 1
        if self.fast_forward and not self._dirty and self.events.next_time() > t \
                and self._rule_deadline > t + _EPS:
            # No event, nothing in flight, no rule due: the state is as the last session left it, except
            # perhaps the usage, which matters only if it moves fair share (KAI's only use of it).
            self._account_usage(t)
            if self._deadline > t + _EPS or not self._usage_moves_fair_share(t):
                return Step(t, self.last_result, self.snapshot, False, 0, 0, 0)
        self.snapshot = _fresh(self.snapshot)     # what earlier steps returned is never modified
        arrived, completed = self._advance_to(t)
        withdrawn = self._withdraw_impatient(t)
        in_flight = self._transitions()
        must_run = (not self.fast_forward or self._dirty or in_flight or arrived or completed or withdrawn
                    or self._deadline <= t + _EPS)
        if not must_run:     # only cancelled events were due
            return Step(t, self.last_result, self.snapshot, False, arrived, completed, 0)
        evicted = self._run_session(t)
        return Step(t, self.last_result, self.snapshot, True, arrived, completed, evicted)

    def run(self, until_s: float) -> "Simulator":
        """Run until ``until_s`` simulated seconds after the start, jumping over cycles where nothing can
        change. Events up to that moment are applied; a cycle exactly at ``until_s`` runs."""
        end = self.start_time + float(until_s)
        while True:
            if self.fast_forward and not self._dirty:
                wake = min(self.events.next_time(), self._deadline)
                if math.isinf(wake):
                    break
                self._cycle = max(self._cycle, math.ceil((wake - self.start_time) / self.period_s - _EPS))
            if self.next_cycle_time() > end + _EPS:
                break
            self.step()
        # Cycles up to ``end`` that did not run were skipped: the next step() continues after ``end``.
        self._cycle = max(self._cycle, math.floor((end - self.start_time) / self.period_s + _EPS) + 1)
        self.snapshot = _fresh(self.snapshot)
        self._advance_to(max(end, self.time))
        return self

    def frames(self):
        """The record as ``{"queues", "cluster", "evictions", "jobs"}`` pandas DataFrames."""
        return self.recorder.frames(self.time)

    # ------------------------------------------------------------------------------------------ events
    def _advance_to(self, t: float) -> tuple[int, int]:
        """Apply arrivals and completions up to ``t``, accounting usage at each completion's exact time."""
        arrived = completed = 0
        done: set[str] = set()
        jobs_by_key = None
        for event in self.events.pop_until(t):
            at = max(event.time, self.time)
            self._account_usage(at)
            if event.kind == ARRIVAL:
                job: Job = event.payload
                job.creation_time = at
                self.snapshot.jobs.append(job)
                self.recorder.job_arrived(job.key, job.queue, at)
                arrived += 1
            elif event.kind == COMPLETION:
                if jobs_by_key is None:
                    jobs_by_key = {j.key: j for j in self.snapshot.jobs}
                job = jobs_by_key.get(event.payload)
                if job is None or event.payload in done:
                    continue
                self._alloc -= self.index.job_allocation(job, self._node_gpu_memory)
                done.add(event.payload)
                self.recorder.job_finished(event.payload, at)
                completed += 1
        if done:
            self.snapshot.jobs = [j for j in self.snapshot.jobs if j.key not in done]
        self._account_usage(max(t, self.time))
        self.arrived_total += arrived
        self.completed_total += completed
        if arrived or completed:
            self._dirty = True
        return arrived, completed

    def _withdraw_impatient(self, t: float) -> int:
        """With ``patience_s``: jobs that never ran and have waited that long leave (their owners delete them), as
        people do with jobs stuck pending; a demo running for days keeps a bounded backlog of huge gangs."""
        if self.patience_s is None:
            return 0
        cutoff = t - self.patience_s
        gone = {j.key for j in self.snapshot.jobs
                if j.creation_time <= cutoff and j.last_start_time is None
                and all(task.status == "pending" for task in j.tasks)}
        if not gone:
            return 0
        self.snapshot.jobs = [j for j in self.snapshot.jobs if j.key not in gone]
        for key in gone:
            self.recorder.job_withdrawn(key, t)
        self.withdrawn_total += len(gone)
        self._dirty = True
        return len(gone)

    def _account_usage(self, t: float) -> None:
        if self.usage_tracker is not None:
            self.usage_tracker.advance(t, self._alloc, self._capacity)
        self.time = t

    # ------------------------------------------------------------------------------------------ cycle
    def _transitions(self) -> bool:
        """Between-cycle transitions and stale-gang stamps, copy-on-write on the live snapshot's jobs.

        Returns True if a task was in flight. Leaves ``self._allocated_before`` (allocated tasks per job).
        """
        t = self.time
        in_flight = False
        jobs = self.snapshot.jobs
        allocated_before: dict[str, int] = {}
        for idx, job in enumerate(jobs):
            moved = None                 # task index -> new status
            allocated = active = 0
            succeeded = False
            for k, task in enumerate(job.tasks):
                status = task.status
                if status in IN_FLIGHT:
                    status = "running" if status == "binding" else "pending"
                    moved = moved or {}
                    moved[k] = status
                if status in ALLOCATED_STATUSES:
                    allocated += 1
                if status in ACTIVE_USED_STATUSES:
                    active += 1
                elif status == "succeeded":
                    succeeded = True
            allocated_before[job.key] = allocated
            stale = active > 0 and not succeeded and self._below_min(job, active, moved)
            stamp = job.stale_since
            if stale and stamp is None:
                stamp = t
            elif not stale:
                stamp = None
            if moved is None and stamp == job.stale_since:
                continue
            job = copy.copy(job)
            job.stale_since = stamp
            if moved is not None:
                in_flight = True
                job.tasks = list(job.tasks)
                for k, status in moved.items():
                    task = copy.copy(job.tasks[k])
                    task.status = status
                    if status == "pending":
                        task.node, task.gpu_groups, task.gpu_indices = None, [], []
                    job.tasks[k] = task
            jobs[idx] = job
        self._allocated_before = allocated_before
        return in_flight

    @staticmethod
    def _below_min(job: Job, active: int, moved: Optional[dict]) -> bool:
        """Some pod set has fewer active-used pods than its min available (KAI's stale condition)."""
        if not job.subgroups:
            return active < job.min_available
        for sg in job.subgroups:
            n = 0
            for k, task in enumerate(job.tasks):
                status = moved.get(k, task.status) if moved else task.status
                if task.subgroup == sg.name and status in ACTIVE_USED_STATUSES:
                    n += 1
            if n < sg.min_available:
                return True
        return False

    def _run_session(self, t: float) -> int:
        snap = self.snapshot
        snap.time = t
        if self.usage_tracker is not None:
            usage, refreshed = self.usage_tracker.fetch(t)
            if refreshed:
                self._usage = usage
                snap.usage = self.usage_tracker.as_dict(usage)
        self._fair_share_seen = None
        before = self._allocated_before

        session = self._session or _default_session()
        started_at = _wallclock.perf_counter()
        result = session(snap)
        session_ms = (_wallclock.perf_counter() - started_at) * 1000.0
        new = result.snapshot
        if new is None:
            raise EngineError("session result has no snapshot (ScheduleResult.snapshot is None)")
        new.jobs = list(new.jobs)        # jobs are replaced, never modified: the engine may share them

        evicted_jobs = {ev.job for ev in result.evicted}
        if evicted_jobs:
            queue_of = {j.key: j.queue for j in new.jobs}
            for ev in result.evicted:
                self.recorder.eviction(t, ev.task, ev.job, queue_of.get(ev.job), ev.action, ev.preemptor,
                                       ev.message)
            for key in evicted_jobs:
                rec = self.recorder.active_jobs.get(key)
                if rec is not None:
                    rec.evictions += 1

        nq = len(self.index)
        pending_own = np.zeros(nq)
        running_own = np.zeros(nq)
        in_flight = False
        has_pending = False
        deadline = math.inf
        for idx, job in enumerate(new.jobs):
            allocated = pending = 0
            for x in job.tasks:
                s = x.status
                if s in ALLOCATED_STATUSES:
                    allocated += 1
                elif s == "pending":
                    pending += 1
                if s in IN_FLIGHT:
                    in_flight = True
            key = job.key
            was = before.get(key, 0)
            rec = self.recorder.active_jobs.get(key)
            started = was == 0 and allocated > 0
            if started or key in evicted_jobs:
                job = copy.copy(job)
                new.jobs[idx] = job
                if key in evicted_jobs:
                    job.last_eviction_time = t
            if started:
                job.last_start_time = t
                if rec is not None:
                    rec.started(t)
                if job.duration_s is not None:
                    self.events.schedule_completion(t + job.duration_s, key)
            elif was > 0 and allocated == 0:
                self.events.cancel_completion(key)
                if rec is not None:
                    rec.evicted(t)
            i = self.index.row.get(job.queue)
            if i is not None:
                if allocated:
                    running_own[i] += 1
                elif pending or any(x.status == "pipelined" for x in job.tasks):
                    pending_own[i] += 1
            has_pending = has_pending or pending > 0
            deadline = min(deadline, self._job_deadline(job, t, allocated > 0, pending > 0))
        self._usage_matters = has_pending and self.usage_tracker is not None and new.config.k_value > 0

        self.snapshot = new
        self.last_result = result
        self.cycles_run += 1
        self._dirty = in_flight or bool(result.evicted)
        self._rule_deadline = self._first_cycle_due(deadline, t)
        self._deadline = min(self._rule_deadline, self._next_usage_read(t))
        self._alloc, requested = self.index.demand(new)
        evicted = len(result.evicted)
        self.evicted_total += evicted
        self._record(t, result, requested, self.index.subtree @ pending_own, self.index.subtree @ running_own,
                     evicted, session_ms)
        return evicted

    # ------------------------------------------------------------------------------------------ deadlines
    def _job_deadline(self, job: Job, t: float, running: bool, pending: bool) -> float:
        """Earliest time >= t at which a clock-only rule could change this job's fate (inf if none)."""
        d = math.inf
        if job.stale_since is not None:
            grace = (job.stale_grace_period_s if job.stale_grace_period_s is not None
                     else self.snapshot.config.stale_grace_period_s)
            if grace >= 0:
                d = min(d, _due(job.stale_since + grace, t))
        if running and job.last_start_time is not None:
            for r in self._min_runtimes:
                d = min(d, _due(job.last_start_time + r, t))
        if pending and job.preemption_delay_s:
            since = max(job.creation_time, job.last_eviction_time or -math.inf)
            d = min(d, _due(since + job.preemption_delay_s, t))
        if pending and not running and self.patience_s is not None and job.last_start_time is None:
            d = min(d, _due(job.creation_time + self.patience_s, t))
        return d

    def _next_usage_read(self, t: float) -> float:
        """The cycle at which a usage re-read could change a decision (inf when it cannot)."""
        if not self._usage_matters:
            return math.inf
        return self._first_cycle_due(self.usage_tracker.next_fetch_time(), t)

    def _usage_moves_fair_share(self, t: float) -> bool:
        """Re-read usage at ``t``; True if it changes any queue's fair share (then a session must run).

        Otherwise the new usage is stored in the snapshot and the next re-read becomes the wake-up time: the
        session would have seen the same fair shares and the same snapshot, and decided nothing again.
        """
        from ..fairshare import compute_fair_share

        before = self.snapshot.usage
        usage, refreshed = self.usage_tracker.fetch(t)
        if not refreshed:
            return False
        after = self.usage_tracker.as_dict(usage)
        if self._fair_share_seen is None:
            self._fair_share_seen = _fair_share_array(compute_fair_share(self.snapshot, usage=before))
        now = _fair_share_array(compute_fair_share(self.snapshot, usage=after))
        self.snapshot = _fresh(self.snapshot)
        self.snapshot.usage = after
        self._usage = usage
        if np.array_equal(now, self._fair_share_seen):
            self._deadline = min(self._rule_deadline, self._next_usage_read(t))
            return False
        return True

    def _first_cycle_due(self, deadline: float, t: float) -> float:
        """The first cycle time strictly after ``t`` that is at or after ``deadline``.

        A deadline exactly at ``t`` means the rule may compare with ``>``; the next cycle then sees it pass.
        """
        if math.isinf(deadline):
            return math.inf
        n = math.ceil((deadline - self.start_time) / self.period_s - _EPS)
        due = self.start_time + n * self.period_s
        return due if due > t + _EPS else t + self.period_s

    @staticmethod
    def _distinct_min_runtimes(snap: Snapshot) -> list[float]:
        values = {snap.config.default_preempt_min_runtime_s, snap.config.default_reclaim_min_runtime_s}
        for q in snap.queues:
            values.update(v for v in (q.preempt_min_runtime_s, q.reclaim_min_runtime_s) if v is not None)
        return sorted(v for v in values if v and v > 0)

    # ------------------------------------------------------------------------------------------ records
    def _record(self, t: float, result: ScheduleResult, requested: np.ndarray, pending: np.ndarray,
                running: np.ndarray, evicted: int, session_ms: float) -> None:
        rows = np.empty((len(self.index), len(QUEUE_METRICS)))
        rows[:, 0:3] = self._alloc
        for i, q in enumerate(self.index.names):
            fs = result.fair_share.get(q, {})
            rows[i, 3:6] = (fs.get("gpu", np.nan), fs.get("cpu", np.nan), fs.get("memory", np.nan))
        rows[:, 6] = self._deserved_gpu
        rows[:, 7] = requested[:, 0]
        rows[:, 8] = self._usage[:, 0]
        rows[:, 9] = pending
        rows[:, 10] = running
        leaf = self.index.is_leaf
        gpus_allocated = float(self._alloc[leaf, 0].sum())
        total = self._gpus_allocatable
        cluster = (total, gpus_allocated, gpus_allocated / total if total > 0 else 0.0,
                   float(pending[leaf].sum()), float(running[leaf].sum()),
                   self.arrived_total, self.completed_total, evicted, session_ms)
        assert len(cluster) == len(CLUSTER_METRICS)
        self.recorder.tick(t, rows, cluster)

    def _check_arrivals(self, snap: Snapshot, arrivals: list[tuple[float, Job]]) -> None:
        seen = {j.key for j in snap.jobs}
        problems = []
        for _, job in arrivals:
            if job.key in seen:
                problems.append((f"arrivals[{job.key}]", "a job with this key is already in the simulation"))
            seen.add(job.key)
            for task in job.tasks:
                if task.status != "pending":
                    problems.append((f"arrivals[{job.key}].tasks[{task.name}].status",
                                     f"an arriving job's tasks must be pending, got {task.status!r}"))
        if problems:
            raise SnapshotError(problems)


def _due(when: float, t: float) -> float:
    """A deadline still to come (``>= t``), else inf."""
    return when if when >= t - _EPS else math.inf


def _fresh(snapshot: Snapshot) -> Snapshot:
    """A shallow copy with its own job list: the simulator then replaces jobs rather than modifying them."""
    out = copy.copy(snapshot)
    out.jobs = list(snapshot.jobs)
    return out


def _fair_share_array(shares) -> np.ndarray:
    """``queues × resources`` fair shares from :func:`scheduler.fairshare.compute_fair_share` (sorted queues)."""
    return np.array([[per[r].fair_share for r in sorted(per)] for _, per in sorted(shares.items())])
