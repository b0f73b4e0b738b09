"""Columnar node state of a session: one row per node, one column per resource or GPU slot.

Accounting follows KAI's ``NodeInfo`` (``pkg/scheduler/api/node_info/node_info.go``,
``gpu_sharing_node_info.go``), paraphrased:

- Per node and resource (whole GPUs, CPU millicores, memory bytes, pods) three vectors: ``idle``,
  ``releasing`` and ``used``. Adding a task: ``used += req``; a running/binding task takes ``idle``, a
  releasing one moves ``req`` from idle to releasing, a pipelined one consumes ``releasing`` only.
  (KAI lets ``releasing`` go negative when a pipelined task needs more than is releasing; so do we.)
- Shared GPUs (fractions, gpu-memory requests) are tracked per GPU group in MiB: ``sh_used`` (every task
  on the group), ``sh_alloc`` (all but pipelined), ``sh_rel`` (releasing minus pipelined). Opening a group
  removes one whole GPU from idle; a group whose tasks are all releasing counts as one releasing whole GPU.

A group lives in a GPU *slot* (its device index); whole-GPU tasks also occupy slots so that
``gpu_index`` can be reported. Slots are bookkeeping for reporting and for choosing the device of a new
group; fit decisions use KAI's counters above.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import EngineError
from ..model import Snapshot, mig_gpus

GPU, CPU, MEM, PODS = 0, 1, 2, 3
"""Columns of the per-node resource arrays."""

# Slot states for whole-GPU occupancy (reporting and device choice only).
SLOT_FREE, SLOT_ACTIVE, SLOT_RELEASING, SLOT_PIPELINED, SLOT_EXTERNAL = 0, 1, 2, 3, 9
ANONYMOUS = -2
"""``slot_owner`` of a slot held by a whole-GPU task whose device index the snapshot did not give."""


class NodeState:
    """Idle / releasing / used resources of every node, plus per-GPU shared-memory bookkeeping."""

    def __init__(self, snapshot: Snapshot):
        nodes = sorted(snapshot.nodes, key=lambda n: n.name)  # index order = name order (KAI's tie-break)
        self.names: list[str] = [n.name for n in nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.n = n = len(nodes)
        self.g = g = max([nd.gpus for nd in nodes], default=0) or 1
        self.ready = np.array([nd.schedulable for nd in nodes], dtype=bool)  # KAI's node condition check
        self.all_ready = bool(self.ready.all())   # fixed for the session, as ready is
        self.gpus = np.array([nd.gpus for nd in nodes], dtype=float)
        self.gpu_mem = np.array([nd.gpu_memory_mib for nd in nodes], dtype=float)
        self.allocatable = np.zeros((n, 4))
        self.allocatable[:, GPU] = self.gpus
        self.allocatable[:, CPU] = [nd.cpu_millis for nd in nodes]
        self.allocatable[:, MEM] = [nd.memory_bytes for nd in nodes]
        self.allocatable[:, PODS] = [nd.pods for nd in nodes]
        external = np.array([[nd.external.gpus, nd.external.cpu_millis, nd.external.memory_bytes,
                              nd.external.pods] for nd in nodes], dtype=float).reshape(n, 4)
        # Other schedulers' pods are subtracted from what KAI can use (§b.1).
        self._idle = self.allocatable - external
        self._rel = np.zeros((n, 4))
        self._used = external.copy()
        self.slot_exists = np.arange(g)[None, :] < self.gpus[:, None]
        self.slot_exists_rows: list[list[bool]] = self.slot_exists.tolist()
        self.sh_used = np.zeros((n, g))
        self.sh_alloc = np.zeros((n, g))
        self.sh_rel = np.zeros((n, g))
        self.sh_present = np.zeros((n, g), dtype=bool)  # group is in KAI's AllocatedSharedGPUsMemory map
        self.sh_marked = np.zeros((n, g), dtype=bool)   # group counted as one releasing whole GPU
        self.slot_group: list[dict[int, str]] = [dict() for _ in range(n)]
        self.group_slot: list[dict[str, int]] = [dict() for _ in range(n)]
        self._slot_whole = np.zeros((n, g), dtype=np.int8)
        self._slot_owner = np.full((n, g), -1, dtype=np.int64)
        ext_slots = np.ceil(external[:, GPU]).astype(int)
        for i in np.nonzero(ext_slots)[0]:  # external GPUs take the highest indices
            k = min(ext_slots[i], int(self.gpus[i]))
            top = int(self.gpus[i])
            self._slot_whole[i, top - k:top] = SLOT_EXTERNAL
        # per array, the nodes whose row (column) lags the plain-Python rows (see the properties below)
        self._stale_idle: set[int] = set()
        self._stale_rel: set[int] = set()
        self._stale_used: set[int] = set()
        self._stale_free: set[int] = set()
        self._stale_freeT: set[int] = set()
        self._stale_idleT: set[int] = set()
        self._stale_slots: set[int] = set()
        self.refresh()
        # MIG instances per profile (KAI: scalar resources nvidia.com/mig-<profile>); their GPU-equivalents are
        # part of the GPU column, so whole-GPU and shared requests use only the GPUs left beside them.
        self.mig_profiles: list[str] = sorted({p for nd in nodes for p in nd.mig})
        self.mig_col = {p: k for k, p in enumerate(self.mig_profiles)}
        pcount = len(self.mig_profiles)
        self.mig_g = np.array([mig_gpus(p) for p in self.mig_profiles], dtype=float)
        self.mig_idle = np.array([[nd.mig.get(p, 0) for p in self.mig_profiles] for nd in nodes],
                                 dtype=float).reshape(n, pcount)
        self.mig_rel = np.zeros((n, pcount))
        self.mig_eq_free = np.zeros(n)  # GPU-equivalents of idle + releasing MIG instances
        self.mig_eq_idle = np.zeros(n)
        self.refresh_mig()
        # KAI: allocatable GPUs are nvidia.com/gpu only (MIG instances are scalar resources); a MIG node (label
        # node-role.kubernetes.io/mig-enabled, or any instance) with nvidia.com/mig.strategy=mixed takes MIG
        # requests only among GPU requests, one with strategy single whole-GPU requests only.
        self.whole_gpus = self.gpus - self.mig_eq_idle
        mig_node = np.array([nd.labels.get("node-role.kubernetes.io/mig-enabled", "").lower() == "true" or bool(nd.mig)
                             for nd in nodes], dtype=bool)
        strategy = [nd.labels.get("nvidia.com/mig.strategy") for nd in nodes]
        self.mig_mixed = mig_node & np.array([s == "mixed" for s in strategy], dtype=bool)
        self.mig_single = mig_node & np.array([s == "single" for s in strategy], dtype=bool)
        self.mig_strategy = bool(self.mig_mixed.any() or self.mig_single.any())
        self.cpu_only = self.gpus == 0
        self.version = 0  # bumped on every change; lets callers cache per-state results
        self.change_log: list[int] = []  # node index of every change, in order (for incremental caches)

    # ------------------------------------------------------------------ derived quantities

    def non_allocated(self, column: int) -> np.ndarray:
        """KAI ``NonAllocatedResource``: idle + releasing of one resource column, all nodes."""
        return self.free[:, column]

    # The per-node resource vectors live twice: as numpy arrays (``idle``, ``rel``, ``used`` and the derived
    # ``free`` = idle + releasing, ``freeT`` / ``idleT`` column-major copies for fast per-resource scans over all
    # nodes) and as plain-Python rows (``idle_rows`` ...), which :meth:`add` / :meth:`remove` change: numpy's
    # per-call cost on a row of 4 is several times the arithmetic. The arrays of a changed node are written
    # from its rows when an array is next read (the properties below), so a node changed many times between two
    # reads (a scenario's evictions, a rollback) is written once. Both hold the same float64 values: Python's
    # float arithmetic is numpy's, operation for operation.

    @property
    def idle(self) -> np.ndarray:
        """Idle resources, (nodes, 4). Bulk edits in place must be followed by :meth:`refresh`."""
        if self._stale_idle:
            write_rows(self._idle, self.idle_rows, self._stale_idle)
        return self._idle

    @property
    def rel(self) -> np.ndarray:
        """Releasing resources, (nodes, 4) (negative where pipelined tasks take more than is releasing)."""
        if self._stale_rel:
            write_rows(self._rel, self.rel_rows, self._stale_rel)
        return self._rel

    @property
    def used(self) -> np.ndarray:
        """Used resources, (nodes, 4)."""
        if self._stale_used:
            write_rows(self._used, self.used_rows, self._stale_used)
        return self._used

    @property
    def free(self) -> np.ndarray:
        """Idle + releasing (KAI ``NonAllocatedResource``), (nodes, 4). Do not modify."""
        if self._stale_free:
            write_rows(self._free, self.free_rows, self._stale_free)
        return self._free

    @property
    def freeT(self) -> np.ndarray:
        """``free`` column-major, (4, nodes). Do not modify."""
        if self._stale_freeT:
            _write_columns(self._freeT, self.free_rows, self._stale_freeT)
        return self._freeT

    @property
    def idleT(self) -> np.ndarray:
        """``idle`` column-major, (4, nodes). Do not modify."""
        if self._stale_idleT:
            _write_columns(self._idleT, self.idle_rows, self._stale_idleT)
        return self._idleT

    @property
    def slot_whole(self) -> np.ndarray:
        """Whole-GPU occupancy per device (``SLOT_*``), (nodes, devices). Bulk edits: then :meth:`refresh`."""
        if self._stale_slots:
            self._write_slots()
        return self._slot_whole

    @property
    def slot_owner(self) -> np.ndarray:
        """Task holding each device whole (-1 none, ``ANONYMOUS``), (nodes, devices). Bulk edits: :meth:`refresh`."""
        if self._stale_slots:
            self._write_slots()
        return self._slot_owner

    def _write_slots(self) -> None:
        whole, owner, wrows, orows = self._slot_whole, self._slot_owner, self.slot_whole_rows, self.slot_owner_rows
        for n in self._stale_slots:
            whole[n] = wrows[n]
            owner[n] = orows[n]
        self._stale_slots.clear()

    def refresh(self) -> None:
        """Recompute derived arrays and the plain-Python rows after bulk edits of the ``idle`` / ``rel`` / ``used``
        arrays."""
        if (self._stale_idle or self._stale_rel or self._stale_used or self._stale_free or self._stale_freeT
                or self._stale_idleT or self._stale_slots):
            raise EngineError("NodeState.refresh: the arrays lag node changes not yet written; "
                              "read them (idle, rel, used) before a bulk edit")
        self._free = self._idle + self._rel
        self._freeT = np.ascontiguousarray(self._free.T)  # column-major copies: fast per-resource scans
        self._idleT = np.ascontiguousarray(self._idle.T)  # KAI NonAllocated (idle + releasing), kept in step
        self.idle_rows: list[list[float]] = self._idle.tolist()
        self.rel_rows: list[list[float]] = self._rel.tolist()
        self.used_rows: list[list[float]] = self._used.tolist()
        self.free_rows: list[list[float]] = self._free.tolist()
        self.slot_whole_rows: list[list[int]] = self._slot_whole.tolist()
        self.slot_owner_rows: list[list[int]] = self._slot_owner.tolist()

    def refresh_mig(self) -> None:
        """Recompute the MIG GPU-equivalents after bulk edits of ``mig_idle`` / ``mig_rel``."""
        if self.mig_profiles:
            self.mig_eq_idle = self.mig_idle @ self.mig_g
            self.mig_eq_free = (self.mig_idle + self.mig_rel) @ self.mig_g

    def add_mig(self, n: int, inst: np.ndarray, status: str, sign: float) -> None:
        """Account (``sign`` +1) or release (-1) MIG instances ``inst`` (one count per profile) of a task on ``n``,
        as :meth:`add` does for the other resources."""
        if status == "releasing":
            self.mig_rel[n] += sign * inst
            self.mig_idle[n] -= sign * inst
        elif status == "pipelined":
            self.mig_rel[n] -= sign * inst
        else:
            self.mig_idle[n] -= sign * inst
        self.mig_eq_idle[n] = self.mig_idle[n] @ self.mig_g
        self.mig_eq_free[n] = (self.mig_idle[n] + self.mig_rel[n]) @ self.mig_g

    def used_gpu_count(self, n: int) -> int:
        """KAI ``getNumberOfUsedGPUs``: whole GPUs used + shared groups in use."""
        return int(self.used_rows[n][GPU]) + int(np.count_nonzero(self.sh_used[n] > 0))

    def task_mem_on_nodes(self, portion: float, gpu_memory_mib: Optional[float]) -> np.ndarray:
        """MiB a shared-GPU request takes on one device of every node (KAI ``GetResourceGpuMemory``)."""
        if gpu_memory_mib is not None:
            return np.full(self.n, float(gpu_memory_mib))
        return np.floor(portion * self.gpu_mem)  # KAI GetResourceGpuMemory: int64(portion × memory)

    def group_fits(self, task_mem: np.ndarray) -> np.ndarray:
        """``(nodes, slots)`` mask of existing shared GPUs a request of ``task_mem[node]`` MiB fits on,
        counting releasing memory (KAI ``IsTaskFitOnGpuGroup``)."""
        room = self.gpu_mem[:, None] - self.sh_alloc + self.sh_rel - task_mem[:, None]
        return (self.sh_used != 0) & (room >= 0) & (self.sh_alloc != self.sh_rel)

    def shared_gpu_in_use(self, rows):
        """Whether the node(s) hold a shared GPU that a 0-MiB request fits (KAI ``IsTaskFitOnGpuGroup`` for a
        CPU-only pod: a group in use whose memory is not all releasing and not over-committed)."""
        room = self.gpu_mem[rows, None] - self.sh_alloc[rows] + self.sh_rel[rows]
        ok = (self.sh_used[rows] != 0) & (room >= 0) & (self.sh_alloc[rows] != self.sh_rel[rows])
        return ok.any(axis=-1)

    def group_fits_idle(self, n: int, slot: int, task_mem: float) -> bool:
        """KAI ``EnoughIdleResourcesOnGpu``: the request fits the group without releasing memory.

        A slot whose non-pipelined memory is all releasing and which holds pipelined memory is, in KAI, a new
        group opened by pipelining onto a fully releasing shared GPU (``findGpuForSharingOnNode`` gives it a new
        id; the releasing group stops being a candidate, ``isAllGpuReleased``). That group is not in
        ``AllocatedSharedGPUsMemory``, so nothing placed on it fits idle: it is pipelined too."""
        if not self.sh_present[n, slot] or self.opened_by_pipelining(n, slot):
            return False
        return self.gpu_mem[n] - self.sh_alloc[n, slot] - task_mem >= 0

    def opened_by_pipelining(self, n: int, slot: int) -> bool:
        """Whether the slot's group is, in KAI, one opened by pipelining onto a fully releasing shared GPU: it
        holds pipelined memory and was counted as a releasing whole GPU before (see :meth:`group_fits_idle`).
        kaidash keeps both groups in the slot; KAI's counters are the releasing group's and the new group's."""
        return bool(self.sh_marked[n, slot] and self.sh_used[n, slot] - self.sh_alloc[n, slot] > 0)

    def group_used(self, n: int, slot: int) -> float:
        """KAI's ``UsedSharedGPUsMemory`` of the group a request joins in the slot: for a group opened by
        pipelining onto a releasing shared GPU only its pipelined memory (the releasing group is another id)."""
        if self.opened_by_pipelining(n, slot):
            return float(self.sh_used[n, slot] - self.sh_alloc[n, slot])
        return float(self.sh_used[n, slot])

    # ------------------------------------------------------------------ add / remove one task

    def add(self, n: int, vec: np.ndarray, status: str, shared: Optional[list[tuple[int, float]]] = None,
            whole_slots: Optional[list[int]] = None, owner: int = -1, derive: bool = True) -> None:
        """Account a task on node ``n``: ``vec`` = (whole GPUs, cpu, memory, pods) it takes,
        ``shared`` = ``[(slot, MiB)]`` for a shared-GPU task, ``whole_slots`` = its device indices.
        ``derive=False`` leaves ``free`` / ``freeT`` / ``idleT`` of the node stale, for a caller that changes the
        node again at once and calls :meth:`derive` (or a last ``add`` / ``remove`` with it) after."""
        self.version += 1
        self.change_log.append(n)
        v0, v1, v2, v3 = vec
        u = self.used_rows[n]
        self.used_rows[n] = [u[0] + v0, u[1] + v1, u[2] + v2, u[3] + v3]
        if status == "releasing":
            r = self.rel_rows[n]
            self.rel_rows[n] = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
            r = self.idle_rows[n]
            self.idle_rows[n] = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
        elif status == "pipelined":
            r = self.rel_rows[n]
            self.rel_rows[n] = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
        else:
            r = self.idle_rows[n]
            self.idle_rows[n] = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
        self._stale_used.add(n)
        if whole_slots:
            self._take_slots(n, whole_slots, status, owner)
        for slot, mem in shared or ():
            self._add_shared(n, slot, mem, status)
        if derive:
            self.derive(n)

    def remove(self, n: int, vec: np.ndarray, status: str, shared: Optional[list[tuple[int, float]]] = None,
               whole_slots: Optional[list[int]] = None, owner: int = -1, derive: bool = True) -> None:
        """Inverse of :meth:`add` for a task currently accounted with ``status`` (``derive``: as there)."""
        self.version += 1
        self.change_log.append(n)
        v0, v1, v2, v3 = vec
        u = self.used_rows[n]
        self.used_rows[n] = [u[0] - v0, u[1] - v1, u[2] - v2, u[3] - v3]
        if status == "releasing":
            r = self.rel_rows[n]
            self.rel_rows[n] = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
            r = self.idle_rows[n]
            self.idle_rows[n] = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
        elif status == "pipelined":
            r = self.rel_rows[n]
            self.rel_rows[n] = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
        else:
            r = self.idle_rows[n]
            self.idle_rows[n] = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
        self._stale_used.add(n)
        if whole_slots:
            self._give_slots(n, whole_slots, status, owner)
        for slot, mem in shared or ():
            self._remove_shared(n, slot, mem, status)
        if derive:
            self.derive(n)

    def restatus(self, n: int, vec, old: str, new: str, old_slots: Optional[list[int]] = None,
                 new_slots: Optional[list[int]] = None, owner: int = -1) -> None:
        """:meth:`remove` of a task accounted with status ``old`` (devices ``old_slots``) on node ``n``, then
        :meth:`add` with ``new`` (devices ``new_slots``) on the same node, no shared GPU (an eviction where the task
        is, and its undoing): the same arithmetic, element for element, in one call."""
        self.version += 2
        self.change_log += (n, n)
        v0, v1, v2, v3 = vec
        u = self.used_rows[n]
        self.used_rows[n] = [u[0] - v0 + v0, u[1] - v1 + v1, u[2] - v2 + v2, u[3] - v3 + v3]
        i, r = self.idle_rows[n], self.rel_rows[n]
        if old == "releasing":
            r = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
            i = [i[0] + v0, i[1] + v1, i[2] + v2, i[3] + v3]
        elif old == "pipelined":
            r = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
        else:
            i = [i[0] + v0, i[1] + v1, i[2] + v2, i[3] + v3]
        if new == "releasing":
            r = [r[0] + v0, r[1] + v1, r[2] + v2, r[3] + v3]
            i = [i[0] - v0, i[1] - v1, i[2] - v2, i[3] - v3]
        elif new == "pipelined":
            r = [r[0] - v0, r[1] - v1, r[2] - v2, r[3] - v3]
        else:
            i = [i[0] - v0, i[1] - v1, i[2] - v2, i[3] - v3]
        self.idle_rows[n], self.rel_rows[n] = i, r
        self.free_rows[n] = [i[0] + r[0], i[1] + r[1], i[2] + r[2], i[3] + r[3]]
        self._stale_used.add(n)
        self._changed(n)
        if old_slots:
            self._give_slots(n, old_slots, old, owner)
        if new_slots:
            self._take_slots(n, new_slots, new, owner)

    def _take_slots(self, n: int, whole_slots: list[int], status: str, owner: int) -> None:
        """Devices of a whole-GPU task added with ``status`` (:meth:`add`)."""
        sw, so = self.slot_whole_rows[n], self.slot_owner_rows[n]
        for s in whole_slots:
            cur = sw[s]
            if status == "releasing" and cur == SLOT_RELEASING and so[s] not in (-1, owner):
                continue  # a task pipelined onto another pod's releasing device, evicted: that pod stays owner
            if status == "releasing":
                sw[s] = SLOT_RELEASING
            elif status == "pipelined":
                sw[s] = SLOT_PIPELINED if cur in (SLOT_RELEASING, SLOT_PIPELINED) else SLOT_ACTIVE
            else:
                sw[s] = SLOT_ACTIVE
            if status == "pipelined" and cur == SLOT_RELEASING:
                continue  # the releasing owner stays recorded; the slot is shared in time
            so[s] = owner
        self._stale_slots.add(n)

    def _give_slots(self, n: int, whole_slots: list[int], status: str, owner: int) -> None:
        """Devices of a whole-GPU task accounted with ``status``, removed (:meth:`remove`)."""
        sw, so = self.slot_whole_rows[n], self.slot_owner_rows[n]
        for s in whole_slots:
            cur = sw[s]
            if status == "pipelined" and cur == SLOT_PIPELINED:
                sw[s] = SLOT_RELEASING
                continue
            own = so[s]
            if status == "releasing" and cur == SLOT_RELEASING and own not in (-1, owner, ANONYMOUS):
                continue  # the inverse of the case in add: the other releasing pod keeps the device
            if own in (owner, ANONYMOUS) or status != "pipelined":
                sw[s] = SLOT_FREE
                so[s] = -1
        self._stale_slots.add(n)

    def keep_slots(self, n: int) -> tuple:
        """Node ``n``'s whole-GPU device rows, for :meth:`restore_slots`. :meth:`remove` and :meth:`add` of a task
        are not each other's inverse on them: removing a task the snapshot gave no device frees its anonymous
        slots, and adding it back claims only slots still marked anonymous (``Session._whole_slots``)."""
        return n, list(self.slot_whole_rows[n]), list(self.slot_owner_rows[n])

    def restore_slots(self, kept: tuple) -> None:
        """Put back what :meth:`keep_slots` returned (a statement's rollback, after the inverse transition). Not a
        change of its own (``version``, ``change_log``): the inverse transition has just recorded the node."""
        n, whole, owner = kept
        self.slot_whole_rows[n] = whole
        self.slot_owner_rows[n] = owner
        self._stale_slots.add(n)

    def derive(self, n: int) -> None:
        """Recompute node ``n``'s ``free`` row from its ``idle`` and ``rel`` rows; its arrays are written when next
        read."""
        i, r = self.idle_rows[n], self.rel_rows[n]
        self.free_rows[n] = [i[0] + r[0], i[1] + r[1], i[2] + r[2], i[3] + r[3]]
        self._changed(n)

    def _changed(self, n: int) -> None:
        """Node ``n``'s idle / releasing / free rows changed: its arrays are written when next read."""
        self._stale_idle.add(n)
        self._stale_rel.add(n)
        self._stale_free.add(n)
        self._stale_freeT.add(n)
        self._stale_idleT.add(n)

    def _add_shared(self, n: int, s: int, mem: float, status: str) -> None:
        self.sh_used[n, s] += mem
        used = self.sh_used[n, s]
        if status == "releasing":
            self.sh_rel[n, s] += mem
            self.sh_alloc[n, s] += mem
            self.sh_present[n, s] = True
            if used == self.sh_rel[n, s]:  # every task on this GPU is releasing
                if not self.sh_marked[n, s]:
                    self.rel_rows[n][GPU] += 1
                    self.sh_marked[n, s] = True
                if self.gpus[n] < self.idle_rows[n][GPU] + self.used_gpu_count(n):
                    self.idle_rows[n][GPU] -= 1
        elif status == "pipelined":
            self.sh_rel[n, s] -= mem
            if used - mem == self.sh_rel[n, s] + mem:  # pipelined onto a releasing GPU
                self.rel_rows[n][GPU] -= 1
        else:
            self.sh_alloc[n, s] += mem
            self.sh_present[n, s] = True
            if used <= mem and self.gpus[n] < self.idle_rows[n][GPU] + self.used_gpu_count(n):
                self.idle_rows[n][GPU] -= 1  # the first fraction on this GPU takes a whole GPU from idle
            if self.sh_marked[n, s]:
                self.rel_rows[n][GPU] -= 1
                self.sh_marked[n, s] = False

    def _remove_shared(self, n: int, s: int, mem: float, status: str) -> None:
        self.sh_used[n, s] -= mem
        used = self.sh_used[n, s]
        if status == "releasing":
            self.sh_rel[n, s] -= mem
            self.sh_alloc[n, s] -= mem
            if used <= 0:
                if self.gpus[n] >= self.idle_rows[n][GPU] + self.used_gpu_count(n):
                    self.idle_rows[n][GPU] += 1
                if self.sh_marked[n, s]:
                    self.rel_rows[n][GPU] -= 1
                    self.sh_marked[n, s] = False
        elif status == "pipelined":
            self.sh_rel[n, s] += mem
            rel = self.sh_rel[n, s]
            if self.sh_marked[n, s]:
                # the group opened by pipelining onto this releasing GPU (opened_by_pipelining): KAI gives the
                # releasing whole GPU back when that group empties (isPipelinedToReleasingGpu: used and
                # releasing memory both 0), as adding its first task took it
                if used - self.sh_alloc[n, s] <= 0:
                    self.rel_rows[n][GPU] += 1
            elif (used + mem == rel - mem) or (used == 0 and rel == 0):
                self.rel_rows[n][GPU] += 1
        else:
            self.sh_alloc[n, s] -= mem
            if used <= 0 and self.gpus[n] >= self.idle_rows[n][GPU] + self.used_gpu_count(n):
                self.idle_rows[n][GPU] += 1
            if used > 0 and self.sh_rel[n, s] == used and not self.sh_marked[n, s]:
                self.rel_rows[n][GPU] += 1
                self.sh_marked[n, s] = True
        if used <= 0 and self.sh_alloc[n, s] <= 0:
            self.sh_present[n, s] = False
            self.sh_used[n, s] = self.sh_alloc[n, s] = self.sh_rel[n, s] = 0.0
            group = self.slot_group[n].pop(s, None)
            if group is not None:
                self.group_slot[n].pop(group, None)

    # ------------------------------------------------------------------ slots

    def bind_group(self, n: int, slot: int, group: str) -> None:
        """Record that GPU group ``group`` lives in ``slot`` of node ``n``."""
        self.slot_group[n][slot] = group
        self.group_slot[n][group] = slot

    def free_whole_slots(self, n: int, k: int, pipelined: bool) -> list[int]:
        """Device indices for a whole-GPU task: lowest idle slots; a pipelined task takes releasing
        slots first. Returns fewer than ``k`` only when the slots do not say (anonymous occupancy)."""
        # plain Python over the node's few devices (numpy's per-call cost dominates at this size)
        exists, whole, used = self.slot_exists_rows[n], self.slot_whole_rows[n], self.sh_used[n].tolist()
        if not pipelined:
            return [s for s in range(len(exists)) if exists[s] and whole[s] == SLOT_FREE and used[s] == 0][:k]
        # A releasing device that a pipelined shared GPU already took is not free to pipeline onto
        # (sh_used - sh_alloc is the pipelined memory on the device).
        alloc, marked = self.sh_alloc[n].tolist(), self.sh_marked[n].tolist()
        releasing, releasing_shared, idle = [], [], []
        for s in range(len(exists)):
            if not exists[s]:
                continue
            u = used[s]
            if u == 0:
                w = whole[s]
                if w == SLOT_RELEASING:
                    releasing.append(s)
                elif w == SLOT_FREE:
                    idle.append(s)
            if marked[s] and not u - alloc[s] > 1e-9:
                releasing_shared.append(s)
        return (releasing + releasing_shared + idle)[:k]

    def new_group_slot(self, n: int, releasing: bool) -> int:
        """Device for a newly opened shared GPU: the lowest idle slot, or for a pipelined placement the
        lowest releasing one (a releasing whole GPU, then a shared GPU whose tasks are all releasing)."""
        exists = self.slot_exists[n]
        idle = np.nonzero(exists & (self.slot_whole[n] == SLOT_FREE) & (self.sh_used[n] == 0)
                          & ~self._grouped(n))[0]
        if releasing:
            rel_whole = np.nonzero(exists & (self.slot_whole[n] == SLOT_RELEASING) & (self.sh_used[n] == 0))[0]
            if rel_whole.size:
                return int(rel_whole[0])
            rel_shared = np.nonzero(exists & self.sh_marked[n])[0]
            if rel_shared.size:
                return int(rel_shared[0])
        if idle.size:
            return int(idle[0])
        # Accounting and slots disagree (anonymous or external occupancy): any slot without a group.
        spare = np.nonzero(exists & (self.sh_used[n] == 0) & ~self._grouped(n))[0]
        return int(spare[0]) if spare.size else 0

    def _grouped(self, n: int) -> np.ndarray:
        mask = np.zeros(self.g, dtype=bool)
        for s in self.slot_group[n]:
            mask[s] = True
        return mask


def write_rows(arr: np.ndarray, rows: list, stale: set) -> None:
    """Write the plain-Python ``rows[n]`` of every node in ``stale`` into ``arr[n]``; empties ``stale``."""
    if len(stale) > 8:   # one fancy-index assignment beats a per-row call on many rows
        idx = list(stale)
        arr[idx] = [rows[n] for n in idx]
    else:
        for n in stale:
            arr[n] = rows[n]
    stale.clear()


def _write_columns(arrT: np.ndarray, rows: list, stale: set) -> None:
    """:func:`write_rows` into a column-major copy: ``arrT[:, n] = rows[n]``."""
    if len(stale) > 8:
        idx = list(stale)
        arrT[:, idx] = np.array([rows[n] for n in idx]).T
    else:
        for n in stale:
            arrT[:, n] = rows[n]
    stale.clear()
