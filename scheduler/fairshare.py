"""KAI's fair-share division (the ``proportion`` plugin), per resource and level by level.

KAI divides GPU, CPU and memory independently among sibling queues, then divides each parent's fair share
among its children with the same procedure (kai-semantics.md §b). The division of one resource has three phases:

1. **deserved**: every queue gets ``min(quota, requestable)`` (``quota = -1`` means the whole amount being
   divided); priority plays no part and the sum may exceed the amount (oversubscribed quotas are honoured).
2. **over quota**: what is left goes to priority buckets in descending priority; inside a bucket it is split
   in rounds by over-quota weight, adjusted by historical usage (``sw = max(0, nW + k(nW - usage))``), and
   handed out in whole units unless the rest of a queue's request is smaller than its share.
3. **remainder**: fractions rounded off in phase 2 are handed out one unit (or the final fraction) at a time,
   largest remainder first, then the older queue, then the queue name.

Rules come from KAI's ``pkg/scheduler/plugins/proportion/resource_division/resource_division.go`` (phases),
``resource_share/resource_share.go`` (requestable, allocatable) and ``proportion.go`` (totals, per-queue
accounting, hierarchy). The arithmetic is done in the same order on the same float64 values, so results match
KAI's bit for bit where KAI's own map iteration order does not matter.

Public API:

- :func:`divide_resource`: the pure division of one resource among siblings (with an optional phase trace).
- :func:`divide_tree`: the hierarchical application, level by level.
- :func:`compute_fair_share`: both, on a :class:`~scheduler.model.Snapshot` (totals and requests from it).
- :func:`queue_demand` / :class:`TaskTable`: per-queue allocated and requested sums over columnar task arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from .model import (ALLOCATED_STATUSES, NON_PREEMPTIBLE_PRIORITY, RESOURCES, UNLIMITED, Queue, Snapshot,
                    has_gpu_memory_value, memory_to_fraction)

MAX_ROUNDS = 10_000
"""Safety cap on over-quota rounds per priority bucket (KAI has none; real divisions end in a few rounds)."""


# ---------------------------------------------------------------------------------------------- data

def requestable(requested: float, limit: float) -> float:
    """KAI's ``Requestable``: the request capped by the limit (``-1`` = no limit)."""
    return requested if limit == UNLIMITED else min(limit, requested)


@dataclass
class QueueShare:
    """One resource of one queue as the proportion plugin sees it (KAI ``ResourceShare``).

    ``deserved`` is the quota and ``limit`` the max allowed (``-1`` = unlimited for both). ``allocated``,
    ``allocated_non_preemptible`` and ``requested`` are sums over the queue's subtree; ``requested`` includes
    what is allocated. ``usage`` is the normalised historical usage (0..1) for time-based fair share.
    """

    deserved: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0
    fair_share: float = 0.0
    allocated: float = 0.0
    allocated_non_preemptible: float = 0.0
    requested: float = 0.0
    usage: float = 0.0

    @property
    def requestable(self) -> float:
        """``min(requested, limit)``; the request when there is no limit."""
        return requestable(self.requested, self.limit)

    @property
    def allocatable(self) -> float:
        """KAI's ``GetAllocatableShare``: limit if deserved is -1, else ``max(deserved, fair share)`` capped by
        the limit. ``-1`` means unlimited."""
        if self.deserved == UNLIMITED:
            return self.limit
        value = max(self.deserved, self.fair_share)
        if self.limit != UNLIMITED:
            value = min(self.limit, value)
        return value

    def as_dict(self) -> dict[str, float]:
        return {"deserved": self.deserved, "limit": self.limit, "over_quota_weight": self.over_quota_weight,
                "fair_share": self.fair_share, "allocated": self.allocated,
                "allocated_non_preemptible": self.allocated_non_preemptible, "requested": self.requested,
                "usage": self.usage}


