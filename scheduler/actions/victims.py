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
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..decisions import PREEMPTION_DELAY_NOT_ELAPSED
from ..model import UNLIMITED
from ..ordering import JobsOrderByQueues, _QueueNode, dominant_resource_share, queue_less
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
        self._state: list[int] = (self._elastic_states(np.arange(J)) if J else np.zeros(0, np.int64)).tolist()
        # plain-Python copies for the per-job reads of a refresh (numpy's scalar reads cost more than the logic)
        self._static_ok: list[bool] = (self.preemptible & self.queue_ok).tolist()
        self._active_l: list[int] = self.active.tolist()
        self._queue_l: list[int] = self.queue.tolist()
        self._min_l: list[int] = self.min_available.tolist()
        self._has_sub_l: list[bool] = self.has_subgroups.tolist()
        self.version = 0
        self._refreshed: list[list[int]] = []   # the jobs of each refresh, in order (version = its length)

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
        when next needed. ``version`` counts the refreshes (masks derived from these columns follow it)."""
        s = self.s
        self.version += 1
        jobs = set(jobs)
        self._refreshed.append(list(jobs))
        start, status = s.job_start, s.status
        for j in jobs:
            act = sum(1 for st in status[start[j]:start[j + 1]] if st in ACTIVE_ALLOCATED)
            self.active[j] = act
            self._active_l[j] = act
            if self._has_sub_l[j]:
                state = s.elastic_state(j)
            else:
                m = self._min_l[j]
                state = 0 if act < m else (1 if act == m else 2)
            if state != self._state[j]:
                self._state[j] = state
                if act > 0:  # inactive jobs are no candidates: their place does not matter
                    self._leaf_order.pop(self._queue_l[j], None)

    def refreshed_since(self, version: int) -> list[int]:
        """The jobs refreshed after ``version`` (with repeats): the only ones whose ``active`` count changed."""
        return [j for jobs in self._refreshed[version:] for j in jobs]

    def base_candidates(self, jobs: Optional[np.ndarray] = None) -> np.ndarray:
        """Mask of jobs that can be victims at all: preemptible, with an active task, in a valid leaf queue
        (of every job, or of the job indices ``jobs`` in their order). A new array."""
        if jobs is None:
            return self.preemptible & (self.active > 0) & self.queue_ok
        return self.preemptible[jobs] & (self.active[jobs] > 0) & self.queue_ok[jobs]

    def base_candidate(self, j: int) -> bool:
        """:meth:`base_candidates` of one job (scalar reads: a commit refreshes a few jobs)."""
        return self._static_ok[j] and self._active_l[j] > 0

    def order_key(self, j: int, state: Optional[int] = None) -> tuple:
        """KAI's job order key of job ``j`` (:func:`~scheduler.ordering.job_order_key`) from these columns;
        ``state`` overrides its elastic state (a job representative holding part of its tasks)."""
        job = self.s.jobs[j]
        return (-float(self.priority[j]), self._state[j] if state is None else state, float(self.creation[j]),
                job.job.name, job.key)

    def leaf_order(self, q: int) -> np.ndarray:
        """Every job of leaf queue ``q`` in reverse job order (victim order inside the queue)."""
        order = self._leaf_order.get(q)
        if order is None:
            js = np.nonzero(self.queue == q)[0].tolist()
            js.sort(key=self.order_key, reverse=True)
            order = self._leaf_order[q] = np.array(js, dtype=np.int64)
        return order


# ---------------------------------------------------------------------------------------------- batches

@dataclass
class Batch:
    """Tasks of one victim job taken together (one pop of the victim queue)."""

    job: int
    tasks: list[int]
    elastic: bool = False       # the job is elastic (KAI IsElastic), for the min-runtime check


SKIPPED = Batch(job=-1, tasks=[])
"""What :meth:`VictimQueue.pop` returns for a pop that held an already recorded victim."""


def merge_by_job(batches: list[Batch]) -> list[Batch]:
    """One victim per job with all its chosen tasks, in order of first appearance (KAI keys a scenario's
    victims by job: ``BaseScenario.appendTasksAsVictimJob``)."""
    merged: dict[int, Batch] = {}
    for b in batches:
        cur = merged.get(b.job)
        if cur is None:
            merged[b.job] = Batch(job=b.job, tasks=list(b.tasks), elastic=b.elastic)
        else:
            cur.tasks.extend(b.tasks)
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
    if len(sets) == 1:   # the same answer without the per-set lists
        ps = sets[0]
        a = [i for i in ps.tasks if st[i] in ACTIVE_ALLOCATED and (rep is None or i in rep)]
        if len(a) > ps.min_available:
            return [a[-1]], a[:-1]
        return a[::-1], []
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

def _le(a: float, b: float) -> bool:
    if a == UNLIMITED:
        return b == UNLIMITED
    if b == UNLIMITED:
        return True
    return a <= b


class LeafStart:
    """Where the first victim candidate of a leaf's job order may be: no job of ``arr`` before ``pos`` is a
    candidate (under the candidate mask it was found with, as long as no job of the leaf became a candidate
    since). Successive searches skip the jobs earlier searches walked past (victims evicted by then)."""

    __slots__ = ("arr", "pos")

    def __init__(self, arr: np.ndarray):
        self.arr, self.pos = arr, 0


class _Reversed:
    """A job order key that sorts in victim order (the job order reversed)."""

    __slots__ = ("k",)

    def __init__(self, k: tuple):
        self.k = k

    def __lt__(self, other: "_Reversed") -> bool:
        return other.k < self.k


_WALK_CHUNK = 16
"""First chunk of a leaf's order :meth:`_VictimLeaf._arr_head` looks at for the next candidate (then 4× larger)."""


