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

from ..ordering import JobsOrderByQueues, _QueueNode, job_order_key, queue_key, queue_less
from ..placement import topology
from ..session import ACTIVE_ALLOCATED, KIND_WHOLE, OCCUPIES_NODE, Statement
from ..session.nodes import GPU


def sim_tasks_to_allocate(session, j: int) -> list[int]:
    """KAI ``GetTasksToAllocate(isRealAllocation=false)``: like allocate's chunk, but tasks evicted in this
    session (virtually releasing) may be placed again. Kept per job until one of its tasks changes."""
    memo = session.sim_tasks_memo
    version = session.job_version[j]
    hit = memo.get(j)
    if hit is None or hit[0] != version:
        hit = memo[j] = (version, _sim_tasks_to_allocate(session, j))
    return list(hit[1])


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
    The head is cached between pushes and pops: the job order reads it at every comparison."""

    __slots__ = ("mine", "mine_keys", "rest", "rest_keys", "pos", "skip", "_head", "_items")

    def __init__(self, mine_keys: dict, rest: list, rest_keys: dict, skip: set):
        self.mine: list = []
        self.mine_keys, self.rest, self.rest_keys, self.skip = mine_keys, rest, rest_keys, skip
        self.pos = 0
        self._head = self._items = None

    def _rest_head(self):
        rest, skip = self.rest, self.skip
        while self.pos < len(rest) and rest[self.pos] in skip:
            self.pos += 1
        return rest[self.pos] if self.pos < len(rest) else None

    def push(self, j: int) -> None:
        self.mine.append(j)
        self.mine.sort(key=self.mine_keys.__getitem__)
        self._items = None

    def peek(self):
        if self._items is None:
            r = self._rest_head()
            if self.mine and (r is None or self.mine_keys[self.mine[0]] < self.rest_keys[r]):
                r = self.mine[0]
            self._head = r
            self._items = [] if r is None else [(None, r)]
        return self._head

    def pop(self):
        """``(key, job)`` of the next job, as :class:`~scheduler.ordering.JobsOrderByQueues` pops its leaves."""
        j = self.peek()
        if self.mine and j == self.mine[0]:
            self.mine.pop(0)
        else:
            self.pos += 1
        self._items = None
        return None, j

    @property
    def items(self) -> list:
        """What the job order reads of a leaf: ``[(key, top job)]``, empty when the leaf is."""
        if self._items is None:
            self.peek()
        return self._items

    def __len__(self) -> int:
        return len(self.mine) + (1 if self._rest_head() is not None else 0)


class _SimOrder(JobsOrderByQueues):
    """The job queue of a simulation (KAI ``GetJobsToAllocate``): the scenario's jobs and every pending job of
    the queue trees they are in. A job's queue-order resources are its simulation chunk's (``known`` for the
    preemptor, whose probe may hold fewer tasks)."""

    def __init__(self, session, jobs: list[int], known: dict, pending: Optional[PendingJobs]):
        self._known = known
        self._pending = pending
        self._skip = set(jobs)
        super().__init__(session, [])
        leaves, keys = _scenario_leaves(session, jobs, pending, self._skip)
        rest_keys = pending.keys if pending is not None else {}
        if pending is not None:
            roots = {session.queues.chains[q][-1] for q in leaves}
            for q, lst in pending.by_leaf.items():
                if q not in leaves and lst and pending.root[q] in roots:
                    leaves[q] = _Leaf(keys, lst, rest_keys, self._skip)
        for q in sorted(leaves):
            if len(leaves[q]):
                node = self._nodes[q] = _QueueNode(q, leaves[q], True)
                self._link(node)
                self._mark(node)

    def push(self, j: int) -> None:
        raise NotImplementedError("a simulation's job queue is built once")

    def _job_resources(self, j: int) -> np.ndarray:
        res = self._known.get(j)
        if res is None:
            if j not in self._skip and self._pending is not None:
                return self._pending.resources_of(j)
            res = self._known[j] = sim_job_resources(self.session, j)
        return res


def _scenario_leaves(session, jobs: list[int], pending: Optional[PendingJobs], skip: set) -> tuple[dict, dict]:
    """Per leaf queue of ``jobs``, a :class:`_Leaf` holding them and that queue's other pending jobs, and the
    jobs' keys: a job of the scenario has its own key (its state may differ from the one the index holds)."""
    keys = {j: job_order_key(session, j) for j in jobs}
    rest_keys = pending.keys if pending is not None else {}
    leaves: dict[int, _Leaf] = {}
    for j in jobs:
        q = session.jobs[j].queue
        leaf = leaves.get(q)
        if leaf is None:
            rest = pending.by_leaf.get(q, []) if pending is not None else []
            leaf = leaves[q] = _Leaf(keys, rest, rest_keys, skip)
        leaf.push(j)
    return leaves, keys


def sim_job_order(session, jobs: Iterable[int], known: Optional[dict] = None,
                  pending: Optional[PendingJobs] = None, popped: Optional[list] = None):
    """Yield ``jobs`` in KAI's queue/job order, each once, re-evaluated after each one (placements in between
    change the queues' Allocated). The ``pending`` jobs take part in the order and are skipped. ``known``: chunk
    resources per job, filled in as computed (valid while those jobs are not placed). ``popped``: a list that
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
            j = leaves[q].peek()
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
        _, j = leaves[best].pop()
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
            session.predicates.note_pre_filter(tasks[0])
            session.predicates.note_node_search(tasks[0])
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
