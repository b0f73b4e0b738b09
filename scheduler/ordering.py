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
- Hierarchy (``actions/utils/job_order_by_queue.go``): one heap of child queues per level (of jobs for a leaf),
  Go's ``container/heap`` operations; a queue is compared using the job at the top of its subtree as the tops of
  the child heaps are, without fixing them first; after a pop the queues on the path are marked and re-placed
  lazily (``heap.Fix(0)``) when the next traversal meets them at the top (:class:`JobsOrderByQueues`).
"""

from __future__ import annotations

import heapq
from typing import Optional

import numpy as np

from .model import UNLIMITED

NO_FAIR_SHARE_DRF_MULTIPLIER = 1000.0
"""KAI ``noFairShareDrfMultiplier``: a resource with allocatable 0 costs allocated × 1000 in DRF."""


def job_order_key(session, j: int) -> tuple:
    """Sort key of KAI's job order (smaller = tried first): priority, elastic state, creation time, then what KAI
    calls the job's UID, which is the PodGroup's name (``PodGroupInfo.UID``, ``cluster_info.snapshotPodGroups``);
    the namespace last, where KAI itself would merge two PodGroups of one name."""
    memo = session.job_order_memo
    version = session.job_version[j]
    hit = memo.get(j)
    if hit is not None and hit[0] == version:   # the elastic state changes only with the job's tasks
        return hit[1]
    info = session.jobs[j]
    key = (-info.priority, session.elastic_state(j), info.creation, info.job.name, info.key)
    memo[j] = (version, key)
    return key


def job_order_key_by_state(session, j: int) -> tuple:
    """:func:`job_order_key`, kept per tuple of the job's task statuses as well (the elastic state is a function of
    them; its podsets are fixed): eviction scenarios revisit a victim job's states, with a new ``job_version``
    each time (evicted, then rolled back)."""
    memo = session.job_order_memo
    version = session.job_version[j]
    hit = memo.get(j)
    if hit is not None and hit[0] == version:
        return hit[1]
    st = session.status
    key = bounded_memo(session.job_order_by_state, (j, tuple([st[i] for i in session.jobs[j].tasks])),
                       lambda: job_order_key(session, j))
    memo[j] = (version, key)
    return key


def bounded_memo(memo: dict, key, compute, limit: int = 200_000):
    """``memo[key]``, computed by ``compute()`` when missing; the memo starts over at ``limit`` entries."""
    out = memo.get(key)
    if out is None:
        if len(memo) >= limit:
            memo.clear()
        out = memo[key] = compute()
    return out


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
    job = tuple(job_resources.tolist() if isinstance(job_resources, np.ndarray) else job_resources)
    return queue_key_of(session.queues, q, job)


def _order_consts(qs) -> tuple:
    """The queue values the order reads as plain lists, (re)built with empty key and tie memos whenever the
    queues' fair share or allocatable arrays were replaced."""
    consts = qs.__dict__.get("_order_consts")
    if consts is None or consts[0] is not qs.fair_share or consts[5] is not qs.allocatable:
        consts = (qs.fair_share, qs.fair_share.tolist(), qs.deserved.tolist(), qs.allocatable.tolist(),
                  qs.total.tolist(), qs.allocatable, (-qs.priority).tolist())
        qs._order_consts = consts
        qs._order_memo = {}
        qs._order_ties = {}
    return consts


def queue_key_of(qs, q: int, job: tuple) -> tuple:
    """:func:`queue_key` with the job's resources as a tuple of floats (GPU, CPU, memory)."""
    consts = _order_consts(qs)
    # The key is a pure function of the queue's Allocated row and the job's resources while the constants above
    # hold: eviction searches roll back to the same states scenario after scenario, so most keys repeat. The
    # row is read as plain floats (QueueState.allocated_rows, the values the array holds).
    memo = qs._order_memo
    alloc = qs.allocated_rows[q]
    mkey = (q, *alloc, job)
    hit = memo.get(mkey)
    if hit is not None:
        return hit
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    _, fair_l, des_l, alloc_l, total, _, prio = consts
    fair, deserved, allocatable = fair_l[q], des_l[q], alloc_l[q]
    over = fair[0] < alloc[0] and fair[1] < alloc[1] and fair[2] < alloc[2]
    with_job = [alloc[0] + job[0], alloc[1] + job[1], alloc[2] + job[2]]
    starved = _le(with_job[0], deserved[0]) and _le(with_job[1], deserved[1]) and _le(with_job[2], deserved[2])
    violation = any(allocatable[r] == 0 and with_job[r] > 0 for r in range(3))
    key = memo[mkey] = (over, not starved, prio[q], violation, dominant_resource_share(with_job, allocatable, total),
                        dominant_resource_share(alloc, allocatable, total))
    return key


