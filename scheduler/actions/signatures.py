"""KAI's scheduling signatures in the eviction actions (``--use-scheduling-signatures``, default on;
``pkg/scheduler/actions/common/minimal_job_comparison.go``, used by ``actions/reclaim/reclaim.go``,
``actions/preempt/preempt.go`` and ``actions/consolidation/consolidation.go``).

Once a pending job's search for victims has failed, a later job with the same *scheduling-constraints
signature* that is no easier to schedule is skipped for the rest of the action run. Nothing invalidates a
recorded failure: not a later successful commit, not a change of queue shares.

- **Key** (``api/podgroup_info``, ``api/pod_info/scheduling_constraints_signature.go``): the sorted
  signatures of the job's pod sets; a pod set whose pods are all active-allocated has the empty signature,
  otherwise it hashes its pods that are not active-allocated. A pod's signature hashes its node selector,
  affinity, tolerations, storage claims, topology-spread constraints, host ports and priority class /
  priority — not its resource request. The model carries node selector, affinities, tolerations, host ports,
  the pod's priority (the job's) and its class name where it is not the one an export gives that priority
  (``Task.priority_class``: a pod of class ``train`` and one without a class differ even at equal priority);
  storage and spread constraints are not modelled. KAI computes and caches
  the signature when the session opens (``cluster_info.go``), so the pods counted are those not
  active-allocated at session open (a pod a previous cycle pipelined is Pending then), not those still waiting
  when an action looks at the job.
- **Scope**: reclaim and preempt keep one table per leaf queue, consolidation one for all queues.
- **Recorded** when the job's attempt fails (no valid scenario found, including having no victim
  candidates); a job filtered before the attempt (reclaim's ``CanReclaimResources``) records nothing. A key
  keeps the failed job with the smallest footprint: the new job replaces it when it has no more pending pods
  and each of its sorted requests is ≤ the representative's at the same rank.
- **Easier** (``jobEasierToScheduleComparison``), comparing pending pods' requests sorted ascending: a
  job is easier when the representative has more pending pods, or at the first rank where the job's
  request is ≤ the representative's and they differ; equal requests go on to the next rank, and a job
  that runs out of ranks (or has none pending) is not easier.

Requests are KAI's resource vectors (``PodInfo.ResReqVector``): GPUs, CPU, memory. GPU memory is not in it,
and a GPU-memory pod counts 0 GPUs there, so a 4000 MiB pod is "easier" than a failed 4-GPU job of the same
signature (seed 4090 of the differential tool: KAI tries team-b/job-063 after team-a/job-079 failed).

Deviation: KAI sorts requests with ``sort.Slice`` and the partial order ``LessEqual``; here requests are
sorted by the tuple ``(gpus, cpu, memory)``, which agrees wherever the requests are comparable.
"""

from __future__ import annotations

from typing import Optional

from ..session import KIND_FRACTION, KIND_WHOLE

Request = tuple[float, float, float]


def pod_signature(session, i: int) -> tuple:
    """A pod's scheduling constraints as KAI's pod signature hashes them (its resources excluded)."""
    t = session.task_objs[i]
    c = t.constraints
    prio = (session.jobs[session.task_job[i]].priority, t.priority_class)
    if c is None:
        return (prio,)
    return (prio, tuple(sorted(c.node_selector.items())), repr(c.node_affinity), repr(c.pod_affinity),
            repr(c.pod_anti_affinity), repr(c.preferred_pod_affinity), repr(c.preferred_pod_anti_affinity),
            repr(c.tolerations), tuple(repr(p) for p in c.host_ports))


def job_signature(session, j: int) -> tuple:
    """The job's scheduling-constraints key (see module docstring): per pod set, the sorted signatures of its
    pods that were not active-allocated when the session opened (empty when all were), sorted; cached for the
    session like KAI's ``PodGroupInfo.GetSchedulingConstraintsSignature``."""
    cache = session.signature_cache
    key = cache.get(j)
    if key is None:
        objs = session.task_objs
        sets = []
        for ps in session.podsets(j):
            waiting = [i for i in ps.tasks if objs[i].status not in ("running", "binding")]
            sets.append(tuple(sorted(pod_signature(session, i) for i in waiting)) if waiting else ())
        key = tuple(sorted(sets))
        cache[j] = key
    return key


