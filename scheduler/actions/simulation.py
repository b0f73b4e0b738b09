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

import bisect
from typing import Iterable, Optional

import numpy as np

from ..ordering import (_heap_down, _heap_up, bounded_memo, job_order_key, job_order_key_by_state, queue_key,
                        queue_key_of, queue_less, queue_tie_less)
from ..placement import topology
from ..session import ACTIVE_ALLOCATED, KIND_WHOLE, OCCUPIES_NODE, Statement
from ..session.nodes import GPU


def sim_tasks_to_allocate(session, j: int, by_state: bool = False) -> list[int]:
    """KAI ``GetTasksToAllocate(isRealAllocation=false)``: like allocate's chunk, but tasks evicted in this
    session (virtually releasing) may be placed again. Kept per job until one of its tasks changes, and with
    ``by_state`` per state of its tasks as well (:func:`_sim_tasks_by_state`)."""
    memo = session.sim_tasks_memo
    version = session.job_version[j]
    hit = memo.get(j)
    if hit is None or hit[0] != version:
        hit = memo[j] = (version, _sim_tasks_by_state(session, j) if by_state else _sim_tasks_to_allocate(session, j))
    return list(hit[1])


def _sim_tasks_by_state(session, j: int) -> list[int]:
    """:func:`_sim_tasks_to_allocate`, a function of the job's task statuses and which of its tasks were evicted in
    this session (its podsets are fixed), kept per such state."""
    st, evicted = session.status, session.evict_prior
    tasks = session.jobs[j].tasks
    key = (j, tuple([st[i] for i in tasks]), tuple([i for i in tasks if i in evicted]))
    return bounded_memo(session.sim_tasks_by_state, key, lambda: _sim_tasks_to_allocate(session, j))


def _sim_tasks_to_allocate(session, j: int) -> list[int]:
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


class PendingJobs:
    """The jobs with a pending task, per leaf queue in job order: they take part in every simulation's job order.
    Built once per action run and kept current with :meth:`refresh` after each commit (a search itself changes
    nothing: its simulations roll back)."""

    def __init__(self, session):
        self.session = session
        self.keys: dict[int, tuple] = {}
        self.by_leaf: dict[int, list[int]] = {}
        self.resources: dict[int, np.ndarray] = {}
        self.root: dict[int, int] = {}
        for j in session.jobs_with_pending():
            self._add(j)

    def _add(self, j: int) -> None:
        s = self.session
        q = s.jobs[j].queue
        if q < 0 or not s.queues.is_leaf[q]:
            return
        self.keys[j] = job_order_key(s, j)
        bisect.insort(self.by_leaf.setdefault(q, []), j, key=self.keys.__getitem__)
        self.root[q] = s.queues.chains[q][-1]

    def refresh(self, jobs: Iterable[int]) -> None:
        """Jobs whose tasks changed (a committed scenario's victims and preemptor)."""
        s = self.session
        st = s.status
        for j in set(jobs):
            self.resources.pop(j, None)
            key = self.keys.get(j)
            if key is not None:
                lst = self.by_leaf[s.jobs[j].queue]
                # the job is usually its leaf's first (the one just tried); keys are unique (a total order)
                lst.pop(0 if lst[0] == j else bisect.bisect_left(lst, key, key=self.keys.__getitem__))
                del self.keys[j]
            if any(st[i] == "pending" for i in s.jobs[j].tasks):
                self._add(j)

    def resources_of(self, j: int) -> np.ndarray:
        res = self.resources.get(j)
        if res is None:
            res = self.resources[j] = sim_job_resources(self.session, j)
        return res


class _Leaf:
    """A leaf queue's jobs in job order (a total order, so a sorted sequence pops as KAI's heap does): the
    scenario's jobs (``mine``), merged with the pre-sorted pending jobs of the leaf that are not among them.
    The head is cached between pops: the job order reads it at every comparison."""

    __slots__ = ("mine", "mine_keys", "rest", "rest_keys", "pos", "skip", "head")

    def __init__(self, mine_keys: dict, rest: list, rest_keys: dict, skip: set):
        self.mine: list = []
        self.mine_keys, self.rest, self.rest_keys, self.skip = mine_keys, rest, rest_keys, skip
        self.pos = 0
        self._find_head()

    def set_mine(self, jobs: list[int]) -> None:
        """The scenario's jobs of this leaf (while the order is built)."""
        self.mine = sorted(jobs, key=self.mine_keys.__getitem__)
        self._find_head()

    def _find_head(self) -> None:
        rest, skip = self.rest, self.skip
        pos, n = self.pos, len(rest)
        while pos < n and rest[pos] in skip:
            pos += 1
        self.pos = pos
        r = rest[pos] if pos < n else None
        mine = self.mine
        if mine and (r is None or self.mine_keys[mine[0]] < self.rest_keys[r]):
            r = mine[0]
        self.head = r

    def pop(self) -> Optional[int]:
        """The next job, or None when the leaf is empty."""
        j = self.head
        if j is None:
            return None
        if self.mine and j == self.mine[0]:
            self.mine.pop(0)
        else:
            self.pos += 1
        self._find_head()
        return j


