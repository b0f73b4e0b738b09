"""Shared parts of the eviction actions (reclaim, preempt, consolidation): who may trigger evictions, which
running jobs may be victims, and the order victims are taken in.

- :func:`eviction_triggers`: pending jobs that may trigger evictions — the allocate filters (ready gang,
  existing leaf queue) plus the preemption delay (kai-semantics §c.8; ``actions/utils/input_jobs.go``).
- :class:`JobFacts`: per-job numpy columns (queue, preemptibility, priority, creation, last start, active
  task count, elastic flag) so that victim candidates are filtered with masks, not Python loops.
- :class:`VictimQueue`: KAI's ``JobsOrderByQueues`` in victim mode (``VictimQueue: true``): the queue order of
  §b.6 reversed at every level (the most over-served queue first; its dominant resource share is computed with
  the victims already taken from it removed, so victims alternate between over-served queues), the job order
  reversed inside a leaf (lowest priority first, jobs above min_available before those at it, youngest first).
  Each pop yields a :class:`Batch` = KAI ``GetTasksToEvict``: an elastic job gives up one surplus task (its
  youngest) and is pushed back with the rest; otherwise the whole job (every active task) goes at once.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..decisions import PREEMPTION_DELAY_NOT_ELAPSED
from ..model import UNLIMITED
from ..ordering import dominant_resource_share, link_chain, queue_less, unlink_chain
from ..session import ACTIVE_ALLOCATED
from ..session.nodes import GPU
from .allocate import candidate_jobs

# ---------------------------------------------------------------------------------------------- triggers


def within_preemption_delay(session, j: int) -> Optional[float]:
    """End of the job's preemption delay when ``snapshot.time`` is still inside it, else None (§c.8)."""
    job = session.snapshot.jobs[j]
    delay = job.preemption_delay_s
    if delay is None:
        return None
    since = job.creation_time
    if job.last_eviction_time is not None:
        since = max(since, job.last_eviction_time)
    end = since + delay
    return end if session.snapshot.time < end else None


def eviction_triggers(session, preemptible_only: bool = False) -> list[int]:
    """Pending jobs that may trigger evictions this session; jobs inside their preemption delay get the
    reason ``PreemptionDelayNotElapsed`` (the allocate reason they had is kept in ``details``)."""
    out = []
    for j in candidate_jobs(session):
        if preemptible_only and not session.jobs[j].preemptible:
            continue
        end = within_preemption_delay(session, j)
        if end is not None:
            job = session.snapshot.jobs[j]
            before = session.job_reasons.get(j)
            details = {"preemption_delay_s": job.preemption_delay_s, "delay_ends_at": end,
                       "seconds_left": end - session.snapshot.time}
            if before is not None:
                details["allocate_reason"], details["allocate_message"] = before[0], before[1]
            session.set_reason(j, PREEMPTION_DELAY_NOT_ELAPSED,
                               f"Workload is within its preemption delay window ({job.preemption_delay_s:g}s) and may "
                               f"not trigger evictions for another {end - session.snapshot.time:g}s", details)
            continue
        out.append(j)
    return out


# ---------------------------------------------------------------------------------------------- job facts