def task_request(session, i: int) -> Request:
    """A pod's request as KAI's ``PodInfo.ResReqVector`` holds it: (GPUs, CPU millis, memory bytes). A
    GPU-memory pod counts 0 GPUs (its requirement has portion 0, ``resource_info.NewGpuResourceRequirementWithGpus``)
    and GPU memory is no dimension of the vector (``ResourceRequirements.ToVector``), so a GPU-memory pod
    compares like a CPU-only pod of the same CPU and memory."""
    kind = session.kind_list[i]
    gpus = 0.0
    if kind == KIND_WHOLE:
        gpus = float(session.gpu[i])
    elif kind == KIND_FRACTION:
        gpus = float(session.gpu[i]) * int(session.dev[i])
    return (gpus, float(session.cpu[i]), float(session.mem[i]))


def pending_requests(session, j: int) -> list[Request]:
    """Requests of the job's pending pods, sorted ascending."""
    status = session.status
    return sorted(task_request(session, i) for i in session.jobs[j].tasks if status[i] == "pending")


def _le(a: Request, b: Request) -> bool:
    return all(x <= y for x, y in zip(a, b))


def easier_than(job: list[Request], rep: list[Request]) -> bool:
    """KAI ``jobEasierToScheduleComparison(job, representative)`` over sorted pending requests."""
    if not job or not rep:
        return False
    if len(rep) > len(job):
        return True
    for k, r in enumerate(job):
        if k >= len(rep):
            return False
        if _le(r, rep[k]):
            if _le(rep[k], r):
                continue
            return True
    return False


def footprint_smaller(new: list[Request], rep: list[Request]) -> bool:
    """KAI ``isPodGroupFootprintSmaller``: every pending pod of ``new`` ≤ the representative's at its rank."""
    if not new or not rep or len(new) > len(rep):
        return False
    return all(_le(a, b) for a, b in zip(new, rep))


class FailedJobs:
    """KAI ``MinimalJobRepresentatives``: per signature key, the smallest job whose attempt failed."""

    def __init__(self, session):
        self.s = session
        self._reps: dict[tuple, tuple[int, list[Request]]] = {}

    def easier(self, j: int) -> tuple[bool, Optional[int]]:
        """(worth trying, the representative that makes it not worth it)."""
        rep = self._reps.get(job_signature(self.s, j))
        if rep is None:
            return True, None
        return easier_than(pending_requests(self.s, j), rep[1]), rep[0]

    def record_failure(self, j: int) -> None:
        key = job_signature(self.s, j)
        reqs = pending_requests(self.s, j)
        cur = self._reps.get(key)
        if cur is not None and not footprint_smaller(reqs, cur[1]):
            return
        self._reps[key] = (j, reqs)


class SignatureSkips:
    """Failure tables for one action run: per leaf queue (reclaim, preempt) or one for all
    (consolidation); inactive when ``config.use_scheduling_signatures`` is off. Counts into
    ``session.action_stats[action]``: ``attempted`` and ``skipped_by_signature``."""

    def __init__(self, session, action: str, per_queue: bool):
        self.s = session
        self.on = bool(getattr(session.config, "use_scheduling_signatures", True))
        self.per_queue = per_queue
        self._tables: dict[int, FailedJobs] = {}
        self.stats = session.action_stats.setdefault(action, {"attempted": 0, "skipped_by_signature": 0})

    def _table(self, j: int) -> FailedJobs:
        q = self.s.jobs[j].queue if self.per_queue else -1
        t = self._tables.get(q)
        if t is None:
            t = self._tables[q] = FailedJobs(self.s)
        return t

    def skip(self, j: int) -> bool:
        """True when a job no easier than this one already failed in this action run; otherwise the job
        counts as attempted."""
        if self.on and self._tables and not self._table(j).easier(j)[0]:
            self.stats["skipped_by_signature"] += 1
            return True
        self.stats["attempted"] += 1
        return False

    def failed(self, j: int) -> None:
        """Record that job ``j``'s attempt found no valid scenario."""
        if self.on:
            self._table(j).record_failure(j)


__all__ = ["SignatureSkips", "FailedJobs", "job_signature", "pending_requests", "easier_than",
           "footprint_smaller"]