class _SimOrder:
    """The job queue of a simulation (KAI ``GetJobsToAllocate``): the scenario's jobs and every pending job of
    the queue trees they are in. A job's queue-order resources are its simulation chunk's (``known`` for the
    preemptor, whose probe may hold fewer tasks).

    The algorithm of :class:`~scheduler.ordering.JobsOrderByQueues` (Go ``container/heap`` operations per queue
    level, queues compared through the tops of their child heaps as they stand, marked tops fixed lazily), built
    once, as that class does when each leaf's jobs are pushed together, leaves in index order, best job first
    (tests/test_sim_order.py compares the two). Specialised for the few queues of a simulation: a node is its
    queue index, a leaf a :class:`_Leaf`, and a queue's key is kept per (Allocated version, top job): within one
    order a job's resources do not change."""

    __slots__ = ("session", "_known", "_pending", "_skip", "_qs", "_qver", "_parent", "_heaps", "_leaves",
                 "_up", "_marked", "_roots", "_keys", "_res")

    def __init__(self, session, jobs: list[int], known: dict, pending: Optional[PendingJobs]):
        self.session = session
        self._known = known
        self._pending = pending
        self._skip = set(jobs)
        qs = self._qs = session.queues
        self._qver = qs.version
        self._parent = qs.parent
        self._heaps: dict[int, list[int]] = {}     # internal queue -> heap of child queues
        self._leaves: dict[int, _Leaf] = {}
        self._up: dict[int, int] = {}              # linked queue -> its parent (-1: a root)
        self._marked: set[int] = set()             # KAI needsReorder
        self._roots: list[int] = []
        self._keys: dict[int, tuple] = {}          # queue -> (Allocated version, top job, key)
        self._res: dict[int, tuple] = {}           # job -> its resources as floats
        leaves, keys = _scenario_leaves(session, jobs, pending, self._skip, by_state=True)
        if pending is not None:
            rest_keys = pending.keys
            roots = {qs.chains[q][-1] for q in leaves}
            for q, lst in pending.by_leaf.items():
                if q not in leaves and lst and pending.root[q] in roots:
                    leaves[q] = _Leaf(keys, lst, rest_keys, self._skip)
        for q in sorted(leaves):
            if leaves[q].head is not None:
                self._leaves[q] = leaves[q]
                self._link(q)
                self._mark(q)

    # ------------------------------------------------------------------ tree (JobsOrderByQueues._link etc.)

    def _link(self, q: int) -> None:
        parent = int(self._parent[q])
        if parent < 0:
            self._up[q] = -1
            self._push(self._roots, q)
            return
        created = parent not in self._heaps
        if created:
            self._heaps[parent] = []
        self._up[q] = parent
        self._push(self._heaps[parent], q)
        if created:
            self._link(parent)

    def _mark(self, q: int) -> None:
        marked, up = self._marked, self._up
        while q >= 0:
            marked.add(q)
            q = up[q]

    def _nonempty(self, q: int) -> bool:
        leaf = self._leaves.get(q)
        return bool(self._heaps[q]) if leaf is None else leaf.head is not None

    def pop(self) -> Optional[int]:
        """The next job, or None when none is left (KAI ``PopNextJob``)."""
        heap = self._roots
        leaves, heaps, marked = self._leaves, self._heaps, self._marked
        while True:   # KAI getNextNode per level: fix a marked top once, then take the top
            if not heap:
                return None
            top = heap[0]
            if top in marked:
                self._down(heap, 0, len(heap))
                marked.discard(top)
                continue
            leaf = leaves.get(top)
            if leaf is not None:
                if leaf.head is None:
                    return None
                break
            heap = heaps[top]   # an empty one ends the pop at the loop's start (KAI getNextNode)
        j = leaf.pop()
        q = top
        while True:   # KAI handlePopFromNode
            if self._nonempty(q):
                self._mark(q)
                break
            parent = self._up.pop(q)
            h = self._roots if parent < 0 else heaps[parent]
            n = len(h) - 1
            h[0], h[n] = h[n], h[0]
            self._down(h, 0, n)
            h.pop()
            leaves.pop(q, None)
            heaps.pop(q, None)
            if parent < 0:
                break
            q = parent
        return j

    # ------------------------------------------------------------------ Go container/heap

    def _push(self, h: list, q: int) -> None:
        h.append(q)
        _heap_up(h, len(h) - 1, self._less)

    def _down(self, h: list, i: int, n: int) -> None:
        _heap_down(h, i, n, self._less)

    # ------------------------------------------------------------------ comparisons

    def _less(self, a: int, b: int) -> bool:
        ka = self._key(a)
        if ka is None:   # an empty queue goes first (it is popped from its heap next)
            return True
        kb = self._key(b)
        if kb is None:
            return False
        if ka != kb:
            return ka < kb
        return queue_tie_less(self.session, a, b)

    def _key(self, q: int) -> Optional[tuple]:
        """Keys 1-6 of the queue order with the job at the top of the queue's subtree (tops as they stand); None
        for an empty queue."""
        n = q
        leaves = self._leaves
        leaf = leaves.get(n)
        while leaf is None:
            h = self._heaps[n]
            if not h:
                return None
            n = h[0]
            leaf = leaves.get(n)
        j = leaf.head
        if j is None:
            return None
        qv = self._qver[q]
        cached = self._keys.get(q)
        if cached is not None and cached[0] == qv and cached[1] == j:
            return cached[2]
        res = self._res.get(j)
        if res is None:
            res = self._res[j] = self._job_resources(j)
        key = queue_key_of(self._qs, q, res)
        self._keys[q] = (qv, j, key)
        return key

    def _job_resources(self, j: int) -> tuple:
        """The job's simulation chunk's resources (GPU, CPU, memory) as floats."""
        res = self._known.get(j)
        if res is not None:
            return tuple(res.tolist())
        if j not in self._skip and self._pending is not None:
            return tuple(self._pending.resources_of(j).tolist())
        s = self.session   # sim_job_resources's values without the array
        return s._job_request(sim_tasks_to_allocate(s, j, by_state=True), s.min_gpu_mem)


