"""The cluster snapshot: plain data describing nodes, queues, jobs (pod groups) and tasks (pods).

This is kaidash's snapshot format v1 (see ``docs/snapshot-format.md``) as Python objects. Units are in the
field names: GPUs in devices (fractions allowed), CPU in millicores, memory in bytes, GPU memory in MiB,
times in seconds since the epoch. Loading, saving and validation live in :mod:`scheduler.snapshot_io`.

Everything here is plain data with no behaviour beyond small derived properties, so that sources can build
it, the engine can copy it and views can render it.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Optional

RESOURCES = ("gpu", "cpu", "memory")
"""The three resources KAI divides: GPU devices, CPU millicores, memory bytes."""

UNLIMITED = -1.0
"""KAI's ``-1``: unlimited quota (deserved = everything) or no limit."""

TASK_STATUSES = ("pending", "running", "binding", "releasing", "pipelined", "failed", "succeeded")
"""Task statuses a snapshot may hold. ``binding`` = allocated this cycle, bind not yet confirmed."""

ALLOCATED_STATUSES = frozenset({"running", "binding"})
"""Statuses that count toward a queue's Allocated at session open (KAI ``AllocatedStatus``)."""

ACTIVE_ALLOCATED_STATUSES = frozenset({"running", "binding", "pipelined"})
"""KAI ``ActiveAllocated``: counted for gangs and victim eligibility."""

ACTIVE_USED_STATUSES = frozenset({"running", "binding", "pipelined", "releasing"})
"""KAI ``ActiveUsed``: occupies node resources (releasing ones can be pipelined onto)."""

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
"""KAI's actions in the order a cycle runs them."""

PLACEMENT_STRATEGIES = ["binpack", "spread"]
"""Node placement strategies known to the engine; the placement registry may add more at import."""

GPU_DEVICE_ORDERS = ("pack", "spread")

DEFAULT_GPU_MEMORY_MIB = 100.0
"""KAI's ``DefaultGpuMemory``: the GPU memory of a node without a usable ``nvidia.com/gpu.memory`` label. Nodes at
or below it have no real GPU-memory value: KAI leaves them out of the smallest / largest node GPU memory."""

WAITING_FOR = ("pod-grouper", "queue")
"""Values of ``Job.waiting_for``."""

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
"""Node selector requirement operators (label selectors of pods use the first four)."""

MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")
"""A MIG profile as in ``nvidia.com/mig-<profile>``: ``<G>g.<M>gb``, G compute slices, M GB of memory."""


def mig_gpus(profile: str) -> int:
    """GPU-equivalents of one MIG instance as KAI counts them for quota and fair share: its compute slices G
    (``common_info/resources/mig.go``); 0 for a name that is not a MIG profile."""
    m = MIG_PROFILE.match(profile)
    return int(m.group(1)) if m else 0


def mig_gpu_total(instances: dict[str, int]) -> int:
    """GPU-equivalents of MIG instances by profile (Σ G × count)."""
    return sum(mig_gpus(p) * c for p, c in instances.items())


def mig_memory_mib(profile: str) -> float:
    """GPU memory of one MIG instance from its profile name: M GB of ``<G>g.<M>gb`` as M × 1024 MiB (a
    ``1g.10gb`` instance has 10 GiB); 0 for a name that is not a MIG profile."""
    m = MIG_PROFILE.match(profile)
    return float(m.group(2)) * 1024.0 if m else 0.0


def mig_memory_total_mib(instances: dict[str, int]) -> float:
    """GPU memory of a pod's MIG instances together (Σ M × count); 0 without MIG instances."""
    return sum(mig_memory_mib(p) * c for p, c in instances.items())


def mig_cell_memory_mib(instances: dict[str, int]) -> float:
    """GPU memory per GPU-equivalent of a pod's MIG instances: their memory spread over the G cells they count
    as (Σ M × count / Σ G × count); 0 without MIG instances. A ``1g.10gb`` pod has 10 GiB on its one cell, a
    ``3g.40gb`` pod 40/3 GiB on each of its three."""
    cells = mig_gpu_total(instances)
    return mig_memory_total_mib(instances) / cells if cells else 0.0