@dataclass(frozen=True)
class Claim:
    """One sibling queue's claim on one resource: the inputs of :func:`divide_resource`."""

    name: str
    deserved: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0
    requested: float = 0.0
    usage: float = 0.0
    priority: int = 100
    creation_time: float = 0.0

    @property
    def requestable(self) -> float:
        return requestable(self.requested, self.limit)


@dataclass
class RoundStep:
    """One queue in one over-quota round: its share weight, computed share and what it was given."""

    queue: str
    share_weight: float
    share: float
    remaining_request: float
    given: float
    leftover: Optional[float]
    satisfied: bool


@dataclass
class Round:
    """One round of phase 2 inside one priority bucket."""

    priority: int
    number: int
    round_amount: float
    total_weight: float
    steps: list[RoundStep] = field(default_factory=list)


@dataclass
class DivisionTrace:
    """What each phase of one division did, for ``kaidash fairshare --explain`` and the queues view."""

    total: float = 0.0
    k_value: float = 1.0
    deserved: list[tuple[str, float, float, float]] = field(default_factory=list)
    """Phase 1: ``(queue, effective deserved, requestable, given)``."""
    after_deserved: float = 0.0
    rounds: list[Round] = field(default_factory=list)
    after_over_quota: float = 0.0
    leftovers: list[tuple[int, str, float, float]] = field(default_factory=list)
    """Phase 3: ``(priority, queue, rounded-off remainder, given)`` in hand-out order."""
    remaining: float = 0.0
    fair_share: dict[str, float] = field(default_factory=dict)

    def lines(self, unit: str = "") -> list[str]:
        """The division as plain-language lines, phase by phase."""
        u = f" {unit}" if unit else ""
        out = [f"total to divide: {_fmt(self.total)}{u} (k-value {_fmt(self.k_value)})",
               "phase 1 - deserved quota (priority ignored):"]
        for name, deserved, requestable, given in self.deserved:
            d = "all" if deserved == math.inf else _fmt(deserved)
            out.append(f"  {name}: min(deserved {d}, requestable {_fmt(requestable)}) = {_fmt(given)}")
        out.append(f"  left after phase 1: {_fmt(self.after_deserved)}{u}"
                   + (" (oversubscribed: nothing left for over-quota)" if self.after_deserved < 0 else ""))
        if self.rounds:
            out.append("phase 2 - over quota, by descending priority, then over-quota weight (whole units):")
        for rnd in self.rounds:
            out.append(f"  priority {rnd.priority} round {rnd.number}: {_fmt(rnd.round_amount)}{u} to share, "
                       f"total weight of queues still requesting {_fmt(rnd.total_weight)}")
            for s in rnd.steps:
                note = "satisfied" if s.satisfied else (
                    f"remainder {_fmt(s.leftover)} kept for phase 3" if s.leftover else "")
                out.append(f"    {s.queue}: share weight {_fmt(s.share_weight)} -> share {_fmt(s.share)}, "
                           f"still requesting {_fmt(s.remaining_request)}, given {_fmt(s.given)}"
                           + (f" ({note})" if note else ""))
        if self.rounds:
            out.append(f"  left after phase 2: {_fmt(self.after_over_quota)}{u}")
        if self.leftovers:
            out.append("phase 3 - rounded-off remainders, largest first, then older queue, then name:")
            for prio, name, rem, given in self.leftovers:
                out.append(f"  {name} (priority {prio}, remainder {_fmt(rem)}): given {_fmt(given)}")
        out.append("fair share: " + ", ".join(f"{q}={_fmt(v)}" for q, v in self.fair_share.items())
                   + f"; not handed out: {_fmt(self.remaining)}{u}")
        return out


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x == math.inf:
        return "inf"
    r = round(x, 6)
    return str(int(r)) if r == int(r) else f"{r:g}"


# ---------------------------------------------------------------------------------------------- one level

