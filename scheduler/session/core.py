"""One scheduling session over a snapshot (KAI ``framework.Session``, paraphrased).

The session owns the mutable state of one cycle: task placements, node resources (:class:`NodeState`),
queue accounting (:class:`QueueState`). Actions never touch that state directly: they ask the session for
the tasks a job should place next, whether the job fits its queue's capacity, the ordered fitting nodes
for a task, and place / evict tasks through a :class:`~scheduler.session.statement.Statement`, which can be
rolled back to a checkpoint.

The input snapshot is never mutated: per-task state lives in the session's own lists and arrays.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from .. import placement
from ..decisions import Eviction
from ..errors import EngineError
from ..fairshare import TaskTable
from ..model import DEFAULT_GPU_MEMORY_MIB, RESOURCES, UNLIMITED, Job, Snapshot, Task, memory_as_gpus
from ..placement import gpu_order, scores
from .nodes import (ANONYMOUS, CPU, GPU, MEM, PODS, SLOT_ACTIVE, SLOT_EXTERNAL, SLOT_FREE, SLOT_RELEASING,
                    NodeState)
from .predicates import Predicates
from .queues import R_CPU, R_GPU, R_MEM, QueueState

KIND_NONE, KIND_WHOLE, KIND_FRACTION, KIND_MEMORY = 0, 1, 2, 3
"""GPU request kinds: CPU-only, whole GPUs, a fraction (``gpu`` < 1), a gpu-memory request."""

OCCUPIES_NODE = frozenset({"running", "binding", "pipelined", "releasing"})
"""KAI ``ActiveUsed``: statuses that hold node resources."""

COUNTS_IN_QUEUE = frozenset({"running", "binding", "pipelined"})
"""Statuses counted in a queue's Allocated inside a session (Allocate and Pipeline both add, §c.2b)."""

ACTIVE_ALLOCATED = frozenset({"running", "binding", "pipelined"})
"""KAI ``ActiveAllocated``: what counts toward a gang's min_available."""

ALIVE = frozenset({"pending", "running", "binding", "pipelined"})
"""KAI ``Alive`` (no gated pods in our format)."""

DEFAULT_PODSET = "default"

PREDICATE_REASONS = {"node affinity/selector": "didn't match Pod's node affinity/selector",
                     "taints": "had untolerated taints", "missing ConfigMaps": "missing required ConfigMaps",
                     "host ports": "didn't have free ports for the requested pod ports",
                     "pod affinity": "didn't match pod affinity rules",
                     "pod anti-affinity": "didn't match pod anti-affinity rules",
                     "DRA devices": "had no DRA GPU devices for the pod's ResourceClaims",
                     "DRA-only node": "had DRA GPUs (fractional/shared GPU pods are not yet supported on DRA-only nodes)",
                     "claim allocated": "were not the node its shared ResourceClaim is allocated on",
                     "claim missing": "cannot take it: a ResourceClaim it names does not exist (yet)",
                     "claim queue label": "cannot take it: a shared GPU claim it names lacks the job's queue label "
                                          "(kai.scheduler/queue)"}
"""Fit-error wording of the predicate checks (kube-scheduler's reasons, as KAI reports them)."""


@dataclass
class PodSet:
    """A gang inside a job: tasks that must reach ``min_available`` together (KAI ``PodSet``)."""

    name: str
    min_available: int
    tasks: list[int] = field(default_factory=list)


@dataclass
class JobInfo:
    """Session view of a job (pod group)."""

    index: int
    job: Job
    key: str
    queue: int  # queue index, -1 when the queue does not exist
    priority: int
    preemptible: bool
    creation: float
    tasks: list[int]
    podsets: list[PodSet]


@dataclass
class NodeFit:
    """Vectorised fit of one task over every node."""

    fits: np.ndarray        # bool[N]: fits on idle + releasing resources and passes the per-node quota check
    idle_fit: np.ndarray    # bool[N]: KAI IsTaskAllocatable (fits on idle resources)
    shared_fit: Optional[np.ndarray] = None   # bool[N, G]: existing shared GPUs the request fits on
    task_mem: Optional[np.ndarray] = None     # MiB per device on each node (shared requests)
    parts: dict[str, Optional[np.ndarray]] = field(default_factory=dict)  # check name -> bool[N] ok mask

    @property
    def failures(self) -> dict[str, np.ndarray]:
        """Check name -> nodes for which it is the *first* failing check (not ready, GPU, CPU, memory,
        pods, queue quota on node)."""
        out: dict[str, np.ndarray] = {}
        left = None
        for name, ok in self.parts.items():
            if ok is None:
                continue
            bad = ~ok if left is None else (~left & ~ok)
            out[name] = bad
            left = bad if left is None else (left | bad)
        return out


class _TaskState:
    """One task's state: what :meth:`Session._apply` moves a task to and a statement's undo record keeps."""

    __slots__ = ("status", "node", "groups", "indices", "accepted", "shadow", "evict_prior")

    def __init__(self, status: str, node: int, groups: list, indices: list, accepted: float,
                 shadow: Optional[tuple], evict_prior: Optional[str]):
        self.status = status
        self.node = node
        self.groups = groups
        self.indices = indices
        self.accepted = accepted
        self.shadow = shadow
        self.evict_prior = evict_prior

    def __eq__(self, other) -> bool:
        return isinstance(other, _TaskState) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return "_TaskState(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


class JobTable(dict):
    """``session.jobs[j]``: :class:`JobInfo` objects built on first access (a cluster may hold 100k+ jobs
    of which an action touches a few). A dict of the built ones (a hit is one C-level lookup); ``len`` and
    iteration cover every job of the snapshot."""

    def __init__(self, session: "Session"):
        super().__init__()
        self._s = session
        self._jobs = session.snapshot.jobs

    def __missing__(self, j: int) -> JobInfo:
        s = self._s
        job = self._jobs[j]
        a, b = s.job_start[j], s.job_start[j + 1]
        info = JobInfo(index=j, job=job, key=job.key, queue=s.job_queue[j], priority=job.priority,
                       preemptible=not s.job_non_preemptible[j], creation=job.creation_time,
                       tasks=list(range(a, b)), podsets=[])
        self[j] = info
        return info

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self):
        """Every job's :class:`JobInfo` in index order (built on the way), as a list of them would."""
        return (self[j] for j in range(len(self._jobs)))

    # The mapping methods answer for every job of the snapshot, built or not: the dict underneath holds only
    # the jobs built so far, and ``j in table`` or ``table.values()`` reading it would silently miss the others.
    def __contains__(self, j) -> bool:
        try:
            j = operator.index(j)
        except TypeError:
            return False
        return 0 <= j < len(self._jobs)

    def get(self, j, default=None):
        return self[j] if j in self else default

    def keys(self):
        return range(len(self._jobs))

    def values(self):
        return list(self)

    def items(self):
        return [(info.index, info) for info in self]

    def built(self) -> int:
        """How many jobs have been built so far (diagnostics, tests)."""
        return dict.__len__(self)


