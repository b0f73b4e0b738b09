"""KAI's allocate action (``pkg/scheduler/actions/allocate/allocate.go``, ``actions/common/allocate.go``;
kai-semantics §c.2).

For every job in queue/job order: take the tasks the job should place next (its gang chunk, or one more
task once every gang is satisfied), check the queue's limit and non-preemptible quota, then place each task
on the first node of the session's node order. Any task that fits nowhere rolls the whole chunk back
(all-or-nothing). If part of a gang could only be pipelined, the whole job is pipelined. A job with more
tasks to place is pushed back and competes again (elastic growth, one task per pop).

Jobs left pending get a reason: ``OverLimit`` / ``NonPreemptibleOverQuota`` with KAI's message, or
``PodSchedulingErrors`` with the per-node fit summary.

Faithful shortcut: once a chunk of a given shape (and, for gpu-memory requests, queue) has fit nowhere,
later chunks of the same shape are answered from a cache until something frees resources (``free_epoch``).
Allocate only consumes resources, so the answer cannot change; KAI computes it again, and its node search
leaves session-long marks (PreFilter / PreScore skips), so a cache hit takes those marks too.
"""

from __future__ import annotations

from ..decisions import NOT_ENOUGH_RESOURCES, POD_SCHEDULING_ERRORS
from ..ordering import JobsOrderByQueues
from ..placement import topology
from ..session import KIND_MEMORY, Session, Statement
from ..session.core import ACTIVE_ALLOCATED
from . import register_action

QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
QUEUE_NOT_LEAF = "QueueNotLeaf"
NOT_READY = "NotReadyForScheduling"
AWAITING_POD_GROUPER = "AwaitingPodGrouper"


def candidate_jobs(session: Session) -> list[int]:
    """Jobs with pending tasks that may be scheduled (KAI ``input_jobs.go`` filters); every job filtered
    out gets its reason recorded on the session."""
    out = []
    qs = session.queues
    for j in session.jobs_with_pending():
        info = session.jobs[j]
        if info.job.waiting_for == "pod-grouper":
            session.set_reason(j, AWAITING_POD_GROUPER,
                               "waiting for the pod-grouper: the pod has no PodGroup yet, so KAI does not schedule "
                               "it or count it in fair share", {"queue": info.job.queue})
            continue
        if info.queue < 0 or _orphan(session, info.queue):
            session.set_reason(j, QUEUE_DOES_NOT_EXIST,
                               f"queue {info.job.queue!r} does not exist (or one of its ancestors is missing)",
                               {"queue": info.job.queue})
            continue
        if not qs.is_leaf[info.queue]:
            session.set_reason(j, QUEUE_NOT_LEAF,
                               f"queue {info.job.queue!r} has child queues; jobs are only scheduled from leaf queues",
                               {"queue": info.job.queue})
            continue
        ready, ps, alive = session.is_ready(j)
        if not ready:
            where = "" if ps.name == "default" else f" in sub-group {ps.name}"
            session.set_reason(j, NOT_READY,
                               f"{alive} alive pods{where} while {ps.min_available} are required for gang scheduling",
                               {"podset": ps.name, "alive": alive, "min_available": ps.min_available})
            continue
        out.append(j)
    return out


def _orphan(session: Session, q: int) -> bool:
    """KAI drops queues whose parent is missing, with their subtree."""
    top = session.queues.chains[q][-1]
    return session.snapshot.queues[top].parent is not None


def allocate(session: Session) -> None:
    """Run the allocate action on the session."""
    order = JobsOrderByQueues(session, candidate_jobs(session))
    failed: dict[tuple, tuple] = {}
    failed_epoch = session.free_epoch
    while True:
        j = order.pop()
        if j is None:
            break
        if session.free_epoch != failed_epoch:
            failed.clear()
            failed_epoch = session.free_epoch
        if attempt_job(session, j, failed):
            if session.has_pending(j):  # KAI HasTasksToAllocate
                order.push(j)