def divide_resource(total: float, claims: Sequence[Claim], k_value: float = 1.0,
                    trace: Optional[DivisionTrace] = None) -> tuple[dict[str, float], float]:
    """Divide ``total`` of one resource among sibling queues exactly as KAI's ``setResourceShare`` does.

    Returns ``(fair_share by queue name, remaining)`` where ``remaining`` is what was not handed out
    (0 when deserved quotas used it all up or oversubscribed it). ``claims`` order is the iteration order;
    it only matters where KAI's own (random map) order would too. Pass a :class:`DivisionTrace` to record the
    phases. Pure: inputs are not modified.
    """
    k_value = max(0.0, float(k_value))
    fair = {c.name: 0.0 for c in claims}
    if trace is not None:
        trace.total, trace.k_value = total, k_value

    # Phase 1: deserved (KAI setDeservedResource).
    remaining = total
    for c in claims:
        deserved = total if c.deserved == UNLIMITED else c.deserved
        give = min(deserved, c.requestable)
        fair[c.name] += give
        remaining -= give
        if trace is not None:
            trace.deserved.append((c.name, math.inf if c.deserved == UNLIMITED else c.deserved,
                                   c.requestable, give))
    if trace is not None:
        trace.after_deserved = remaining
    if remaining <= 0:
        remaining = 0.0
        if trace is not None:
            trace.fair_share = dict(fair)
        return fair, remaining

    # Phase 2: over quota per priority bucket, highest first (KAI divideOverQuotaResource).
    priorities = sorted({c.priority for c in claims}, reverse=True)
    leftovers: dict[int, dict[str, float]] = {}
    for prio in priorities:
        bucket = [c for c in claims if c.priority == prio]
        remaining, leftovers[prio] = _divide_up_to_fair_share(remaining, k_value, bucket, fair, trace)
    if trace is not None:
        trace.after_over_quota = remaining

    # Phase 3: rounded-off remainders (KAI divideRemainingResource).
    by_name = {c.name: c for c in claims}
    for prio in priorities:
        if remaining <= 0:
            break
        order = sorted(leftovers[prio].items(),
                       key=lambda kv: (-kv[1], by_name[kv[0]].creation_time, kv[0]))
        for name, rem in order:
            if remaining == 0:
                break
            # KAI gives min(1, remaining) without re-checking the queue's remaining request (can overshoot).
            give = min(1.0, remaining)
            fair[name] += give
            remaining -= give
            if trace is not None:
                trace.leftovers.append((prio, name, rem, give))
    if trace is not None:
        trace.remaining, trace.fair_share = remaining, dict(fair)
    return fair, remaining


def _is_satisfied(c: Claim, fair_share: float) -> bool:
    return c.requested <= fair_share or (c.limit != UNLIMITED and c.limit <= fair_share)


def _remaining_request(c: Claim, fair_share: float) -> float:
    req = c.requestable
    return 0.0 if req < fair_share else req - fair_share


def _divide_up_to_fair_share(amount: float, k_value: float, bucket: Sequence[Claim], fair: dict[str, float],
                             trace: Optional[DivisionTrace]) -> tuple[float, dict[str, float]]:
    """Phase 2 for one priority bucket (KAI ``divideUpToFairShare``); updates ``fair`` in place."""
    leftovers: dict[str, float] = {}
    for number in range(1, MAX_ROUNDS + 1):
        round_amount = amount
        # Share weights of unsatisfied queues (KAI calcShareWeights): weights normalised over the queues
        # that still request something, shifted by historical usage with the k-value.
        total_weight = sum(c.over_quota_weight for c in bucket if _remaining_request(c, fair[c.name]) > 0)
        if total_weight == 0:
            break
        weights: dict[str, float] = {}
        weight_sum = 0.0
        for c in bucket:
            if _is_satisfied(c, fair[c.name]):
                continue
            nw = c.over_quota_weight / total_weight
            sw = max(0.0, nw + k_value * (nw - c.usage))
            weights[c.name] = sw
            weight_sum += sw
        if weight_sum == 0:
            break
        rnd = Round(bucket[0].priority, number, round_amount, total_weight) if trace is not None else None
        another = False
        for c in bucket:
            if amount == 0:
                break
            if _is_satisfied(c, fair[c.name]) or c.over_quota_weight == 0:
                continue
            requested = _remaining_request(c, fair[c.name])
            share = round_amount * (weights[c.name] / weight_sum)
            leftover = None
            if requested <= share:
                give = requested
                leftovers.pop(c.name, None)
            else:
                give = float(math.floor(share))
                if share - give > 0:
                    leftover = share - give
                    leftovers[c.name] = leftover
            if rnd is not None:
                rnd.steps.append(RoundStep(c.name, weights[c.name], share, requested, give, leftover,
                                           requested <= share))
            if give == 0:
                continue
            fair[c.name] += give
            amount -= give
            another = another or requested < share
        if rnd is not None:
            trace.rounds.append(rnd)
        if not another or amount == 0:
            break
    return amount, leftovers