class JobFacts:
    """Per-job columns for vectorised victim filtering, kept current as statements commit."""

    def __init__(self, session):
        self.s = s = session
        jobs = s.snapshot.jobs
        J = len(jobs)
        self.queue = np.asarray(s.job_queue, dtype=np.int64)
        self.preemptible = ~np.asarray(s.job_non_preemptible, dtype=bool)
        self.priority = np.fromiter((job.priority for job in jobs), float, J)
        self.creation = np.fromiter((job.creation_time for job in jobs), float, J)
        self.last_start = np.fromiter((math.nan if job.last_start_time is None else job.last_start_time
                                       for job in jobs), float, J)
        self.min_available = np.fromiter((job.min_available for job in jobs), np.int64, J)
        self.has_subgroups = np.fromiter((bool(job.subgroups) for job in jobs), bool, J)
        self.n_tasks = np.diff(np.asarray(s.job_start, dtype=np.int64))
        self.task_job = np.asarray(s.task_job, dtype=np.int64)
        active = np.fromiter((st in ACTIVE_ALLOCATED for st in s.status), bool, len(s.status))
        self.active = np.bincount(self.task_job[active], minlength=J) if J else np.zeros(0, np.int64)
        # KAI IsElastic: some pod set has fewer required than present tasks.
        self.elastic = (self.min_available < self.n_tasks) & ~self.has_subgroups
        for j in np.nonzero(self.has_subgroups)[0].tolist():
            self.elastic[j] = any(ps.min_available < len(ps.tasks) for ps in s.podsets(j))
        nq = len(s.queues.names)
        # Jobs KAI's victim queue would accept at all: existing leaf queue whose ancestors exist.
        ok_queue = np.zeros(nq + 1, dtype=bool)
        for q in range(nq):
            top = s.queues.chains[q][-1]
            ok_queue[q] = bool(s.queues.is_leaf[q]) and s.snapshot.queues[top].parent is None
        self.queue_ok = ok_queue[self.queue]  # index -1 hits the trailing False
        self._leaf_order: dict[int, np.ndarray] = {}
        self._state = self._elastic_states(np.arange(J)) if J else np.zeros(0, np.int64)

    def _elastic_states(self, js: np.ndarray) -> np.ndarray:
        """KAI elastic job-order state per job: 0 below min_available, 1 at, 2 above."""
        act = self.active[js]
        mins = self.min_available[js]
        out = np.where(act < mins, 0, np.where(act == mins, 1, 2))
        for k in np.nonzero(self.has_subgroups[js])[0].tolist():
            out[k] = self.s.elastic_state(int(js[k]))
        return out

    def refresh(self, jobs) -> None:
        """Recount active tasks of ``jobs`` after a commit; leaf orders whose job states changed are rebuilt
        when next needed."""
        s = self.s
        for j in set(jobs):
            a, b = s.job_start[j], s.job_start[j + 1]
            act = sum(1 for st in s.status[a:b] if st in ACTIVE_ALLOCATED)
            self.active[j] = act
            if self.has_subgroups[j]:
                state = s.elastic_state(j)
            else:
                m = int(self.min_available[j])
                state = 0 if act < m else (1 if act == m else 2)
            if state != self._state[j]:
                self._state[j] = state
                if self.active[j] > 0:  # inactive jobs are no candidates: their place does not matter
                    self._leaf_order.pop(int(self.queue[j]), None)

    def base_candidates(self) -> np.ndarray:
        """Mask of jobs that can be victims at all: preemptible, with an active task, in a valid leaf queue."""
        return self.preemptible & (self.active > 0) & self.queue_ok

    def leaf_order(self, q: int) -> np.ndarray:
        """Every job of leaf queue ``q`` in reverse job order (victim order inside the queue)."""
        order = self._leaf_order.get(q)
        if order is None:
            js = np.nonzero(self.queue == q)[0]
            jobs = self.s.snapshot.jobs
            keys = [jobs[j].key for j in js.tolist()] if js.size else []
            # Stable two-pass sort: key descending, then (priority asc, state desc, creation desc).
            by_key = sorted(range(len(keys)), key=keys.__getitem__, reverse=True)
            js = js[by_key] if js.size else js
            lex = np.lexsort((-self.creation[js], -self._state[js], self.priority[js])) if js.size else js
            order = js[lex] if js.size else js
            self._leaf_order[q] = order
        return order


# ---------------------------------------------------------------------------------------------- batches

@dataclass
class Batch:
    """Tasks of one victim job taken together (one pop of the victim queue)."""

    job: int
    tasks: list[int]
    elastic: bool = False       # the job is elastic (KAI IsElastic), for the min-runtime check
    resources: np.ndarray = field(default_factory=lambda: np.zeros(3))  # queue amount of these tasks


SKIPPED = Batch(job=-1, tasks=[])
"""What :meth:`VictimQueue.pop` returns for a pop that held an already recorded victim."""


def merge_by_job(batches: list[Batch]) -> list[Batch]:
    """One victim per job with all its chosen tasks, in order of first appearance (KAI keys a scenario's
    victims by job: ``BaseScenario.appendTasksAsVictimJob``)."""
    merged: dict[int, Batch] = {}
    for b in batches:
        cur = merged.get(b.job)
        if cur is None:
            merged[b.job] = Batch(job=b.job, tasks=list(b.tasks), elastic=b.elastic, resources=b.resources.copy())
        else:
            cur.tasks.extend(b.tasks)
            cur.resources = cur.resources + b.resources
    return list(merged.values())


def active_tasks(session, j: int, within: Optional[frozenset] = None) -> list[int]:
    st = session.status
    return [i for i in session.jobs[j].tasks if st[i] in ACTIVE_ALLOCATED and (within is None or i in within)]


def tasks_to_evict(session, j: int, rep: Optional[frozenset]) -> tuple[list[int], list[int]]:
    """KAI ``GetTasksToEvict`` on a job representative (``rep`` = its task subset, None = whole job):
    ``(tasks to evict, remaining active tasks)``. A pod set above min_available gives one task, the last in
    task order (pod sets tried in reverse declaration order); otherwise every active task goes."""
    st = session.status
    sets = session.podsets(j)
    per_set = [[i for i in ps.tasks if st[i] in ACTIVE_ALLOCATED and (rep is None or i in rep)] for ps in sets]
    if any(len(a) >= ps.min_available and a for a, ps in zip(per_set, sets)):
        for a, ps in zip(reversed(per_set), reversed(sets)):
            if len(a) > ps.min_available:
                chosen = a[-1]
                rest = [i for b in per_set for i in b if i != chosen]
                return [chosen], rest
    out = [i for a in per_set for i in reversed(a)]
    return out, []