def queue_tie_less(session, qa: int, qb: int) -> bool:
    """:func:`queue_less` of two queues whose keys 1–6 are equal (keys 7 and 8), memoised per session."""
    qs = session.queues
    _order_consts(qs)
    ties = qs._order_ties
    hit = ties.get((qa, qb))
    if hit is None:
        hit = ties[(qa, qb)] = queue_less(session, qa, (), qb, ())
    return hit


_MEMO_LIMIT = 200_000
"""Queue keys kept per session before the memo starts over (bounds memory on long searches)."""


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


def _heap_up(h: list, j: int, less) -> None:
    """Go ``container/heap`` up."""
    while True:
        i = (j - 1) // 2
        if i == j or j <= 0 or not less(h[j], h[i]):
            break
        h[i], h[j] = h[j], h[i]
        j = i


def _heap_down(h: list, i0: int, n: int, less) -> bool:
    """Go ``container/heap`` down; True when the element moved."""
    i = i0
    while True:
        j1 = 2 * i + 1
        if j1 >= n or j1 < 0:
            break
        j = j1
        j2 = j1 + 1
        if j2 < n and less(h[j2], h[j1]):
            j = j2
        if not less(h[j], h[i]):
            break
        h[i], h[j] = h[j], h[i]
        i = j
    return i > i0


class _Heap:
    """A Go ``container/heap`` priority queue (``scheduler_util.PriorityQueue``): same pushes, pops and fixes,
    so the same elements sit at the top when the comparison is the same."""

    __slots__ = ("items", "less")

    def __init__(self, less):
        self.items: list = []
        self.less = less

    def push(self, x) -> None:
        self.items.append(x)
        _heap_up(self.items, len(self.items) - 1, self.less)

    def pop(self):
        h = self.items
        n = len(h) - 1
        h[0], h[n] = h[n], h[0]
        _heap_down(h, 0, n, self.less)
        return h.pop()

    def fix0(self) -> None:
        if not _heap_down(self.items, 0, len(self.items), self.less):
            _heap_up(self.items, 0, self.less)

    def peek(self):
        return self.items[0]

    def __len__(self) -> int:
        return len(self.items)


class _JobHeap:
    """A leaf's heap of jobs. KAI's job order is a total order (it ends with the PodGroup name), so the top
    does not depend on how the heap was built: Python's heapq on ``(key, job)`` gives the same tops, faster."""

    __slots__ = ("items",)

    def __init__(self):
        self.items: list = []

    def push(self, entry) -> None:
        heapq.heappush(self.items, entry)

    def pop(self):
        return heapq.heappop(self.items)

    def peek(self):
        return self.items[0]

    def __len__(self) -> int:
        return len(self.items)


class _QueueNode:
    """A queue of the hierarchy (KAI ``queueNode``): a heap of child nodes, or of jobs for a leaf."""

    __slots__ = ("q", "children", "needs_reorder", "parent", "is_leaf", "key_cache")

    def __init__(self, q: int, children, is_leaf: bool):
        self.q, self.children, self.is_leaf = q, children, is_leaf
        self.needs_reorder = False
        self.parent: Optional[_QueueNode] = None
        self.key_cache: Optional[tuple] = None


