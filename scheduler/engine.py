"""Public entry points of the engine: one session, or N cycles with KAI's between-cycle transitions.

``run_session(snapshot)`` computes fair share (KAI proportion plugin), opens a :class:`Session`, runs the
actions (``snapshot.config.actions`` unless given) in order and returns a :class:`ScheduleResult`. The input
snapshot is never mutated. ``result.snapshot`` is the state after the decisions; it shares the unchanged
nodes, queues, jobs and tasks with the input (copy-on-write), so treat it as read-only or ``.copy()`` it.

``run_cycles(snapshot, cycles)`` repeats that, applying between cycles what the cluster would do
(kai-semantics §k, integration-test harness): ``binding → running``, ``releasing → pending`` with the node
cleared (the evicted pod is re-created), ``pipelined → pending`` with the node cleared (it is re-scheduled,
with its node as nominated node).
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Mapping
from typing import Callable, Iterable, Iterator, Optional

from .actions import get_action
from .decisions import PIPELINED, JobDecision, ScheduleResult, TaskDecision
from .fairshare import TaskTable, compute_fair_share
from .model import Job, Snapshot
from .session import ACTIVE_ALLOCATED, Session


def run_session(snapshot: Snapshot, actions: Optional[Iterable[str]] = None) -> ScheduleResult:
    """Run one scheduling session over ``snapshot`` and return its decisions.

    Python's cyclic garbage collector is paused while the session runs (and restored after): the session
    creates no reference cycles, and a full collection would walk every object of a 140k-pod snapshot
    several times (about 30% of a large session).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_session(snapshot, actions)
    finally:
        if was_enabled:
            gc.enable()


def _run_session(snapshot: Snapshot, actions: Optional[Iterable[str]]) -> ScheduleResult:
    t0 = time.perf_counter()
    tasks = TaskTable.from_snapshot(snapshot)  # one columnar pass over the tasks, for fair share and session
    shares = compute_fair_share(snapshot, tasks=tasks)
    t1 = time.perf_counter()
    session = Session(snapshot, shares, tasks=tasks)
    t2 = time.perf_counter()
    timings = {"fair_share": (t1 - t0) * 1e3, "session_open": (t2 - t1) * 1e3}
    names = list(snapshot.config.actions if actions is None else actions)
    for name in names:
        action = get_action(name)
        if action is None:
            session.skipped_actions.append(name)
            continue
        ta = time.perf_counter()
        action(session)
        timings[name] = (time.perf_counter() - ta) * 1e3
    t3 = time.perf_counter()
    timings["session"] = (t3 - t0) * 1e3
    result = build_result(session, shares)
    timings["result"] = (time.perf_counter() - t3) * 1e3
    timings["total"] = (time.perf_counter() - t0) * 1e3
    result.timings_ms = timings
    return result


def run_cycles(snapshot: Snapshot, cycles: int, actions: Optional[Iterable[str]] = None) -> ScheduleResult:
    """Run ``cycles`` sessions, applying KAI's between-cycle transitions in between.

    The result is the last cycle's, with ``evicted`` gathered over all cycles and ``timings_ms`` summed.
    """
    if cycles < 1:
        raise ValueError("cycles must be at least 1")
    actions = None if actions is None else list(actions)
    current = snapshot
    evicted = []
    totals: dict[str, float] = {}
    result = None
    for c in range(cycles):
        if c > 0:
            current = advance(result.snapshot)
        result = run_session(current, actions)
        evicted.extend(result.evicted)
        for k, v in result.timings_ms.items():
            totals[k] = totals.get(k, 0.0) + v
    result.evicted = evicted
    result.timings_ms = totals
    return result


def advance(snapshot: Snapshot) -> Snapshot:
    """The snapshot one cycle later: binding → running; releasing and pipelined → pending, node cleared.

    Copy-on-write: only changed jobs and tasks are new objects.
    """
    jobs = []
    for job in snapshot.jobs:
        new_tasks = None
        for k, t in enumerate(job.tasks):
            if t.status in ("binding", "releasing", "pipelined"):
                if new_tasks is None:
                    new_tasks = list(job.tasks)
                nt = copy.copy(t)
                if t.status == "binding":
                    nt.status = "running"
                else:
                    nt.status, nt.node, nt.gpu_groups, nt.gpu_indices = "pending", None, [], []
                new_tasks[k] = nt
        if new_tasks is None:
            jobs.append(job)
        else:
            nj = copy.copy(job)
            nj.tasks = new_tasks
            jobs.append(nj)
    out = copy.copy(snapshot)
    out.jobs = jobs
    return out