def _scenario_leaves(session, jobs: list[int], pending: Optional[PendingJobs], skip: set,
                     by_state: bool = False) -> tuple[dict, dict]:
    """Per leaf queue of ``jobs``, a :class:`_Leaf` holding them and that queue's other pending jobs, and the
    jobs' keys: a job of the scenario has its own key (its state may differ from the one the index holds); with
    ``by_state``, keys kept per task state too (:func:`~scheduler.ordering.job_order_key_by_state`)."""
    key_of = job_order_key_by_state if by_state else job_order_key
    keys = {j: key_of(session, j) for j in jobs}
    rest_keys = pending.keys if pending is not None else {}
    mine: dict[int, list[int]] = {}
    infos = session.jobs
    for j in jobs:
        mine.setdefault(infos[j].queue, []).append(j)
    leaves: dict[int, _Leaf] = {}
    for q, lst in mine.items():
        leaf = leaves[q] = _Leaf(keys, pending.by_leaf.get(q, []) if pending is not None else [], rest_keys, skip)
        leaf.set_mine(lst)
    return leaves, keys


def sim_job_order(session, jobs: Iterable[int], known: Optional[dict] = None,
                  pending: Optional[PendingJobs] = None, popped: Optional[list] = None):
    """Yield ``jobs`` in KAI's queue/job order, each once, re-evaluated after each one (placements in between
    change the queues' Allocated). The ``pending`` jobs take part in the order and are skipped. ``known``: chunk
    resources of jobs whose chunk is not the simulation chunk the session gives (the preemptor's probe); may be
    filled in with others as computed. ``popped``: a list that
    receives every job the queue tree pops, skipped ones too (not filled where every job sits in a top-level
    queue)."""
    targets = list(dict.fromkeys(jobs))
    if len(targets) == 1:
        yield targets[0]
        return
    known = {} if known is None else known
    qs = session.queues
    if all(qs.parent[session.jobs[j].queue] < 0 for j in targets):
        yield from _flat_order(session, targets, known, pending)
        return
    order = _SimOrder(session, targets, known, pending)
    wanted = set(targets)
    left = len(wanted)
    while left:
        if left == 1:  # the last one comes next, whatever else is popped before it
            yield next(iter(wanted))
            return
        j = order.pop()
        if j is None:
            return
        if popped is not None:
            popped.append(j)
        if j in wanted:
            wanted.discard(j)
            left -= 1
            yield j