def missing_config_maps(session: Session, tasks: list[int]) -> tuple[int, list[str]] | None:
    """The first of ``tasks`` that mounts a ConfigMap that does not exist, with the missing names (None: none).

    KAI's ConfigMap pre-predicate (``k8s_internal/predicates/config_maps.go``) fails such a pod as
    unschedulable and unresolvable: allocate gives up on the job, and reclaim, preempt and consolidation skip it
    before any victim search, since no eviction can make it start (``actions/common/action_eligibility.go``,
    ``plugins/predicates/predicates.go: victimInvariantPrePredicateCandidates``)."""
    if not session.predicates_apply:
        return None
    return next(((i, m) for i in tasks if (m := session.predicates.missing_config_maps(i))), None)


def attempt_job(session: Session, j: int, failed: dict | None = None) -> bool:
    """Try to place the job's next chunk; True when it was allocated or pipelined (committed)."""
    tasks = session.tasks_to_allocate(j)
    if not tasks:
        return False
    over = session.job_over_capacity(j, tasks)
    if over is not None:
        session.set_reason(j, *over)
        return False
    sig = _signature(session, j, tasks) if failed is not None else None
    missing = missing_config_maps(session, tasks)
    if missing is not None:  # KAI's ConfigMap pre-predicate: the pod cannot start anywhere
        i, names = missing
        message = (f"Scheduling conditions were not met for pod {session.task_names[i]}: ConfigMap: Missing "
                   f"required configmaps: [{' '.join(names)}]")
        session.set_reason(j, POD_SCHEDULING_ERRORS, message, {"task": session.task_names[i],
                                                                "missing_config_maps": names})
        return False
    if sig is not None and sig in failed:
        reason, failing_task, index, fit_message, details, attempted = failed[sig]
        _note_attempts(session, tasks[:attempted])
        message = fit_message if failing_task is None else _failure_message(session, j, tasks[index], index,
                                                                             fit_message)
        session.set_reason(j, reason, message, details)
        return False
    info = session.jobs[j]
    had_allocated = any(session.status[i] in ("running", "binding") for i in info.tasks)
    plan = topology.plan(session, j, tasks)
    if plan is not None and plan.failure is not None:  # no domain of the required level can hold the chunk
        message, details = plan.failure
        session.set_reason(j, POD_SCHEDULING_ERRORS, message, details)
        if sig is not None:
            failed[sig] = (POD_SCHEDULING_ERRORS, None, 0, message, details, 0)  # None: the message is final
        return False
    # KAI's node subsets: every node at once, or each topology domain in turn until the chunk fits in one
    tries = 1 if plan is None else len(plan.candidates)
    attempted = 0  # tasks the node search was run for (in any subset): a cache hit takes their marks again
    for k in range(tries):
        stmt = Statement(session)
        allowed, bonus = (None, None) if plan is None else plan.subset(k)
        failure = _place_chunk(session, stmt, j, tasks, allowed, bonus)
        if failure is None:
            break
        stmt.discard()
        attempted = max(attempted, tasks.index(failure[1]) + 1)
        if k == tries - 1:
            fit_message, i, index, details = failure
            if plan is not None:
                details = dict(details, topology_domains_tried=plan.domains)
            message = _failure_message(session, j, i, index, fit_message)
            session.set_reason(j, POD_SCHEDULING_ERRORS, message, details)
            if sig is not None:
                failed[sig] = (POD_SCHEDULING_ERRORS, i, index, fit_message, details, attempted)
            return False
    pipelined = should_pipeline_job(session, j)
    if pipelined:
        stmt.convert_all_allocated_to_pipelined(j)
    stmt.commit()
    session.clear_reason(j)
    if not pipelined and not had_allocated:
        session.started_jobs.add(j)
    return True


def _note_attempts(session: Session, tasks: list[int]) -> None:
    """A chunk answered from the fits-nowhere cache: KAI runs the node search for ``tasks`` again (each task up to
    the one that fits nowhere), and with it the PreFilter and PreScore whose Skip marks a task for the rest of the
    session (:meth:`Predicates.note_placement_attempt`). A cached shape is never dynamic, so no placed pod's
    anti-affinity or preferred term concerns these tasks now: without the marks, a task tried only from the cache
    would still be refused beside an anti-affinity pod placed later in the session, where KAI places it."""
    if session.predicates_apply:
        for i in tasks:
            session.predicates.note_placement_attempt(i)


