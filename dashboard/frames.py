"""Pure table builders: snapshot + engine result (+ GPU metrics) → the pandas frames the views show.

No Panel import and no scheduling logic: every number here is read from the engine's ``ScheduleResult``
(``queue_stats``, ``jobs``), from the snapshot (tasks, nodes) or from the DCGM frame, so a view's table can be
checked against the engine in a unit test. Column names carry their units where a number could be read two
ways (``gpu_memory_mib``, ``wait_s``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional

import numpy as np
import pandas as pd

from scheduler.decisions import ScheduleResult, eviction_notes
from scheduler.metrics.dcgm import device_column
from scheduler.model import (ALLOCATED_STATUSES, UNLIMITED, Node, Snapshot, Task, mig_cell_memory_mib, mig_gpu_total,
                             mig_gpus)
from scheduler.queue_allocation import observed_allocation, observed_allocations

EPS = 1e-6
IDLE_UTIL_PCT = 5.0
"""A GPU with something allocated and utilisation below this (percent) counts as idle-but-allocated."""

SLICE_STATUSES = ("running", "binding", "releasing", "pipelined")
"""Tasks drawn on the GPU grid: what holds (or is about to hold) a device."""


# ------------------------------------------------------------------------------------------------ queues

QUEUE_COLUMNS = ["queue", "parent", "depth", "label", "leaf", "priority", "quota", "limit", "over_quota_weight",
                 "deserved", "fair_share", "allocated", "allocated_non_preemptible", "requested", "ratio",
                 "borrowed", "reclaimable", "starved_by", "running_jobs", "pending_jobs", "state", "allocated_next"]
"""``allocated`` and the job counts are the cluster as observed; ``allocated_next`` is what the queue would hold
after the engine's decisions of this cycle (a prediction: on a live cluster kaidash is a shadow scheduler)."""


def queue_order(snapshot: Snapshot) -> list[tuple[str, int]]:
    """Queues depth-first (parents before children, siblings by name) with their depth."""
    children = snapshot.children()
    names = {q.name for q in snapshot.queues}
    out: list[tuple[str, int]] = []
    seen: set[str] = set()

    def walk(parent: Optional[str], depth: int) -> None:
        for q in sorted(children.get(parent, []), key=lambda q: q.name):
            if q.name in seen:
                continue
            seen.add(q.name)
            out.append((q.name, depth))
            walk(q.name, depth + 1)

    walk(None, 0)
    # Queues whose parent does not exist (bad input) are shown at top level rather than dropped.
    for q in snapshot.queues:
        if q.name not in seen and q.parent not in names:
            seen.add(q.name)
            out.append((q.name, 0))
            walk(q.name, 1)
    return out


def queue_stats_of(snapshot: Snapshot, result: Any, resource: str = "gpu") -> dict[str, dict[str, float]]:
    """``{queue: {deserved, fair_share, allocated, requested, limit, ...}}`` for one resource.

    The engine's ``result.queue_stats`` when there is a result; otherwise the fair-share calculator on the
    snapshot alone (the numbers KAI's proportion plugin computes at session open).
    """
    stats = getattr(result, "queue_stats", None)
    if stats:
        return {q: dict(per.get(resource, {})) for q, per in stats.items()}
    from scheduler.fairshare import compute_fair_share

    return {q: per[resource].as_dict() for q, per in compute_fair_share(snapshot).items()}


def _job_counts(snapshot: Snapshot) -> tuple[dict[str, int], dict[str, int]]:
    parent_of = {q.name: q.parent for q in snapshot.queues}
    running: dict[str, int] = {}
    pending: dict[str, int] = {}
    for job in snapshot.jobs:
        statuses = {t.status for t in job.tasks}
        target = running if statuses & ALLOCATED_STATUSES else pending if "pending" in statuses else None
        if target is None:
            continue
        cur, seen = job.queue, set()
        while cur is not None and cur not in seen:  # roll up to every ancestor
            seen.add(cur)
            target[cur] = target.get(cur, 0) + 1
            cur = parent_of.get(cur)
    return running, pending


