"""Which job an action tries next: KAI's job order within a leaf queue and queue order between queues.

- Job order (``framework/session_plugins.go JobOrderFn``, plugins ``priority`` and ``elastic``): higher
  priority first; jobs below min_available, then exactly at, then above; older creation time; then key.
- Queue order (``plugins/proportion/queue_order/queue_order.go``, kai-semantics §b.6), each queue compared
  with the best pending job of its subtree:
  1. not over-utilised (fair share < allocated in all three resources = over) first;
  2. ``allocated + job ≤ deserved`` in every resource ("starved") first;
  3. higher queue priority first;
  4. a queue that would use a resource whose allocatable share is 0 last;
  5. smaller dominant resource share with the job;
  6. smaller dominant resource share without it;
  7. component-wise smaller allocatable share first;
  8. older queue first (then name, where KAI's heap order would decide).
- Hierarchy (``actions/utils/job_order_by_queue.go``): descend from the top-level queues choosing the best
  child at each level, pop the best job of the chosen leaf. After every pop the path is re-evaluated, so
  allocations made in the meantime (Allocated grows in-session) change the next choice. Sibling subtrees that
  did not change keep their cached keys, as KAI's heap keeps their positions.
"""

from __future__ import annotations

import heapq
from typing import Optional

import numpy as np

from .model import UNLIMITED

NO_FAIR_SHARE_DRF_MULTIPLIER = 1000.0
"""KAI ``noFairShareDrfMultiplier``: a resource with allocatable 0 costs allocated × 1000 in DRF."""


def job_order_key(session, j: int) -> tuple:
    """Sort key of KAI's job order (smaller = tried first): priority, elastic state, creation time, then the
    PodGroup's UID (KAI's last tie-breaker; the job key when the snapshot has no UID)."""
    info = session.jobs[j]
    return (-info.priority, session.elastic_state(j), info.creation, info.job.uid or info.key)


def dominant_resource_share(allocated: np.ndarray, allocatable: np.ndarray, total: np.ndarray) -> float:
    """KAI ``GetDominantResourceShare``: max over resources of allocated / allocatable (−1 → cluster total;
    0 → allocated × 1000)."""
    best = 0.0
    for r in range(3):
        share = allocatable[r]
        if share == UNLIMITED:
            share = total[r]
        value = allocated[r] * NO_FAIR_SHARE_DRF_MULTIPLIER if share == 0 else allocated[r] / share
        best = max(best, value)
    return best


def _le(a: float, b: float) -> bool:
    """KAI ``compareQuantities(a, b) <= 0`` with −1 as +infinity."""
    if a == UNLIMITED:
        return b == UNLIMITED
    if b == UNLIMITED:
        return True
    return a <= b


def queue_key(session, q: int, job_resources) -> tuple:
    """Keys 1–6 of the queue order for queue ``q`` with its best pending job requesting ``job_resources``."""
    qs = session.queues
    consts = qs.__dict__.get("_order_consts")
    if consts is None or consts[0] is not qs.fair_share or consts[5] is not qs.allocatable:
        consts = (qs.fair_share, qs.fair_share.tolist(), qs.deserved.tolist(), qs.allocatable.tolist(),
                  qs.total.tolist(), qs.allocatable, (-qs.priority).tolist())
        qs._order_consts = consts
    _, fair_l, des_l, alloc_l, total, _, prio = consts
    alloc = qs.allocated[q].tolist()
    fair, deserved, allocatable = fair_l[q], des_l[q], alloc_l[q]
    job = job_resources.tolist() if hasattr(job_resources, "tolist") else list(job_resources)
    over = fair[0] < alloc[0] and fair[1] < alloc[1] and fair[2] < alloc[2]
    with_job = [alloc[0] + job[0], alloc[1] + job[1], alloc[2] + job[2]]
    starved = _le(with_job[0], deserved[0]) and _le(with_job[1], deserved[1]) and _le(with_job[2], deserved[2])
    violation = any(allocatable[r] == 0 and with_job[r] > 0 for r in range(3))
    return (over, not starved, prio[q], violation,
            dominant_resource_share(with_job, allocatable, total), dominant_resource_share(alloc, allocatable, total))


def _allocatable_less(a: np.ndarray, b: np.ndarray) -> bool:
    """KAI ``LessInAtLeastOneResource && LessEqual`` with −1 as +infinity."""
    le = all(_le(a[r], b[r]) for r in range(3))
    strictly = not all(_le(b[r], a[r]) for r in range(3))
    return le and strictly


