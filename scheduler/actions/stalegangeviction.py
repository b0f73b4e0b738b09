"""KAI's stale-gang eviction: a running gang below its minimum for longer than the grace period is evicted
whole (``pkg/scheduler/actions/stalegangeviction/stalegangeviction.go``, ``docs/staleness-grace-period``;
kai-semantics §c.6).

A job is **stale** when it has at least one active-used task (running, binding, pipelined, releasing), no
succeeded task, and some pod set with fewer active-used tasks than its ``min_available``. The grace period is
``job.stale_grace_period_s`` or else ``config.stale_grace_period_s`` (KAI's default 60 s); a negative one
never evicts. Time in the stale state runs from ``job.stale_since`` (KAI's
``kai.scheduler/stale-podgroup-timestamp``; stamped by the simulator or the cluster source) to
``snapshot.time``; a stale job without a stamp is seen stale for the first time now (0 s). Once the grace
period has passed, every active allocated task of the job (running, binding, pipelined) is evicted.
"""

from __future__ import annotations

import numpy as np

from ..session import OCCUPIES_NODE, Statement
from . import register_action

ACTION = "stalegangeviction"


def stale_podset(session, j: int):
    """``(pod set, active-used count)`` of the first pod set below min_available when the job is stale,
    else None (KAI ``IsStale``)."""
    st = session.status
    info = session.jobs[j]
    if any(st[i] == "succeeded" for i in info.tasks):
        return None
    if not any(st[i] in OCCUPIES_NODE for i in info.tasks):
        return None
    for ps in session.podsets(j):
        used = sum(1 for i in ps.tasks if st[i] in OCCUPIES_NODE)
        if used < ps.min_available:
            return ps, used
    return None


def _maybe_stale(session) -> list[int]:
    """Jobs that may be stale: some active-used task and either fewer active-used tasks than min_available
    or sub-groups (checked exactly afterwards)."""
    jobs = session.snapshot.jobs
    J = len(jobs)
    if not J:
        return []
    used = np.fromiter((st in OCCUPIES_NODE for st in session.status), bool, len(session.status))
    task_job = np.asarray(session.task_job, dtype=np.int64)
    counts = np.bincount(task_job[used], minlength=J)
    mins = np.fromiter((job.min_available for job in jobs), np.int64, J)
    subgroups = np.fromiter((bool(job.subgroups) for job in jobs), bool, J)
    return np.nonzero((counts > 0) & ((counts < mins) | subgroups))[0].tolist()


def stale_gang_eviction(session) -> None:
    """Run the stale-gang eviction action on the session."""
    now = session.snapshot.time
    default_grace = session.config.stale_grace_period_s
    for j in _maybe_stale(session):
        hit = stale_podset(session, j)
        if hit is None:
            continue
        ps, used = hit
        job = session.snapshot.jobs[j]
        grace = job.stale_grace_period_s if job.stale_grace_period_s is not None else default_grace
        if grace is None or grace < 0:
            continue
        since = job.stale_since if job.stale_since is not None else now
        stale_for = now - since
        if stale_for < grace:
            continue
        victims = [i for i in session.jobs[j].tasks if session.status[i] in ("running", "binding", "pipelined")]
        if not victims:
            continue
        where = "" if ps.name == "default" else f" in sub-group {ps.name}"
        message = (f"gang job {job.key} has {used} active pods{where} while {ps.min_available} are required, "
                   f"stale for {stale_for:g}s ≥ grace period {grace:g}s: all its pods are evicted")
        stmt = Statement(session)
        for i in victims:
            stmt.evict(i, ACTION, preemptor=None, message=message)
        stmt.commit()


register_action(ACTION, stale_gang_eviction)

__all__ = ["stale_gang_eviction", "stale_podset"]