DEFAULT_QUEUE_PRIORITY = 100
DEFAULT_JOB_PRIORITY = 50
NON_PREEMPTIBLE_PRIORITY = 100
"""A job with no explicit preemptibility is non-preemptible iff its priority is >= 100 (KAI)."""


@dataclass
class PlacementConfig:
    """KAI's ``nodeplacement`` plugin arguments: strategy for GPU tasks and for CPU-only tasks."""

    gpu: str = "binpack"
    cpu: str = "binpack"


@dataclass
class SchedulerConfig:
    """The scheduler knobs a snapshot carries (KAI's SchedulingShard / scheduler config)."""

    actions: list[str] = field(default_factory=lambda: list(ACTIONS))
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    gpu_device_order: str = "pack"
    k_value: float = 1.0
    stale_grace_period_s: float = 60.0
    allow_consolidating_reclaim: bool = True
    max_consolidation_preemptees: int = -1
    default_preempt_min_runtime_s: float = 0.0
    default_reclaim_min_runtime_s: float = 0.0
    reclaimer_saturation_multiplier: float = 1.0
    min_runtime_resolve: str = "lca"
    schedule_period_s: float = 1.0
    use_scheduling_signatures: bool = True


@dataclass
class ExternalUsage:
    """Resources on a node held by pods of other schedulers: KAI subtracts them from capacity."""

    gpus: float = 0.0
    cpu_millis: float = 0.0
    memory_bytes: float = 0.0
    pods: int = 0


@dataclass
class Taint:
    """A node taint (``spec.taints[]``)."""

    key: str
    effect: str = "NoSchedule"
    value: str = ""


@dataclass
class Toleration:
    """A pod toleration (``spec.tolerations[]``); an empty key with ``Exists`` tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.key == taint.key and self.value == taint.value


@dataclass
class Requirement:
    """One requirement of a node selector term or a label selector: ``key operator values``."""

    key: str
    operator: str = "In"
    values: list[str] = field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes' selector semantics (``Gt`` / ``Lt`` compare integers)."""
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        try:
            have, bound = int(value), int(self.values[0])  # type: ignore[arg-type]
        except (TypeError, ValueError, IndexError):
            return False
        return have > bound if op == "Gt" else have < bound


@dataclass
class NodeSelectorTerm:
    """One term of a required node affinity: every requirement must hold (``match_fields`` read the node's
    ``metadata.name``)."""

    match_expressions: list[Requirement] = field(default_factory=list)
    match_fields: list[Requirement] = field(default_factory=list)


@dataclass
class LabelSelector:
    """A pod label selector: ``match_labels`` and ``match_expressions`` must all hold (empty = everything)."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: list[Requirement] = field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        return all(r.matches(labels) for r in self.match_expressions)


@dataclass
class PodAffinityTerm:
    """A required inter-pod (anti-)affinity term: pods matching ``selector`` in ``namespaces`` (None: the pod's
    own namespace; empty list with ``all_namespaces``: every namespace) within the same ``topology_key`` domain."""

    selector: LabelSelector
    topology_key: str
    namespaces: Optional[list[str]] = None
    all_namespaces: bool = False
    weight: int = 0  # preferred terms only (1-100)

    def applies_to(self, namespace: str, own_namespace: str) -> bool:
        if self.all_namespaces:
            return True
        return namespace in self.namespaces if self.namespaces else namespace == own_namespace


@dataclass
class HostPort:
    """A host port a pod binds (``containers[].ports[].hostPort``)."""

    port: int
    protocol: str = "TCP"
    host_ip: str = ""

    def conflicts(self, other: "HostPort") -> bool:
        """Kubernetes' NodePorts check: same port and protocol, and the same IP or either on all addresses."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wild = ("", "0.0.0.0", "::")
        return self.host_ip in wild or other.host_ip in wild or self.host_ip == other.host_ip