class _VictimLeaf:
    """A leaf queue's candidates in victim order: the jobs (whole) in reverse job order, merged with the job
    representatives pushed back (the rest of an elastic job after one of its tasks was taken)."""

    __slots__ = ("arr", "mask", "pos", "heap", "facts", "seq", "_head")

    def __init__(self, arr: np.ndarray, facts: "JobFacts", mask: Optional[np.ndarray] = None, start: int = 0):
        """``arr``: the leaf's jobs in victim order; ``mask`` (over all jobs): which of them are candidates,
        checked as the leaf is walked (a search usually stops long before the end of a long leaf); ``start``:
        no job before this position of ``arr`` is a candidate."""
        self.arr, self.mask, self.pos, self.facts = arr, mask, start, facts
        self.heap: list = []
        self.seq = 0
        self._head: tuple = (-1, None)   # (pos, the candidate found there): the walk is read several times per pop

    def _arr_head(self) -> Optional[int]:
        arr, mask, pos = self.arr, self.mask, self.pos
        head = self._head
        if head[0] == pos:   # the mask does not change while a queue is read (facts change with a commit)
            return head[1]
        n = len(arr)
        if pos >= n:
            return None
        if mask is not None and not mask[arr[pos]]:
            # the next candidate is mostly near (past the jobs evicted since the last walk): look at the next job,
            # then in growing chunks, instead of gathering the mask over the rest of a long leaf
            pos += 1
            if pos >= n:
                self.pos = n
                return None
            if not mask[arr[pos]]:
                start, size = pos + 1, _WALK_CHUNK
                while True:
                    if start >= n:
                        self.pos = n
                        return None
                    end = min(start + size, n)
                    ok = mask[arr[start:end]]
                    k = int(ok.argmax())
                    if ok[k]:
                        pos = start + k
                        break
                    start, size = end, size * 4
            self.pos = pos
        j = int(arr[pos])
        self._head = (pos, j)
        return j

    def candidates(self) -> list[int]:
        """Every job of the leaf that is a candidate (the pushed-back representatives' jobs are among them)."""
        sel = self.arr if self.mask is None else self.arr[self.mask[self.arr]]
        return sel.tolist()

    def rep_key(self, j: int, rep: Optional[frozenset]) -> _Reversed:
        f = self.facts
        if rep is None:
            return _Reversed(f.order_key(j))
        sets = f.s.podsets(j)
        counts = [sum(1 for i in ps.tasks if i in rep) for ps in sets]
        if any(c < ps.min_available for c, ps in zip(counts, sets)):
            state = 0
        elif all(c == ps.min_available for c, ps in zip(counts, sets)):
            state = 1
        else:
            state = 2
        return _Reversed(f.order_key(j, state))

    def push(self, j: int, rep: frozenset) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (self.rep_key(j, rep), self.seq, j, rep))

    def peek(self) -> Optional[tuple]:
        head = self._arr_head()
        a = None if head is None else (head, None)
        if not self.heap:
            return a
        h = self.heap[0]
        if a is None or h[0] < self.rep_key(*a):
            return h[2], h[3]
        return a

    def pop(self) -> tuple:
        head = self.peek()
        if self.heap and self.heap[0][2] == head[0] and self.heap[0][3] == head[1]:
            heapq.heappop(self.heap)
        else:
            self.pos += 1
        return head

    @property
    def items(self) -> list:
        """What the queue heaps read of a leaf: non-empty while a candidate is left."""
        head = self.peek()
        return [] if head is None else [head]

    def __len__(self) -> int:
        """Non-zero while a candidate is left (the count of masked jobs is not known before walking them)."""
        return len(self.heap) + (self._arr_head() is not None)