def _flat_order(session, targets: list[int], known: dict, pending: Optional[PendingJobs]):
    """:func:`sim_job_order` when every job of the scenario sits in a top-level leaf queue: a pop changes only
    its own queue's key, so the next job is the head of the queue that goes first now (what KAI's heap gives);
    pending jobs of other queues never take part."""
    skip = set(targets)
    leaves, _ = _scenario_leaves(session, targets, pending, skip)
    wanted = set(targets)
    queues = sorted(leaves)
    while wanted:
        if len(wanted) == 1:
            yield next(iter(wanted))
            return
        best, best_key = -1, None
        for q in queues:
            j = leaves[q].head
            if j is None:   # the leaf is empty
                continue
            res = known.get(j)
            if res is None:
                if j not in skip and pending is not None:
                    res = pending.resources_of(j)
                else:
                    res = known[j] = sim_job_resources(session, j)
            key = queue_key(session, q, res)
            if best < 0 or queue_less(session, q, key, best, best_key):
                best, best_key = q, key
        if best < 0:
            return
        j = leaves[best].pop()
        if j in wanted:
            wanted.discard(j)
            yield j


def allocate_job_sim(session, stmt: Statement, j: int, tasks: Optional[list[int]] = None,
                     allowed: Optional[np.ndarray] = None) -> bool:
    """KAI ``AllocateJob(isPipelineOnly=true)``: place the job's next chunk (``tasks`` when already known)
    on the ``allowed`` nodes, every task pipelined (or un-evicted where it was); all or nothing."""
    if tasks is None:
        tasks = sim_tasks_to_allocate(session, j)
    if not tasks:
        return False
    if not may_fit(session, tasks):
        # no node has the GPUs: fails like the node search below would, with its session-long marks (KAI runs the
        # first task's pre-filter and pre-score before finding no node)
        if session.predicates_apply:
            session.predicates.note_placement_attempt(tasks[0])
        return False
    if session.job_over_capacity(j, tasks) is not None:
        return False
    plan = topology.plan(session, j, tasks)  # KAI's topology plugin: one domain after another
    if plan is not None and plan.failure is not None:
        return False
    for k in range(1 if plan is None else len(plan.candidates)):
        subset, bonus = (None, None) if plan is None else plan.subset(k)
        nodes = subset if allowed is None else (allowed if subset is None else subset & allowed)
        cp = stmt.checkpoint()
        for i in tasks:
            n = session.best_node(i, allowed=nodes, bonus=bonus)
            if n < 0 or not session.place(stmt, i, n, pipeline_only=True):
                stmt.rollback(cp)
                break
        else:
            return True
    return False


def may_fit(session, tasks: list[int]) -> bool:
    """Necessary condition for whole-GPU tasks: some ready node has that many idle + releasing GPUs."""
    need = 0.0
    for i in tasks:
        if session.kind_list[i] == KIND_WHOLE:
            need = max(need, float(session.gpu[i]))
    if need <= 0:
        return True
    ns = session.nodes
    if ns.all_ready and ns.n:   # one reduction, no temporaries: the largest free count decides
        return bool(ns.freeT[GPU].max() >= need)
    return bool(((ns.freeT[GPU] >= need) & ns.ready).any())   # freeT[GPU]: non_allocated(GPU), contiguous


def active_used(session, j: int) -> int:
    st = session.status
    return sum(1 for i in session.jobs[j].tasks if st[i] in OCCUPIES_NODE)


def gang_satisfied(session, j: int) -> bool:
    st = session.status
    return all(sum(1 for i in ps.tasks if st[i] in OCCUPIES_NODE) >= ps.min_available for ps in session.podsets(j))


__all__ = ["sim_tasks_to_allocate", "sim_job_resources", "sim_job_order", "PendingJobs", "allocate_job_sim", "may_fit",
           "active_used",
           "gang_satisfied"]
