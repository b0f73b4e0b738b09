"""Simulating one victim scenario: what KAI's eviction actions do to check a set of victims
(``actions/common/solvers/by_pod_solver.go``, ``actions/common/action.go``, ``actions/common/allocate.go``).

A scenario is tried in a :class:`~scheduler.session.Statement`: its victims are evicted, then the preemptor and
every victim job are allocated once each, pipeline-only, in KAI's queue/job order (:func:`sim_job_order`). The
order is that of a job queue holding every job with a pending task as well: those are popped and skipped, but
while one heads its leaf queue it decides where that queue stands among its siblings (KAI
``GetJobsToAllocate`` + ``TryToVirtuallyAllocatePreemptorAndGetVictims``). Placements are restricted to the
solver's feasible nodes plus the nodes the victims run on. A victim placed back on its own node (same GPU group)
is un-evicted, one placed elsewhere is moved (pipelined), one that fits nowhere stays evicted.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from ..ordering import JobsOrderByQueues
from ..session import ACTIVE_ALLOCATED, KIND_WHOLE, OCCUPIES_NODE, Statement
from ..session.nodes import GPU


def sim_tasks_to_allocate(session, j: int) -> list[int]:
    """KAI ``GetTasksToAllocate(isRealAllocation=false)``: like allocate's chunk, but tasks evicted in this
    session (virtually releasing) may be placed again."""
    st = session.status
    evicted = session.evict_prior
    sets = session.podsets(j)
    chunks = []
    gang = False
    for ps in sets:
        active = sum(1 for i in ps.tasks if st[i] in ACTIVE_ALLOCATED)
        free = [i for i in ps.tasks if st[i] == "pending" or (st[i] == "releasing" and i in evicted)]
        chunks.append((active, free, ps.min_available))
        gang = gang or active < ps.min_available
    if gang:
        out: list[int] = []
        for active, free, need in chunks:
            if active < need:
                out.extend(free[: need - active])
        return out
    for _, free, _ in chunks:
        if free:
            return free[:1]
    return []


def sim_job_resources(session, j: int) -> np.ndarray:
    """KAI ``GetTasksToAllocateInitResourceVector(isRealAllocation=false)`` of a job."""
    return session.job_request(j, sim_tasks_to_allocate(session, j), session.min_gpu_mem)


class _SimOrder(JobsOrderByQueues):
    """The job queue of a simulation: a job's queue-order resources are its simulation chunk's (``known`` for
    the preemptor, whose probe may hold fewer tasks)."""

    def __init__(self, session, jobs: list[int], known: dict):
        self._known = known
        super().__init__(session, jobs)

    def _job_resources(self, j: int) -> np.ndarray:
        res = self._init_res.get(j)
        if res is None:
            res = self._known.get(j)
            if res is None:
                res = self._known[j] = sim_job_resources(self.session, j)
            self._init_res[j] = res
        return res


def sim_job_order(session, jobs: Iterable[int], known: Optional[dict] = None, others: Iterable[int] = ()):
    """Yield ``jobs`` in KAI's queue/job order, each once, re-evaluated after each one (placements in between
    change the queues' Allocated). ``others`` (jobs with pending tasks) take part in the order and are skipped.
    ``known``: chunk resources per job, filled in as computed (valid while those jobs are not placed)."""
    targets = list(dict.fromkeys(jobs))
    if len(targets) == 1 and not others:
        yield targets[0]
        return
    wanted = set(targets)
    roots = {session.queues.chains[session.jobs[j].queue][-1] for j in targets}
    pool = targets + [j for j in others if j not in wanted
                      and session.jobs[j].queue >= 0
                      and session.queues.chains[session.jobs[j].queue][-1] in roots]
    order = _SimOrder(session, pool, {} if known is None else known)
    left = len(wanted)
    while left:
        j = order.pop()
        if j is None:
            return
        if j in wanted:
            left -= 1
            yield j


def allocate_job_sim(session, stmt: Statement, j: int, tasks: Optional[list[int]] = None,
                     allowed: Optional[np.ndarray] = None) -> bool:
    """KAI ``AllocateJob(isPipelineOnly=true)``: place the job's next chunk (``tasks`` when already known)
    on the ``allowed`` nodes, every task pipelined (or un-evicted where it was); all or nothing."""
    if tasks is None:
        tasks = sim_tasks_to_allocate(session, j)
    if not tasks:
        return False
    if not _may_fit(session, tasks):
        return False  # no node has the GPUs: fails like the node search below would, without side effects
    if session.job_over_capacity(j, tasks) is not None:
        return False
    cp = stmt.checkpoint()
    for i in tasks:
        n = session.best_node(i, allowed=allowed)
        if n < 0 or not session.place(stmt, i, n, pipeline_only=True):
            stmt.rollback(cp)
            return False
    return True


def _may_fit(session, tasks: list[int]) -> bool:
    """Necessary condition for whole-GPU tasks: some ready node has that many idle + releasing GPUs."""
    need = 0.0
    for i in tasks:
        if session.kind_list[i] == KIND_WHOLE:
            need = max(need, float(session.gpu[i]))
    if need <= 0:
        return True
    ns = session.nodes
    free = ns.non_allocated(GPU)
    return bool((free[ns.ready] >= need).any())


def active_used(session, j: int) -> int:
    st = session.status
    return sum(1 for i in session.jobs[j].tasks if st[i] in OCCUPIES_NODE)


def gang_satisfied(session, j: int) -> bool:
    st = session.status
    return all(sum(1 for i in ps.tasks if st[i] in OCCUPIES_NODE) >= ps.min_available for ps in session.podsets(j))


__all__ = ["sim_tasks_to_allocate", "sim_job_resources", "sim_job_order", "allocate_job_sim", "active_used",
           "gang_satisfied"]