class Session:
    """Mutable state of one scheduling cycle over a snapshot, with the queries actions need."""

    def __init__(self, snapshot: Snapshot, shares: Mapping[str, Mapping[str, object]],
                 tasks: Optional[TaskTable] = None):
        """``tasks``: the snapshot's :class:`~scheduler.fairshare.TaskTable` when the caller already built it
        for fair share (the engine does); else the session builds it."""
        self.snapshot = snapshot
        self.config = snapshot.config
        self.nodes = NodeState(snapshot)
        ns = self.nodes
        ready = ns.ready
        total = np.array([
            float((ns.allocatable[ready, GPU] - ns.used[ready, GPU]).sum()) if ready.any() else 0.0,
            float((ns.allocatable[ready, CPU] - ns.used[ready, CPU]).sum()) if ready.any() else 0.0,
            float((ns.allocatable[ready, MEM] - ns.used[ready, MEM]).sum()) if ready.any() else 0.0])
        self.queues = QueueState(snapshot, shares, total)
        gpu_mems = ns.gpu_mem[ns.gpu_mem > DEFAULT_GPU_MEMORY_MIB]  # KAI: nodes with a real GPU-memory value
        self.min_gpu_mem: Optional[float] = float(gpu_mems.min()) if gpu_mems.size else None
        self.max_gpu_mem: Optional[float] = float(gpu_mems.max()) if gpu_mems.size else None
        self.gpu_strategy = placement.get_strategy(self.config.placement.gpu)
        self.cpu_strategy = placement.get_strategy(self.config.placement.cpu)
        self.evictions: list[Eviction] = []
        # task name -> (binding | pipelined, node) of the last placement a committed statement made (statement.py)
        self.committed_placements: dict[str, tuple[str, str]] = {}
        self.job_reasons: dict[int, tuple[str, str, dict]] = {}  # why a job (still) waits, per job index
        self.started_jobs: set[int] = set()  # jobs that went from 0 to allocated tasks (LastStartTimestamp)
        self.skipped_actions: list[str] = []
        # per eviction action: counters such as 'attempted' / 'skipped_by_signature' (actions/signatures.py)
        self.action_stats: dict[str, dict[str, int]] = {}
        self.signature_cache: dict[int, tuple] = {}
        # Bumped whenever resources are freed in-session (evict, un-pipeline). A cache of "this request
        # fits nowhere" is valid while free_epoch is unchanged, provided entries are recorded outside an
        # open statement (a rollback returns exactly to its checkpoint, so it frees nothing older).
        self.free_epoch = 0
        self.commits = 0   # statements committed so far: between two commits, searches start from one state
        self._build_tasks(snapshot, tasks if tasks is not None else TaskTable.from_snapshot(snapshot))
        self._order_cache: dict[tuple, list] = {}
        self._topology = None  # TopologyIndex, built on first use
        self._max_gpus = float(ns.whole_gpus.max(initial=0))
        self._max_cpu = float(ns.allocatable[:, CPU].max(initial=0))
        self._gpu_one = getattr(self.gpu_strategy, "local_score_one", None)
        self._cpu_one = getattr(self.cpu_strategy, "local_score_one", None)
        self._node_ready = ns.ready.tolist()
        self._node_gpus = ns.whole_gpus.tolist()
        self._node_cpu = ns.allocatable[:, CPU].tolist()
        self._node_cpu_only = ns.cpu_only.tolist()
        # gpusharingorder (bin-packing only) gives a task that fits an existing shared GPU its bonus; a CPU-only
        # task asks 0 GPU memory, so it fits every shared GPU in use (plugins/gpusharingorder, issue 13 item 1).
        self._gpu_sharing_order = self.config.placement.gpu == "binpack"
        self._tta_cache: dict[int, tuple[int, list[int]]] = {}
        # per job, (job_version, value): ordering.job_order_key and actions.simulation.sim_tasks_to_allocate
        self.job_order_memo: dict[int, tuple[int, tuple]] = {}
        self._amount_cache: dict[int, tuple[float, np.ndarray]] = {}
        self._shape_keys: dict[int, tuple] = {}   # node_values: the cache key of each task's request
        self.sim_tasks_memo: dict[int, tuple[int, list[int]]] = {}
        # per (job, its tasks' statuses[, evicted tasks]): the same values by state, which eviction scenarios revisit
        # with a new job_version each time (evicted, then rolled back)
        self.job_order_by_state: dict[tuple, tuple] = {}
        self.sim_tasks_by_state: dict[tuple, list[int]] = {}
        self._elastic_memo: dict[int, tuple[int, int]] = {}   # per job, (job_version, elastic_state)
        self.job_version = [0] * len(snapshot.jobs)  # bumped when any task of the job changes state
        self._numeric_groups = any(g.isdigit() for g in self.group_ids)
        self.predicates = Predicates(self)
        self.predicates.start((i, n) for i, n in enumerate(self.node) if n >= 0 and self.status[i] in OCCUPIES_NODE)
        # False when no node has a taint and no pod a constraint: every predicate mask is None
        self.predicates_apply = self.predicates.applies()

    @property
    def task_index(self) -> dict[str, int]:
        """Task name -> task index (built on first use: only the eviction actions read it)."""
        index = self._task_index
        if index is None:
            index = self._task_index = {name: i for i, name in enumerate(self.task_names)}
        return index

    # ================================================================== build

    def _build_tasks(self, snapshot: Snapshot, table: TaskTable) -> None:
        ns = self.nodes
        tasks: list[Task] = table.tasks
        self.task_objs = tasks
        T = len(tasks)
        # One pass over the task objects for every attribute the session reads from them: at 140k pods a loop
        # with bound appends costs about half of one list comprehension per attribute.
        names: list[str] = []
        groups: list[list] = []
        indices: list[list] = []
        dra_task: list[bool] = []
        mig_tasks: list[int] = []
        constrained: list = []
        add_name, add_groups, add_indices, add_dra = names.append, groups.append, indices.append, dra_task.append
        for i, t in enumerate(tasks):
            add_name(t.name)
            add_groups(t.gpu_groups)
            add_indices(t.gpu_indices)
            add_dra(bool(t.dra_claims))   # Task.is_dra, inlined
            if t.mig:
                mig_tasks.append(i)
            if t.constraints is not None:
                constrained.append(t.constraints)
        self.task_names = names
        self.constrained_tasks = constrained   # every task's PodConstraints that is not None (Predicates.start)
        self._task_index: Optional[dict[str, int]] = None
        self.task_job = table.task_job.tolist()
        nget = ns.index.get
        status = list(table.status)  # a copy: the session changes it (the table's columns are read-only)
        node = [nget(n, -1) for n in table.node]
        self.gpu, self.gmem, self.dev, self.cpu, self.mem = table.gpu, table.gmem, table.dev, table.cpu, table.mem
        has_mem = ~np.isnan(self.gmem)
        kind = np.zeros(T, dtype=np.int8)
        kind[self.gpu >= 1] = KIND_WHOLE
        kind[(self.gpu > 0) & (self.gpu < 1)] = KIND_FRACTION
        kind[has_mem] = KIND_MEMORY
        self.kind = kind
        self.kind_list = kind.tolist()
        self._build_dra(snapshot, tasks, dra_task, status, node)
        self.groups: list[list] = groups
        self.indices: list[list] = indices
        self.shadow: dict[int, tuple] = {}
        self.evict_prior: dict[int, str] = {}
        self.nominated: dict[int, int] = {}
        # Pipelined pods of an earlier cycle are Pending pods with a nominated node in KAI (§c.2).
        for i, s in enumerate(status):
            if s == "pipelined":
                if node[i] >= 0:
                    self.nominated[i] = node[i]
                status[i] = "pending"
                node[i] = -1
                self.groups[i] = []
                self.indices[i] = []
            elif s not in OCCUPIES_NODE:
                node[i] = -1
        self.status = status
        self.node = node
        self.group_ids: set[str] = set()
        node_arr = np.array(node, dtype=np.int64)
        st_arr = np.array(status, dtype=object)
        on_node = node_arr >= 0
        releasing = on_node & (st_arr == "releasing")
        # Non-shared resource vector of every task: (whole GPUs, cpu, memory, 1 pod).
        whole_gpu = np.where(kind == KIND_WHOLE, self.node_gpu, 0.0)
        N = ns.n
        idx = node_arr[on_node]
        for col, vals in ((GPU, whole_gpu), (CPU, self.cpu), (MEM, self.mem), (PODS, np.ones(T))):
            add = np.bincount(idx, weights=vals[on_node], minlength=N)
            ns.used[:, col] += add
            ns.idle[:, col] -= add
            ns.rel[:, col] += np.bincount(node_arr[releasing], weights=vals[releasing], minlength=N)
        # Accepted GPUs per placed task (queue accounting).
        accepted = np.zeros(T)
        accepted[kind == KIND_WHOLE] = self.gpu[kind == KIND_WHOLE]
        frac = kind == KIND_FRACTION
        accepted[frac] = self.gpu[frac] * self.dev[frac]
        memk = np.nonzero((kind == KIND_MEMORY) & on_node)[0]
        if memk.size:
            nm = ns.gpu_mem[node_arr[memk]]
            accepted[memk] = self.dev[memk] * _mem_to_fraction(self.gmem[memk], nm)
        self.accepted = accepted.tolist()
        for gs in self.groups:  # every group id in the snapshot stays reserved
            if gs:
                self.group_ids.update(gs)
        self._build_whole_slots(node_arr, on_node, releasing)
        self._build_shared(node_arr, on_node, releasing)
        self._build_mig(tasks, mig_tasks, status, node)
        ns.refresh()
        self._build_jobs(snapshot, table)
        self._vec_cache: dict[int, np.ndarray] = {}
        self._row_cache: dict[int, tuple[float, float, float, float]] = {}
        self._cpu_l = self.cpu.tolist()
        self._mem_l = self.mem.tolist()
        self._gpu_l = self.gpu.tolist()  # requests (the packing bound of the eviction actions reads them)
        self._node_gpu_l = self._gpu_l if self.node_gpu is self.gpu else self.node_gpu.tolist()

    def _build_mig(self, tasks: list[Task], mig_tasks: list[int], status: list[str], node: list[int]) -> None:
        """MIG requests (``mig_req[i]`` = (instances per node profile, whether every profile exists on some node))
        and the instances placed tasks hold; ``mig_tasks``: the indices of the tasks that ask for MIG."""
        ns = self.nodes
        self.mig_req: dict[int, tuple[np.ndarray, bool]] = {}
        for i in mig_tasks:
            t = tasks[i]
            vec = np.zeros(len(ns.mig_profiles))
            for prof, count in t.mig.items():
                k = ns.mig_col.get(prof)
                if k is not None:
                    vec[k] = count
            self.mig_req[i] = (vec, all(p in ns.mig_col for p in t.mig))
            n = node[i]
            if n >= 0 and status[i] in OCCUPIES_NODE:
                ns.add_mig(n, vec, status[i], 1.0)
        self._mig_nodes = bool(ns.mig_profiles)

    def _build_dra(self, snapshot: Snapshot, tasks: list[Task], dra_task: list[bool], status: list[str],
                   node: list[int]) -> None:
        """DRA: which nodes publish GPU devices in ResourceSlices, which tasks claim them, and ``node_gpu``, the GPUs
        a task takes on its node. ``node_gpu`` is ``gpu`` except for a shared claim already allocated in the snapshot
        (held by a placed task): KAI counts its devices once per node (``DRASharedDeviceRefCount``), so a further
        holder takes none of them, and a pending holder may go only to that claim's node. Queues still count every
        pod's claims (``accepted``), as KAI's proportion plugin does."""
        self.node_gpu = self.gpu
        self.dra_pin: dict[int, int] = {}
        by_name = snapshot.node_map()
        dra = np.array([by_name[name].dra_gpus > 0 for name in self.nodes.names], dtype=bool)
        self.dra_task = dra_task   # per task: it claims GPUs through DRA (Task.is_dra)
        self._dra_nodes = dra if dra.any() or any(self.dra_task) else None
        if self._dra_nodes is None:
            return
        # KAI's DRA pre-predicate: every claim exists, and a shared GPU claim carries the job's queue label
        queues = [j.queue for j in snapshot.jobs]
        self.dra_blocked: dict[int, str] = {}
        for i, t in enumerate(tasks):
            for c in t.dra_claims:
                if c.missing:
                    self.dra_blocked[i] = "claim missing"
                elif c.shared and c.queue != queues[self.task_job[i]]:
                    self.dra_blocked.setdefault(i, "claim queue label")
        self._dra_node_l = dra.tolist()
        held: dict[str, int] = {}  # shared claim -> the node of the placed task holding it first
        for i, t in enumerate(tasks):
            if node[i] >= 0 and status[i] in OCCUPIES_NODE:
                for c in t.dra_claims:
                    if c.shared:
                        held.setdefault(c.name, node[i])
        if not held:
            return
        node_gpu = np.array(self.gpu, dtype=float)
        first: set[str] = set()
        for i, t in enumerate(tasks):
            placed = node[i] >= 0 and status[i] in OCCUPIES_NODE
            for c in t.dra_claims:
                n = held.get(c.name) if c.shared else None
                if n is None:
                    continue
                if placed and node[i] == n and c.name not in first:
                    first.add(c.name)  # the first holder counts the devices on the node
                elif placed and node[i] == n:
                    node_gpu[i] -= c.gpus
                elif not placed:
                    node_gpu[i] -= c.gpus
                    self.dra_pin[i] = n
        self.node_gpu = np.maximum(node_gpu, 0.0)

    def _dra_parts(self, i: int, kind: int, rows) -> dict[str, np.ndarray]:
        """DRA checks of task ``i`` over nodes ``rows``: a claim needs a node whose ResourceSlices publish GPU devices
        (the kube-scheduler DRA plugin allocates them; their number is in the node's GPUs) and its allocated shared
        claim's node; a fractional / shared GPU request may not go to a node with DRA GPUs (KAI's
        ``PredicateByNodeResourcesType``)."""
        dra = self._dra_nodes[rows]
        if self.dra_task[i]:
            blocked = self.dra_blocked.get(i)
            if blocked is not None:
                return {blocked: np.zeros(dra.shape, dtype=bool)}
            parts = {"DRA devices": dra}
            pin = self.dra_pin.get(i)
            if pin is not None:
                parts["claim allocated"] = np.arange(self.nodes.n)[rows] == pin
            return parts
        if kind in (KIND_FRACTION, KIND_MEMORY):
            return {"DRA-only node": ~dra}
        return {}

    def _dra_fits_node(self, i: int, n: int) -> bool:
        """:meth:`_dra_parts` for one node (the plain-Python path of :meth:`_eval_node`)."""
        if self.dra_task[i]:
            return self._dra_node_l[n] and self.dra_pin.get(i, n) == n and i not in self.dra_blocked
        return True  # _eval_node sees CPU-only and whole-GPU tasks only

    def _build_whole_slots(self, node_arr, on_node, releasing) -> None:
        ns = self.nodes
        whole = on_node & (self.kind == KIND_WHOLE)
        anon_active = np.zeros(ns.n)
        anon_rel = np.zeros(ns.n)
        for i in np.nonzero(whole)[0].tolist():
            n = self.node[i]
            idxs = self.indices[i]
            state = SLOT_RELEASING if self.status[i] == "releasing" else SLOT_ACTIVE
            if idxs:
                for s in idxs:
                    ns.slot_whole[n, s] = state
                    ns.slot_owner[n, s] = i
            elif state == SLOT_RELEASING:
                anon_rel[n] += self.node_gpu[i]
            else:
                anon_active[n] += self.node_gpu[i]
        for need, state in ((anon_active, SLOT_ACTIVE), (anon_rel, SLOT_RELEASING)):
            if not need.any():
                continue
            free = ns.slot_exists & (ns.slot_whole == SLOT_FREE)
            rank = np.cumsum(free, axis=1)
            take = free & (rank <= need[:, None])
            ns.slot_whole[take] = state
            ns.slot_owner[take] = ANONYMOUS

    def _build_shared(self, node_arr, on_node, releasing) -> None:
        ns = self.nodes
        shared_idx = np.nonzero(on_node & (self.kind >= KIND_FRACTION))[0].tolist()
        if not shared_idx:
            return
        rows, slots, mems, rel_flags = [], [], [], []
        for i in shared_idx:
            n = self.node[i]
            groups = list(self.groups[i])
            idxs = list(self.indices[i])
            d = int(self.dev[i])
            task_mem = self._task_mem(i, n)
            out_idx = []
            for k in range(d):
                group = groups[k] if k < len(groups) else None
                slot = idxs[k] if k < len(idxs) else None
                if group is not None and group in ns.group_slot[n]:
                    slot = ns.group_slot[n][group]
                if slot is None:
                    slot = self._free_group_slot(n, exclude=out_idx)
                if group is None:
                    group = ns.slot_group[n].get(slot) or self._new_group_id(n, slot)
                ns.bind_group(n, slot, group)
                self.group_ids.add(group)
                if k >= len(groups):
                    groups.append(group)
                out_idx.append(slot)
                rows.append(n)
                slots.append(slot)
                mems.append(task_mem)
                rel_flags.append(self.status[i] == "releasing")
            self.groups[i] = groups
            self.indices[i] = out_idx
        rows_a, slots_a, mems_a = np.array(rows), np.array(slots), np.array(mems, dtype=float)
        rel_a = np.array(rel_flags, dtype=bool)
        np.add.at(ns.sh_used, (rows_a, slots_a), mems_a)
        np.add.at(ns.sh_alloc, (rows_a, slots_a), mems_a)
        np.add.at(ns.sh_rel, (rows_a[rel_a], slots_a[rel_a]), mems_a[rel_a])
        ns.sh_present = ns.sh_used > 0
        ns.sh_marked = (ns.sh_used > 0) & (ns.sh_rel == ns.sh_used)
        ns.idle[:, GPU] -= (ns.sh_used > 0).sum(axis=1)
        # Every shared GPU a running pod uses has its reservation pod, which holds a pod slot on the node (KAI
        # counts it in the node's pods; a group opened this cycle gets its reservation pod only when bound).
        reserved = {(self.node[i], s) for i in shared_idx if self.status[i] in ("running", "releasing")
                    for s in self.indices[i]}
        if reserved:
            per_node = np.bincount([n for n, _ in reserved], minlength=ns.n).astype(float)
            ns.used[:, PODS] += per_node
            ns.idle[:, PODS] -= per_node
        ns.rel[:, GPU] += ns.sh_marked.sum(axis=1)

    def _free_group_slot(self, n: int, exclude=()) -> int:
        ns = self.nodes
        for s in range(int(ns.gpus[n])):
            if s in exclude or s in ns.slot_group[n]:
                continue
            if ns.slot_whole[n, s] == SLOT_FREE:
                return s
        for s in range(int(ns.gpus[n])):
            if s not in exclude and s not in ns.slot_group[n]:
                return s
        raise EngineError(f"nodes[{ns.names[n]}]: more shared GPU groups than GPUs on the node")

    def _new_group_id(self, n: int, slot: int) -> str:
        """Deterministic id for a newly opened shared GPU: ``<node>-gpu<index>-<k>``, smallest unused k."""
        base = f"{self.nodes.names[n]}-gpu{slot}-"
        k = 0
        while f"{base}{k}" in self.group_ids:
            k += 1
        gid = f"{base}{k}"
        self.group_ids.add(gid)
        return gid

    def _build_jobs(self, snapshot: Snapshot, table: TaskTable) -> None:
        qidx = self.queues.index
        self.job_start = np.concatenate(([0], np.cumsum(table.job_counts))).tolist()
        queue_of_name = np.array([qidx.get(name, -1) for name in table.queue_names], dtype=np.int64)
        # Jobs KAI does not consider (Job.waiting_for) are in no queue: never candidates, never victims.
        self.job_queue = np.where(table.job_grouped, queue_of_name[table.job_queue_id], -1).tolist()
        self.job_non_preemptible = table.job_non_preemptible.tolist()  # KAI: explicit, else priority >= 100
        self.jobs = JobTable(self)
        self._job_index: Optional[dict[str, int]] = None
        self._podsets_built: set[int] = set()

    @property
    def job_index(self) -> dict[str, int]:
        """Job key → job index (built on first use)."""
        if self._job_index is None:
            self._job_index = {job.key: j for j, job in enumerate(self.snapshot.jobs)}
        return self._job_index

    def jobs_with_pending(self) -> list[int]:
        """Indices of jobs that have at least one pending task now."""
        st = np.array(self.status, dtype=object) == "pending"
        if not st.any():
            return []
        per_job = np.bincount(np.array(self.task_job)[st], minlength=len(self.job_start) - 1)
        return np.nonzero(per_job)[0].tolist()

    def podsets(self, j: int) -> list[PodSet]:
        """The job's gangs: one per declared subgroup (declaration order), plus ``default`` for tasks
        without a subgroup. Without subgroups ``default`` has the job's ``min_available``; with subgroups
        it is elastic (min 0)."""
        info = self.jobs[j]
        if j in self._podsets_built:
            return info.podsets
        job = info.job
        if job.subgroups:
            sets = {sg.name: PodSet(sg.name, sg.min_available) for sg in job.subgroups}
            default = PodSet(DEFAULT_PODSET, 0)
        else:
            sets = {}
            default = PodSet(DEFAULT_PODSET, job.min_available)
        for i in info.tasks:
            sg = self.task_objs[i].subgroup
            (sets.get(sg) if sg is not None and sg in sets else default).tasks.append(i)
        order = list(sets.values())
        if default.tasks or not order:
            order.append(default)
        tkey = self._task_order_key
        for ps in order:
            ps.tasks.sort(key=tkey)
        info.podsets = order
        self._podsets_built.add(j)
        return order

    def _task_order_key(self, i: int):
        """KAI's task order fallback: creation time, then the pod's UID (its name without one)."""
        t = self.task_objs[i]
        ct = t.creation_time if t.creation_time is not None else self.snapshot.jobs[self.task_job[i]].creation_time
        return (ct, t.uid or t.name)

    # ================================================================== task facts

    def is_gpu_task(self, i: int) -> bool:
        return self.kind_list[i] != KIND_NONE

    def is_shared(self, i: int) -> bool:
        return self.kind_list[i] >= KIND_FRACTION

    def _task_mem(self, i: int, n: int) -> float:
        """MiB per device a shared-GPU task takes on node ``n``."""
        if self.kind_list[i] == KIND_MEMORY:
            return float(self.gmem[i])
        return math.floor(float(self.gpu[i]) * float(self.nodes.gpu_mem[n]))  # KAI: int64(portion × memory)

    def accepted_gpus_on(self, i: int, n: int) -> float:
        """GPUs the task accounts for once placed on node ``n`` (KAI ``setAcceptedResources``)."""
        k = self.kind_list[i]
        if k == KIND_NONE:
            return 0.0
        if k == KIND_WHOLE:
            return float(self.gpu[i])
        if k == KIND_FRACTION:
            return float(self.gpu[i]) * int(self.dev[i])
        return int(self.dev[i]) * float(_mem_to_fraction(np.array([self.gmem[i]]),
                                                          np.array([self.nodes.gpu_mem[n]]))[0])

    def request_gpus(self, i: int, gpu_mem_for_memory: Optional[float]) -> float:
        """GPUs a pending task requests; a gpu-memory request is converted with the given GPU memory, not rounded
        (KAI ``GpuMemoryAsGpuFraction``, with the smallest node GPU memory for queue order and fair share, the
        largest for the capacity check; rounding up to 0.01 is for placement on a node only)."""
        k = self.kind_list[i]
        if k == KIND_MEMORY:
            return memory_as_gpus(float(self.gmem[i]), int(self.dev[i]), gpu_mem_for_memory)
        if k == KIND_FRACTION:
            return float(self.gpu[i]) * int(self.dev[i])
        return float(self.gpu[i])

    def task_vector(self, i: int) -> np.ndarray:
        """Non-shared node resources of a task: (whole GPUs, cpu, memory, pods). Do not modify."""
        vec = self._vec_cache.get(i)
        if vec is None:
            vec = np.array([float(self.node_gpu[i]) if self.kind_list[i] == KIND_WHOLE else 0.0,
                            float(self.cpu[i]), float(self.mem[i]), 1.0])
            self._vec_cache[i] = vec
        return vec

    def _task_row(self, i: int) -> tuple[float, float, float, float]:
        """:meth:`task_vector` as plain floats (what :meth:`NodeState.add` / ``remove`` take), cached per task."""
        row = self._row_cache.get(i)
        if row is None:
            row = self._row_cache[i] = (self._node_gpu_l[i] if self.kind_list[i] == KIND_WHOLE else 0.0,
                                        self._cpu_l[i], self._mem_l[i], 1.0)
        return row

    def queue_amount(self, i: int) -> np.ndarray:
        """What the task adds to its queue's Allocated: (accepted GPUs, cpu, memory). Do not modify (kept per
        task while its accepted GPUs stay the same)."""
        acc = self.accepted[i]
        hit = self._amount_cache.get(i)
        if hit is not None and hit[0] == acc and (acc != 0.0 or math.copysign(1.0, acc) == math.copysign(1.0, hit[0])):
            return hit[1]
        vec = np.array([acc, float(self.cpu[i]), float(self.mem[i])])
        self._amount_cache[i] = (acc, vec)
        return vec

    # ================================================================== state transitions

    def _state(self, i: int) -> _TaskState:
        return _TaskState(self.status[i], self.node[i], self.groups[i], self.indices[i], self.accepted[i],
                          self.shadow.get(i), self.evict_prior.get(i))

    def _copies(self, st: "_TaskState") -> list[tuple]:
        """Where a task in state ``st`` holds node resources: ``(status, node, groups, indices, own)`` for its own
        placement (``own`` True, when it occupies a node) and a ``"releasing"`` copy for each placement a move
        left behind (``shadow``)."""
        out = []
        if st.node >= 0 and st.status in OCCUPIES_NODE:
            out.append((st.status, st.node, list(st.groups), list(st.indices), True))
        for sn, sg, si, _ in st.shadow or ():
            out.append(("releasing", sn, list(sg), list(si), False))
        return out

    def _account_copy(self, i: int, copy: tuple, sign: int) -> None:
        """Add or remove one copy of :meth:`_copies` from node accounting (the task's own placement claims
        anonymous whole-GPU slots from the current fields, as before)."""
        status, n, groups, indices, own = copy
        vec = self._task_row(i)
        shared = self._shared_parts(i, n, indices) if self.is_shared(i) else None
        whole = None
        if self.kind_list[i] == KIND_WHOLE:
            whole = self._whole_slots(i, n, status) if own else list(indices)
        if sign > 0:
            if shared:
                for (slot, _), g in zip(shared, groups):
                    self.nodes.bind_group(n, slot, g)
            self.nodes.add(n, vec, status, shared, whole, owner=i)
            self.predicates.add(i, n)
        else:
            self.nodes.remove(n, vec, status, shared, whole, owner=i)
            self.predicates.remove(i, n)
        if i in self.mig_req:
            self.nodes.add_mig(n, self.mig_req[i][0], status, float(sign))

    def _account_queue(self, i: int, sign: int) -> None:
        j = self.task_job[i]
        q = self.job_queue[j]
        if self.status[i] in COUNTS_IN_QUEUE and q >= 0:
            self.queues.add(q, self.queue_amount(i), self.job_non_preemptible[j], float(sign))

    def _shared_parts(self, i: int, n: int, indices: list) -> list[tuple[int, float]]:
        m = self._task_mem(i, n)
        return [(s, m) for s in indices]

    def _whole_slots(self, i: int, n: int, status: str) -> list[int]:
        """Device indices of a whole-GPU task; claims anonymous slots for tasks the snapshot gave none."""
        if self.indices[i]:
            return list(self.indices[i])
        ns = self.nodes
        want = SLOT_RELEASING if status == "releasing" else SLOT_ACTIVE
        owner, whole = ns.slot_owner_rows[n], ns.slot_whole_rows[n]   # a node's few devices: plain Python
        cand = [s for s in range(len(owner)) if owner[s] == ANONYMOUS and whole[s] == want]
        self.indices[i] = cand[: int(self.node_gpu[i])]
        return list(self.indices[i])

    def _apply(self, i: int, new: _TaskState) -> None:
        """Move task ``i`` to ``new`` state, keeping node and queue accounting consistent.

        Node accounting changes only for the copies that change: a releasing copy that stays where it is (the
        copy a move leaves on the old node, KAI keeping the evicted pod there; or a releasing task becoming such
        a copy of its own move, and back) is never removed and re-added — KAI never does, and its shared-GPU
        bookkeeping (a whole GPU taken from idle when a group's memory is all releasing) is not undone by a
        removal, so doing so would drift."""
        self.job_version[self.task_job[i]] += 1
        if self._simple_apply and self.kind_list[i] <= KIND_WHOLE and i not in self.mig_req:
            old_shadow = self.shadow.get(i)
            new_shadow = new.shadow
            if new_shadow is None and old_shadow is None:
                self._apply_simple(i, new)
                return
            if self._move_apply:
                if old_shadow is None and new.status != "releasing" and \
                        self._is_own_copy(new_shadow, self.status[i], self.node[i], self.groups[i], self.indices[i]):
                    self._apply_simple(i, new, keep_old=True)   # a move: the releasing placement stays as its copy
                    return
                if new_shadow is None and self.node[i] >= 0 and self.status[i] in ACTIVE_ALLOCATED and \
                        self._is_own_copy(old_shadow, new.status, new.node, new.groups, new.indices):
                    self._apply_simple(i, new, reuse_new=True)  # a move undone: its copy is the placement again
                    return
        gone = self._copies(self._state(i))
        added = []
        for c in self._copies(new):
            match = next((k for k, g in enumerate(gone) if g[:4] == c[:4]), -1)
            if match >= 0:
                del gone[match]
            else:
                added.append(c)
        for c in gone:
            self._account_copy(i, c, -1)
        self._account_queue(i, -1)
        self.status[i] = new.status
        self.node[i] = new.node
        self.groups[i] = new.groups
        self.indices[i] = new.indices
        self.accepted[i] = new.accepted
        if new.shadow is None:
            self.shadow.pop(i, None)
        else:
            self.shadow[i] = new.shadow
        if new.evict_prior is None:
            self.evict_prior.pop(i, None)
        else:
            self.evict_prior[i] = new.evict_prior
        for c in added:
            self._account_copy(i, c, +1)
        self._account_queue(i, +1)

    def _can_restatus(self, i: int) -> bool:
        """Whether :meth:`_restatus` may change task ``i``'s status where it is: a whole-GPU task with its devices
        known or a CPU-only one, no MIG instances, no releasing copies of earlier moves, on a node."""
        k = self.kind_list[i]
        return (self._simple_apply and k <= KIND_WHOLE and self.node[i] >= 0 and i not in self.shadow
                and i not in self.mig_req and (k == KIND_NONE or bool(self.indices[i])))

    def _restatus(self, i: int, status: str, evict_prior: Optional[str]) -> None:
        """:meth:`_apply` to the task's state with only ``status`` (both statuses holding the node) and
        ``evict_prior`` changed, for a task :meth:`_can_restatus` allows (an eviction where the task is, and its
        undoing): :meth:`_apply_simple`'s same-node path, with the same node, queue and predicate calls."""
        j = self.task_job[i]
        self.job_version[j] += 1
        st0, n = self.status[i], self.node[i]
        idx = self.indices[i] if self.kind_list[i] == KIND_WHOLE else None
        self._restatus_on_node(i, n, self._row_cache.get(i) or self._task_row(i), st0, status, idx, idx)
        q = self.job_queue[j]
        if q >= 0:
            amount = (self.accepted[i], self._cpu_l[i], self._mem_l[i])   # queue_amount's values, as plain floats
            if st0 in COUNTS_IN_QUEUE:
                self.queues.add(q, amount, self.job_non_preemptible[j], -1.0)
            if status in COUNTS_IN_QUEUE:
                self.queues.add(q, amount, self.job_non_preemptible[j], 1.0)
        self.status[i] = status
        if evict_prior is None:
            self.evict_prior.pop(i, None)
        else:
            self.evict_prior[i] = evict_prior

    def _restatus_on_node(self, i: int, n: int, vec, st0: str, st1: str, idx0: Optional[list],
                          idx1: Optional[list]) -> None:
        """Node and predicate accounting of task ``i`` going from ``st0`` (devices ``idx0``) to ``st1`` (``idx1``)
        where it is, node ``n``: :meth:`NodeState.restatus`, the same arithmetic as a remove and an add."""
        self.nodes.restatus(n, vec, st0, st1, idx0, idx1, owner=i)
        if self.predicates.tracking:
            self.predicates.remove(i, n)
            self.predicates.add(i, n)

    def _can_move(self, i: int) -> bool:
        """Whether :meth:`_apply_move` may move task ``i`` (releasing, evicted in this session) elsewhere: the case of
        :meth:`_apply` that keeps its releasing placement as the move's only copy (no copies of earlier moves)."""
        return (self._simple_apply and self._move_apply and self.kind_list[i] <= KIND_WHOLE and self.node[i] >= 0
                and i not in self.shadow and i not in self.mig_req)

    def _apply_move(self, i: int, new: _TaskState, undo: bool = False) -> None:
        """:meth:`_apply` for a move :meth:`_can_move` allows (``new``: pipelined elsewhere, with the releasing
        placement as its copy) and, ``undo``, for its undoing (``new``: the releasing placement before the move),
        without re-deriving which case it is."""
        self.job_version[self.task_job[i]] += 1
        self._apply_simple(i, new, keep_old=not undo, reuse_new=undo)

    _simple_apply = True
    """Use :meth:`_apply_simple` where it applies (tests compare it with the general path)."""

    _move_apply = True
    """Let :meth:`_apply_simple` take a move and its undoing too (tests compare it with the general path)."""

    @staticmethod
    def _is_own_copy(shadow, status: str, node: int, groups, indices) -> bool:
        """Whether ``shadow`` (a task's releasing copies) is exactly one copy, the releasing placement
        ``(status, node, groups, indices)``: the copy :meth:`_copies` matches with that placement."""
        if shadow is None or len(shadow) != 1 or status != "releasing" or node < 0:
            return False
        sn, sg, si, _ = shadow[0]
        return sn == node and list(sg) == list(groups) and list(si) == list(indices)

    def _apply_simple(self, i: int, new: _TaskState, keep_old: bool = False, reuse_new: bool = False) -> None:
        """:meth:`_apply` for a task without shared GPU, MIG instances or releasing copies of earlier moves (on
        either side): at most one placement changes, accounted with the same calls in the same order, and a
        status change on the same node writes the node's derived rows once.

        Also a move of such a task (``keep_old``: its releasing placement becomes the move's only copy, which
        the general path leaves where it is) and its undoing (``reuse_new``: that copy becomes the releasing
        placement again), with the general path's calls in its order."""
        status, node = self.status, self.node
        st0, n0 = status[i], node[i]
        st1, n1 = new.status, new.node
        occ0 = n0 >= 0 and st0 in OCCUPIES_NODE
        occ1 = n1 >= 0 and st1 in OCCUPIES_NODE
        groups, indices = self.groups, self.indices
        idx0, idx1 = indices[i], new.indices
        change = not (occ0 and occ1 and st0 == st1 and n0 == n1 and groups[i] == new.groups and idx0 == idx1)
        whole = self.kind_list[i] == KIND_WHOLE
        ns = self.nodes
        vec = self._row_cache.get(i) or self._task_row(i)
        tracking = self.predicates.tracking
        if occ1 and n0 == n1 and occ0 and change and not keep_old and not reuse_new and (not whole or idx0 and idx1):
            # a status change where the task is (an eviction, its undoing): one node call, the same arithmetic
            self._restatus_on_node(i, n0, vec, st0, st1, idx0 if whole else None, idx1 if whole else None)
            occ0 = occ1 = False   # accounted: only the queue and the task's fields change below
        if occ0 and change and not keep_old:
            # _whole_slots claims anonymous devices only when the task has none; ns.remove does not keep the list
            ns.remove(n0, vec, st0, None, (idx0 or self._whole_slots(i, n0, st0)) if whole else None, owner=i,
                      derive=not (occ1 and n0 == n1 and not reuse_new))
            if tracking:
                self.predicates.remove(i, n0)
        j = self.task_job[i]
        q = self.job_queue[j]
        accepted = self.accepted
        if q >= 0 and st0 in COUNTS_IN_QUEUE:   # queue_amount's values, as plain floats
            self.queues.add(q, (accepted[i], self._cpu_l[i], self._mem_l[i]), self.job_non_preemptible[j], -1.0)
        status[i] = st1
        node[i] = n1
        groups[i] = new.groups
        indices[i] = idx1
        accepted[i] = new.accepted
        if new.shadow is None:
            if reuse_new:
                del self.shadow[i]
        else:
            self.shadow[i] = new.shadow
        if new.evict_prior is None:
            self.evict_prior.pop(i, None)
        else:
            self.evict_prior[i] = new.evict_prior
        if occ1 and change and not reuse_new:
            ns.add(n1, vec, st1, None, (idx1 or self._whole_slots(i, n1, st1)) if whole else None, owner=i)
            if tracking:
                self.predicates.add(i, n1)
        if q >= 0 and st1 in COUNTS_IN_QUEUE:
            self.queues.add(q, (accepted[i], self._cpu_l[i], self._mem_l[i]), self.job_non_preemptible[j], 1.0)

    # ================================================================== jobs

    def active_allocated(self, ps: PodSet) -> int:
        st = self.status
        return sum(1 for i in ps.tasks if st[i] in ACTIVE_ALLOCATED)

    def pending_tasks(self, ps: PodSet) -> list[int]:
        st = self.status
        return [i for i in ps.tasks if st[i] == "pending"]

    def has_pending(self, j: int) -> bool:
        st = self.status
        return any(st[i] == "pending" for i in self.jobs[j].tasks)

    def is_ready(self, j: int) -> tuple[bool, Optional[PodSet], int]:
        """KAI ``IsReadyForScheduling``: alive tasks ≥ min_available in every gang.
        Returns ``(ready, first short gang, its alive count)``."""
        st = self.status
        for ps in self.podsets(j):
            alive = sum(1 for i in ps.tasks if st[i] in ALIVE)
            if alive < ps.min_available:
                return False, ps, alive
        return True, None, 0

    def elastic_state(self, j: int) -> int:
        """KAI ``elastic`` job order: 0 below min_available, 1 exactly at, 2 above."""
        version = self.job_version[j]
        hit = self._elastic_memo.get(j)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = self._elastic_state(j)
        self._elastic_memo[j] = (version, value)
        return value

    def _elastic_state(self, j: int) -> int:
        exactly = True
        for ps in self.podsets(j):
            n = self.active_allocated(ps)
            if n < ps.min_available:
                return 0
            if n > ps.min_available:
                exactly = False
        return 1 if exactly else 2

    def tasks_to_allocate(self, j: int) -> list[int]:
        """KAI ``GetTasksToAllocate``: gang phase = (min − active) pending tasks of every unsatisfied
        gang; once every gang is satisfied, exactly one more task (elastic growth)."""
        cached = self._tta_cache.get(j)
        if cached is not None and cached[0] == self.job_version[j]:
            return list(cached[1])
        out = self._tasks_to_allocate(j)
        self._tta_cache[j] = (self.job_version[j], out)
        return list(out)

    def _tasks_to_allocate(self, j: int) -> list[int]:
        sets = self.podsets(j)
        counts = [self.active_allocated(ps) for ps in sets]
        if any(c < ps.min_available for c, ps in zip(counts, sets)):
            out: list[int] = []
            for c, ps in zip(counts, sets):
                if c < ps.min_available:
                    out.extend(self.pending_tasks(ps)[: ps.min_available - c])
            return out
        for ps in sets:
            pend = self.pending_tasks(ps)
            if pend:
                return pend[:1]
        return []

    def job_request(self, j: int, tasks: list[int], gpu_mem_for_memory: Optional[float]) -> np.ndarray:
        """(GPUs, cpu, memory) the given tasks request."""
        return np.array(self._job_request(tasks, gpu_mem_for_memory))

    def _job_request(self, tasks: list[int], gpu_mem_for_memory: Optional[float]) -> tuple[float, float, float]:
        """:meth:`job_request` as plain floats."""
        g = c = m = 0.0   # the same float64 sums as accumulating into an array, without numpy per task
        cpu, mem, kinds, gpu = self._cpu_l, self._mem_l, self.kind_list, self._gpu_l
        for i in tasks:
            k = kinds[i]
            # request_gpus, inlined for whole-GPU and CPU-only tasks (float(gpu[i]) is _gpu_l[i])
            g += gpu[i] if k <= KIND_WHOLE else self.request_gpus(i, gpu_mem_for_memory)
            c += cpu[i]
            m += mem[i]
        return g, c, m

    def job_over_capacity(self, j: int, tasks: list[int]) -> Optional[tuple[str, str, dict]]:
        """KAI ``IsJobOverQueueCapacity``: limit up the hierarchy, then (non-preemptible jobs) deserved.
        gpu-memory requests are converted with the largest node GPU memory. Returns
        ``(reason, message, details)`` or None."""
        info = self.jobs[j]
        req = self._job_request(tasks, self.max_gpu_mem)
        qs = self.queues
        hit = qs.over_limit(info.queue, req)
        if hit is None and info.preemptible:
            return None
        req = np.array(req)
        if hit is not None:
            a, r = hit
            return "OverLimit", _over_limit_message(qs.names[a], r, qs.limit[a, r], qs.allocated[a, r], req[r]), \
                self._queue_details(a, r, req, info)
        if not info.preemptible:
            hit = qs.non_preemptible_over_quota(info.queue, req)
            if hit is not None:
                a, r = hit
                return "NonPreemptibleOverQuota", _np_over_quota_message(
                    qs.names[a], r, qs.deserved[a, r], qs.allocated_np[a, r], req[r]), \
                    self._queue_details(a, r, req, info)
        return None

    def _queue_details(self, a: int, r: int, req: np.ndarray, info: JobInfo) -> dict:
        qs = self.queues
        return {"queue": qs.names[a], "resource": RESOURCES[r],
                "job_requested": dict(zip(RESOURCES, req.tolist())),
                "queue_deserved": dict(zip(RESOURCES, qs.deserved[a].tolist())),
                "queue_limit": dict(zip(RESOURCES, qs.limit[a].tolist())),
                "queue_allocated": dict(zip(RESOURCES, qs.allocated[a].tolist())),
                "queue_allocated_non_preemptible": dict(zip(RESOURCES, qs.allocated_np[a].tolist())),
                "queue_requested": dict(zip(RESOURCES, qs.requested[a].tolist())),
                "job_preemptible": info.preemptible}

    # ================================================================== node fit and order

    def fit(self, i: int) -> NodeFit:
        """Where task ``i`` fits over every node: idle + releasing resources (KAI ``FittingNode``), idle
        only (``IsTaskAllocatable``); the per-check masks stay available for the fit error."""
        return self._eval(i, slice(None))

    def _eval(self, i: int, rows) -> NodeFit:
        """:meth:`fit` restricted to ``rows`` (an index array or a slice), plus each node's local score
        (see :meth:`best_node`) in ``NodeFit.local``."""
        ns = self.nodes
        cpu, mem = float(self.cpu[i]), float(self.mem[i])
        fT, iT = ns.freeT[:, rows], ns.idleT[:, rows]
        cpu_ok, mem_ok, pods_ok = fT[CPU] >= cpu, fT[MEM] >= mem, fT[PODS] >= 1
        base_idle = (iT[CPU] >= cpu) & (iT[MEM] >= mem) & (iT[PODS] >= 1)
        ready = ns.ready[rows]
        k = self.kind_list[i]
        shared_fit = task_mem = cap_ok = None
        if k == KIND_NONE:
            # KAI compares the whole request vector, GPUs too (0 <= the node's GPUs): a node whose idle (or idle
            # + releasing) whole GPUs went negative — a shared GPU opened without an idle one, as KAI's own
            # accounting does — takes no CPU-only pod on idle (it is pipelined) or at all (node_info.go
            # lessEqualTaskToNodeResources).
            gpu_ok = self._whole_free(fT[GPU], rows) >= 0
            fits = ready & cpu_ok & mem_ok & pods_ok & gpu_ok
            idle_fit = fits & base_idle & (self._whole_idle(iT[GPU], rows) >= 0)
            local = self._cpu_local(fT[CPU], ns.allocatable[rows, CPU]) + np.where(ns.cpu_only[rows], scores.RESOURCE_TYPE, 0.0)
            if self.config.placement.gpu == "binpack":  # gpusharingorder: 0 GPU memory fits every shared GPU
                local = local + np.where(ns.shared_gpu_in_use(rows), scores.GPU_SHARING, 0.0)
        elif k == KIND_WHOLE:
            need = float(self.node_gpu[i])
            mig = self.mig_req.get(i)
            whole_free = self._whole_free(fT[GPU], rows)
            if mig is not None:  # MIG instances of its profiles (KAI: scalar resources), not whole devices
                gpu_ok = ((ns.mig_idle[rows] + ns.mig_rel[rows]) >= mig[0]).all(axis=1) & mig[1]
                gpu_idle = (ns.mig_idle[rows] >= mig[0]).all(axis=1)
                if ns.mig_strategy:
                    gpu_ok = gpu_ok & ~ns.mig_single[rows]
            else:  # whole devices: the GPUs beside the node's MIG instances
                gpu_ok = whole_free >= need
                gpu_idle = self._whole_idle(iT[GPU], rows) >= need
                if ns.mig_strategy:
                    gpu_ok = gpu_ok & ~ns.mig_mixed[rows]
            fits = ready & cpu_ok & mem_ok & pods_ok & gpu_ok
            idle_fit = fits & base_idle & gpu_idle
            local = self._gpu_local(whole_free, ns.whole_gpus[rows])
        else:
            d = int(self.dev[i])
            gmem = ns.gpu_mem[rows]
            task_mem = (np.full(gmem.shape, float(self.gmem[i])) if k == KIND_MEMORY
                        else np.floor(float(self.gpu[i]) * gmem))
            valid = (ns.gpus[rows] > 0) & (task_mem <= gmem) & (gmem > 0)
            room = gmem[:, None] - ns.sh_alloc[rows] + ns.sh_rel[rows] - task_mem[:, None]
            shared_fit = (ns.sh_used[rows] != 0) & (room >= 0) & (ns.sh_alloc[rows] != ns.sh_rel[rows])
            # KAI fractionTaskGpusAllocatableDeviceCount stops counting at the request's device count, so matching
            # shared GPUs never make up for idle or releasing GPUs driven negative by pipelined tasks.
            count = np.minimum(shared_fit.sum(axis=1), d)
            whole_free = self._whole_free(fT[GPU], rows)
            gpu_ok = valid & (np.floor(whole_free) + count >= d)
            if ns.mig_strategy:
                gpu_ok = gpu_ok & ~(ns.mig_mixed[rows] | ns.mig_single[rows])
            # KAI checkMaxPodsWithGpuGroupReservation: a new shared GPU also needs a slot for its reservation pod,
            # and KAI takes any group whose id is not a number for a new one (ids are UUIDs in practice), so a
            # shared request needs two free pod slots unless it fits an existing group with a numeric id.
            pods_ok = fT[PODS] >= np.where((count >= d) & self._numeric_group_fit(shared_fit, rows), 1, 2)
            fits = ready & cpu_ok & mem_ok & pods_ok & gpu_ok
            if k == KIND_MEMORY:
                cap_ok = self._node_capacity_ok(i, task_mem, rows)
                fits &= cap_ok
            # KAI's IsTaskAllocatable counts matching shared GPUs including their releasing memory.
            whole_idle = iT[GPU] - ns.mig_eq_idle[rows] if self._mig_nodes else iT[GPU]
            idle_fit = fits & base_idle & valid & (np.floor(whole_idle) + count >= d)
            local = self._gpu_local(whole_free, ns.whole_gpus[rows])
            if self.config.placement.gpu == "binpack":
                local = local + np.where(count > 0, scores.GPU_SHARING, 0.0)
        dra_parts = self._dra_parts(i, k, rows) if self._dra_nodes is not None else {}
        for ok in dra_parts.values():
            fits = fits & ok
            idle_fit = idle_fit & ok
        static, static_parts = self.predicates.static(i)
        dynamic = self.predicates.dynamic(i, rows) if self.predicates.is_dynamic(i) else {}
        if static is not None:
            fits = fits & static[rows]
            idle_fit = idle_fit & fits
        for ok in dynamic.values():
            fits = fits & ok
            idle_fit = idle_fit & fits
        local = local + np.where(idle_fit, scores.AVAILABILITY, 0.0)
        parts = {"not ready": ready, "GPU": gpu_ok, "CPU": cpu_ok, "memory": mem_ok, "pods": pods_ok,
                 "queue quota on node": cap_ok}
        for name, ok in static_parts.items():
            parts[name] = ok[rows]
        parts.update(dra_parts)
        parts.update(dynamic)
        res = NodeFit(fits=fits, idle_fit=idle_fit, shared_fit=shared_fit, task_mem=task_mem, parts=parts)
        res.local = local
        return res

    def _whole_free(self, free_gpu: np.ndarray, rows) -> np.ndarray:
        """Idle + releasing whole GPUs of nodes ``rows``: KAI's GPU column, without MIG instances."""
        return free_gpu - self.nodes.mig_eq_free[rows] if self._mig_nodes else free_gpu

    def _whole_idle(self, idle_gpu: np.ndarray, rows) -> np.ndarray:
        """Idle whole GPUs of nodes ``rows``, without MIG instances (see :meth:`_whole_free`)."""
        return idle_gpu - self.nodes.mig_eq_idle[rows] if self._mig_nodes else idle_gpu

    def _numeric_group_fit(self, shared_fit: np.ndarray, rows) -> np.ndarray:
        """Per node: the request fits an existing shared GPU whose group id is a number (KAI ``isNewGpuGroup``)."""
        ns = self.nodes
        out = np.zeros(shared_fit.shape[0], dtype=bool)
        if not self._numeric_groups:
            return out
        idx = np.arange(ns.n)[rows]
        for k, n in enumerate(np.atleast_1d(idx).tolist()):
            out[k] = any(shared_fit[k, s] and g.isdigit() for s, g in ns.slot_group[n].items())
        return out

    def _eval_node(self, i: int, n: int) -> tuple[bool, bool, float]:
        """:meth:`_eval` for one node and a CPU-only or whole-GPU task, in plain Python (the hot path of
        incremental node ordering): ``(fits, fits on idle, local score)``."""
        ns = self.nodes
        f0, f1, f2, f3 = ns.free_rows[n]
        i0, i1, i2, i3 = ns.idle_rows[n]
        cpu, mem = self._cpu_l[i], self._mem_l[i]
        fits = self._node_ready[n] and f1 >= cpu and f2 >= mem and f3 >= 1
        idle = i1 >= cpu and i2 >= mem and i3 >= 1
        if self._mig_nodes:
            f0, i0 = f0 - float(ns.mig_eq_free[n]), i0 - float(ns.mig_eq_idle[n])  # whole GPUs only
        if self.kind_list[i] == KIND_NONE:
            fits = fits and f0 >= 0   # the GPU entry of KAI's request vector (see _eval)
            idle = idle and i0 >= 0
            one = self._cpu_one
            local = (one(f1, self._node_cpu[n], self._max_cpu) if one is not None else
                     float(self._cpu_local(np.array([f1]), ns.allocatable[n:n + 1, CPU])[0]))
            if self._node_cpu_only[n]:
                local += scores.RESOURCE_TYPE
            elif self._gpu_sharing_order and ns.slot_group[n] and ns.shared_gpu_in_use(n):
                local += scores.GPU_SHARING
        else:
            need = self._node_gpu_l[i]
            mig = self.mig_req.get(i) if self.mig_req else None
            if mig is not None:
                fits = fits and mig[1] and bool(((ns.mig_idle[n] + ns.mig_rel[n]) >= mig[0]).all()) \
                    and not ns.mig_single[n]
                idle = idle and bool((ns.mig_idle[n] >= mig[0]).all())
            else:
                fits = fits and f0 >= need and not ns.mig_mixed[n]
                idle = idle and i0 >= need
            one = self._gpu_one
            local = (one(f0, self._node_gpus[n], self._max_gpus) if one is not None else
                     float(self._gpu_local(np.array([f0]), ns.whole_gpus[n:n + 1])[0]))
        if fits and self._dra_nodes is not None:
            fits = self._dra_fits_node(i, n)
        if fits and self.predicates_apply:
            static = self.predicates.static(i)[0]
            if static is not None and not static[n]:
                fits = False
            elif self.predicates.is_dynamic(i):
                fits = all(bool(ok[n]) for ok in self.predicates.dynamic(i).values())
        idle = fits and idle
        if idle:
            local += scores.AVAILABILITY
        return fits, idle, local

    def _gpu_local(self, free: np.ndarray, total: np.ndarray) -> np.ndarray:
        fn = getattr(self.gpu_strategy, "local_score", None)
        return fn(free, total, self._max_gpus) if fn else np.zeros(free.shape)

    def _cpu_local(self, free: np.ndarray, total: np.ndarray) -> np.ndarray:
        fn = getattr(self.cpu_strategy, "local_score", None)
        return fn(free, total, self._max_cpu) if fn else np.zeros(free.shape)

    def _node_capacity_ok(self, i: int, task_mem: np.ndarray, rows=slice(None)) -> np.ndarray:
        """KAI ``IsTaskAllocationOnNodeOverCapacity`` for a gpu-memory request: the GPU amount depends on
        the node's GPU memory, so limit / non-preemptible quota are re-checked per node."""
        info = self.jobs[self.task_job[i]]
        ns, qs = self.nodes, self.queues
        gmem = ns.gpu_mem[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            gpus = int(self.dev[i]) * _mem_to_fraction(task_mem, np.where(gmem > 0, gmem, 1.0))
        ok = np.ones(gmem.shape, dtype=bool)
        if info.queue < 0:
            return ok
        for a in qs.chains[info.queue]:
            lim = qs.limit[a, R_GPU]
            if lim != UNLIMITED:
                ok &= lim >= qs.allocated[a, R_GPU] + gpus
            if not info.preemptible and qs.deserved[a, R_GPU] != UNLIMITED:
                ok &= qs.deserved[a, R_GPU] >= qs.allocated_np[a, R_GPU] + gpus
        return ok

    def node_scores(self, i: int, fit: NodeFit) -> np.ndarray:
        """Σ of KAI's node-order plugin scores for task ``i`` on every node (§e.5)."""
        ns = self.nodes
        score = np.where(fit.idle_fit, scores.AVAILABILITY, 0.0)
        if self.kind_list[i] == KIND_NONE:
            score += np.where(ns.cpu_only, scores.RESOURCE_TYPE, 0.0)
            score += self.cpu_strategy.score(ns.non_allocated(CPU), ns.allocatable[:, CPU], ns.ready)
            if self._gpu_sharing_order:
                score += np.where(ns.shared_gpu_in_use(slice(None)), scores.GPU_SHARING, 0.0)
        else:
            if fit.shared_fit is not None and self.config.placement.gpu == "binpack":
                score += np.where(fit.shared_fit.any(axis=1), scores.GPU_SHARING, 0.0)
            task_score = getattr(self.gpu_strategy, "task_score", None)  # per-task strategies (fragaware)
            if task_score is not None:
                score += task_score(self, i, fit)
            else:
                score += self.gpu_strategy.score(self._whole_free(ns.non_allocated(GPU), slice(None)), ns.whole_gpus,
                                                 ns.ready)
        nom = self.nominated.get(i)
        if nom is not None:
            score[nom] += scores.NOMINATED_NODE
        if self.predicates_apply:
            affinity = self.predicates.preferred_score(i)
            if affinity is not None:
                score += scores.K8S_PLUGINS * affinity
        return score

    def ordered_nodes(self, i: int, fit: Optional[NodeFit] = None) -> list[int]:
        """Fitting nodes for task ``i`` in KAI's order: score descending, then node name."""
        fit = fit or self.fit(i)
        cand = np.nonzero(fit.fits)[0]
        if cand.size == 0:
            return []
        sc = self.node_scores(i, fit)[cand]
        order = np.lexsort((cand, -sc))
        return cand[order].tolist()

    def topology_index(self):
        """The snapshot's topologies over this session's nodes (:mod:`scheduler.placement.topology`), built on
        first use."""
        if self._topology is None:
            from ..placement.topology import TopologyIndex
            self._topology = TopologyIndex(self)
        return self._topology

    def best_node(self, i: int, fit: Optional[NodeFit] = None, allowed: Optional[np.ndarray] = None,
                  bonus: Optional[np.ndarray] = None) -> int:
        """The first node of :meth:`ordered_nodes` (or -1), without sorting them all; ``allowed`` (a boolean
        mask over nodes) restricts the choice, as KAI's eviction simulations do to their feasible nodes and its
        topology plugin to a domain; ``bonus`` adds per-node scores (the topology plugin's).

        Node order only compares nodes, so each node's score may be replaced by any value that orders
        nodes the same way. Strategies with ``local_score`` give such a per-node value; then a cache per
        request shape keeps every node's value and, on the next query, recomputes only the nodes changed
        since (``NodeState.change_log``): placing a task touches one node, not 4,000. gpu-memory requests
        (their per-node quota check depends on the queue) and strategies without ``local_score`` are scored
        in full each time.
        """
        if self.nodes.n == 0:
            return -1  # an empty cluster (e.g. nodes not readable yet): nothing fits anywhere
        if self.predicates_apply:
            self.predicates.note_placement_attempt(i)
        if fit is not None:
            fits = fit.fits if allowed is None else fit.fits & allowed
            if not fits.any():
                if self.predicates_apply:  # KAI scores pod affinity before the fit check, even when none fits
                    self.predicates.preferred_score(i)
                return -1
            sc = self.node_scores(i, fit)
            if bonus is not None:
                sc = sc + bonus
            return int(np.argmax(np.where(fits, sc, -np.inf)))
        values = self.node_values(i)
        if values is None:
            return self.best_node(i, self.fit(i), allowed, bonus)
        if allowed is not None:  # a topology domain (and its node scores): KAI's node subsets
            values = np.where(allowed, values if bonus is None else values + bonus, -np.inf)
        nom = self.nominated.get(i)
        if nom is not None and values[nom] > -np.inf:
            values = values.copy()
            values[nom] += scores.NOMINATED_NODE
        n = int(np.argmax(values))
        return n if values[n] > -np.inf else -1

    def node_values(self, i: int) -> Optional[np.ndarray]:
        """Per node, task ``i``'s local score where it fits and ``-inf`` where it does not, from the cache per
        request shape that :meth:`best_node` keeps (refreshed for the nodes changed since its last use; do not
        modify the result). None when the request is scored in full each time (see :meth:`best_node`)."""
        key = self.shape_key(i)
        if key is None:
            return None
        k = key[0]
        log = self.nodes.change_log
        entry = self._order_cache.get(key)
        if entry is None:
            f = self._eval(i, slice(None))
            entry = [len(log), np.where(f.fits, f.local, -np.inf)]
            self._order_cache[key] = entry
        elif entry[0] < len(log):
            changed = log[entry[0]:]
            if len(changed) <= 4096:   # np.unique's nodes in its order, without numpy's cost on a few entries
                dirty_list = sorted(set(changed))
            else:
                dirty_list = np.unique(np.array(changed, dtype=np.int64)).tolist()
            if k <= KIND_WHOLE and len(dirty_list) <= _NODE_BY_NODE:
                vals = entry[1]
                for n in dirty_list:
                    fits, _, local = self._eval_node(i, n)
                    vals[n] = local if fits else -np.inf
            elif len(dirty_list) > self.nodes.n // 4:
                f = self._eval(i, slice(None))
                entry[1] = np.where(f.fits, f.local, -np.inf)
            else:
                dirty = np.array(dirty_list, dtype=np.int64)
                f = self._eval(i, dirty)
                entry[1][dirty] = np.where(f.fits, f.local, -np.inf)
            entry[0] = len(log)
        return entry[1]

    def shape_key(self, i: int) -> Optional[tuple]:
        """The request shape of task ``i`` that :meth:`node_values` caches under: two tasks of one shape fit and
        score every node alike in every state. None when the request is scored in full each time."""
        if self._dra_nodes is None and not self.predicates.tracking:
            key = self._shape_keys.get(i)   # stored only after the checks below, which cannot change here
            if key is not None:
                return key
        k = self.kind_list[i]
        strategy = self.cpu_strategy if k == KIND_NONE else self.gpu_strategy
        if (k == KIND_MEMORY or not hasattr(strategy, "local_score") or self.predicates.is_dynamic(i)
                or i in self.mig_req):
            return None
        key = self._shape_keys.get(i) if self._dra_nodes is None else None
        if key is None:
            static = self.predicates.static(i)[0]
            key = (k, float(self.node_gpu[i]), int(self.dev[i]), float(self.cpu[i]), float(self.mem[i]),
                   None if static is None else id(static),
                   None if self._dra_nodes is None else (self.dra_task[i], self.dra_pin.get(i),
                                                         self.dra_blocked.get(i)))
            if self._dra_nodes is None:   # a task's request and static mask stay; its DRA pins do not
                self._shape_keys[i] = key
        return key

    # ================================================================== placing one task

    def place(self, stmt, i: int, n: int, fit: Optional[NodeFit] = None, pipeline_only: bool = False) -> bool:
        """Put task ``i`` on node ``n`` through ``stmt``: allocate when it fits on idle resources, else
        pipeline onto releasing ones (KAI ``allocateTaskToNode``). Shared-GPU requests choose devices by
        the GPU order (``AllocateFractionalGPUTaskToNode``)."""
        if fit is None and self.kind_list[i] <= KIND_WHOLE:
            fits, idle_ok, _ = self._eval_node(i, n)
            if not fits:
                return False
            return self._place_whole(stmt, i, n, idle_ok, pipeline_only)
        if fit is None or fit.fits.shape[0] != self.nodes.n:
            one = self._eval(i, np.array([n]))
            fit = NodeFit(fits=_scatter(one.fits, n, self.nodes.n), idle_fit=_scatter(one.idle_fit, n, self.nodes.n),
                          shared_fit=None if one.shared_fit is None else _scatter(one.shared_fit, n, self.nodes.n),
                          task_mem=None if one.task_mem is None else _scatter(one.task_mem, n, self.nodes.n))
            if not fit.fits[n]:
                return False
        if self.is_shared(i):
            return self._place_shared(stmt, i, n, fit, pipeline_only)
        return self._place_whole(stmt, i, n, bool(fit.idle_fit[n]), pipeline_only)

    def _place_whole(self, stmt, i: int, n: int, idle_ok: bool, pipeline_only: bool) -> bool:
        pipelined = pipeline_only or not idle_ok
        indices = self.nodes.free_whole_slots(n, int(self._node_gpu_l[i]), pipelined) if self.kind_list[i] == KIND_WHOLE else []
        if not pipelined:
            stmt.allocate(i, n, indices=indices)
        else:
            stmt.pipeline(i, n, indices=indices, update_if_on_node=not pipeline_only)
        return True

    def _place_shared(self, stmt, i: int, n: int, fit: NodeFit, pipeline_only: bool) -> bool:
        ns = self.nodes
        d = int(self.dev[i])
        task_mem = float(fit.task_mem[n])
        node_idle = bool(fit.idle_fit[n])
        shared = [(int(s), ns.group_used(n, int(s)) / float(ns.gpu_mem[n])) for s in np.nonzero(fit.shared_fit[n])[0]]
        # KAI: int(idle) + int(releasing) whole-GPU candidates (Go truncation; releasing goes negative when
        # pipelined tasks take more than is releasing, and then cancels idle GPUs they will use).
        idle_gpu = ns.idle_rows[n][GPU]
        whole_count = max(int(idle_gpu) + int(ns.rel_rows[n][GPU]), 0)
        idle_whole = min(max(int(idle_gpu), 0), whole_count)
        order = gpu_order.order_candidates(self.config.gpu_device_order, shared, whole_count)
        device_order = getattr(self.gpu_strategy, "device_order", None)    # per-task strategies (fragaware)
        if device_order is not None:
            order = device_order(self, i, n, order, {s: 1.0 - u for s, u in shared})
        groups, slots, releasing = [], [], False
        whole_taken = 0
        for c in order:
            if c == gpu_order.WHOLE:
                # KAI lists one whole-GPU candidate per idle and per releasing GPU, all with the same score, and
                # pipelines onto one only when the node-level IsTaskAllocatable fails (gpu_sharing/gpuSharing.go
                # findGpuForSharingOnNode): a fraction that also fits an existing shared GPU is bound on a new one
                # even when the whole GPUs left are releasing. Devices: idle ones first, then releasing ones.
                on_idle = whole_taken < idle_whole
                whole_taken += 1
                is_rel = pipeline_only or not node_idle
                slot = self._new_slot(n, is_rel or not on_idle, exclude=slots, join_releasing=is_rel)
                if slot is None and not is_rel:
                    slot = self._new_slot(n, True, exclude=slots, join_releasing=False)
                if slot is None:
                    continue
                group = ns.slot_group[n].get(slot) or self._new_group_id(n, slot)
            else:
                is_rel = (not ns.group_fits_idle(n, c, task_mem)) or not node_idle
                slot, group = c, ns.slot_group[n][c]
            releasing = releasing or is_rel
            groups.append(group)
            slots.append(slot)
            if len(slots) == d:
                break
        if len(slots) < d:
            return False
        if pipeline_only or releasing:
            stmt.pipeline(i, n, groups=groups, indices=slots, update_if_on_node=not pipeline_only)
        else:
            stmt.allocate(i, n, groups=groups, indices=slots)
        return True

    def _new_slot(self, n: int, releasing: bool, exclude: list[int], join_releasing: bool = True) -> Optional[int]:
        """Device for a newly opened shared GPU: the lowest idle device; with ``releasing`` the lowest releasing
        one first (a releasing whole GPU, then — ``join_releasing``, pipelined placements only — a GPU whose
        fractions are all releasing). None when no such device is left."""
        ns = self.nodes
        exists = ns.slot_exists[n]
        grouped = np.zeros(ns.g, dtype=bool)
        for s in list(ns.slot_group[n]) + list(exclude):
            grouped[s] = True
        empty = exists & (ns.sh_used[n] == 0) & ~grouped
        idle = np.nonzero(empty & (ns.slot_whole[n] == SLOT_FREE))[0]
        if releasing:
            rel_whole = np.nonzero(empty & (ns.slot_whole[n] == SLOT_RELEASING))[0]
            if rel_whole.size:
                return int(rel_whole[0])
            # a releasing GPU that a pipelined group already took (NodeState.opened_by_pipelining) is not free:
            # KAI opens that group on it and counts the releasing GPU used
            rel_shared = [s for s in np.nonzero(exists & ns.sh_marked[n])[0].tolist()
                          if s not in exclude and not ns.opened_by_pipelining(n, s)] if join_releasing else []
            if rel_shared:
                return rel_shared[0]  # joins the releasing GPU's group (KAI would open a new id there)
        if idle.size:
            return int(idle[0])
        # Counts and slots disagree (fractional external usage): a device marked external, or — pipelined
        # only — any device without a group. Never bind onto a device a task holds or is releasing.
        spare = np.nonzero(empty & (ns.slot_whole[n] == SLOT_EXTERNAL))[0]
        if not spare.size and releasing:
            spare = np.nonzero(empty)[0]
        return int(spare[0]) if spare.size else None

    # ================================================================== fit error summary

    def fit_error(self, i: int, fit: Optional[NodeFit] = None) -> tuple[str, dict]:
        """Why task ``i`` fits no node: ``"0/4 nodes fit: 3 insufficient GPU (need 2, max free 1), 1 not
        ready"`` and the numbers behind it."""
        fit = fit or self.fit(i)
        ns = self.nodes
        counts = {name: int(mask.sum()) for name, mask in fit.failures.items() if mask.any() and not fit.fits.all()}
        parts = []
        details: dict = {"nodes": ns.n, "nodes_fitting": int(fit.fits.sum()), "first_failure_counts": counts}
        for name, c in counts.items():
            if name == "not ready":
                parts.append(f"{c} not ready")
                continue
            if name in PREDICATE_REASONS:
                parts.append(f"{c} {PREDICATE_REASONS[name]}")
                continue
            need, have = self._need_and_max_free(i, name, fit)
            details[f"{name}_need"] = need
            details[f"{name}_max_free"] = have
            if name == "queue quota on node":
                parts.append(f"{c} over the queue's GPU limit/quota on that node")
            else:
                parts.append(f"{c} insufficient {name} (need {_num(need)}, max free {_num(have)})")
        msg = f"{int(fit.fits.sum())}/{ns.n} nodes fit: " + ", ".join(parts) if parts else \
            f"{int(fit.fits.sum())}/{ns.n} nodes fit"
        return msg, details

    def _need_and_max_free(self, i: int, name: str, fit: NodeFit) -> tuple[float, float]:
        ns = self.nodes
        ready = ns.ready
        if name == "CPU":
            return float(self.cpu[i]), float(ns.non_allocated(CPU)[ready].max(initial=0))
        if name == "memory":
            return float(self.mem[i]), float(ns.non_allocated(MEM)[ready].max(initial=0))
        if name == "pods":
            return 1.0, float(ns.non_allocated(PODS)[ready].max(initial=0))
        if name == "GPU":
            k = self.kind_list[i]
            if k == KIND_WHOLE:
                return float(self.gpu[i]), float(ns.non_allocated(GPU)[ready].max(initial=0))
            if k == KIND_NONE:  # no GPU asked: only nodes whose whole GPUs went negative fail it (see _eval)
                whole = self._whole_free(ns.non_allocated(GPU), slice(None))[ready]
                return 0.0, float(whole.max()) if whole.size else 0.0
            # shared: need = per-device fraction; max free = largest room on one device
            room = np.where(fit.shared_fit is not None and ns.sh_used > 0,
                            (ns.gpu_mem[:, None] - ns.sh_alloc + ns.sh_rel) / np.where(ns.gpu_mem > 0, ns.gpu_mem, 1)[:, None],
                            0.0)
            whole_free = np.floor(ns.non_allocated(GPU)) > 0
            best = np.where(whole_free, 1.0, room.max(axis=1, initial=0))
            need = float(self.gpu[i]) if k == KIND_FRACTION else float(self.gmem[i]) / (self.max_gpu_mem or 1)
            return need * int(self.dev[i]), float(best[ready].max(initial=0))
        return 0.0, 0.0

    # ================================================================== reasons

    def set_reason(self, j: int, reason: str, message: str, details: Optional[dict] = None) -> None:
        """Record why job ``j`` could not (fully) be placed (KAI's job fit errors)."""
        self.job_reasons[j] = (reason, message, dict(details or {}))

    def clear_reason(self, j: int) -> None:
        self.job_reasons.pop(j, None)

    # ================================================================== results

    def changed_tasks(self) -> list[int]:
        """Tasks whose status, node or GPU placement differs from the input snapshot."""
        objs = self.task_objs
        names = self.nodes.names
        status, node, groups, indices = self.status, self.node, self.groups, self.indices
        out = []
        for i, t in enumerate(objs):
            if status[i] != t.status:
                out.append(i)
                continue
            n = node[i]
            if (names[n] if n >= 0 else None) != t.node or groups[i] is not t.gpu_groups and groups[i] != t.gpu_groups \
                    or indices[i] is not t.gpu_indices and indices[i] != t.gpu_indices:
                out.append(i)
        return out

    def node_name(self, n: int) -> Optional[str]:
        return self.nodes.names[n] if n >= 0 else None

    def queue_stats(self) -> dict[str, dict[str, dict[str, float]]]:
        return {name: self.queues.stats(q) for q, name in enumerate(self.queues.names)}


_NODE_BY_NODE = 20
""":meth:`Session.node_values` re-scores up to this many changed nodes one by one (``_eval_node``, about 0.4 µs a
node) rather than through the vectorised ``_eval`` (about 15 µs however few nodes); both give the same values."""


def _scatter(values: np.ndarray, n: int, size: int) -> np.ndarray:
    """A length-``size`` array holding ``values[0]`` at ``n`` (a one-node evaluation seen as all nodes)."""
    out = np.zeros((size,) + values.shape[1:], dtype=values.dtype)
    out[n] = values[0]
    return out


def _mem_to_fraction(mem: np.ndarray, node_mem: np.ndarray) -> np.ndarray:
    """Vectorised :func:`scheduler.model.memory_to_fraction` (ceil to 0.01, KAI's float arithmetic)."""
    return np.ceil(mem / node_mem * 100) / 100


def _num(x: float) -> str:
    if abs(x) >= 1e6:
        return f"{x:.4g}"
    return f"{x:g}" if x == int(x) else f"{x:.4g}"


def _human(r: int, value: float) -> str:
    if r == R_GPU:
        return f"{value:g} GPUs"
    if r == R_CPU:
        return f"{value / 1000:g} cores"
    return f"{value / 1e9:.3g} GB"


def _over_limit_message(queue: str, r: int, limit: float, allocated: float, requested: float) -> str:
    """KAI ``GetJobOverMaxAllowedMessageForQueue`` wording."""
    name = {R_GPU: "GPUs", R_CPU: "CPU cores", R_MEM: "memory"}[r]
    return (f"{queue} quota has reached the allowable limit of {name}. Limit is {_human(r, limit)}, currently "
            f"{_human(r, allocated)} allocated and workload requested {_human(r, requested)}")


def _np_over_quota_message(queue: str, r: int, deserved: float, allocated_np: float, requested: float) -> str:
    """KAI ``GetBuildOverCapacityMessageForQueue`` wording."""
    return (f"Non-preemptible workload is over quota. Workload requested {_human(r, requested)}, but {queue} "
            f"quota is {_human(r, deserved)}, while {_human(r, allocated_np)} are already allocated for "
            f"non-preemptible pods. Use a preemptible workload to go over quota.")