class VictimQueue(JobsOrderByQueues):
    """Victim order over candidate jobs: KAI's ``JobsOrderByQueues`` with ``VictimQueue: true``.

    The same heaps of queues as the job order (lazy ``Fix(0)``, subtrees compared by the tops of their child
    heaps as they stand, :class:`~scheduler.ordering.JobsOrderByQueues`), with every comparison reversed: a queue
    goes first when it would go last in the job order, compared by its allocated resources minus what was
    already taken from its subtree's best leaf (the popped representatives plus the next one, KAI
    ``getVictimsForQueue``), so victims alternate between over-served queues. In a leaf, the job order reversed.

    ``candidates``: ``{leaf queue: job indices in reverse job order}``, or ``{leaf queue: (the leaf's jobs in
    reverse job order, candidate mask over all jobs)}``, or ``{leaf queue: (jobs, mask, start)}`` with a
    :class:`LeafStart` that says where the leaf's first candidate may be (and learns where it is).
    ``max_jobs`` caps how many distinct jobs are ever popped (consolidation's candidate limit; the first ones in
    victim order).
    """

    def __init__(self, session, facts: JobFacts, candidates: dict, max_jobs: int = -1):
        super().__init__(session, [])
        self.facts = facts
        self._leaves: dict[int, _VictimLeaf] = {}
        self._popped: dict[int, np.ndarray] = {}   # leaf -> what its pops took (absent: nothing yet)
        self._max_jobs = max_jobs
        self._seen_jobs: set[int] = set()
        for q in sorted(candidates):
            value = candidates[q]
            start = None
            if not isinstance(value, tuple):
                arr, mask = value, None
            elif len(value) == 2:
                arr, mask = value
            else:
                arr, mask, start = value
            leaf = _VictimLeaf(arr, facts, mask, 0 if start is None else start.pos)
            found = len(leaf)   # walks the leaf to its first candidate
            if start is not None:
                start.pos = leaf.pos
            if not found:
                continue
            self._leaves[q] = leaf
        # With a single leaf no two queues are ever compared (every heap holds one node), so what was taken from
        # it is never read, and the leaf is read directly, without the tree of queues. (Linking the leaves after
        # walking them all compares the same heads: a walk changes its own leaf only.)
        self._track_popped = len(self._leaves) > 1
        self._single: Optional[_VictimLeaf] = None
        if len(self._leaves) == 1 and self.single_leaf_shortcut:
            self._single = next(iter(self._leaves.values()))
        else:
            for q, leaf in self._leaves.items():
                node = self._nodes[q] = _QueueNode(q, leaf, True)
                self._link(node)
                self._mark(node)

    single_leaf_shortcut = True
    """Read a queue with one candidate leaf without its tree of queues; off: the tree (tests compare)."""

    def empty(self) -> bool:
        if self._single is not None:
            return not len(self._single)
        return not len(self._roots)

    def candidate_tasks(self) -> list[int]:
        """Every task a pop could ever yield: the active tasks of all candidate jobs (whatever the cap)."""
        out: list[int] = []
        for leaf in self._leaves.values():
            for j in leaf.candidates():
                out.extend(active_tasks(self.s, j))
        return out

    @property
    def s(self):
        return self.session

    # ---- comparisons (victim mode)

    def _rep_alloc(self, j: int, rep: Optional[frozenset]) -> np.ndarray:
        """KAI's ``AllocatedVector`` of a job representative: what its allocated tasks hold in their queue.

        Only Allocated / Bound / Binding / Running tasks count (``podgroup_info/job_info.go``,
        ``pod_status.AllocatedStatus``): a task pipelined earlier in the session is in its queue's allocated but
        adds nothing to what taking the job gives up (the what-if over-quota-weight state, KAI 10 of 10 runs)."""
        s = self.s
        g = c = m = 0.0
        st = s.status
        for i in active_tasks(s, j, rep):
            if st[i] == "pipelined":
                continue
            g += s.accepted[i]
            c += float(s.cpu[i])
            m += float(s.mem[i])
        return np.array([g, c, m])

    def _victims_of(self, node) -> np.ndarray:
        """Resources of the victims KAI passes for a subtree: popped from its best leaf, plus that leaf's next."""
        while not node.is_leaf:
            node = node.children.peek()
        taken = self._popped.get(node.q)   # nothing popped from the leaf yet: zeros
        res = np.zeros(3) if taken is None else taken.copy()
        head = node.children.peek()
        if head is not None:
            res += self._rep_alloc(*head)
        return res

    def _vkey(self, node) -> tuple:
        """Queue-order keys 1–6 of §b.6 for a queue compared with no pending job and its victims removed."""
        qs = self._qs
        q = node.q
        victims = self._victims_of(node)
        alloc = qs.allocated[q]
        fair, deserved, allocatable = qs.fair_share[q], qs.deserved[q], qs.allocatable[q]
        over = bool((fair < alloc).all())
        starved = all(_le(float(alloc[r]), float(deserved[r])) for r in range(3))
        violation = any(allocatable[r] == 0 and alloc[r] > 0 for r in range(3))
        return (over, not starved, -float(qs.priority[q]), violation,
                dominant_resource_share(alloc - victims, allocatable, qs.total),
                dominant_resource_share(alloc, allocatable, qs.total))

    def _node_less(self, a, b) -> bool:
        if not len(a.children):
            return False
        if not len(b.children):
            return True
        return queue_less(self.s, b.q, self._vkey(b), a.q, self._vkey(a))

    # ---- pop

    def pop(self, recorded: frozenset = frozenset()) -> Optional[Batch]:
        """The next victim batch (KAI ``PopNextJob`` + ``GetTasksToEvict``), or None when no candidate is left.
        A pop whose tasks include one of ``recorded`` (victims already part of every scenario) pushes the job
        back without them and returns :data:`SKIPPED` (KAI ``addNextPotentialVictims``)."""
        single = self._single
        while True:
            if single is not None:   # one leaf (leaf None below): its own order is the queue's
                if not len(single):
                    return None
                leaf = None
                j, rep = single.pop()
            else:
                got = self._pop_top()
                if got is None:
                    return None
                leaf, (j, rep) = got
            if self._max_jobs >= 0 and j not in self._seen_jobs and len(self._seen_jobs) >= self._max_jobs:
                if leaf is not None:
                    self._after_pop(leaf)
                continue
            self._seen_jobs.add(j)
            if self._track_popped:
                taken = self._popped.get(leaf.q)
                self._popped[leaf.q] = (np.zeros(3) if taken is None else taken) + self._rep_alloc(j, rep)
            tasks, rest = tasks_to_evict(self.s, j, rep)
            if leaf is not None:
                self._after_pop(leaf)
            if recorded and any(i in recorded for i in tasks):
                remaining = [i for i in active_tasks(self.s, j, rep) if i not in recorded]
                if remaining:
                    self._push_back(leaf, j, frozenset(remaining))
                return SKIPPED
            if rest:
                self._push_back(leaf, j, frozenset(rest))
            if not tasks:
                continue
            return Batch(job=j, tasks=tasks, elastic=bool(self.facts.elastic[j]))

    def _push_back(self, leaf, j: int, rep: frozenset) -> None:
        """KAI ``PushJob`` of a job representative: into its leaf, re-created and linked when the pop emptied it
        (``leaf`` None: the single leaf read without a tree)."""
        if leaf is None:
            self._single.push(j, rep)
            return
        if self._nodes.get(leaf.q) is not leaf:
            leaf = self._nodes[leaf.q] = _QueueNode(leaf.q, leaf.children, True)
            leaf.children.push(j, rep)
            self._link(leaf)
        else:
            leaf.children.push(j, rep)
        self._mark(leaf)

    def push(self, j: int) -> None:
        raise NotImplementedError("victims are pushed back by pop()")