# ---------------------------------------------------------------------------------------------- victim queue

class _Desc(str):
    """A string that sorts in reverse (job key descending inside an ascending tuple)."""

    __slots__ = ()

    def __lt__(self, other):
        return str.__gt__(self, other)


def _le(a: float, b: float) -> bool:
    if a == UNLIMITED:
        return b == UNLIMITED
    if b == UNLIMITED:
        return True
    return a <= b


class VictimQueue:
    """Victim order over candidate jobs (KAI ``JobsOrderByQueues`` with ``VictimQueue: true``).

    ``candidates``: ``{leaf queue: job indices in reverse job order}``. ``max_jobs`` caps how many distinct
    jobs are ever popped (consolidation's ``max_consolidation_preemptees``).
    """

    def __init__(self, session, facts: JobFacts, candidates: dict[int, np.ndarray], max_jobs: int = -1):
        self.s = session
        self.facts = facts
        qs = session.queues
        self._arrays = {q: arr for q, arr in candidates.items() if len(arr)}
        self._pos = {q: 0 for q in self._arrays}
        self._heaps: dict[int, list] = {}
        self._popped = {q: np.zeros(3) for q in self._arrays}   # allocated of popped representatives
        self._seq = 0
        self._max_jobs = max_jobs
        self._seen_jobs: set[int] = set()
        # Active subtree structure.
        self._children: dict[int, set[int]] = {}
        self._roots: set[int] = set()
        for q in self._arrays:
            self._link(q)
        self._qs = qs

    def _link(self, q: int) -> None:
        link_chain(self._children, self._roots, self.s.queues.chains[q])

    def _unlink(self, q: int) -> None:
        unlink_chain(self._children, self._roots, self.s.queues.chains[q])

    def empty(self) -> bool:
        return not self._roots

    def candidate_tasks(self) -> list[int]:
        """Every task a pop could ever yield: the active tasks of all candidate jobs (whatever the cap)."""
        out: list[int] = []
        for arr in self._arrays.values():
            for j in arr.tolist():
                out.extend(active_tasks(self.s, j))
        return out

    # ---- leaf heads

    def _rep_key(self, j: int, rep: Optional[frozenset]) -> tuple:
        f = self.facts
        if rep is None:
            state = int(f._state[j])
        else:
            counts = [sum(1 for i in ps.tasks if i in rep) for ps in self.s.podsets(j)]
            sets = self.s.podsets(j)
            if any(c < ps.min_available for c, ps in zip(counts, sets)):
                state = 0
            elif all(c == ps.min_available for c, ps in zip(counts, sets)):
                state = 1
            else:
                state = 2
        return (float(f.priority[j]), -state, -float(f.creation[j]), _Desc(self.s.jobs[j].key))

    def _head(self, q: int):
        """``(job, rep)`` next in leaf ``q`` without removing it, or None."""
        arr, pos = self._arrays.get(q), self._pos.get(q, 0)
        heap = self._heaps.get(q)
        a = (int(arr[pos]), None) if arr is not None and pos < len(arr) else None
        if not heap:
            return a
        h = heap[0]
        if a is None or h[0] < self._rep_key(*a):
            return h[2], h[3]
        return a

    def _take(self, q: int) -> tuple[int, Optional[frozenset]]:
        head = self._head(q)
        heap = self._heaps.get(q)
        if heap and heap[0][2] == head[0] and heap[0][3] == head[1]:
            heapq.heappop(heap)
        else:
            self._pos[q] += 1
        return head

    def _leaf_empty(self, q: int) -> bool:
        arr = self._arrays.get(q)
        return not self._heaps.get(q) and (arr is None or self._pos[q] >= len(arr))

    def _rep_alloc(self, j: int, rep: Optional[frozenset]) -> np.ndarray:
        out = np.zeros(3)
        for i in active_tasks(self.s, j, rep):
            out += self.s.queue_amount(i)
        return out

    # ---- queue order (reversed)

    def _victims_res(self, leaf: int) -> np.ndarray:
        head = self._head(leaf)
        res = self._popped[leaf].copy()
        if head is not None:
            res += self._rep_alloc(*head)
        return res

    def _key(self, q: int, victims: np.ndarray) -> tuple:
        """Queue-order keys 1–6 of §b.6 for a queue compared with no pending job and ``victims`` removed."""
        qs = self._qs
        alloc = qs.allocated[q]
        fair, deserved, allocatable = qs.fair_share[q], qs.deserved[q], qs.allocatable[q]
        over = bool((fair < alloc).all())
        starved = all(_le(float(alloc[r]), float(deserved[r])) for r in range(3))
        violation = any(allocatable[r] == 0 and alloc[r] > 0 for r in range(3))
        return (over, not starved, -float(qs.priority[q]), violation,
                dominant_resource_share(alloc - victims, allocatable, qs.total),
                dominant_resource_share(alloc, allocatable, qs.total))

    def _best_leaf(self, q: int) -> int:
        while q in self._children:
            q = self._select(self._children[q])
        return q

    def _select(self, queues) -> int:
        """The sibling that goes first in victim order: the greatest under the normal queue order."""
        queues = sorted(queues)
        if len(queues) == 1:
            return queues[0]
        best, best_key = -1, None
        for q in queues:
            key = self._key(q, self._victims_res(self._best_leaf(q)))
            if best < 0 or queue_less(self.s, best, best_key, q, key):
                best, best_key = q, key
        return best

    # ---- pop

    def _push(self, leaf: int, j: int, rep: frozenset) -> None:
        self._seq += 1
        heapq.heappush(self._heaps.setdefault(leaf, []), (self._rep_key(j, rep), self._seq, j, rep))

    def pop(self, recorded: frozenset = frozenset()) -> Optional[Batch]:
        """The next victim batch, or None when no candidate is left. A pop whose tasks include one of
        ``recorded`` (victims already part of every scenario) pushes the job back without them and returns
        :data:`SKIPPED` (KAI ``addNextPotentialVictims``)."""
        while self._roots:
            leaf = self._best_leaf(self._select(self._roots))
            j, rep = self._take(leaf)
            if self._max_jobs >= 0 and j not in self._seen_jobs and len(self._seen_jobs) >= self._max_jobs:
                if self._leaf_empty(leaf):
                    self._unlink(leaf)
                continue
            self._seen_jobs.add(j)
            self._popped[leaf] = self._popped[leaf] + self._rep_alloc(j, rep)
            tasks, rest = tasks_to_evict(self.s, j, rep)
            if recorded and any(i in recorded for i in tasks):
                remaining = [i for i in active_tasks(self.s, j, rep) if i not in recorded]
                if remaining:
                    self._push(leaf, j, frozenset(remaining))
                if self._leaf_empty(leaf):
                    self._unlink(leaf)
                return SKIPPED
            if rest:
                self._push(leaf, j, frozenset(rest))
            if self._leaf_empty(leaf):
                self._unlink(leaf)
            if not tasks:
                continue
            res = np.zeros(3)
            for i in tasks:
                res += self.s.queue_amount(i)
            return Batch(job=j, tasks=tasks, elastic=bool(self.facts.elastic[j]), resources=res)
        return None