# ---------------------------------------------------------------------------------------------- hierarchy

def divide_tree(total: Mapping[str, float], queues: Sequence[Queue], shares: Mapping[str, Mapping[str, QueueShare]],
                k_value: float = 1.0, traces: Optional[dict] = None) -> dict[str, float]:
    """Divide ``total`` level by level: top-level queues split it, each parent's fair share is split among its
    children (KAI ``setFairShareForQueues``).

    ``shares[queue][resource]`` must hold deserved/limit/weight/requested/usage; its ``fair_share`` is written.
    Queues whose parent is missing (and their subtrees, and queues in a parent cycle) are unreachable from the
    top and keep fair share 0, as KAI drops orphan queues. Returns the top level's remaining per resource.
    ``traces``, when given, is filled with ``{(parent or None, resource): DivisionTrace}``.
    """
    children: dict[Optional[str], list[Queue]] = {}
    for q in queues:
        children.setdefault(q.parent, []).append(q)
    for per_res in shares.values():
        for s in per_res.values():
            s.fair_share = 0.0
    top_remaining = {r: 0.0 for r in RESOURCES}
    stack: list[tuple[Optional[str], dict[str, float]]] = [(None, dict(total))]
    visited: set[str] = set()
    while stack:
        parent, amounts = stack.pop()
        siblings = [q for q in children.get(parent, []) if q.name not in visited]
        if not siblings:
            continue
        visited.update(q.name for q in siblings)
        for res in RESOURCES:
            claims = [_claim(q, shares[q.name][res]) for q in siblings]
            trace = DivisionTrace() if traces is not None else None
            fair, remaining = divide_resource(amounts.get(res, 0.0), claims, k_value, trace)
            for q in siblings:
                shares[q.name][res].fair_share = fair[q.name]
            if parent is None:
                top_remaining[res] = remaining
            if traces is not None:
                traces[(parent, res)] = trace
        for q in reversed(siblings):
            stack.append((q.name, {r: shares[q.name][r].fair_share for r in RESOURCES}))
    return top_remaining


def _claim(q: Queue, s: QueueShare) -> Claim:
    return Claim(name=q.name, deserved=s.deserved, limit=s.limit, over_quota_weight=s.over_quota_weight,
                 requested=s.requested, usage=s.usage, priority=q.priority, creation_time=q.creation_time)


# ---------------------------------------------------------------------------------------------- snapshot

def cluster_total(snapshot: Snapshot) -> dict[str, float]:
    """Resources KAI divides: allocatable of schedulable nodes (Ready, no pressure condition, not cordoned: KAI's
    ``ValidateIsNodeReady``) minus what other schedulers' pods hold (§b.1)."""
    total = {r: 0.0 for r in RESOURCES}
    for n in snapshot.nodes:
        if not n.schedulable:
            continue
        total["gpu"] += n.gpus - n.external.gpus
        total["cpu"] += n.cpu_millis - n.external.cpu_millis
        total["memory"] += n.memory_bytes - n.external.memory_bytes
    return total