class VictimTape:
    """What one :class:`VictimQueue` pops for one set of recorded victims, kept for every reader that would build
    the same queue in the same session state: the same inputs and state give the same pops, so a later reader
    replays them and the queue is only advanced past them (the eviction solver's probes and generators read
    one queue each, between simulations that all roll back)."""

    __slots__ = ("queue", "batches", "done")

    def __init__(self, queue: VictimQueue):
        self.queue = queue
        self.batches: list = []
        self.done = False


class TapedVictims:
    """A victim queue read through a :class:`VictimTape` (one per recorded victim set, from ``tapes``, made on
    first use with ``make``): the same pops as a queue of its own from ``make()``."""

    __slots__ = ("_tapes", "_make", "_tape", "_pos")

    def __init__(self, tapes: dict, make):
        self._tapes, self._make = tapes, make
        self._tape: Optional[VictimTape] = None
        self._pos = 0

    def pop(self, recorded: frozenset = frozenset()) -> Optional[Batch]:
        """:meth:`VictimQueue.pop` (every call of one reader passes the same ``recorded``)."""
        tape = self._tape
        if tape is None:
            tape = self._tapes.get(recorded)
            if tape is None:
                tape = self._tapes[recorded] = VictimTape(self._make())
            self._tape = tape
        pos = self._pos
        if pos < len(tape.batches):
            self._pos = pos + 1
            return tape.batches[pos]
        if tape.done:
            return None
        batch = tape.queue.pop(recorded)
        if batch is None:
            tape.done = True
            return None
        tape.batches.append(batch)
        self._pos = pos + 1
        return batch


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