def _place_chunk(session: Session, stmt: Statement, j: int, tasks: list[int], allowed, bonus):
    """Place every task of the chunk through ``stmt`` on the nodes ``allowed`` (None: all); None on success,
    else ``(fit message, task, index in its sub-group, details)`` of the first task that fits nowhere."""
    for index, i in enumerate(tasks):
        n = session.best_node(i, allowed=allowed, bonus=bonus)
        if n < 0 or not session.place(stmt, i, n):
            fit_message, details = session.fit_error(i)
            index = _index_in_podset(session, j, tasks, index)  # KAI counts per sub-group
            return fit_message, i, index, dict(details, task=session.task_names[i], placed_before_failure=index)
    return None


def should_pipeline_job(session: Session, j: int) -> bool:
    """KAI ``ShouldPipelineJob``: a gang with a pipelined task and fewer than min_available other active
    tasks is pipelined whole (no partial bind)."""
    st = session.status
    for ps in session.podsets(j):
        has_pipelined = any(st[i] == "pipelined" for i in ps.tasks)
        others = sum(1 for i in ps.tasks if st[i] in ("running", "binding"))
        if has_pipelined and others < ps.min_available:
            return True
    return False


def _index_in_podset(session: Session, j: int, tasks: list[int], index: int) -> int:
    ps = next(p for p in session.podsets(j) if tasks[index] in p.tasks)
    return sum(1 for i in tasks[:index] if i in ps.tasks)


def _failure_message(session: Session, j: int, task: int, index: int, fit_message: str) -> str:
    """KAI ``handleFailedTaskAllocation`` wording."""
    info = session.jobs[j]
    sets = session.podsets(j)
    name = session.task_names[task]
    ns = f"{info.job.namespace}/" if info.job.namespace and not name.startswith(f"{info.job.namespace}/") else ""
    gang = any(ps.min_available > 1 for ps in sets)
    ps = next(p for p in sets if task in p.tasks)
    active_used = sum(1 for i in ps.tasks if session.status[i] in ("running", "binding", "pipelined", "releasing"))
    if not gang or active_used >= ps.min_available:
        return f"Resources were not found for pod {ns}{name} due to: {fit_message}"
    if len(sets) == 1 and ps.name == "default":
        return (f"Resources were found for {index} pods while {ps.min_available} are required for gang scheduling. "
                f"Additional pods cannot be scheduled due to: {fit_message}")
    return (f"Resources were found for {index} pods from all sub-groups while sub-group {ps.name} requires "
            f"{ps.min_available} pods for gang scheduling. Additional pods cannot be scheduled in this sub-group "
            f"due to: {fit_message}")


def _signature(session: Session, j: int, tasks: list[int]):
    """Shape of a chunk: equal shapes fit (or not) on the same nodes. gpu-memory requests also depend on
    the queue (per-node quota check), so the queue and preemptibility join the key."""
    preds = session.predicates if session.predicates_apply else None
    if preds is not None and any(preds.is_dynamic(i) for i in tasks):
        return None  # fits depend on the pods placed so far (host ports, inter-pod affinity): never cached
    shape = tuple((session.kind_list[i], float(session.gpu[i]), float(session.gmem[i]) if session.kind_list[i] == KIND_MEMORY else 0.0,
                   int(session.dev[i]), float(session.cpu[i]), float(session.mem[i]), session.nominated.get(i, -1),
                   id(preds.static(i)[0]) if preds is not None else 0)
                  for i in tasks)
    job = session.jobs[j].job
    if job.topology is not None:  # the domains depend on the constraint, and on where the job's pods already run
        c = job.topology
        if any(session.status[i] in ACTIVE_ALLOCATED for i in session.jobs[j].tasks):
            return None
        shape = (c.topology, c.required_level, c.preferred_level, shape)
    if any(session.kind_list[i] == KIND_MEMORY for i in tasks):
        info = session.jobs[j]
        return (info.queue, info.preemptible, shape)
    return shape


register_action("allocate", allocate)

__all__ = ["allocate", "attempt_job", "candidate_jobs", "missing_config_maps", "should_pipeline_job",
           "NOT_ENOUGH_RESOURCES"]
