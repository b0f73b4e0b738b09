"""Queue accounting of a session: deserved, limit, fair share (fixed for the session) and Allocated /
AllocatedNonPreemptible, which change within the session as statements allocate, pipeline and evict
(KAI ``proportion`` plugin event handlers, kai-semantics §c.2b).

Resources are columns ``gpu, cpu, memory`` (in that order, matching :data:`scheduler.model.RESOURCES`).
``-1`` means unlimited for deserved and limit, as in the Queue CRD.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..model import RESOURCES, UNLIMITED, Snapshot
from .nodes import write_rows

R_GPU, R_CPU, R_MEM = 0, 1, 2


class QueueState:
    """Per-queue arrays ``[queue, resource]`` plus the parent chain of each queue."""

    def __init__(self, snapshot: Snapshot, shares: Mapping[str, Mapping[str, object]], total: np.ndarray):
        queues = snapshot.queues
        self.names: list[str] = [q.name for q in queues]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        nq = len(queues)
        self.parent = np.array([self.index.get(q.parent, -1) if q.parent else -1 for q in queues], dtype=int)
        self.priority = np.array([q.priority for q in queues], dtype=float)
        self.creation = np.array([q.creation_time for q in queues], dtype=float)
        children = {i: [] for i in range(nq)}
        for i, p in enumerate(self.parent):
            if p >= 0:
                children[int(p)].append(i)
        self.children: dict[int, list[int]] = children
        self.is_leaf = np.array([not children[i] for i in range(nq)], dtype=bool)
        self.chains: list[list[int]] = [self._chain(i) for i in range(nq)]
        self.total = total  # cluster total per resource (for DRF when allocatable is unlimited)

        def field(name: str) -> np.ndarray:
            out = np.zeros((nq, 3))
            for i, q in enumerate(self.names):
                per = shares.get(q)
                if per is None:
                    continue
                for r, res in enumerate(RESOURCES):
                    out[i, r] = float(getattr(per[res], name))
            return out

        self.deserved = field("deserved")
        self.limit = field("limit")
        self.fair_share = field("fair_share")
        self._allocated = field("allocated")
        self._allocated_np = field("allocated_non_preemptible")
        # Allocated rows in plain Python, changed by add(); the arrays are written from them when next read (numpy's
        # per-call cost on a row of 3 is several times the arithmetic, which is the same float64 arithmetic).
        self.allocated_rows: list[list[float]] = self._allocated.tolist()
        self.allocated_np_rows: list[list[float]] = self._allocated_np.tolist()
        self._stale: set[int] = set()      # queues whose row of the array lags allocated_rows
        self._stale_np: set[int] = set()   # ... of allocated_np
        self.requested = field("requested")
        # KAI GetAllocatableShare: limit if deserved is -1, else max(deserved, fair share) capped by limit.
        alloc = np.maximum(self.deserved, self.fair_share)
        alloc = np.where(self.limit != UNLIMITED, np.minimum(self.limit, alloc), alloc)
        self.allocatable = np.where(self.deserved == UNLIMITED, self.limit, alloc)
        self.version = [0] * nq  # bumped when a queue's Allocated changes (cached ordering keys)

    @property
    def allocated(self) -> np.ndarray:
        """Allocated per queue and resource (KAI ``Allocated``), ``[queue, resource]``. Do not modify: :meth:`add`."""
        if self._stale:
            write_rows(self._allocated, self.allocated_rows, self._stale)
        return self._allocated

    @property
    def allocated_np(self) -> np.ndarray:
        """Allocated by non-preemptible jobs (KAI ``AllocatedNonPreemptible``). Do not modify: :meth:`add`."""
        if self._stale_np:
            write_rows(self._allocated_np, self.allocated_np_rows, self._stale_np)
        return self._allocated_np

    def _chain(self, i: int) -> list[int]:
        out, seen = [], set()
        while i >= 0 and i not in seen:
            out.append(i)
            seen.add(i)
            i = int(self.parent[i])
        return out

    def add(self, q: int, amount, non_preemptible: bool, sign: float = 1.0) -> None:
        """Add (``sign=-1``: subtract) ``amount`` (GPU, CPU, memory) to the queue and every ancestor."""
        version = self.version
        rows, np_rows, stale = self.allocated_rows, self.allocated_np_rows, self._stale
        a0, a1, a2 = amount.tolist() if isinstance(amount, np.ndarray) else amount
        if sign != 1.0:   # exact for -1: x - a is x + (-1 × a), bit for bit
            a0, a1, a2 = sign * a0, sign * a1, sign * a2
        for a in self.chains[q]:
            r = rows[a]
            rows[a] = [r[0] + a0, r[1] + a1, r[2] + a2]
            version[a] += 1
            stale.add(a)
            if non_preemptible:
                r = np_rows[a]
                np_rows[a] = [r[0] + a0, r[1] + a1, r[2] + a2]
                self._stale_np.add(a)

    # ------------------------------------------------------------------ capacity checks (§c.2)

    def over_limit(self, q: int, requested: np.ndarray) -> Optional[tuple[int, int]]:
        """First ``(queue, resource)`` up the chain where ``limit < allocated + requested`` (KAI
        ``resultsOverLimit``; resources checked in KAI's order CPU, memory, GPU; only requested ones)."""
        rows, limit = self.allocated_rows, self.limit
        for a in self.chains[q]:
            for r in (R_CPU, R_MEM, R_GPU):
                lim = limit[a, r]
                if lim == UNLIMITED or requested[r] == 0:
                    continue
                if lim < rows[a][r] + requested[r]:
                    return a, r
        return None

    def non_preemptible_over_quota(self, q: int, requested: np.ndarray) -> Optional[tuple[int, int]]:
        """First ``(queue, resource)`` where ``deserved < allocated_non_preemptible + requested`` (KAI
        ``resultsWithNonPreemptibleOverQuota``; deserved -1 is skipped)."""
        rows, deserved = self.allocated_np_rows, self.deserved
        for a in self.chains[q]:
            for r in (R_CPU, R_MEM, R_GPU):
                d = deserved[a, r]
                if d == UNLIMITED or requested[r] == 0:
                    continue
                if d < rows[a][r] + requested[r]:
                    return a, r
        return None

    def stats(self, i: int) -> dict[str, dict[str, float]]:
        """``{resource: {deserved, limit, fair_share, allocatable, allocated, allocated_non_preemptible,
        requested}}`` for one queue, as the session ends."""
        out = {}
        for r, res in enumerate(RESOURCES):
            out[res] = {"deserved": float(self.deserved[i, r]), "limit": float(self.limit[i, r]),
                        "fair_share": float(self.fair_share[i, r]), "allocatable": float(self.allocatable[i, r]),
                        "allocated": float(self.allocated[i, r]),
                        "allocated_non_preemptible": float(self.allocated_np[i, r]),
                        "requested": float(self.requested[i, r])}
        return out