@dataclass
class PodConstraints:
    """What KAI's predicates read from a pod spec (snapshot format v1.1): labels (for others' inter-pod
    affinity), tolerations, node selector, required node affinity, required and preferred inter-pod affinity and
    anti-affinity, host ports, and the ConfigMaps it needs. Tasks of one job may share one instance: treat it as
    read-only."""

    labels: dict[str, str] = field(default_factory=dict)
    tolerations: list[Toleration] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: list[NodeSelectorTerm] = field(default_factory=list)
    pod_affinity: list[PodAffinityTerm] = field(default_factory=list)
    pod_anti_affinity: list[PodAffinityTerm] = field(default_factory=list)
    preferred_pod_affinity: list[PodAffinityTerm] = field(default_factory=list)
    preferred_pod_anti_affinity: list[PodAffinityTerm] = field(default_factory=list)
    host_ports: list[HostPort] = field(default_factory=list)
    config_maps: list[str] = field(default_factory=list)

    @property
    def filters_nodes(self) -> bool:
        """True when a node predicate depends on this pod (tolerations alone do not: taints decide)."""
        return bool(self.node_selector or self.node_affinity or self.pod_affinity or self.pod_anti_affinity
                    or self.host_ports)


@dataclass
class ExternalPod:
    """A pod of another scheduler that KAI's predicates see on a node: its namespace, the labels some inter-pod
    (anti-)affinity selector reads, its host ports and its required anti-affinity (symmetry)."""

    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    host_ports: list[HostPort] = field(default_factory=list)
    pod_anti_affinity: list[PodAffinityTerm] = field(default_factory=list)


@dataclass
class Node:
    """A Kubernetes node as the scheduler sees it (allocatable capacity)."""

    name: str
    gpus: int = 0
    gpu_memory_mib: float = 0.0
    cpu_millis: float = 0.0
    memory_bytes: float = 0.0
    pods: int = 110
    gpu_model: Optional[str] = None
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    external: ExternalUsage = field(default_factory=ExternalUsage)
    unschedulable: bool = False
    """``spec.unschedulable`` (cordoned): like a not-Ready node, it takes nothing and counts nothing."""
    taints: list[Taint] = field(default_factory=list)
    external_pods: list[ExternalPod] = field(default_factory=list)
    mig: dict[str, int] = field(default_factory=dict)
    """1.2: MIG instances by profile (``{"1g.10gb": 7}``: allocatable ``nvidia.com/mig-1g.10gb``). They are part
    of ``gpus`` as G GPU-equivalents each (KAI's quota counting); only MIG requests of that profile use them."""
    dra_gpus: int = 0
    """1.2: GPU devices the node's DRA ResourceSlices publish (slices of a driver whose name contains ``gpu``).
    They are part of ``gpus`` (KAI adds them to the node's GPU capacity); only DRA claims use them, and
    fractional / shared GPU requests do not go to a node that has them."""

    @property
    def schedulable(self) -> bool:
        """KAI's node condition check: Ready (no pressure condition) and not cordoned."""
        return self.ready and not self.unschedulable

    @property
    def pool(self) -> str:
        """Node pool name: KAI's node-pool label, else the GPU model, else ``cpu``."""
        return (self.labels.get("kai.scheduler/node-pool") or self.labels.get("pool")
                or self.gpu_model or ("gpu" if self.gpus else "cpu"))


@dataclass
class QueueResource:
    """One resource of a queue: quota (deserved), limit (max allowed), over-quota weight.

    ``-1`` means unlimited for quota and limit, as in KAI's Queue CRD. In our format an omitted limit means
    unlimited and an omitted weight means 1 (the KAI CRD's missing-means-0 is applied by the kube source).
    """

    quota: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0