def queue_frame(snapshot: Snapshot, result: Any = None, resource: str = "gpu",
                allocations: Optional[tuple[dict, dict]] = None) -> pd.DataFrame:
    """One row per queue, depth-first: configuration, the deserved → fair share → allocated → requested
    chain, KAI's queue-order ratio (allocated / fair share) and the borrowing / reclaimable / starved state.

    ``snapshot`` is the cluster as observed (the session's input): ``allocated`` is what the queue's running and
    binding pods hold now, as KAI accounts it (:func:`scheduler.queue_allocation.observed_allocation`), and the
    job counts are the observed ones; the engine's binds and evictions of this cycle are predictions, only in
    ``allocated_next`` (the session's ``queue_stats`` allocated). ``allocations``: ``observed_allocations(snapshot)``
    when the caller has it already (:func:`dashboard.state.tick_allocations`).

    * ``borrowed`` = allocated above deserved (over-quota use; 0 for unlimited quotas).
    * ``reclaimable`` = preemptible allocation above fair share: what reclaim may take back for others.
    * ``starved_by`` = how far allocation is below ``min(fair share, requested)`` while a job of the subtree
      waits: demand it is entitled to but does not get.
    """
    stats = queue_stats_of(snapshot, result, resource)
    held, held_np = allocations if allocations is not None else observed_allocations(snapshot)
    qmap = snapshot.queue_map()
    parents = {q.parent for q in snapshot.queues if q.parent}
    running, pending = _job_counts(snapshot)
    rows = []
    for name, depth in queue_order(snapshot):
        q = qmap[name]
        cfg = q.resource(resource)
        s = stats.get(name, {})
        deserved = float(s.get("deserved", cfg.quota))
        fair = float(s.get("fair_share", math.nan))
        alloc = float(held[name][resource])
        alloc_np = float(held_np[name][resource])
        alloc_next = float(s.get("allocated", alloc))
        req = float(s.get("requested", math.nan))
        borrowed = max(0.0, alloc - deserved) if deserved != UNLIMITED and not math.isnan(alloc) else 0.0
        reclaimable = max(0.0, min(alloc - fair, alloc - alloc_np)) if not math.isnan(fair) else 0.0
        # Starved needs a waiting job: requested counts gpu-memory requests at the smallest node's GPU memory,
        # so a queue whose jobs all run can look "below" its request without anything waiting.
        starved = (max(0.0, min(fair, req) - alloc) if pending.get(name, 0) and not (math.isnan(fair) or math.isnan(req))
                   else 0.0)
        ratio = alloc / fair if fair and fair > EPS and not math.isnan(alloc) else (math.inf if alloc > EPS else 0.0)
        if starved > EPS:
            state = "starved"
        elif reclaimable > EPS:
            state = "reclaimable"
        elif borrowed > EPS:
            state = "borrowing"
        elif req > EPS and not math.isnan(req):
            state = "ok"
        else:
            state = "idle"
        label = ("\u2003" * depth + ("\u2514 " if depth else "") + name)
        rows.append({
            "queue": name, "parent": q.parent or "", "depth": depth, "label": label, "leaf": name not in parents,
            "priority": q.priority, "quota": cfg.quota, "limit": cfg.limit, "over_quota_weight": cfg.over_quota_weight,
            "deserved": deserved, "fair_share": fair, "allocated": alloc, "allocated_non_preemptible": alloc_np,
            "requested": req, "ratio": ratio, "borrowed": borrowed, "reclaimable": reclaimable,
            "starved_by": starved, "running_jobs": running.get(name, 0), "pending_jobs": pending.get(name, 0),
            "state": state, "allocated_next": alloc_next,
        })
    return pd.DataFrame(rows, columns=QUEUE_COLUMNS)


# -------------------------------------------------------------------------------------------------- jobs

JOB_COLUMNS = ["job", "queue", "priority", "preemptible", "status", "tasks", "running_tasks", "pending_tasks",
               "gpus", "nodes", "age_s", "reason", "next_cycle"]
"""``status``, the task counts and ``nodes`` are as observed; ``next_cycle`` is the engine's decision for the job
this cycle in words ("KAI would bind 2 pods"), a prediction, empty when it changes nothing."""

WOULD_BIND = "KAI would bind it this cycle"
"""What the Pending list says of a job the engine binds whole in this cycle (a prediction, not the cluster)."""


def next_cycle(job, result: Any) -> str:
    """The engine's decisions for ``job``'s tasks this cycle in words, or ``""`` when it changes nothing:
    "KAI would bind it this cycle", "KAI would bind 2 of 4 waiting pods", "KAI would pipeline it (bind once
    resources are released)", "KAI would evict 1 pod". On a live cluster these are predictions: the views show
    the observed state and this beside it."""
    tasks = getattr(result, "tasks", None) or {}
    if not tasks:
        return ""
    waiting = [t for t in job.tasks if t.status == "pending"]
    bind = sum(1 for t in waiting if getattr(tasks.get(t.name), "status", None) == "binding")
    pipe = sum(1 for t in waiting if getattr(tasks.get(t.name), "status", None) == "pipelined")
    evict = sum(1 for t in job.tasks if t.status in ALLOCATED_STATUSES
                and getattr(tasks.get(t.name), "status", None) in ("releasing", "pending"))
    parts = []
    if bind and bind == len(waiting):
        parts.append(WOULD_BIND)
    elif bind:
        parts.append(f"KAI would bind {bind} of {len(waiting)} waiting pods this cycle")
    if pipe:
        what = "it" if pipe == len(waiting) else f"{pipe} of {len(waiting)} waiting pods"
        parts.append(f"KAI would pipeline {what} this cycle (bind once resources are released)")
    if evict:
        parts.append(f"KAI would evict {evict} pod{'s' if evict > 1 else ''} this cycle")
    return "; ".join(parts)


def job_status(statuses: Iterable[str]) -> str:
    """A job's one-word status from its tasks' statuses (the most telling one wins)."""
    s = set(statuses)
    for status in ("releasing", "binding", "pipelined"):
        if status in s:
            return status
    if "running" in s:
        return "running" if "pending" not in s else "partial"
    if "pending" in s:
        return "pending"
    return next(iter(s), "empty")