# ---------------------------------------------------------------------------------------------- result

class LazyDecisions(Mapping):
    """A read-only mapping whose values are built on first access.

    ``ScheduleResult.tasks`` / ``.jobs`` hold one entry per task / job of the snapshot (140k on a large
    cluster); most callers look at a few, so the decision objects are made when asked for.
    """

    def __init__(self, keys: list[str], make: Callable[[int], object]):
        self._keys = keys
        self._index = {k: i for i, k in enumerate(keys)}
        self._make = make
        self._made: dict[int, object] = {}

    def __getitem__(self, key: str):
        i = self._index[key]
        value = self._made.get(i)
        if value is None:
            value = self._made[i] = self._make(i)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"LazyDecisions({len(self._keys)} entries)"


def build_result(session: Session, shares) -> ScheduleResult:
    """Turn the session's final state into a :class:`ScheduleResult` (decisions + after-snapshot)."""
    names = session.nodes.names
    fair_share = {q: {r: float(s.fair_share) for r, s in per.items()} for q, per in shares.items()}
    status, node, groups, indices = session.status, session.node, session.groups, session.indices

    def task_decision(i: int) -> TaskDecision:
        n = node[i]
        return TaskDecision(status[i], names[n] if n >= 0 else None, list(groups[i]), list(indices[i]),
                            observed_gpu_indices=list(session.task_objs[i].gpu_indices))

    tasks = LazyDecisions(session.task_names, task_decision)
    jobs = LazyDecisions([job.key for job in session.snapshot.jobs], lambda j: _job_decision(session, j))
    return ScheduleResult(fair_share=fair_share, tasks=tasks, jobs=jobs, evicted=list(session.evictions),
                          snapshot=_after_snapshot(session), queue_stats=session.queue_stats(),
                          committed_placements=dict(session.committed_placements))


def _job_decision(session: Session, j: int) -> JobDecision:
    a, b = session.job_start[j], session.job_start[j + 1]
    st = session.status[a:b]
    present = set(st)
    for status in ("pipelined", "binding", "running", "releasing", "pending", "succeeded", "failed"):
        if status in present:
            break
    acc = session.accepted
    gpus = sum(acc[i] for i in range(a, b) if st[i - a] in ACTIVE_ALLOCATED)
    decision = JobDecision(status=status, gpus_accepted=gpus)
    if "pending" in present:
        reason = session.job_reasons.get(j)
        if reason is not None:
            decision.reason, decision.message, decision.details = reason
        elif "allocate" in session.skipped_actions or not session.config.actions:
            decision.message = "not considered in this session"
    elif status == "pipelined":
        where = sorted({session.nodes.names[session.node[i]] for i in range(a, b)
                        if session.status[i] == "pipelined"})
        decision.reason = PIPELINED
        decision.message = ("placed on resources that are still being released on " + ", ".join(where) +
                            "; binds once they are free")
        decision.details = {"nodes": where}
    return decision


def _clone(obj):
    """Shallow copy of a plain dataclass instance (much faster than ``copy.copy``)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


def _after_snapshot(session: Session) -> Snapshot:
    snap = session.snapshot
    changed = session.changed_tasks()
    started = session.started_jobs
    if not changed and not started:
        out = copy.copy(snap)
        out.jobs = list(snap.jobs)
        return out
    by_job: dict[int, list[int]] = {}
    for i in changed:
        by_job.setdefault(session.task_job[i], []).append(i)
    for j in started:
        by_job.setdefault(j, [])
    jobs: list[Job] = list(snap.jobs)
    names = session.nodes.names
    for j, tids in by_job.items():
        job = _clone(snap.jobs[j])
        job.tasks = list(job.tasks)
        first = session.job_start[j]
        for i in tids:
            t = _clone(session.task_objs[i])
            n = session.node[i]
            t.status = session.status[i]
            t.node = names[n] if n >= 0 else None
            t.gpu_groups = list(session.groups[i])
            t.gpu_indices = list(session.indices[i])
            job.tasks[i - first] = t
        if j in started:
            job.last_start_time = snap.time
        jobs[j] = job
    out = copy.copy(snap)
    out.jobs = jobs
    return out