@dataclass
class Queue:
    """A KAI queue (``scheduling.run.ai/v2`` Queue)."""

    name: str
    parent: Optional[str] = None
    priority: int = DEFAULT_QUEUE_PRIORITY
    creation_time: float = 0.0
    gpu: QueueResource = field(default_factory=QueueResource)
    cpu: QueueResource = field(default_factory=QueueResource)
    memory: QueueResource = field(default_factory=QueueResource)
    preempt_min_runtime_s: Optional[float] = None
    reclaim_min_runtime_s: Optional[float] = None
    display_name: Optional[str] = None

    def resource(self, name: str) -> QueueResource:
        """The :class:`QueueResource` for ``gpu``, ``cpu`` or ``memory``."""
        return getattr(self, name)


@dataclass
class SubGroup:
    """A gang inside a job (PodGroup ``subGroups[]``)."""

    name: str
    min_available: int = 1


@dataclass
class TaskUsage:
    """What a pod really uses of its GPU (simulated scenarios; DCGM in live mode).

    Both values are per device: a pod on 8 GPUs using 60,000 MiB on each has ``gpu_memory_mib=60000``. A pod on
    a MIG instance: its instance's (a ``3g.40gb`` pod using 30,000 MiB has ``gpu_memory_mib=30000``).
    """

    gpu_memory_mib: float = 0.0
    gpu_util: float = 0.0


def is_gpu_device_class(name: str) -> bool:
    """KAI's test for a GPU DeviceClass (or a ResourceSlice driver): its name contains ``gpu``, any case
    (``common/resources/dra.go``)."""
    return "gpu" in name.lower()


@dataclass
class DraClaim:
    """1.2: a DRA ResourceClaim a pod uses for GPUs (resource.k8s.io/v1), as KAI counts it."""

    name: str
    """``namespace/name`` of the ResourceClaim; pods naming the same claim share its devices."""
    gpus: int = 1
    """GPU devices the claim requests: Σ ``exactly.count`` of its requests of a GPU DeviceClass (1 when the
    count is missing, 1 for ``allocationMode: All``, as KAI counts them)."""
    device_class: str = "gpu.nvidia.com"
    """The DeviceClass of its GPU requests."""
    shared: bool = False
    """A claim the pod names directly (``resourceClaimName``), which several pods may hold; a claim made from
    a ResourceClaimTemplate belongs to one pod."""
    queue: Optional[str] = None
    """A shared claim's ``kai.scheduler/queue`` label: KAI schedules a pod of a shared GPU claim only when it names
    the pod's queue."""
    missing: bool = False
    """The pod names a claim that does not exist (yet: the DRA controller has not made the template's claim);
    KAI keeps the pod pending. ``gpus`` is then 0."""