def queue_less(session, qa: int, key_a: tuple, qb: int, key_b: tuple) -> bool:
    """True when queue ``qa`` (with its key) goes before ``qb``: keys 1–6, then 7 and 8."""
    if key_a != key_b:
        return key_a < key_b
    qs = session.queues
    aa, ab = qs.allocatable[qa], qs.allocatable[qb]
    if _allocatable_less(aa, ab):
        return True
    if _allocatable_less(ab, aa):
        return False
    ca, cb = qs.creation[qa], qs.creation[qb]
    if ca != cb:
        return ca < cb
    return qs.names[qa] < qs.names[qb]


def link_chain(children: dict[int, set[int]], roots: set[int], chain: list[int]) -> None:
    """Make a leaf queue reachable in a tree of active queues: ``chain`` is the leaf then its ancestors."""
    child = chain[0]
    for a in chain[1:]:
        children.setdefault(a, set()).add(child)
        child = a
    roots.add(child)


def unlink_chain(children: dict[int, set[int]], roots: set[int], chain: list[int]) -> None:
    """Remove a leaf queue from the tree, and every ancestor left without an active child."""
    cur = chain[0]
    for a in chain[1:]:
        kids = children.get(a)
        kids.discard(cur)
        if kids:
            return
        del children[a]
        cur = a
    roots.discard(cur)


class JobsOrderByQueues:
    """KAI's hierarchical job queue: ``pop()`` the next job to try, ``push()`` one back (elastic growth)."""

    def __init__(self, session, jobs: list[int]):
        self.session = session
        qs = session.queues
        self._heaps: dict[int, list] = {}
        self._active_children: dict[int, set[int]] = {}
        self._roots: set[int] = set()
        self._cache: dict[int, tuple] = {}   # queue -> (best child or -1, best job, key)
        self._init_res: dict[int, np.ndarray] = {}
        self._qs = qs
        for j in jobs:
            self.push(j)

    def __len__(self) -> int:
        return sum(len(h) for h in self._heaps.values())

    def push(self, j: int) -> None:
        """Add a job (again) to its leaf queue; its ordering keys are recomputed."""
        s = self.session
        q = s.jobs[j].queue
        heap = self._heaps.setdefault(q, [])
        self._init_res.pop(j, None)
        heapq.heappush(heap, (job_order_key(s, j), j))
        link_chain(self._active_children, self._roots, self._qs.chains[q])
        self._mark_dirty(q)

    def pop(self) -> Optional[int]:
        """The next job in queue order, or None when none is left."""
        if not self._roots:
            return None
        q = self._select(self._roots)
        while q in self._active_children:
            entry = self._best(q)
            q = entry[0]
        heap = self._heaps[q]
        _, j = heapq.heappop(heap)
        self._init_res.pop(j, None)
        self._mark_dirty(q)
        if not heap:
            self._deactivate(q)
        return j

    # ------------------------------------------------------------------ internals

    def _mark_dirty(self, q: int) -> None:
        for a in self._qs.chains[q]:
            self._cache.pop(a, None)

    def _deactivate(self, q: int) -> None:
        del self._heaps[q]
        unlink_chain(self._active_children, self._roots, self._qs.chains[q])

    def _job_resources(self, j: int) -> np.ndarray:
        res = self._init_res.get(j)
        if res is None:
            s = self.session
            res = s.job_request(j, s.tasks_to_allocate(j), s.min_gpu_mem)
            self._init_res[j] = res
        return res

    def _best(self, q: int) -> tuple:
        """``(best child or -1, best job, key)`` of an active queue, cached until its subtree changes."""
        entry = self._cache.get(q)
        if entry is not None:
            return entry
        if q in self._heaps and q not in self._active_children:
            j = self._heaps[q][0][1]
            entry = (-1, j, queue_key(self.session, q, self._job_resources(j)))
        else:
            child = self._select(self._active_children[q])
            j = self._best(child)[1]
            entry = (child, j, queue_key(self.session, q, self._job_resources(j)))
        self._cache[q] = entry
        return entry

    def _select(self, queues) -> int:
        """The queue that goes first: the smallest keys 1–6; on an exact tie keys 7, 8 (and name)."""
        keyed = [(self._best(q)[2], q) for q in queues]
        if len(keyed) == 1:
            return keyed[0][1]
        low = min(keyed)
        tied = [q for key, q in keyed if key == low[0]]
        if len(tied) == 1:
            return tied[0]
        s = self.session
        best = tied[0]
        for q in tied[1:]:
            if queue_less(s, q, low[0], best, low[0]):
                best = q
        return best