class JobsOrderByQueues:
    """KAI's hierarchical job queue (``actions/utils/job_order_by_queue.go``): ``pop()`` the next job to try,
    ``push()`` one back (elastic growth).

    Every queue level is a heap ordered by KAI's queue order, each queue compared with the job at the top of its
    subtree found by following the tops of the child heaps *as they are* (KAI does not fix a child heap before
    a parent comparison reads it). After a pop or push the queues on the path are marked and re-placed lazily:
    only when the traversal meets a marked queue at the top of its heap is it fixed (``heap.Fix(0)``). The heaps
    are Go's ``container/heap`` operations, so with KAI's comparison they hold the same order.

    Deterministic where KAI is not: KAI pushes the jobs in Go map order, and because a push only marks the
    queues on its path, a queue keeps the place it got with the job it held then: the order depends on the push
    order (KAI's varies from run to run, seeds 4155/4161 in docs/engine.md). kaidash pushes in the order given
    (snapshot order), one of KAI's possible orders. KAI's queue order also leaves queues with equal creation
    times unordered; kaidash breaks that tie by queue name (then index).
    """

    def __init__(self, session, jobs: list[int]):
        self.session = session
        self._qs = session.queues
        self._roots = _Heap(self._node_less)
        self._nodes: dict[int, _QueueNode] = {}
        self._init_res: dict[int, tuple] = {}
        self._qver = self._qs.version
        self._jver = session.job_version
        for j in jobs:
            self.push(j)

    def __len__(self) -> int:
        return sum(len(n.children) for n in self._nodes.values() if n.is_leaf)

    # ------------------------------------------------------------------ public

    def push(self, j: int) -> None:
        """Add a job (again) to its leaf queue; its ordering key is recomputed (KAI ``PushJob``)."""
        s = self.session
        q = s.jobs[j].queue
        self._init_res.pop(j, None)
        leaf = self._nodes.get(q)
        new = leaf is None
        if new:
            leaf = self._nodes[q] = _QueueNode(q, _JobHeap(), True)
        leaf.children.push((job_order_key(s, j), j))
        if new:
            self._link(leaf)
        self._mark(leaf)

    def pop(self) -> Optional[int]:
        """The next job in KAI's order, or None when none is left (KAI ``PopNextJob``)."""
        got = self._pop_top()
        if got is None:
            return None
        leaf, (_, j) = got
        self._after_pop(leaf)
        return j

    def _pop_top(self):
        """``(leaf node, the item popped from it)`` of the best leaf, or None when the tree is empty; the caller
        runs :meth:`_after_pop` on the leaf."""
        if not len(self._roots):
            return None
        leaf = self._traverse(self._roots)
        if leaf is None:
            return None
        return leaf, leaf.children.pop()

    # ------------------------------------------------------------------ tree

    def _link(self, node: _QueueNode) -> None:
        """KAI ``ensureAncestorChainForPush``: hang a new node under its parent, creating parents as needed."""
        qs = self._qs
        parent_q = int(qs.parent[node.q])
        if parent_q < 0:
            if node.parent is None:
                self._roots.push(node)
            return
        parent = self._nodes.get(parent_q)
        created = parent is None
        if created:
            parent = self._nodes[parent_q] = _QueueNode(parent_q, _Heap(self._node_less), False)
        if node.parent is None:
            node.parent = parent
            parent.children.push(node)
        if created:
            self._link(parent)

    def _mark(self, node: Optional[_QueueNode]) -> None:
        while node is not None:
            node.needs_reorder = True
            node = node.parent

    def _traverse(self, heap: _Heap) -> Optional[_QueueNode]:
        while True:
            node = self._next(heap)
            if node is None or node.is_leaf:
                return node
            heap = node.children

    def _next(self, heap: _Heap) -> Optional[_QueueNode]:
        """KAI ``getNextNode``: fix a marked top once, then take the top."""
        while heap.items:
            node = heap.items[0]
            if node.needs_reorder:
                heap.fix0()
                node.needs_reorder = False
                continue
            return node if node.children.items else None
        return None

    def _after_pop(self, node: _QueueNode) -> None:
        """KAI ``handlePopFromNode``: drop emptied queues (they are at the top of their parent's heap) and mark
        the path for re-placement."""
        while True:
            if len(node.children):
                self._mark(node)
                return
            (node.parent.children if node.parent is not None else self._roots).pop()
            del self._nodes[node.q]
            if node.parent is None:
                return
            node = node.parent

    # ------------------------------------------------------------------ comparisons

    def _best_job(self, node: _QueueNode) -> int:
        """KAI ``getBestJobFromNode``: follow the tops of the child heaps without fixing them."""
        while not node.is_leaf:
            node = node.children.items[0]
        return node.children.items[0][1]

    def _job_resources(self, j: int):
        hit = self._init_res.get(j)
        version = self.session.job_version[j]
        if hit is None or hit[0] != version:
            s = self.session
            hit = self._init_res[j] = (version, s.job_request(j, s.tasks_to_allocate(j), s.min_gpu_mem))
        return hit[1]

    def _key(self, node: _QueueNode) -> tuple:
        """Keys 1-6 of the queue order with the job at the top of the queue's subtree, cached until the queue's
        Allocated, its top job or that job's tasks change."""
        n = node
        while not n.is_leaf:
            n = n.children.items[0]
        j = n.children.items[0][1]
        qv = self._qver[node.q]
        jv = self._jver[j]
        cached = node.key_cache
        if cached is not None and cached[0] == qv and cached[1] == j and cached[2] == jv:
            return cached[3]
        key = queue_key(self.session, node.q, self._job_resources(j))
        node.key_cache = (qv, j, jv, key)
        return key

    def _node_less(self, a: _QueueNode, b: _QueueNode) -> bool:
        if not a.children.items:
            return True
        if not b.children.items:
            return False
        ka, kb = self._key(a), self._key(b)
        if ka != kb:
            return ka < kb
        return queue_less(self.session, a.q, ka, b.q, kb)