@dataclass
class Task:
    """A pod. GPU request is either ``gpu`` devices (fraction < 1 allowed) or ``gpu_memory_mib`` per device.

    ``gpu_devices`` is the number of devices a fractional / gpu-memory request spans
    (``gpu-fraction-num-devices``); for whole GPUs ``gpu`` itself is the device count.
    ``gpu_groups`` / ``gpu_indices`` record where a placed task sits: one entry per device.
    """

    name: str
    gpu: float = 0.0
    gpu_memory_mib: Optional[float] = None
    gpu_devices: int = 1
    cpu_millis: float = 0.0
    memory_bytes: float = 0.0
    status: str = "pending"
    node: Optional[str] = None
    gpu_groups: list[str] = field(default_factory=list)
    gpu_indices: list[int] = field(default_factory=list)
    subgroup: Optional[str] = None
    creation_time: Optional[float] = None
    usage: Optional[TaskUsage] = None
    constraints: Optional[PodConstraints] = None
    """What KAI's predicates read from the pod spec (None: no labels, tolerations or constraints)."""
    uid: Optional[str] = None
    """Kubernetes UID: KAI's last tie-breaker in task order (after creation time); absent → the name."""
    mig: dict[str, int] = field(default_factory=dict)
    """1.2: MIG instances requested by profile (``nvidia.com/mig-<profile>``); ``gpu`` is then their
    GPU-equivalents (Σ G × count), which queues and fair share count."""
    dra_claims: list[DraClaim] = field(default_factory=list)
    """1.2: the pod's DRA ResourceClaims of GPUs; ``gpu`` is then their device count (Σ ``gpus``), which queues
    and fair share count per pod, as KAI does."""
    priority_class: Optional[str] = None
    """1.2: the pod's own ``spec.priorityClassName`` ("" = none) where it is not the PriorityClass a KAI export
    gives the job's priority (None). KAI's scheduling signature hashes the class *name*
    (``pod_info/scheduling_constraints_signature.go``), so two pods of equal priority, one of class ``train`` and
    one without a class, are not alike for the eviction actions' signature skips."""

    @property
    def is_dra(self) -> bool:
        """True for a pod that gets its GPUs through DRA ResourceClaims."""
        return bool(self.dra_claims)

    @property
    def is_fractional(self) -> bool:
        """True for a shared-GPU request (``gpu-fraction`` < 1 or ``gpu-memory``)."""
        return self.gpu_memory_mib is not None or (0 < self.gpu < 1)

    @property
    def is_gpu(self) -> bool:
        return self.gpu > 0 or self.gpu_memory_mib is not None

    @property
    def gpu_group(self) -> Optional[str]:
        return self.gpu_groups[0] if self.gpu_groups else None

    @property
    def gpu_index(self) -> Optional[int]:
        return self.gpu_indices[0] if self.gpu_indices else None

    @property
    def devices_held(self) -> int:
        """GPU devices this task occupies when placed: its whole GPUs, or the devices its share spans (at least
        one)."""
        return int(self.gpu) if (self.gpu_memory_mib is None and self.gpu >= 1) else max(1, self.gpu_devices)

    def device_share(self, node_gpu_memory_mib: float) -> float:
        """The fraction of each GPU device this task uses on a node with that GPU memory: a whole device for a
        whole-GPU request, the fraction for ``gpu-fraction``, the memory's fraction for ``gpu-memory``."""
        if self.gpu_memory_mib is not None:
            return memory_to_fraction(self.gpu_memory_mib, node_gpu_memory_mib)
        return 1.0 if self.gpu >= 1 else self.gpu

    def gpus_on(self, node_gpu_memory_mib: float) -> float:
        """GPU devices this task accounts for on a node with that GPU memory (KAI's rounding up to 0.01)."""
        if self.gpu_memory_mib is None:
            return self.gpu if self.gpu >= 1 else self.gpu * self.gpu_devices
        return self.gpu_devices * memory_to_fraction(self.gpu_memory_mib, node_gpu_memory_mib)


@dataclass
class TopologyLevel:
    """One level of a :class:`Topology`: the node label whose value names the node's domain at that level."""

    node_label: str
    alias: Optional[str] = None
    """KAI's ``alias``: a short name (``rack``) a constraint may use instead of the label."""


@dataclass
class Topology:
    """KAI's ``Topology`` CRD (``kai.scheduler/v1alpha1``): levels from the widest (zone) to the narrowest
    (hostname). A node belongs to the topology only when it has every level's label."""

    name: str
    levels: list[TopologyLevel] = field(default_factory=list)

    def resolve(self, level: Optional[str]) -> Optional[str]:
        """The node label a constraint's level names (an alias or the label itself)."""
        if not level:
            return None
        for lv in self.levels:
            if lv.alias == level:
                return lv.node_label
        return level


@dataclass
class TopologyConstraint:
    """A PodGroup's ``spec.topologyConstraint``: all pods in one domain of ``required_level`` (when set),
    preferably in one domain of ``preferred_level``. Levels are node labels or the topology's aliases."""

    topology: str
    required_level: Optional[str] = None
    preferred_level: Optional[str] = None