def job_gpus(job, node_mem: Mapping[str, float], default_mem: float = 0.0) -> float:
    """GPU devices the job's tasks request (fractions counted on their node, else on ``default_mem``)."""
    return float(sum(t.gpus_on(node_mem.get(t.node, default_mem)) for t in job.tasks if t.is_gpu))


def jobs_frame(snapshot: Snapshot, result: Any = None, queues: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """One row per job (optionally only jobs of ``queues``) with status, GPUs, nodes and the engine's reason."""
    node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    default_mem = min((n.gpu_memory_mib for n in snapshot.nodes if n.gpus and n.gpu_memory_mib), default=0.0)
    wanted = set(queues) if queues is not None else None
    decisions = getattr(result, "jobs", None) or {}
    rows = []
    for job in snapshot.jobs:
        if wanted is not None and job.queue not in wanted:
            continue
        statuses = [t.status for t in job.tasks]
        dec = decisions.get(job.key)
        rows.append({
            "job": job.key, "queue": job.queue, "priority": job.priority, "preemptible": job.is_preemptible,
            "status": job_status(statuses), "tasks": len(job.tasks),
            "running_tasks": sum(s in ALLOCATED_STATUSES for s in statuses),
            "pending_tasks": sum(s == "pending" for s in statuses),
            "gpus": round(job_gpus(job, node_mem, default_mem), 4),
            "nodes": ",".join(sorted({t.node for t in job.tasks if t.node})),
            "age_s": max(0.0, snapshot.time - job.creation_time),
            "reason": (dec.reason or "") if dec is not None else "",
            "next_cycle": next_cycle(job, result),
        })
    return pd.DataFrame(rows, columns=JOB_COLUMNS)


# ----------------------------------------------------------------------------------------------- pending

PENDING_COLUMNS = ["job", "queue", "priority", "pending_tasks", "min_available", "gpus_requested", "wait_s",
                   "reason", "message", "counterfactual", "eviction", "queue_allocated", "queue_fair_share",
                   "queue_limit", "queue_allocated_next", "next_cycle"]
"""Jobs waiting in the observed cluster (``queue_allocated`` observed too); ``next_cycle`` and
``queue_allocated_next`` are the engine's prediction for this cycle (:func:`next_cycle`)."""


def _explanation_fields(exp: Any) -> dict:
    """Reason / message / counterfactual from an explanation object or dict (explain.py's record)."""
    if exp is None:
        return {}
    if isinstance(exp, Mapping):
        get = exp.get
    else:
        def get(key, default=None):
            return getattr(exp, key, default)
    cf = get("counterfactual")
    if cf is not None and not isinstance(cf, str):
        cf = getattr(cf, "text", None) or getattr(cf, "message", None) or str(cf)
    return {k: v for k, v in (("reason", get("reason")), ("message", get("message")), ("counterfactual", cf),
                              ("eviction", get("eviction") or None)) if v is not None}


def pending_frame(snapshot: Snapshot, result: Any = None, explanations: Optional[Mapping[str, Any]] = None,
                  resource: str = "gpu", allocated: Optional[dict] = None) -> pd.DataFrame:
    """Every job with a pending task in ``snapshot`` (the cluster as observed), longest wait first: the engine's
    reason and message, the explainer's counterfactual, the eviction scenarios behind its outcome (victims it
    evicts, or why its searches found none), the queue numbers behind the reason (allocated as observed), and
    ``next_cycle``: what the engine would do with it this cycle (a job it binds stays listed until the cluster
    runs it). ``allocated``: ``observed_allocation(snapshot)`` when the caller has it already."""
    decisions = getattr(result, "jobs", None) or {}
    notes = eviction_notes(result) if isinstance(result, ScheduleResult) else {}
    explanations = explanations or {}
    stats = queue_stats_of(snapshot, result, resource) if snapshot.queues else {}
    held = allocated if allocated is not None else observed_allocation(snapshot)
    node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    default_mem = min((n.gpu_memory_mib for n in snapshot.nodes if n.gpus and n.gpu_memory_mib), default=0.0)
    rows = []
    for job in snapshot.jobs:
        waiting = [t for t in job.tasks if t.status == "pending"]
        if not waiting:
            continue
        dec = decisions.get(job.key)
        fields = {"reason": "", "message": "", "counterfactual": "", "eviction": notes.get(job.key, "")}
        if dec is not None:
            fields.update(reason=dec.reason or "", message=dec.message or "")
        fields.update(_explanation_fields(explanations.get(job.key)))
        predicted = next_cycle(job, result)
        if predicted and not fields["counterfactual"] and dec is not None and dec.status != "pending":
            fields["counterfactual"] = f"nothing: {predicted}"
        qs = stats.get(job.queue, {})
        rows.append({
            "job": job.key, "queue": job.queue, "priority": job.priority, "pending_tasks": len(waiting),
            "min_available": job.min_available,
            "gpus_requested": round(float(sum(t.gpus_on(node_mem.get(t.node, default_mem)) for t in waiting
                                              if t.is_gpu)), 4),
            "wait_s": max(0.0, snapshot.time - job.creation_time), **fields,
            "queue_allocated": held.get(job.queue, {}).get(resource, math.nan),
            "queue_fair_share": qs.get("fair_share", math.nan), "queue_limit": qs.get("limit", math.nan),
            "queue_allocated_next": qs.get("allocated", math.nan), "next_cycle": predicted,
        })
    frame = pd.DataFrame(rows, columns=PENDING_COLUMNS)
    return frame.sort_values(["wait_s", "job"], ascending=[False, True], kind="stable").reset_index(drop=True)


# -------------------------------------------------------------------------------------------------- GPUs

SLICE_COLUMNS = ["node", "pool", "gpu_model", "gpu_index", "task", "job", "queue", "status", "share", "offset",
                 "gpu_memory_mib", "memory_share_mib", "memory_used_mib", "gpu_util", "over_share", "device_source",
                 "dra", "mig_profile", "mig_instance"]
"""``gpu_index = -1`` with ``device_source = "unknown"``: the pod holds a GPU on the node, no evidence says
which (drawn in no cell; listed with the node). ``dra``: the pod's DRA ResourceClaims (empty for device-plugin
GPUs). A pod on MIG instances has one slice per cell (GPU-equivalent) an instance spans; ``mig_profile`` names
the instance the cell belongs to and ``mig_instance`` numbers the pod's instances from 0 (:func:`mig_cell_instances`;
``""`` and -1 for a pod without MIG), so a table can show one row per instance."""
GPU_COLUMNS = ["node", "pool", "gpu_model", "gpu_index", "device", "allocated", "slices", "memory_used_mib",
               "gpu_memory_mib", "gpu_util", "idle_allocated", "over_share", "busy_unallocated", "holder_unknown",
               "evidence"]


def _device_shares(task: Task, node: Node) -> float:
    """The fraction of one device each of the task's devices holds (1 for whole-GPU tasks)."""
    if not task.is_fractional:
        return 1.0
    return task.gpus_on(node.gpu_memory_mib) / max(1, task.gpu_devices)


def _device_count(task: Task) -> int:
    return max(1, task.gpu_devices) if task.is_fractional else max(1, int(math.ceil(task.gpu - EPS)))


def _assign_devices(node: Node, tasks: list[tuple[Any, Task]]) -> list[tuple[Any, Task, list[int], float]]:
    """Device indices for each task on a node: its recorded ``gpu_indices``, else the device another task of
    its ``gpu_group`` records; else none (``[]``: held, device unknown — never a guessed free device)."""
    free = np.ones(max(node.gpus, 0))
    group_dev: dict[str, int] = {}
    out = []
    placed_later = []
    for job, t in tasks:
        share = _device_shares(t, node)
        n = _device_count(t)
        if t.gpu_indices:
            idx = [i for i in t.gpu_indices if 0 <= i < node.gpus][:n] or list(t.gpu_indices[:n])
            for i, g in zip(idx, t.gpu_groups or []):
                group_dev.setdefault(g, i)
            for i in idx:
                if 0 <= i < len(free):
                    free[i] -= share
            out.append((job, t, idx, share))
        else:
            placed_later.append((job, t, share, n))
    for job, t, share, n in placed_later:
        idx = sorted({group_dev[g] for g in t.gpu_groups if g in group_dev})[:n]
        for i in idx:
            free[i] -= share
        out.append((job, t, idx, share))
    return out


def _dcgm_slices(snapshot: Snapshot, dcgm: pd.DataFrame) -> pd.DataFrame:
    """Slices from the per-GPU DCGM frame (:data:`scheduler.metrics.dcgm.FRAME_COLUMNS`): its attribution of
    measured memory and utilisation (0-1 ratios, turned into percent here) to each slice."""
    rows = dcgm[dcgm["task"].notna()]
    nodes = snapshot.node_map()
    util = rows["pod_util"].where(rows["pod_util"].notna(), rows["gpu_util"]).astype(float) * 100.0
    out = pd.DataFrame({
        "node": rows["node"].to_numpy(object),
        "pool": [nodes[n].pool if n in nodes else "" for n in rows["node"]],
        "gpu_model": [(nodes[n].gpu_model or "") if n in nodes else "" for n in rows["node"]],
        "gpu_index": rows["gpu_index"].astype(int).to_numpy(),
        "task": rows["task"].to_numpy(object), "job": rows["job"].to_numpy(object),
        "queue": rows["queue"].to_numpy(object), "status": rows["status"].to_numpy(object),
        "share": rows["share"].astype(float).to_numpy(),
        "gpu_memory_mib": [nodes[n].gpu_memory_mib if n in nodes else math.nan for n in rows["node"]],
        "memory_share_mib": rows["alloc_memory_mib"].astype(float).to_numpy(),
        "memory_used_mib": rows["used_memory_mib"].astype(float).to_numpy(),
        "gpu_util": util.to_numpy(),
        "over_share": rows["over_share"].astype(bool).to_numpy(),
        "device_source": (rows["device_source"].to_numpy(object) if "device_source" in rows
                          else np.where(rows["gpu_index"] >= 0, "snapshot", "unknown")),
    })
    out["offset"] = out.groupby(["node", "gpu_index"], sort=False)["share"].cumsum() - out["share"]
    # object first: with no claim at all the mapped column is float NaN, and pandas 4 refuses "" as its fill value
    out["dra"] = out["task"].map(dra_claims_of(snapshot)).astype(object).fillna("")
    return _with_mig_instances(out, snapshot).reset_index(drop=True)


def dra_claims_of(snapshot: Snapshot) -> dict[str, str]:
    """Task name → its DRA ResourceClaims as one line (``DRA: ns/claim (shared)``), for pods that get their GPUs
    through DRA; others are absent."""
    out = {}
    for _, t in snapshot.iter_tasks():
        if t.is_dra:
            out[t.name] = "DRA: " + ", ".join(c.name + (" (shared)" if c.shared else "") for c in t.dra_claims)
    return out


def is_dcgm_frame(frame: Optional[pd.DataFrame]) -> bool:
    """True for the metrics layer's per-GPU frame (one row per GPU and slice)."""
    return frame is not None and {"task", "share", "alloc_memory_mib", "used_memory_mib", "gpu_util",
                                  "idle_allocated"} <= set(frame.columns)


def gpu_slices_frame(snapshot: Snapshot, gpu_frame: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per (node, GPU, task) slice: who holds which share of each device, and what it really uses.

    With a DCGM frame (``scheduler.metrics``) measured usage and the over-share flag come from it; without one,
    slices come from the snapshot (tasks' ``gpu_indices``, else their GPU group, else none: held, device unknown)
    and usage from each task's own ``usage`` when the snapshot carries it (per device, as KAI's ``gpu-memory``
    and ``gpu-fraction`` are per device: a pod on 2 devices using 2,000 MiB on each shows 2,000 MiB on each). ``over_share`` marks a pod using more
    GPU memory than its share (KAI does not isolate GPU memory: neighbours risk out-of-memory).
    """
    if is_dcgm_frame(gpu_frame) and len(gpu_frame):
        return _dcgm_slices(snapshot, gpu_frame)
    by_node: dict[str, list] = {}
    for job, t in snapshot.iter_tasks():
        if t.status in SLICE_STATUSES and t.node and t.is_gpu:
            by_node.setdefault(t.node, []).append((job, t))
    rows = []
    dra = dra_claims_of(snapshot)
    for node in snapshot.nodes:
        tasks = by_node.get(node.name)
        if not tasks or node.gpus <= 0:
            continue
        offsets = np.zeros(node.gpus)
        for job, t, idx, share in _assign_devices(node, tasks):
            source = "snapshot" if t.gpu_indices else "reservation"
            if not idx:
                idx, source = [-1] * _device_count(t), "unknown"
            for i in idx:
                if i >= node.gpus or (i < 0 and source != "unknown"):
                    continue
                mem_used = t.usage.gpu_memory_mib if t.usage is not None else None   # per device (TaskUsage)
                util = t.usage.gpu_util * 100.0 if t.usage is not None else None
                mem_share = share * node.gpu_memory_mib
                if t.mig:   # its instance's memory and usage, spread over the cells the instance spans
                    mem_share = mig_cell_memory_mib(t.mig)
                    mem_used = None if mem_used is None else mem_used / max(1, mig_gpu_total(t.mig))
                rows.append({
                    "node": node.name, "pool": node.pool, "gpu_model": node.gpu_model or "", "gpu_index": i,
                    "task": t.name, "job": job.key, "queue": job.queue, "status": t.status, "share": share,
                    "offset": offsets[i] if i >= 0 else 0.0, "gpu_memory_mib": node.gpu_memory_mib,
                    "memory_share_mib": mem_share,
                    "memory_used_mib": math.nan if mem_used is None else float(mem_used),
                    "gpu_util": math.nan if util is None else float(util),
                    "over_share": bool(mem_used is not None and (share < 1 - EPS or t.mig)
                                       and mem_used > mem_share + EPS),
                    "device_source": source, "dra": dra.get(t.name, ""),
                })
                if i >= 0:
                    offsets[i] += share
    return _with_mig_instances(pd.DataFrame(rows, columns=SLICE_COLUMNS[:-2]), snapshot)


def mig_cell_instances(instances: dict[str, int], cells: list[int]) -> list[tuple[str, int]]:
    """``(profile, instance number)`` of each of a pod's cells (in the order given): its MIG instances in profile
    order, each taking as many cells as it counts GPU-equivalents (``{"3g.40gb": 1, "1g.10gb": 1}`` on cells
    ``[4, 5, 6, 7]`` → three cells of instance 0, 3g.40gb, then one of instance 1). Cells past the instances'
    total (bad input) belong to the last instance."""
    order = [(p, max(1, mig_gpus(p))) for p, c in instances.items() for _ in range(c)]
    out = []
    k = used = 0
    for _ in cells:
        if order and used >= order[k][1] and k + 1 < len(order):
            k, used = k + 1, 0
        out.append((order[k][0], k) if order else ("", -1))
        used += 1
    return out


def _with_mig_instances(slices: pd.DataFrame, snapshot: Snapshot) -> pd.DataFrame:
    """``slices`` with :data:`SLICE_COLUMNS`' ``mig_profile`` and ``mig_instance`` filled from the tasks' MIG
    instances (the snapshot's); a pod's cells are numbered in device order, devices unknown (-1) last."""
    profile = np.full(len(slices), "", dtype=object)
    instance = np.full(len(slices), -1, dtype=int)
    mig = {t.name: t.mig for _, t in snapshot.iter_tasks() if t.mig}
    if mig and len(slices):
        rows = slices.reset_index(drop=True)
        for (node, task), part in rows[rows["task"].isin(mig)].groupby(["node", "task"], sort=False):
            order = part.assign(unknown=part["gpu_index"] < 0).sort_values(["unknown", "gpu_index"], kind="stable")
            for pos, (p, k) in zip(order.index, mig_cell_instances(mig[task], list(order["gpu_index"]))):
                profile[pos], instance[pos] = p, k
        slices = rows
    return slices.assign(mig_profile=profile, mig_instance=instance)[SLICE_COLUMNS]


def gpu_frame_from_slices(snapshot: Snapshot, slices: pd.DataFrame,
                          gpu_frame: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per physical GPU: allocated share, slices, measured memory and utilisation (percent), flags.

    With a DCGM frame, device-level measurements and its flags are used (``idle_allocated`` judged by the
    metrics layer over a window); without one, sums of the slices' usage, and ``idle_allocated`` = an
    allocated device below :data:`IDLE_UTIL_PCT` now. ``busy_unallocated``: in use with nothing allocated.
    """
    nodes = [n for n in snapshot.nodes if n.gpus > 0]
    if not nodes:
        return pd.DataFrame(columns=GPU_COLUMNS)
    counts = [n.gpus for n in nodes]
    base = pd.DataFrame({
        "node": np.repeat([n.name for n in nodes], counts),
        "pool": np.repeat([n.pool for n in nodes], counts),
        "gpu_model": np.repeat([n.gpu_model or "" for n in nodes], counts),
        "gpu_index": np.concatenate([np.arange(n.gpus) for n in nodes]),
        "gpu_memory_mib": np.repeat([n.gpu_memory_mib for n in nodes], counts),
    })
    # without instance series a MIG node's cell names no device: the DCGM frame's ``device`` fills those below
    base["device"] = device_column(base, {}, {n.name for n in nodes if n.mig})
    held = slices[slices["status"].isin(("running", "binding", "releasing"))] if len(slices) else slices
    if len(held):
        groups = held.groupby(["node", "gpu_index"], sort=False)
        agg = groups.agg(allocated=("share", "sum"), slices=("task", "count"), over_share=("over_share", "any"))
        sums = groups[["memory_used_mib", "gpu_util"]].sum(min_count=1)     # NaN when no slice has a value
        base = base.merge(agg.join(sums).reset_index(), on=["node", "gpu_index"], how="left")
    else:
        for c in ("allocated", "slices", "memory_used_mib", "gpu_util", "over_share"):
            base[c] = np.nan
    base["allocated"] = base["allocated"].fillna(0.0).clip(upper=1.0)
    base["slices"] = base["slices"].fillna(0).astype(int)
    base["over_share"] = base["over_share"].eq(True)   # NaN (no metrics) -> False; no bool fill of a float column
    base["gpu_util"] = base["gpu_util"].astype(float).clip(upper=100.0)
    base["memory_used_mib"] = base["memory_used_mib"].astype(float)
    if is_dcgm_frame(gpu_frame) and len(gpu_frame):
        spec = dict(util=("gpu_util", "first"), mem=("memory_used_mib", "first"), idle=("idle_allocated", "any"),
                    busy=("unallocated_in_use", "any"), has=("has_metrics", "any"))
        if "device" in gpu_frame:
            spec["device"] = ("device", "first")
        dev = gpu_frame.groupby(["node", "gpu_index"], sort=False).agg(**spec)
        if "holder_unknown" in gpu_frame:
            extra = gpu_frame.groupby(["node", "gpu_index"], sort=False).agg(
                unknown=("holder_unknown", "any"), evidence=("evidence", lambda e: "; ".join(x for x in e if x)))
            dev = dev.join(extra)
        key = pd.MultiIndex.from_frame(base[["node", "gpu_index"]])
        dev = dev.reindex(key)
        base["gpu_util"] = (dev["util"].to_numpy(float) * 100.0)
        base["memory_used_mib"] = dev["mem"].to_numpy(float)
        base["idle_allocated"] = dev["idle"].fillna(False).to_numpy(bool) & (base["allocated"] > EPS).to_numpy()
        base["busy_unallocated"] = dev["busy"].fillna(False).to_numpy(bool)
        base["holder_unknown"] = dev["unknown"].fillna(False).to_numpy(bool) if "unknown" in dev else False
        base["evidence"] = dev["evidence"].fillna("").to_numpy(object) if "evidence" in dev else ""
        if "device" in dev:
            named = dev["device"].fillna("").to_numpy(object)
            base["device"] = np.where(named != "", named, base["device"].to_numpy(object))
    else:
        base["idle_allocated"] = (base["allocated"] > EPS) & (base["gpu_util"] < IDLE_UTIL_PCT)
        base["busy_unallocated"] = (base["allocated"] <= EPS) & (base["gpu_util"] >= IDLE_UTIL_PCT)
        base["holder_unknown"] = False
        base["evidence"] = ""
    return base[GPU_COLUMNS]


TOPOLOGY_COLUMNS = ["domain", "nodes", "gpus", "free_gpus"]
GANG_COLUMNS = ["job", "queue", "level", "gpus", "best_domain", "best_free", "fits"]
MIG_COLUMNS = ["node", "profile", "first", "width"]


def topology_levels(snapshot: Snapshot) -> list[str]:
    """Levels of the snapshot's topologies a view can group nodes by (alias, else node label), widest first;
    the per-node level (``kubernetes.io/hostname``) is left out: grouping by it is no grouping."""
    out: list[str] = []
    for topo in snapshot.topologies:
        for lv in topo.levels:
            name = lv.alias or lv.node_label
            if lv.node_label != "kubernetes.io/hostname" and name not in out:
                out.append(name)
    return out


def _level_label(snapshot: Snapshot, level: str) -> Optional[str]:
    for topo in snapshot.topologies:
        for lv in topo.levels:
            if level in (lv.alias, lv.node_label):
                return lv.node_label
    return None


def node_domains(snapshot: Snapshot, level: str) -> dict[str, str]:
    """Node → its domain at a topology level (the node label's value); nodes without the label are absent."""
    label = _level_label(snapshot, level)
    if label is None:
        return {}
    return {n.name: n.labels[label] for n in snapshot.nodes if label in n.labels}


def mig_cells(node: Node) -> int:
    """Grid cells (GPU-equivalents) a node's MIG instances take: the first ones of the node."""
    return sum(mig_gpus(p) * c for p, c in node.mig.items())


def free_whole_gpus(snapshot: Snapshot, gpus: pd.DataFrame) -> dict[str, int]:
    """Node → GPUs nothing holds, not counting MIG instances (a whole-GPU gang cannot use them) nor not-ready or
    cordoned nodes."""
    if not len(gpus):
        return {}
    idle = gpus[gpus["allocated"] <= EPS]
    nodes = snapshot.node_map()
    first = idle["node"].map(lambda n: mig_cells(nodes[n]) if n in nodes else 0)
    counts = idle[idle["gpu_index"] >= first].groupby("node").size()
    return {n: int(c) for n, c in counts.items() if n in nodes and nodes[n].schedulable}


def domain_frame(snapshot: Snapshot, gpus: pd.DataFrame, level: str) -> pd.DataFrame:
    """One row per domain of a topology level: its nodes, GPUs and free whole GPUs (most free first)."""
    domains = node_domains(snapshot, level)
    if not domains:
        return pd.DataFrame(columns=TOPOLOGY_COLUMNS)
    free = free_whole_gpus(snapshot, gpus)
    rows: dict[str, list] = {}
    for n in snapshot.nodes:
        if n.name in domains and n.gpus > 0:
            r = rows.setdefault(domains[n.name], [0, 0, 0])
            r[0] += 1
            r[1] += n.gpus
            r[2] += free.get(n.name, 0)
    df = pd.DataFrame([[d, *v] for d, v in rows.items()], columns=TOPOLOGY_COLUMNS)
    return df.sort_values(["free_gpus", "domain"], ascending=[False, True], kind="stable").reset_index(drop=True)


def gang_domains(snapshot: Snapshot, gpus: pd.DataFrame) -> pd.DataFrame:
    """Pending jobs with a required topology level: the domain of that level with the most free whole GPUs
    now (where the gang would best land), and whether their pending GPUs fit in it."""
    rows = []
    by_level: dict[str, pd.DataFrame] = {}
    for job in snapshot.jobs:
        c = job.topology
        pending = [t for t in job.tasks if t.status == "pending"]
        if c is None or not c.required_level or not pending:
            continue
        need = sum(t.gpu for t in pending)
        level = c.required_level
        if level not in by_level:
            by_level[level] = domain_frame(snapshot, gpus, level)
        frame = by_level[level]
        if len(frame):
            best = frame.iloc[0]
            rows.append([job.key, job.queue, level, need, best["domain"], int(best["free_gpus"]),
                         bool(best["free_gpus"] >= need - EPS)])
        else:
            rows.append([job.key, job.queue, level, need, "", 0, False])
    return pd.DataFrame(rows, columns=GANG_COLUMNS)


def mig_frame(snapshot: Snapshot, nodes: Iterable[str]) -> pd.DataFrame:
    """One row per MIG instance of the given nodes: its profile and the grid cells (GPU-equivalents) it spans.
    Kubernetes reports instance counts per profile, not which GPU holds which, so instances are laid out in the
    node's profile order from cell 0 (the order the synthetic demo places its MIG pods in)."""
    names = set(nodes)
    rows = []
    for n in snapshot.nodes:
        if n.name not in names or not n.mig:
            continue
        cell = 0
        for profile, count in n.mig.items():
            g = max(1, mig_gpus(profile))
            for _ in range(count):
                rows.append([n.name, profile, cell, g])
                cell += g
    return pd.DataFrame(rows, columns=MIG_COLUMNS)


def held_unknown(slices: pd.DataFrame) -> dict[str, str]:
    """``node -> "N GPU(s) held, device unknown: pod, ..."`` for slices no evidence places on a device."""
    if not len(slices) or "device_source" not in slices:
        return {}
    unknown = slices[slices["gpu_index"] < 0]
    out = {}
    for node, part in unknown.groupby("node", sort=False):
        out[node] = f"{len(part)} GPU(s) held, device unknown: " + ", ".join(dict.fromkeys(part["task"]))
    return out


# ---------------------------------------------------------------------------------------------- overview

def overview_numbers(snapshot: Snapshot, result: Any = None, gpus: Optional[pd.DataFrame] = None) -> dict:
    """Cluster totals for the overview: GPUs, allocated, used per DCGM, idle-but-allocated, jobs."""
    ready = [n for n in snapshot.nodes if n.ready]
    total = float(sum(n.gpus for n in ready))
    node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    allocated = float(sum(t.gpus_on(node_mem.get(t.node, 0.0)) for _, t in snapshot.iter_tasks()
                          if t.status in ALLOCATED_STATUSES and t.is_gpu))
    running = pending = 0
    for job in snapshot.jobs:
        st = {t.status for t in job.tasks}
        running += bool(st & ALLOCATED_STATUSES)
        pending += "pending" in st
    used = idle = over = busy_unalloc = math.nan
    if gpus is not None and len(gpus):
        if gpus["gpu_util"].notna().any():
            used = float(gpus["gpu_util"].fillna(0).sum() / 100.0)
            idle = int(gpus["idle_allocated"].sum())
            busy_unalloc = int(gpus["busy_unallocated"].sum())
        over = int(gpus["over_share"].sum())
    evicted = len(getattr(result, "evicted", None) or [])
    started = 0
    if result is not None:
        started = sum(1 for d in (getattr(result, "tasks", None) or {}).values()
                      if d.status in ("binding", "pipelined"))
    return {"nodes": len(snapshot.nodes), "nodes_ready": len(ready), "gpus_total": total,
            "gpus_allocated": allocated, "allocation_pct": 100 * allocated / total if total else 0.0,
            "gpus_used": used, "utilisation_pct": 100 * used / total if total and not math.isnan(used) else math.nan,
            "gpus_idle_allocated": idle, "over_share_gpus": over, "busy_unallocated_gpus": busy_unalloc,
            "running_jobs": running, "pending_jobs": pending, "queues": len(snapshot.queues),
            "tasks_started": started, "tasks_evicted": evicted}


def alerts(queues: pd.DataFrame, pending: pd.DataFrame, overview: Mapping[str, Any],
           long_wait_s: float = 3600.0, limit: int = 8) -> list[dict]:
    """The top alerts, most severe first: starved queues, idle-allocated GPUs, over-share pods, long waits.

    Each alert is ``{severity, kind, subject, text}``; severity 2 = act now, 1 = look soon.
    """
    out: list[dict] = []
    if len(queues):
        starved = queues[(queues["starved_by"] > EPS) & queues["leaf"]].sort_values("starved_by", ascending=False)
        for r in starved.itertuples():
            out.append({"severity": 2, "kind": "starved", "subject": r.queue,
                        "text": f"queue {r.queue} gets {r.allocated:g} GPU of a fair share of {r.fair_share:g} "
                                f"with {r.requested:g} requested ({r.starved_by:g} short)"})
    idle = overview.get("gpus_idle_allocated")
    if isinstance(idle, (int, float)) and not math.isnan(idle) and idle > 0:
        out.append({"severity": 1, "kind": "idle", "subject": "gpus",
                    "text": f"{int(idle)} GPU(s) allocated but idle (<{IDLE_UTIL_PCT:g}% utilisation)"})
    over = overview.get("over_share_gpus")
    if isinstance(over, (int, float)) and not math.isnan(over) and over > 0:
        out.append({"severity": 2, "kind": "over-share", "subject": "gpus",
                    "text": f"{int(over)} shared GPU(s) hold a pod using more memory than its share (OOM risk)"})
    if len(pending):
        long = pending[pending["wait_s"] > long_wait_s]
        for r in long.head(3).itertuples():
            out.append({"severity": 1, "kind": "long-wait", "subject": r.job,
                        "text": f"job {r.job} ({r.queue}) waiting {format_duration(r.wait_s)}: "
                                f"{r.reason or 'no reason yet'}"})
    out.sort(key=lambda a: -a["severity"])
    return out[:limit]


def format_duration(seconds: float) -> str:
    """``95`` → ``1m35s``; ``7200`` → ``2h00m``; ``NaN`` → ``–``."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "–"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
