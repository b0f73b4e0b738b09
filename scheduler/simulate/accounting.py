"""Per-queue resource matrices from a snapshot: allocated and requested, with parents holding subtree sums.

Rows follow the snapshot's queue order, columns :data:`~scheduler.model.RESOURCES`. The per-job arithmetic is
:func:`scheduler.fairshare.queue_demand` (KAI's accounting: running/binding tasks are allocated; pending tasks
add to the request, gpu-memory requests converted with the smallest node GPU memory), so the simulator's
numbers are the ones fair share is computed from.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..fairshare import queue_demand
from ..model import ALLOCATED_STATUSES, RESOURCES, Job, Snapshot


class QueueIndex:
    """Queue names, their row numbers, and the ``queues × queues`` matrix that sums subtrees."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.names = [q.name for q in snapshot.queues]
        self.row = {name: i for i, name in enumerate(self.names)}
        parent_of = {q.name: q.parent for q in snapshot.queues}
        n = len(self.names)
        self.subtree = np.zeros((n, n))          # subtree[i, j] = 1 when queue i is j or an ancestor of j
        for j, name in enumerate(self.names):
            seen: set[str] = set()
            cur: Optional[str] = name
            while cur is not None and cur in self.row and cur not in seen:
                seen.add(cur)
                self.subtree[self.row[cur], j] = 1.0
                cur = parent_of.get(cur)
        parents = {q.parent for q in snapshot.queues if q.parent}
        self.is_leaf = np.array([name not in parents for name in self.names])

    def __len__(self) -> int:
        return len(self.names)

    def demand(self, snapshot: Snapshot) -> tuple[np.ndarray, np.ndarray]:
        """``(allocated, requested)``, each ``queues × 3``, parents holding their subtree sums.

        Jobs whose queue is not in the snapshot are ignored (the engine reports them as QueueDoesNotExist).
        """
        n = len(self.names)
        own_alloc = np.zeros((n, len(RESOURCES)))
        own_req = np.zeros((n, len(RESOURCES)))
        for queue, acc in queue_demand(snapshot).items():
            i = self.row.get(queue)
            if i is None:
                continue
            for j, r in enumerate(RESOURCES):
                own_alloc[i, j] = acc[r][0]
                own_req[i, j] = acc[r][2]
        return self.subtree @ own_alloc, self.subtree @ own_req

    def job_allocation(self, job: Job, node_gpu_memory_mib: dict[str, float]) -> np.ndarray:
        """What one job holds (``queues × 3``, added to its queue and every ancestor)."""
        out = np.zeros((len(self.names), len(RESOURCES)))
        i = self.row.get(job.queue)
        if i is None:
            return out
        own = np.zeros(len(RESOURCES))
        for t in job.tasks:
            if t.status in ALLOCATED_STATUSES:
                if t.is_gpu:
                    own[0] += t.gpus_on(node_gpu_memory_mib.get(t.node, 0.0))
                own[1] += t.cpu_millis
                own[2] += t.memory_bytes
        out += self.subtree[:, [i]] * own[None, :]
        return out


def node_capacity(snapshot: Snapshot) -> np.ndarray:
    """Cluster capacity for usage normalisation: the sum of node capacity over all nodes (gpu, cpu, memory).

    KAI's default capacity metric is ``sum(kube_node_status_capacity{resource=...})`` over every node, Ready
    or not and without subtracting other schedulers' pods (``usagedb/prometheus/prometheus.go``).
    """
    return np.array([sum(n.gpus for n in snapshot.nodes),
                     sum(n.cpu_millis for n in snapshot.nodes),
                     sum(n.memory_bytes for n in snapshot.nodes)], dtype=float)