@dataclass
class Job:
    """A pod group (gang): ``min_available`` tasks must be placed together."""

    name: str
    queue: str
    namespace: Optional[str] = None
    priority: int = DEFAULT_JOB_PRIORITY
    preemptible: Optional[bool] = None
    min_available: int = 1
    subgroups: list[SubGroup] = field(default_factory=list)
    creation_time: float = 0.0
    last_start_time: Optional[float] = None
    stale_since: Optional[float] = None
    last_eviction_time: Optional[float] = None
    preemption_delay_s: Optional[float] = None
    stale_grace_period_s: Optional[float] = None
    duration_s: Optional[float] = None
    tasks: list[Task] = field(default_factory=list)
    waiting_for: Optional[str] = None
    """Why KAI does not consider the job at all: ``pod-grouper`` (pods in no PodGroup yet) or ``queue`` (its
    queue does not exist). KAI neither schedules such a job nor counts it in fair share; its pods already on a
    node keep holding their resources there."""
    uid: Optional[str] = None
    """Kubernetes UID of the PodGroup (informational: KAI's job order breaks ties by the PodGroup's name)."""
    topology: Optional[TopologyConstraint] = None
    """1.2: the PodGroup's topology constraint (KAI's topology plugin)."""

    @property
    def key(self) -> str:
        """Unique id: ``namespace/name`` when a namespace is set, else ``name``."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def is_preemptible(self) -> bool:
        """Explicit preemptibility, else KAI's default: preemptible iff priority < 100."""
        if self.preemptible is not None:
            return self.preemptible
        return self.priority < NON_PREEMPTIBLE_PRIORITY


@dataclass
class Snapshot:
    """A whole cluster at one moment: what every source produces and the engine consumes."""

    nodes: list[Node] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    time: float = 0.0
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    config_maps: Optional[list[str]] = None
    """``namespace/name`` of the ConfigMaps that exist; None: not known (KAI's ConfigMap predicate is skipped)."""
    topologies: list[Topology] = field(default_factory=list)
    """1.2: KAI ``Topology`` objects (network / rack layout read from node labels)."""
    version: int = 1

    def copy(self) -> "Snapshot":
        """A deep copy: what-if and simulation never mutate the original."""
        return copy.deepcopy(self)

    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def queue_map(self) -> dict[str, Queue]:
        return {q.name: q for q in self.queues}

    def job_map(self) -> dict[str, Job]:
        return {j.key: j for j in self.jobs}

    def children(self) -> dict[Optional[str], list[Queue]]:
        """Queues grouped by parent name (``None`` = top level)."""
        out: dict[Optional[str], list[Queue]] = {}
        for q in self.queues:
            out.setdefault(q.parent, []).append(q)
        return out

    def leaf_queues(self) -> list[Queue]:
        parents = {q.parent for q in self.queues if q.parent}
        return [q for q in self.queues if q.name not in parents]

    def iter_tasks(self):
        """Yield ``(job, task)`` for every task."""
        for job in self.jobs:
            for task in job.tasks:
                yield job, task


def has_gpu_memory_value(gpu_memory_mib: float) -> bool:
    """KAI's ``MemoryOfEveryGpuOnNode > DefaultGpuMemory``: the node reports a real GPU memory."""
    return gpu_memory_mib > DEFAULT_GPU_MEMORY_MIB


def memory_to_fraction(gpu_memory_mib: float, node_gpu_memory_mib: float) -> float:
    """KAI's conversion of a ``gpu-memory`` request to a fraction of a device: ceil to 0.01, with KAI's float
    arithmetic (``math.Ceil(memory / nodeMemory * 100) / 100``, float noise included, so that the same requests
    fit the same devices)."""
    if node_gpu_memory_mib <= 0:
        return 1.0
    return math.ceil(gpu_memory_mib / node_gpu_memory_mib * 100) / 100


def memory_as_gpus(gpu_memory_mib: float, devices: int, gpu_memory_of_device: Optional[float]) -> float:
    """KAI's ``GpuMemoryAsGpuFraction``: a gpu-memory request as GPUs for queue accounting (count × memory /
    device memory, not rounded); 0 without a device memory to divide by."""
    if gpu_memory_of_device is None or gpu_memory_of_device <= 0 or gpu_memory_mib <= 0:
        return 0.0
    return float(devices) * (gpu_memory_mib / gpu_memory_of_device)
