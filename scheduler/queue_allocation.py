"""Queue allocation as KAI accounts it: what the cluster holds now, not what a session would place.

KAI's queue ``allocated`` (kai-semantics.md §a, Queue status) is the resources of the pods in an allocated
status (``running``, ``binding``: :data:`~scheduler.model.ALLOCATED_STATUSES`) of the queue and its
descendants. :func:`observed_allocation` computes it from an observed snapshot (the source's, before any
session); a session's ``queue_stats`` allocated is the hypothetical state after its decisions.
"""

from __future__ import annotations

from .model import ALLOCATED_STATUSES, RESOURCES, Snapshot


def observed_allocation(snapshot: Snapshot, non_preemptible_only: bool = False) -> dict[str, dict[str, float]]:
    """``{queue: {"gpu": devices, "cpu": millicores, "memory": bytes}}`` held now, rolled up to ancestors.

    GPUs count fractions as KAI does (``Task.gpus_on``: a GPU-memory request as a fraction of its node's GPU
    memory). Every queue of the snapshot is present (zeros when it holds nothing); a job whose queue is not
    in the snapshot is not counted. ``non_preemptible_only``: only non-preemptible jobs (KAI's
    ``AllocatedNonPreemptible``, what reclaim cannot take back).
    """
    held, held_np = observed_allocations(snapshot)
    return held_np if non_preemptible_only else held


def observed_allocations(snapshot: Snapshot) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """:func:`observed_allocation` of all jobs and of the non-preemptible ones, in one pass over the jobs."""
    parent = {q.name: q.parent for q in snapshot.queues}
    out = {name: dict.fromkeys(RESOURCES, 0.0) for name in parent}
    out_np = {name: dict.fromkeys(RESOURCES, 0.0) for name in parent}
    node_mem = {n.name: n.gpu_memory_mib for n in snapshot.nodes}
    for job in snapshot.jobs:
        if job.queue not in out:
            continue
        gpu = cpu = mem = 0.0
        for t in job.tasks:
            if t.status in ALLOCATED_STATUSES:
                gpu += t.gpus_on(node_mem.get(t.node, 0.0)) if t.is_gpu else 0.0
                cpu += t.cpu_millis
                mem += t.memory_bytes
        if not (gpu or cpu or mem):
            continue
        totals = (out,) if job.is_preemptible else (out, out_np)
        seen: set[str] = set()
        q = job.queue
        while q is not None and q in out and q not in seen:   # a cycle is the validator's to report
            seen.add(q)
            for table in totals:
                acc = table[q]
                acc["gpu"] += gpu
                acc["cpu"] += cpu
                acc["memory"] += mem
            q = parent.get(q)
    return out, out_np