def min_node_gpu_memory_mib(snapshot: Snapshot) -> Optional[float]:
    """The smallest GPU memory of any node that reports one (KAI ``MinNodeGPUMemoryMiB``: nodes at the 100 MiB
    default an unlabelled node gets are left out), or None when no node does."""
    mems = [n.gpu_memory_mib for n in snapshot.nodes if has_gpu_memory_value(n.gpu_memory_mib)]
    return min(mems) if mems else None


class TaskTable:
    """Every task of a snapshot as columns (job order, then task order), built once per session.

    Fair share (:func:`queue_demand`) reads it, and the engine hands the same table to
    :class:`~scheduler.session.Session`, which adopts its arrays instead of walking 100k+ task objects a
    second time. Treat every column as read-only.

    Task columns: ``tasks`` (the :class:`~scheduler.model.Task` objects), ``status`` and ``node`` (as in the
    snapshot), ``gpu``, ``gmem`` (``gpu_memory_mib``, NaN when absent), ``dev`` (``gpu_devices``), ``cpu``,
    ``mem`` (float64 / int64 arrays) and ``task_job`` (job index of each task). Job columns: ``job_counts``
    (tasks per job), ``job_queue_id`` (index into ``queue_names``, the jobs' queue names in order of first
    appearance), ``job_non_preemptible`` and ``job_grouped`` (False: KAI does not consider the job, ``Job.waiting_for``).
    """

    __slots__ = ("snapshot", "tasks", "status", "node", "gpu", "gmem", "dev", "cpu", "mem", "task_job",
                 "job_counts", "queue_names", "job_queue_id", "job_non_preemptible", "job_grouped", "_status_codes")

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> "TaskTable":
        # Two plain loops with bound appends: reading 100k+ objects' attributes dominates, and one pass per
        # object kind is about twice as fast as a comprehension per column.
        self = cls.__new__(cls)
        self.snapshot = snapshot
        jobs = snapshot.jobs
        tasks: list = []
        counts: list[int] = []
        queue_ids: list[int] = []
        non_preemptible: list[bool] = []
        grouped: list[bool] = []
        ids: dict[str, int] = {}
        add_tasks, add_count, add_queue, add_np, queue_id = (tasks.extend, counts.append, queue_ids.append,
                                                             non_preemptible.append, ids.setdefault)
        for job in jobs:
            job_tasks = job.tasks
            add_tasks(job_tasks)
            add_count(len(job_tasks))
            add_queue(queue_id(job.queue, len(ids)))
            explicit = job.preemptible  # Job.is_preemptible, inlined
            add_np((not explicit) if explicit is not None else job.priority >= NON_PREEMPTIBLE_PRIORITY)
            grouped.append(job.waiting_for is None)
        status: list[str] = []
        node: list = []
        gpu: list = []
        gmem: list = []
        dev: list = []
        cpu: list = []
        mem: list = []
        add_s, add_n, add_g, add_gm, add_d, add_c, add_m = (status.append, node.append, gpu.append, gmem.append,
                                                             dev.append, cpu.append, mem.append)
        for t in tasks:
            add_s(t.status)
            add_n(t.node)
            add_g(t.gpu)
            add_gm(t.gpu_memory_mib)
            add_d(t.gpu_devices)
            add_c(t.cpu_millis)
            add_m(t.memory_bytes)
        self.tasks, self.status, self.node = tasks, status, node
        self.gpu = np.array(gpu, dtype=float)
        self.gmem = np.array(gmem, dtype=float)  # None -> NaN
        self.dev = np.array(dev, dtype=np.int64)
        self.cpu = np.array(cpu, dtype=float)
        self.mem = np.array(mem, dtype=float)
        self.job_counts = np.array(counts, dtype=np.int64)
        self.task_job = np.repeat(np.arange(len(jobs), dtype=np.int64), self.job_counts)
        self.job_queue_id = np.array(queue_ids, dtype=np.int64)
        self.queue_names = list(ids)
        self.job_non_preemptible = np.array(non_preemptible, dtype=bool)
        self.job_grouped = np.array(grouped, dtype=bool)
        self._status_codes = None
        return self

    def __len__(self) -> int:
        return len(self.tasks)

    def status_masks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(allocated, pending)`` boolean masks: running|binding (KAI ``AllocatedStatus``), and pending — a task
        ``pipelined`` in the input is a Pending pod with a nominated node to KAI, so it counts as pending."""
        if self._status_codes is None:
            st = np.array(self.status, dtype=object)
            allocated = np.zeros(len(st), dtype=bool)
            for s in ALLOCATED_STATUSES:
                allocated |= st == s
            self._status_codes = (allocated, (st == "pending") | (st == "pipelined"))
        return self._status_codes


def _memory_fractions(gmem: np.ndarray, node_mem: np.ndarray) -> np.ndarray:
    """:func:`~scheduler.model.memory_to_fraction` element-wise, computed once per distinct pair with the scalar
    function itself (so the rounding is exactly the scalar one; a cluster has few distinct pairs)."""
    if gmem.size == 0:
        return np.zeros(0)
    pairs, inverse = np.unique(np.stack([gmem, node_mem], axis=1), axis=0, return_inverse=True)
    values = np.array([memory_to_fraction(g, m) for g, m in pairs.tolist()], dtype=float)
    return values[inverse.reshape(-1)]


def queue_demand(snapshot: Snapshot, tasks: Optional[TaskTable] = None) -> dict[str, dict[str, list[float]]]:
    """Per leaf queue and resource ``[allocated, allocated_non_preemptible, requested]`` of its own jobs.

    Allocated = tasks running or binding (KAI ``AllocatedStatus``), fractional GPUs counted on their node
    (``Task.gpus_on``; a gpu-memory task on an unknown node is converted with the smallest node GPU memory);
    requested adds pending tasks, gpu-memory requests converted with the smallest node GPU memory and not rounded
    (KAI ``GpuMemoryAsGpuFraction``; kai-semantics.md §b.1.3). Jobs KAI does not consider (``Job.waiting_for``) count nowhere. ``tasks`` is the snapshot's :class:`TaskTable` when the caller has one.

    Vectorised over the task columns; the sums are taken per job, then per queue in job order, exactly as a
    task-by-task loop would add them (``bincount`` adds in index order), so the floats are the loop's.
    """
    table = TaskTable.from_snapshot(snapshot) if tasks is None else tasks
    n_jobs = len(table.job_counts)
    out: dict[str, dict[str, list[float]]] = {}
    if n_jobs == 0:
        return out
    allocated, pending = table.status_masks()
    gpu, gmem, dev = table.gpu, table.gmem, table.dev
    has_mem = ~np.isnan(gmem)
    # GPUs of a gpu-fraction / whole-GPU request: gpu itself when >= 1, else gpu x devices; none when gpu <= 0.
    base = np.where(gpu > 0, np.where(gpu >= 1, gpu, gpu * dev), 0.0)
    gpu_alloc = np.where(allocated & ~has_mem, base, 0.0)
    gpu_pend = np.where(pending & ~has_mem, base, 0.0)
    min_mem = min_node_gpu_memory_mib(snapshot)
    alloc_mem = np.nonzero(allocated & has_mem)[0]
    if alloc_mem.size:
        node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
        fallback = min_mem or 0.0
        names = table.node
        on = np.array([node_mem.get(names[i], fallback) for i in alloc_mem.tolist()], dtype=float)
        gpu_alloc[alloc_mem] = dev[alloc_mem] * _memory_fractions(gmem[alloc_mem], on)
    pend_mem = np.nonzero(pending & has_mem)[0]
    if pend_mem.size and min_mem is not None:  # KAI GpuMemoryAsGpuFraction: not rounded (rounding is placement's)
        gpu_pend[pend_mem] = dev[pend_mem] * (gmem[pend_mem] / min_mem)

    task_job = table.task_job
    job_queue = table.job_queue_id
    if not table.job_grouped.all():  # jobs KAI does not consider (Job.waiting_for) are in no queue's numbers
        outside = ~table.job_grouped[task_job]
        allocated, pending = allocated & ~outside, pending & ~outside
        gpu_alloc = np.where(outside, 0.0, gpu_alloc)
        gpu_pend = np.where(outside, 0.0, gpu_pend)
    n_queues = len(table.queue_names)
    non_preemptible = table.job_non_preemptible
    columns = []
    for a_task, p_task in ((gpu_alloc, gpu_pend),
                           (np.where(allocated, table.cpu, 0.0), np.where(pending, table.cpu, 0.0)),
                           (np.where(allocated, table.mem, 0.0), np.where(pending, table.mem, 0.0))):
        a_job = np.bincount(task_job, weights=a_task, minlength=n_jobs)
        p_job = np.bincount(task_job, weights=p_task, minlength=n_jobs)
        columns.append((np.bincount(job_queue, weights=a_job, minlength=n_queues).tolist(),
                        np.bincount(job_queue, weights=np.where(non_preemptible, a_job, 0.0),
                                    minlength=n_queues).tolist(),
                        np.bincount(job_queue, weights=a_job + p_job, minlength=n_queues).tolist()))
    for q, name in enumerate(table.queue_names):
        out[name] = {r: [col[0][q], col[1][q], col[2][q]] for r, col in zip(RESOURCES, columns)}
    return out


def compute_fair_share(snapshot: Snapshot, *, usage: Optional[Mapping[str, Mapping[str, float]]] = None,
                       traces: Optional[dict] = None,
                       tasks: Optional[TaskTable] = None) -> dict[str, dict[str, QueueShare]]:
    """Fair share of every queue and resource for a snapshot, as KAI's proportion plugin computes it at
    session open.

    Returns ``{queue: {"gpu"|"cpu"|"memory": QueueShare}}`` with deserved, limit, over-quota weight, fair
    share, allocated, allocated non-preemptible, requested and usage (subtree sums for parents). ``usage``
    overrides ``snapshot.usage`` (normalised historical usage per queue and resource). The snapshot is not
    modified. ``traces`` receives the per-level :class:`DivisionTrace` objects (see :func:`divide_tree`).
    ``tasks`` is the snapshot's :class:`TaskTable` when the caller already built one (the engine does, and
    hands the same table to the session).
    """
    usage = snapshot.usage if usage is None else usage
    queues = snapshot.queues
    shares: dict[str, dict[str, QueueShare]] = {}
    for q in queues:
        qu = usage.get(q.name, {}) if usage else {}
        shares[q.name] = {
            r: QueueShare(deserved=q.resource(r).quota, limit=q.resource(r).limit,
                          over_quota_weight=q.resource(r).over_quota_weight, usage=float(qu.get(r, 0.0)))
            for r in RESOURCES}
    parent_of = {q.name: q.parent for q in queues}
    for leaf, acc in queue_demand(snapshot, tasks).items():
        for name in _ancestors_and_self(leaf, parent_of):
            for r in RESOURCES:
                s = shares[name][r]
                s.allocated += acc[r][0]
                s.allocated_non_preemptible += acc[r][1]
                s.requested += acc[r][2]
    divide_tree(cluster_total(snapshot), queues, shares, snapshot.config.k_value, traces)
    return shares


def _ancestors_and_self(name: str, parent_of: Mapping[str, Optional[str]]) -> Iterable[str]:
    """The queue and every ancestor that exists (KAI walks ``ParentQueue`` while the queue is known)."""
    seen: set[str] = set()
    cur: Optional[str] = name
    while cur is not None and cur in parent_of and cur not in seen:
        seen.add(cur)
        yield cur
        cur = parent_of[cur]


def fair_share_table(shares: Mapping[str, Mapping[str, QueueShare]]) -> dict[str, dict[str, float]]:
    """``{queue: {resource: fair share}}``: the ``fair_share`` part of the schedule/fairshare contracts."""
    return {q: {r: s.fair_share for r, s in per_res.items()} for q, per_res in shares.items()}
