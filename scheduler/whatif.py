"""What-if: overrides on a snapshot copy, both sides run to steady state, and the difference.

A :class:`WhatIf` names the changes (queue quota / limit / over-quota weight / priority, nodes added to or
removed from a pool, placement strategy and GPU device order, k-value, demand scaling). :func:`run_whatif` applies
them to a copy, runs the base and the modified snapshot through the engine's cycles until a cycle changes nothing
(or ``cycles`` ran), and returns a :class:`WhatIfDiff` with, per side, fair shares, jobs started / evicted / still
pending per queue, GPU utilisation and fragmentation. The input snapshot is never modified.

For sliders, :class:`WhatIfRunner` keeps the base side of one snapshot so that only the modified side is re-run.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from . import placement as _placement  # noqa: F401  registers strategies (fragaware) in PLACEMENT_STRATEGIES
from .decisions import eviction_notes
from .errors import SnapshotError
from .fairshare import cluster_total, compute_fair_share, fair_share_table
from .model import (
    ACTIVE_USED_STATUSES,
    ALLOCATED_STATUSES,
    GPU_DEVICE_ORDERS,
    PLACEMENT_STRATEGIES,
    RESOURCES,
    ExternalUsage,
    Job,
    Node,
    Snapshot,
    Task,
    memory_to_fraction,
)

QUEUE_RESOURCE_FIELDS = ("quota", "limit", "over_quota_weight")


# ---------------------------------------------------------------------------------------------- overrides

@dataclass
class QueueOverride:
    """Changes to one queue: ``priority`` and, per resource, any of quota / limit / over_quota_weight.

    ``resources`` is ``{"gpu": {"quota": 4, "limit": -1}, ...}``; ``None`` or a missing key keeps the value.
    """

    priority: Optional[int] = None
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], path: str) -> "QueueOverride":
        problems = []
        prio = None
        res: dict[str, dict[str, float]] = {}
        for key, value in doc.items():
            if key == "priority":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                    problems.append((f"{path}.priority", f"expected a whole number, got {value!r}"))
                else:
                    prio = int(value)
            elif key in RESOURCES:
                if not isinstance(value, Mapping):
                    problems.append((f"{path}.{key}", f"expected a mapping of {', '.join(QUEUE_RESOURCE_FIELDS)}"))
                    continue
                res[key] = {}
                for f, v in value.items():
                    fp = f"{path}.{key}.{f}"
                    if f not in QUEUE_RESOURCE_FIELDS:
                        problems.append((fp, f"unknown key {f!r} (allowed: {', '.join(QUEUE_RESOURCE_FIELDS)})"))
                    elif v is None:
                        continue
                    elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                        problems.append((fp, f"expected a number, got {v!r}"))
                    elif v < 0 and not (v == -1 and f != "over_quota_weight"):
                        problems.append((fp, f"negative quantity {v!r}" + (" (use -1 for unlimited)"
                                                                          if f != "over_quota_weight" else "")))
                    else:
                        res[key][f] = float(v)
            else:
                problems.append((f"{path}.{key}", f"unknown key {key!r} (allowed: priority, gpu, cpu, memory)"))
        if problems:
            raise SnapshotError(problems)
        return cls(priority=prio, resources=res)


@dataclass
class WhatIf:
    """The changes a what-if applies to a snapshot copy.

    - ``queues``: ``{queue: QueueOverride or {"priority": 5, "gpu": {"quota": 4, "limit": 8,
      "over_quota_weight": 2}}}``
    - ``nodes``: ``{pool: +N | -N}``: add N clones of the pool's first node, or remove N of its nodes (the least
      allocated first, then the last by name); tasks on removed nodes go back to pending.
    - ``placement_gpu`` / ``placement_cpu``: ``binpack`` | ``spread`` | ``fragaware`` (any registered
      node strategy, :data:`scheduler.placement.NODE_STRATEGIES`); ``gpu_device_order``: ``pack`` | ``spread``.
    - ``k_value``: time-based fair-share k.
    - ``demand_scale``: multiply the pending jobs: 1.5 clones every other pending job once more, 0.5 drops every
      other one, 2 clones each once (deterministic: pending jobs ordered by creation time, then key).
    - ``replace_running``: place running work again too. By default only pending jobs are placed by the changed
      rules (KAI never moves a running pod to improve placement), so a new placement strategy may change
      nothing at all; with this set every task goes back to pending on both sides (base and modified), and the
      diff compares two clusters placed from scratch.
    """

    queues: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    placement_gpu: Optional[str] = None
    placement_cpu: Optional[str] = None
    gpu_device_order: Optional[str] = None
    k_value: Optional[float] = None
    demand_scale: float = 1.0
    replace_running: bool = False

    def __post_init__(self) -> None:
        self.queues = {name: (q if isinstance(q, QueueOverride) else QueueOverride.from_dict(q, f"whatif.queues[{name}]"))
                       for name, q in self.queues.items()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "WhatIf":
        """Build from a plain mapping (YAML/JSON, a dashboard model); unknown keys are errors."""
        allowed = {"queues", "nodes", "placement_gpu", "placement_cpu", "gpu_device_order", "k_value", "demand_scale",
                   "replace_running"}
        bad = [(f"whatif.{k}", f"unknown key {k!r} (allowed: {', '.join(sorted(allowed))})") for k in doc if k not in allowed]
        if bad:
            raise SnapshotError(bad)
        return cls(**dict(doc))

    def is_empty(self) -> bool:
        """No change to the cluster or its rules (``replace_running`` alone changes both sides alike)."""
        return not (self.queues or any(self.nodes.values()) or self.placement_gpu or self.placement_cpu
                    or self.gpu_device_order or self.k_value is not None or self.demand_scale != 1.0)

    def describe(self) -> list[str]:
        """The overrides in words, one per line (for the what-if panel and reports)."""
        out = []
        for name, q in self.queues.items():
            if q.priority is not None:
                out.append(f"queue {name}: priority {q.priority}")
            for r, vals in q.resources.items():
                for f, v in vals.items():
                    out.append(f"queue {name}: {r} {f.replace('_', ' ')} {'unlimited' if v == -1 else f'{v:g}'}")
        for pool, n in self.nodes.items():
            if n:
                out.append(f"{'add' if n > 0 else 'remove'} {abs(n)} node{'s' if abs(n) != 1 else ''} "
                           f"{'to' if n > 0 else 'from'} pool {pool}")
        if self.placement_gpu:
            out.append(f"GPU placement {self.placement_gpu}")
        if self.placement_cpu:
            out.append(f"CPU placement {self.placement_cpu}")
        if self.gpu_device_order:
            out.append(f"GPU device order {self.gpu_device_order}")
        if self.k_value is not None:
            out.append(f"k-value {self.k_value:g}")
        if self.demand_scale != 1.0:
            out.append(f"pending demand x{self.demand_scale:g}")
        if self.replace_running:
            out.append("running work placed again too (both sides placed from scratch)")
        return out

    # ------------------------------------------------------------------ applying

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """A modified copy of ``snapshot``; raises :class:`SnapshotError` naming a bad override.

        Copy-on-write: unchanged nodes, queues, jobs and tasks are shared with ``snapshot`` (the engine never
        mutates its input), so treat the result as read-only or ``.copy()`` it before editing in place.
        """
        return self.apply_with_notes(snapshot)[0]

    def apply_with_notes(self, snapshot: Snapshot) -> tuple[Snapshot, dict[str, list[str]]]:
        """Like :meth:`apply`, also returning what it did: ``{"nodes_added", "nodes_removed", "tasks_displaced",
        "jobs_cloned", "jobs_dropped", "actions_removed"}`` (names; ``actions_removed`` only when spread
        placement took consolidation out of the action list, as KAI's operator does)."""
        self._validate(snapshot)
        snap = copy.copy(snapshot)
        snap.nodes, snap.queues, snap.jobs = list(snapshot.nodes), list(snapshot.queues), list(snapshot.jobs)
        snap.config = copy.deepcopy(snapshot.config)
        snap.usage = copy.deepcopy(snapshot.usage)
        notes: dict[str, list[str]] = {"nodes_added": [], "nodes_removed": [], "tasks_displaced": [],
                                       "jobs_cloned": [], "jobs_dropped": [], "actions_removed": []}
        position = {q.name: i for i, q in enumerate(snap.queues)}
        for name, q in self.queues.items():
            queue = snap.queues[position[name]] = copy.deepcopy(snap.queues[position[name]])
            if q.priority is not None:
                queue.priority = q.priority
            for r, vals in q.resources.items():
                res = queue.resource(r)
                for f, v in vals.items():
                    setattr(res, f, v)
        for pool, n in self.nodes.items():
            if n > 0:
                notes["nodes_added"] += _add_nodes(snap, pool, n)
            elif n < 0:
                removed, displaced = _remove_nodes(snap, pool, -n)
                notes["nodes_removed"] += removed
                notes["tasks_displaced"] += displaced
        if self.placement_gpu:
            snap.config.placement.gpu = self.placement_gpu
        if self.placement_cpu:
            snap.config.placement.cpu = self.placement_cpu
        if (self.placement_gpu == "spread" or self.placement_cpu == "spread") and "consolidation" in snap.config.actions:
            # KAI's operator writes no consolidation action for a shard with spread placement
            # (pkg/apis/kai/v1/schedulingshard_types.go); a shard switched to spread runs without it.
            snap.config.actions = [a for a in snap.config.actions if a != "consolidation"]
            notes["actions_removed"] = ["consolidation"]
        if self.gpu_device_order:
            snap.config.gpu_device_order = self.gpu_device_order
        if self.k_value is not None:
            snap.config.k_value = float(self.k_value)
        if self.demand_scale != 1.0:
            cloned, dropped = _scale_demand(snap, self.demand_scale)
            notes["jobs_cloned"], notes["jobs_dropped"] = cloned, dropped
        if self.replace_running:
            notes["tasks_replaced"] = unplace_all(snap)
        return snap, notes

    def _validate(self, snapshot: Snapshot) -> None:
        problems = []
        queues = {q.name for q in snapshot.queues}
        for name in self.queues:
            if name not in queues:
                problems.append((f"whatif.queues[{name}]", f"no queue {name!r} in the snapshot"))
        pools = Counter(n.pool for n in snapshot.nodes)
        for pool, n in self.nodes.items():
            if isinstance(n, bool) or not isinstance(n, int):
                problems.append((f"whatif.nodes[{pool}]", f"expected a whole number of nodes, got {n!r}"))
            elif pool not in pools:
                problems.append((f"whatif.nodes[{pool}]", f"no node pool {pool!r} (pools: {', '.join(sorted(pools))})"))
            elif n < 0 and -n > pools[pool]:
                problems.append((f"whatif.nodes[{pool}]", f"cannot remove {-n} nodes: pool {pool!r} has {pools[pool]}"))
        for key, value, choices in (("placement_gpu", self.placement_gpu, PLACEMENT_STRATEGIES),
                                    ("placement_cpu", self.placement_cpu, PLACEMENT_STRATEGIES),
                                    ("gpu_device_order", self.gpu_device_order, GPU_DEVICE_ORDERS)):
            if value is not None and value not in choices:
                problems.append((f"whatif.{key}", f"unknown value {value!r} (choices: {', '.join(choices)})"))
        if self.k_value is not None and (not isinstance(self.k_value, (int, float)) or self.k_value < 0):
            problems.append(("whatif.k_value", f"expected a number >= 0, got {self.k_value!r}"))
        if not isinstance(self.demand_scale, (int, float)) or not 0 <= self.demand_scale <= 100:
            problems.append(("whatif.demand_scale", f"expected a number between 0 and 100, got {self.demand_scale!r}"))
        if problems:
            raise SnapshotError(problems)


def _unique(name: str, taken: set[str]) -> str:
    i = 1
    while f"{name}-{i}" in taken:
        i += 1
    out = f"{name}-{i}"
    taken.add(out)
    return out


def _add_nodes(snap: Snapshot, pool: str, n: int) -> list[str]:
    template = sorted((x for x in snap.nodes if x.pool == pool), key=lambda x: x.name)[0]
    taken = {x.name for x in snap.nodes}
    added = []
    for _ in range(n):
        node = copy.deepcopy(template)
        node.name = _unique(f"{pool}-whatif", taken)
        node.ready = True
        node.external = ExternalUsage()
        snap.nodes.append(node)
        added.append(node.name)
    return added


def _remove_nodes(snap: Snapshot, pool: str, n: int) -> tuple[list[str], list[str]]:
    load: Counter = Counter()
    for _, t in snap.iter_tasks():
        if t.node is not None and t.status in ACTIVE_USED_STATUSES:
            load[t.node] += max(t.gpu, 1e-3)
    candidates = [x for x in snap.nodes if x.pool == pool]
    # Least loaded first; among equals the last by name (like scaling a node group down).
    candidates.sort(key=lambda x: x.name, reverse=True)
    candidates.sort(key=lambda x: load[x.name])
    removed = {x.name for x in candidates[:n]}
    snap.nodes = [x for x in snap.nodes if x.name not in removed]
    displaced = []
    for j, job in enumerate(snap.jobs):
        if not any(t.node in removed for t in job.tasks):
            continue
        job = snap.jobs[j] = copy.copy(job)  # copy-on-write: only jobs with tasks on removed nodes
        job.tasks = [copy.copy(t) if t.node in removed else t for t in job.tasks]
        for t in job.tasks:
            if t.node in removed:
                if t.status in ACTIVE_USED_STATUSES:
                    displaced.append(t.name)
                    t.status = "pending"
                t.node = None
                t.gpu_groups, t.gpu_indices = [], []
    return sorted(removed), displaced


def unplace_all(snap: Snapshot) -> list[str]:
    """Every task holding or about to hold resources goes back to pending with no node or GPU (copy-on-write
    on ``snap``'s jobs); returns the tasks' names. What "place everything from scratch" starts from."""
    moved = []
    for j, job in enumerate(snap.jobs):
        if not any(t.status in ACTIVE_USED_STATUSES or t.status == "pipelined" for t in job.tasks):
            continue
        job = snap.jobs[j] = copy.copy(job)
        job.tasks = [copy.copy(t) for t in job.tasks]
        job.last_start_time = None
        for t in job.tasks:
            if t.status in ACTIVE_USED_STATUSES or t.status == "pipelined":
                moved.append(t.name)
                t.status, t.node, t.gpu_groups, t.gpu_indices = "pending", None, [], []
    return moved


def pending_jobs(snap: Snapshot) -> list[Job]:
    """Jobs that have not started: some task pending and none holding resources; oldest first."""
    out = [j for j in snap.jobs
           if any(t.status == "pending" for t in j.tasks)
           and not any(t.status in ACTIVE_USED_STATUSES for t in j.tasks)]
    return sorted(out, key=lambda j: (j.creation_time, j.key))


def _scale_demand(snap: Snapshot, scale: float) -> tuple[list[str], list[str]]:
    """Job i of the N pending jobs appears ``ceil((i+1)s) - ceil(is)`` times: an even spread of copies or drops."""
    jobs = pending_jobs(snap)
    taken_jobs = {j.name for j in snap.jobs}
    taken_tasks = {t.name for _, t in snap.iter_tasks()}
    dropped: set[int] = set()
    cloned, dropped_names = [], []
    for i, job in enumerate(jobs):
        copies = math.ceil(round((i + 1) * scale, 9)) - math.ceil(round(i * scale, 9))
        if copies == 0:
            dropped.add(id(job))
            dropped_names.append(job.key)
        for _ in range(copies - 1):
            clone = copy.deepcopy(job)
            clone.name = _unique(f"{job.name}-x", taken_jobs)
            for t in clone.tasks:
                t.name = _unique(f"{t.name}-x", taken_tasks)
            snap.jobs.append(clone)
            cloned.append(clone.key)
    snap.jobs = [j for j in snap.jobs if id(j) not in dropped]
    return cloned, dropped_names


# ---------------------------------------------------------------------------------------------- outcome

@dataclass
class Outcome:
    """One side of a what-if after running to steady state."""

    snapshot: Snapshot
    fair_share: dict[str, dict[str, float]]
    started: dict[str, int]
    evicted: dict[str, int]
    pending: dict[str, int]
    gpu_allocated: float
    gpu_total: float
    fragmentation: dict[str, Any]
    cycles_run: int
    run_ms: float = 0.0
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Jobs still waiting at the end: ``{job: (reason, message)}`` from the last cycle's decisions."""
    eviction_notes: dict[str, str] = field(default_factory=dict)
    """Per job key, the eviction scenarios the cycles made for or against it (first cycle's note per job,
    :func:`~scheduler.decisions.eviction_notes`)."""

    @property
    def gpu_utilisation(self) -> float:
        """Allocated GPUs / GPUs KAI divides (0 on a cluster without GPUs)."""
        return self.gpu_allocated / self.gpu_total if self.gpu_total > 0 else 0.0


def _task_gpus(t: Task, node: Optional[Node]) -> float:
    return t.gpus_on(node.gpu_memory_mib if node else 0.0) if t.is_gpu else 0.0


def gpu_occupancy(snap: Snapshot) -> dict[str, list[float]]:
    """Per node, the used fraction of each GPU device (tasks running, binding or releasing)."""
    nodes = snap.node_map()
    used = {n.name: [0.0] * n.gpus for n in snap.nodes}
    for _, t in snap.iter_tasks():
        if t.node not in used or t.status not in ("running", "binding", "releasing") or not t.is_gpu:
            continue
        node = nodes[t.node]
        devices = used[t.node]
        per = t.device_share(node.gpu_memory_mib)
        idx = [i for i in t.gpu_indices if 0 <= i < len(devices)]
        want = t.devices_held
        if len(idx) < want:  # no recorded devices: take the first free ones (whole GPUs), least used (shares)
            free = sorted(range(len(devices)), key=lambda i: devices[i])
            idx += [i for i in free if i not in idx][: want - len(idx)]
        for i in idx:
            devices[i] = min(1.0, devices[i] + per)
    return used


def fragmentation(snap: Snapshot) -> dict[str, Any]:
    """GPU fragmentation: free fractions stranded on shared GPUs and nodes that cannot host the most common
    pending task shape although they have free GPU.

    Keys: ``idle_gpus`` (fully free devices on Ready nodes), ``free_on_shared_gpus`` (sum of free fractions of
    partly used devices), ``shared_free_fraction`` (that share of all free GPU), ``common_pending_shape``
    (e.g. ``"1 GPU"``, ``"0.5 GPU"``; ``None`` when nothing GPU is pending), ``nodes_unable_to_host``
    (Ready GPU nodes with free GPU that cannot host that shape), ``largest_free_block`` (most fully free GPUs on
    one node).
    """
    occ = gpu_occupancy(snap)
    ready = [n for n in snap.nodes if n.ready and n.gpus > 0]
    idle = sum(sum(1 for u in occ[n.name] if u <= 1e-9) for n in ready)
    shared_free = sum(sum(1 - u for u in occ[n.name] if 1e-9 < u < 1 - 1e-9) for n in ready)
    total_free = idle + shared_free
    shapes = Counter()
    for _, t in snap.iter_tasks():
        if t.status == "pending" and t.is_gpu:
            shapes[_shape(t)] += 1
    common = min(shapes.items(), key=lambda kv: (-kv[1], kv[0]))[0] if shapes else None
    unable = 0
    if common is not None:
        for n in ready:
            devices = occ[n.name]
            if any(u < 1 - 1e-9 for u in devices) and not _shape_fits(common, n, devices):
                unable += 1
    return {"idle_gpus": idle, "free_on_shared_gpus": round(shared_free, 6),
            "shared_free_fraction": round(shared_free / total_free, 6) if total_free > 0 else 0.0,
            "common_pending_shape": _shape_label(common), "nodes_unable_to_host": unable,
            "largest_free_block": max((sum(1 for u in occ[n.name] if u <= 1e-9) for n in ready), default=0)}


def _shape(t: Task) -> tuple[str, float]:
    """``("whole", GPUs)``, ``("fraction", of a device)`` or ``("memory", MiB)`` for a GPU task."""
    if t.gpu_memory_mib is not None:
        return ("memory", float(t.gpu_memory_mib))
    if t.gpu >= 1:
        return ("whole", float(math.ceil(t.gpu)))
    return ("fraction", round(t.gpu, 6))


def _shape_fits(shape: tuple[str, float], node: Node, devices: list[float]) -> bool:
    kind, value = shape
    if kind == "whole":
        return sum(1 for u in devices if u <= 1e-9) >= value
    need = value if kind == "fraction" else memory_to_fraction(value, node.gpu_memory_mib)
    return any(1 - u >= need - 1e-9 for u in devices)


def _shape_label(shape: Optional[tuple[str, float]]) -> Optional[str]:
    if shape is None:
        return None
    kind, value = shape
    if kind == "whole":
        return f"{value:g} GPU" + ("s" if value > 1 else "")
    if kind == "memory":
        return f"{value:g} MiB GPU memory"
    return f"{value:g} GPU"


def allocated_gpus(snap: Snapshot) -> float:
    """GPUs held by running or binding tasks (fractions on their node's devices)."""
    nodes = snap.node_map()
    return sum(_task_gpus(t, nodes.get(t.node)) for _, t in snap.iter_tasks() if t.status in ALLOCATED_STATUSES)


def _job_started(job: Job) -> bool:
    """Running or binding tasks reach the gang's ``min_available`` (at least one task)."""
    placed = sum(1 for t in job.tasks if t.status in ALLOCATED_STATUSES)
    return placed >= max(1, min(job.min_available, len(job.tasks)))


def _per_queue(snap: Snapshot, counts: Counter) -> dict[str, int]:
    return {q.name: int(counts.get(q.name, 0)) for q in snap.leaf_queues()}


def _task_state(snap: Snapshot) -> dict[str, tuple]:
    return {t.name: (t.status, t.node, tuple(t.gpu_groups), tuple(t.gpu_indices)) for _, t in snap.iter_tasks()}


def run_to_steady_state(snapshot: Snapshot, cycles: int = 10, run_cycle=None,
                        on_cycle: Optional[Callable[[int, "Outcome"], None]] = None,
                        on_session: Optional[Callable[[Snapshot, Any], None]] = None) -> Outcome:
    """Run scheduling cycles on ``snapshot`` (not modified) until one changes nothing, at most ``cycles``.

    Each cycle is one engine session (``run_session``); between cycles the engine's ``advance`` applies KAI's
    transitions (binding -> running, releasing/pipelined -> pending). Jobs *started* are jobs that had not
    started in ``snapshot`` and have at the end; *evicted* counts tasks the cycles evicted; *pending* counts
    jobs that have not started at the end. ``run_cycle(snapshot) -> ScheduleResult`` replaces session +
    transitions (its result's snapshot is the next cycle's input), e.g. for a simplified model.

    ``on_cycle(n, interim)``, when given, is called after every cycle that does not end the run, with the
    :class:`Outcome` as it stands after cycle ``n`` (``run_ms``: time so far); it only observes (the returned
    outcome is the same with or without it) and may raise to abandon the run at that cycle boundary.
    ``on_session(input, result)``, when given, sees every cycle's input snapshot and its session result, the
    last cycle's too (e.g. to replay each cycle's input elsewhere, ``bench/kai_diff_whatif.py``).
    """
    import time

    if run_cycle is None:
        from .engine import advance, run_session
    else:
        run_session, advance = run_cycle, (lambda s: s)

    t0 = time.perf_counter()
    fair = fair_share_table(compute_fair_share(snapshot))
    initially_started = {j.key for j in snapshot.jobs if _job_started(j)}
    current = snapshot
    last = snapshot
    evicted_tasks: dict[str, str] = {}
    notes: dict[str, str] = {}
    ran = 0
    result = None
    limit = max(1, cycles)
    for _ in range(limit):
        result = run_session(current)
        if on_session is not None:
            on_session(current, result)
        ran += 1
        last = result.snapshot
        for ev in result.evicted:
            evicted_tasks.setdefault(ev.task, ev.job)
        if result.evicted:
            for key, text in eviction_notes(result).items():
                notes.setdefault(key, text)
        if not result.evicted and _task_state(last) == _task_state(current):
            break
        if on_cycle is not None and ran < limit:
            on_cycle(ran, _outcome(snapshot, last, result, fair, initially_started, dict(evicted_tasks),
                                   dict(notes), ran, t0))
        current = advance(last)
    return _outcome(snapshot, last, result, fair, initially_started, evicted_tasks, notes, ran, t0)


def _outcome(snapshot: Snapshot, current: Snapshot, result, fair: dict, initially_started: set,
             evicted_tasks: dict[str, str], notes: dict[str, str], ran: int, t0: float) -> Outcome:
    """The :class:`Outcome` of ``snapshot`` run to ``current`` (after ``ran`` cycles, the last one ``result``)."""
    import time

    jobs = current.job_map()
    queue_of = {j.key: j.queue for j in snapshot.jobs} | {k: j.queue for k, j in jobs.items()}
    started = Counter(j.queue for j in current.jobs if _job_started(j) and j.key not in initially_started)
    evicted = Counter(queue_of.get(job, "?") for job in evicted_tasks.values())
    pending = Counter(j.queue for j in current.jobs if not _job_started(j)
                      and any(t.status in ("pending", "pipelined") for t in j.tasks))
    decisions = getattr(result, "jobs", None) or {}
    waiting = {}
    for j in current.jobs:
        if not _job_started(j) and any(t.status in ("pending", "pipelined") for t in j.tasks):
            d = decisions.get(j.key)
            waiting[j.key] = ((getattr(d, "reason", "") or "", getattr(d, "message", "") or "") if d is not None
                              else ("", ""))
    return Outcome(snapshot=current, fair_share=fair, started=_per_queue(current, started),
                   evicted=_per_queue(current, evicted), pending=_per_queue(current, pending),
                   gpu_allocated=allocated_gpus(current), gpu_total=cluster_total(current)["gpu"],
                   fragmentation=fragmentation(current), cycles_run=ran,
                   run_ms=(time.perf_counter() - t0) * 1000, waiting=waiting, eviction_notes=notes)


@dataclass
class WhatIfDiff:
    """Base and modified outcomes side by side. ``modified`` is the overridden input snapshot (before any cycle)."""

    overrides: WhatIf
    before: Outcome
    after: Outcome
    modified: Snapshot
    notes: dict[str, list[str]] = field(default_factory=dict)

    def queue_rows(self) -> list[dict[str, Any]]:
        """One row per queue: fair share per resource, jobs started / evicted / pending, before and after."""
        names = list(dict.fromkeys([*self.before.fair_share, *self.after.fair_share]))
        rows = []
        for q in names:
            row: dict[str, Any] = {"queue": q}
            for r in RESOURCES:
                b = self.before.fair_share.get(q, {}).get(r, 0.0)
                a = self.after.fair_share.get(q, {}).get(r, 0.0)
                row[f"fair_share_{r}_before"], row[f"fair_share_{r}_after"] = b, a
            for key in ("started", "evicted", "pending"):
                b, a = getattr(self.before, key).get(q), getattr(self.after, key).get(q)
                row[f"{key}_before"], row[f"{key}_after"] = b, a
            rows.append(row)
        return rows

    def summary(self) -> dict[str, tuple[Any, Any]]:
        """Cluster-level ``{metric: (before, after)}``."""
        out: dict[str, tuple[Any, Any]] = {}
        for key in ("gpu_total", "gpu_allocated", "gpu_utilisation", "cycles_run"):
            out[key] = (getattr(self.before, key), getattr(self.after, key))
        for key in ("jobs_started", "jobs_pending", "tasks_evicted"):
            attr = {"jobs_started": "started", "jobs_pending": "pending", "tasks_evicted": "evicted"}[key]
            out[key] = (sum(getattr(self.before, attr).values()), sum(getattr(self.after, attr).values()))
        for key in self.before.fragmentation:
            out[key] = (self.before.fragmentation[key], self.after.fragmentation.get(key))
        return out

    def job_changes(self) -> list[dict[str, Any]]:
        """Jobs whose end state differs: ``{job, queue, before, after, explanation}`` with
        ``started``/``pending``/``absent``; ``explanation``: the eviction scenarios behind the change (the
        modified side's, else the base side's prefixed ``before:``; empty when no eviction was involved)."""
        def states(o: Outcome) -> dict[str, tuple[str, str]]:
            return {j.key: (j.queue, "started" if _job_started(j) else "pending") for j in o.snapshot.jobs}
        b, a = states(self.before), states(self.after)
        rows = []
        for key in sorted(set(b) | set(a)):
            sb, sa = b.get(key, (None, "absent")), a.get(key, (None, "absent"))
            if sb[1] != sa[1]:
                rows.append({"job": key, "queue": sa[0] or sb[0], "before": sb[1], "after": sa[1],
                             "explanation": self._eviction_note(key)})
        return rows

    def _eviction_note(self, key: str) -> str:
        after = self.after.eviction_notes.get(key)
        if after:
            return after
        before = self.before.eviction_notes.get(key)
        return f"before: {before}" if before else ""

    def to_frames(self) -> dict[str, "pd.DataFrame"]:
        """``{"queues", "summary", "jobs"}`` pandas frames for tables (imports pandas lazily)."""
        import pandas as pd

        queues = pd.DataFrame(self.queue_rows()).set_index("queue") if self.before.fair_share else pd.DataFrame()
        summary = pd.DataFrame([{"metric": k, "before": v[0], "after": v[1]} for k, v in self.summary().items()])
        jobs = pd.DataFrame(self.job_changes(), columns=["job", "queue", "before", "after", "explanation"])
        return {"queues": queues, "summary": summary.set_index("metric"), "jobs": jobs}

    def save(self, path: str | Path) -> None:
        """Write the modified snapshot (overrides applied, before any cycle) in snapshot format v1."""
        from .snapshot_io import save_snapshot

        save_snapshot(self.modified, path)


@dataclass
class WhatIfProgress:
    """Where a :meth:`WhatIfRunner.run` stands after one cycle that did not end its side's run.

    ``side``: ``"base"`` (the unmodified side, computed once per snapshot) or ``"modified"``; ``cycle`` of at most
    ``cycles``; ``elapsed_ms`` since the run began; ``diff``: the interim diff (base at steady state, modified
    side as it stands after ``cycle``), only on the modified side."""

    side: str
    cycle: int
    cycles: int
    elapsed_ms: float
    diff: Optional[WhatIfDiff] = None


class WhatIfRunner:
    """Keeps one snapshot's base outcome so that each slider move only re-runs the modified side (one base
    as the cluster is, one placed from scratch for ``replace_running``)."""

    def __init__(self, snapshot: Snapshot, cycles: int = 10, run_cycle=None):
        self.snapshot = snapshot
        self.cycles = cycles
        self.run_cycle = run_cycle
        self._bases: dict[bool, Outcome] = {}

    @property
    def base(self) -> Outcome:
        return self.base_for(False)

    def base_for(self, replace_running: bool, on_cycle: Optional[Callable[[int, Outcome], None]] = None) -> Outcome:
        """The unmodified side: the snapshot as it is, or with everything placed again (``on_cycle``: as
        :func:`run_to_steady_state`'s, only when it is computed now)."""
        if replace_running not in self._bases:
            snap = WhatIf(replace_running=True).apply(self.snapshot) if replace_running else self.snapshot
            self._bases[replace_running] = run_to_steady_state(snap, self.cycles, self.run_cycle, on_cycle)
        return self._bases[replace_running]

    def run(self, overrides: WhatIf, on_cycle: Optional[Callable[[WhatIfProgress], None]] = None) -> WhatIfDiff:
        """Base (cached) and modified side to steady state, as a :class:`WhatIfDiff`.

        ``on_cycle(progress)``, when given, hears of every cycle that does not end a side's run
        (:class:`WhatIfProgress`, with the interim diff on the modified side); it may raise to abandon the run.
        The result is the same with or without it."""
        import time

        t0 = time.perf_counter()
        modified, notes = overrides.apply_with_notes(self.snapshot)
        base_cycle = modified_cycle = None
        if on_cycle is not None:
            def base_cycle(n: int, _: Outcome) -> None:
                on_cycle(WhatIfProgress("base", n, self.cycles, (time.perf_counter() - t0) * 1000))

            def modified_cycle(n: int, interim: Outcome) -> None:
                diff = WhatIfDiff(overrides=overrides, before=base, after=interim, modified=modified, notes=notes)
                on_cycle(WhatIfProgress("modified", n, self.cycles, (time.perf_counter() - t0) * 1000, diff))
        base = self.base_for(overrides.replace_running, base_cycle)
        after = (base if overrides.is_empty()
                 else run_to_steady_state(modified, self.cycles, self.run_cycle, modified_cycle))
        return WhatIfDiff(overrides=overrides, before=base, after=after, modified=modified, notes=notes)


def run_whatif(snapshot: Snapshot, overrides: WhatIf | Mapping[str, Any], cycles: int = 10,
               run_cycle=None) -> WhatIfDiff:
    """Apply ``overrides`` to a copy of ``snapshot``, run base and modified to steady state (at most ``cycles``
    cycles each, stopping early when a cycle changes nothing) and return the :class:`WhatIfDiff`.
    ``snapshot`` is never modified."""
    if not isinstance(overrides, WhatIf):
        overrides = WhatIf.from_dict(overrides)
    return WhatIfRunner(snapshot, cycles, run_cycle).run(overrides)