_RAW_CACHE: dict[int, tuple] = {}


def raw_gpu_capacity(session) -> np.ndarray:
    """:func:`node_gpu_capacity` on every node, ready or not (KAI's accumulated-GPU filter and feasible nodes
    read every node of the cluster). Cached per node-state version; do not modify the result."""
    ns = session.nodes
    hit = _RAW_CACHE.get(id(session))
    if hit is not None and hit[0] is ns and hit[1] == ns.version:
        return hit[2]
    log = ns.change_log
    cap_max = None
    if hit is not None and hit[0] is ns and len(log) - hit[3] <= 64 and not hit[4] and not ns.sh_present.any():
        # no shared GPU anywhere: a node's capacity is its idle + releasing GPUs; patch the nodes changed since
        old = hit[2]
        cap = old.copy()
        idle, rel = ns.idle_rows, ns.rel_rows   # the values the arrays hold (or will, when next read)
        cap_max = hit[5]
        for n in set(log[hit[3]:]):
            v = idle[n][GPU] + rel[n][GPU]
            if cap_max is not None:   # no node below its old capacity: the largest is the old one or a new one
                cap_max = None if v < old[n] else max(cap_max, v)
            cap[n] = v
        shared = False
    else:
        cap = _node_gpu_capacity(ns, ready_only=False)
        shared = bool(ns.sh_present.any())
    _RAW_CACHE.clear()
    _RAW_CACHE[id(session)] = [ns, ns.version, cap, len(log), shared, cap_max]
    return cap


def raw_gpu_capacity_max(session, cap: np.ndarray) -> float:
    """``float(cap.max())`` of a non-empty capacity array; for :func:`raw_gpu_capacity`'s latest answer, kept
    with it (and carried over a patch that lowered no node)."""
    hit = _RAW_CACHE.get(id(session))
    if hit is None or hit[2] is not cap:
        return float(cap.max())
    if hit[5] is None:
        hit[5] = float(cap.max())
    return hit[5]


def _node_gpu_capacity(ns, ready_only: bool = True) -> np.ndarray:
    """KAI ``GetSumOfIdleGPUs + GetSumOfReleasingGPUs`` (``node_info/gpu_sharing_node_info.go``): idle and
    releasing whole GPUs; per shared GPU with allocated memory ``1 − ⌈allocated / memory⌉₀.₀₁``, plus its
    releasing memory ``⌈releasing / memory⌉₀.₀₁`` unless every task on it is releasing (then it is one
    releasing whole GPU already)."""
    cap = ns.idle[:, GPU] + ns.rel[:, GPU]
    if ns.sh_present.any():
        mem = np.where(ns.gpu_mem > 0, ns.gpu_mem, 1.0)[:, None]
        alloc, rel, used = ns.sh_alloc, ns.sh_rel, ns.sh_used
        idle_part = np.where(alloc > 0, 1.0 - np.ceil(alloc / mem * 100) / 100, 0.0)
        whole_releasing = (used > 0) & (rel == used)
        rel_part = np.where((rel > 0) & ~whole_releasing, np.ceil(rel / mem * 100) / 100, 0.0)
        cap = cap + (idle_part + rel_part).sum(axis=1)
    return np.where(ns.ready, cap, 0.0) if ready_only else cap