# ---------------------------------------------------------------------------------------------- capacity

_CAPACITY_CACHE: dict[int, tuple] = {}


def node_gpu_capacity(session) -> np.ndarray:
    """KAI ``GetSumOfIdleGPUs + GetSumOfReleasingGPUs`` per node: whole idle and releasing GPUs plus the free
    and releasing parts of shared GPUs. Cached per node-state version; do not modify the result."""
    ns = session.nodes
    hit = _CAPACITY_CACHE.get(id(session))
    if hit is not None and hit[0] is ns and hit[1] == ns.version:
        return hit[2]
    cap = _node_gpu_capacity(ns)
    _CAPACITY_CACHE.clear()  # one session at a time is enough; never keeps old sessions alive
    _CAPACITY_CACHE[id(session)] = (ns, ns.version, cap)
    return cap


def raw_gpu_capacity(session) -> np.ndarray:
    """:func:`node_gpu_capacity` on every node, ready or not (KAI's accumulated-GPU filter and feasible nodes
    read every node of the cluster). A new array."""
    return _node_gpu_capacity(session.nodes, ready_only=False)


def _node_gpu_capacity(ns, ready_only: bool = True) -> np.ndarray:
    cap = ns.idle[:, GPU] + ns.rel[:, GPU]
    if ns.sh_present.any():
        mem = np.where(ns.gpu_mem > 0, ns.gpu_mem, 1.0)[:, None]
        shared_free = np.where(ns.sh_present & ~ns.sh_marked, (ns.gpu_mem[:, None] - ns.sh_alloc + ns.sh_rel) / mem, 0.0)
        cap = cap + np.clip(shared_free, 0, None).sum(axis=1)
    return np.where(ns.ready, cap, 0.0) if ready_only else cap
