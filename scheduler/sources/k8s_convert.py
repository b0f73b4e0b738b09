"""Kubernetes objects (as the API server returns them in JSON) → a validated :class:`~scheduler.model.Snapshot`.

Shared by the live ``kube`` source and the KAI ``/get-snapshot`` zip importer, so both read a cluster the same
way. The rules follow KAI's cache (kai-semantics.md):

- Nodes: allocatable ``nvidia.com/gpu`` (+ MIG instances counted as their compute-slice number of GPUs, §e.6),
  ``nvidia.com/gpu.memory`` label (MiB, floored to 100 MiB; missing → 100 as KAI does, §e.2), KAI's node condition
  check (Ready, no memory / disk / PID pressure, network available), ``spec.unschedulable``, taints; labels with
  scheduling prefixes plus any label a pod's node selector, node affinity or topology key reads.
- What KAI's predicates read from pods (:mod:`scheduler.sources.k8s_constraints`): tolerations, node selector,
  required node affinity, inter-pod (anti-)affinity, host ports, required ConfigMaps; pods of other schedulers
  keep what those predicates see of them (``Node.external_pods``); ConfigMaps present (``Snapshot.config_maps``).
- Pods of the KAI scheduler become tasks; their status follows KAI's ``getTaskStatus`` (§b "Mapping from a k8s
  Pod"). Fractions come from the ``gpu-fraction`` / ``gpu-memory`` / ``gpu-fraction-num-devices`` annotations,
  GPU groups from the ``runai-gpu-group`` labels, GPU indices from the reservation pods in
  ``kai-resource-reservation`` (annotation ``run.ai/reserve_for_gpu_index``, §e.4).
- Active pods of other schedulers count against their node's capacity (``Node.external``, §b.1); KAI utility pods
  (reservation, scaling) do not.
- Queues (``scheduling.run.ai/v2``): missing quota/limit/weight = 0, memory in MB (10^6 bytes), ``-1`` kept;
  orphan queues and their subtrees are dropped (§b, "Queue snapshotting details").
- PodGroups (``scheduling.run.ai/v2alpha2``): minMember (nil → 1), queue, priority class (unknown → globalDefault
  else 50, §d/§f), preemptibility, subGroups, KAI's timestamps and durations. KAI pods in no PodGroup become a
  job each (by their ``pod-group-name`` annotation, else their name) with ``waiting_for: pod-grouper``: KAI
  schedules PodGroups only, so it neither schedules nor counts them until the pod-grouper creates one. A PodGroup
  in a queue that does not exist stays a job with ``waiting_for: queue`` (its running pods keep their nodes).

One malformed object is skipped (or adjusted) with a :class:`SourceWarning` naming kind, namespace, name and
field; conversion itself never raises for bad objects.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..errors import SnapshotError, SourceError
from ..model import (
    DEFAULT_GPU_MEMORY_MIB,
    DEFAULT_JOB_PRIORITY,
    DEFAULT_QUEUE_PRIORITY,
    ExternalPod,
    Job,
    Node,
    Queue,
    QueueResource,
    SchedulerConfig,
    Snapshot,
    SubGroup,
    Task,
)
from ..snapshot_io import (_Collector, cross_check_problems, job_checked, job_placement_problems, node_checked,
                           queue_checked, validate)
from .k8s_parse import (BadField, as_list, as_mapping, duration, gpu_memory_label_mib, integer, number, quantity,
                        timestamp)
from .k8s_constraints import host_ports, node_readiness, node_taints, pod_constraints, selector_label_keys
from .k8s_dra import ClaimIndex, node_dra_gpus
from .k8s_topology import convert_topology, level_labels, topology_constraint
from .kai_export import gpu_index_of_uuid, priority_class_name
from .warnings import SourceWarning

DEFAULT_SCHEDULER_NAME = "kai-scheduler"
DEFAULT_QUEUE_NAME = "default-queue"
DEFAULT_QUEUE_LABEL_KEY = "kai.scheduler/queue"
LEGACY_QUEUE_LABEL_KEY = "runai/queue"
PROJECT_LABEL_KEY = "project"

RESERVATION_NAMESPACE = "kai-resource-reservation"
UTILITY_APP_LABEL_VALUES = frozenset({"kai-resource-reservation", "runai-reservation", "scaling-pod"})
"""Values of the ``app`` label that mark KAI utility pods (``pod_info/utility_pods.go``)."""

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")
ANN_FRACTION = "gpu-fraction"
ANN_GPU_MEMORY = "gpu-memory"
ANN_NUM_DEVICES = "gpu-fraction-num-devices"
ANN_POD_GROUP = "pod-group-name"
ANN_RESERVED_INDEX = "run.ai/reserve_for_gpu_index"
GPU_UUID_PREFIXES = ("GPU-", "MIG-")
"""What KAI's reservation binary writes in ``run.ai/reserve_for_gpu_index``: the device's NVML UUID."""
LABEL_GPU_GROUP = "runai-gpu-group"
LABEL_SUBGROUP = "kai.scheduler/subgroup-name"
LABEL_PREEMPTIBILITY = "kai.scheduler/preemptibility"
LABEL_PRIORITY_CLASS = "priorityClassName"
FALLBACK_PRIORITY_CLASS = "train"
"""The pod-grouper's last-resort priority class for a bare pod (kai-semantics §d)."""

NODE_LABEL_PREFIXES = ("kai.scheduler/", "nvidia.com/gpu.", "nvidia.com/mig.", "node-role.kubernetes.io/",
                       "topology.kubernetes.io/", "node.kubernetes.io/instance-type", "kubernetes.io/hostname",
                       "pool", "nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
                       "kubernetes.azure.com/agentpool")
"""Node labels kept in the snapshot (scheduling-relevant ones; feature-discovery noise is dropped)."""

RESOURCE_KINDS = {"nodes": "Node", "pods": "Pod", "queues": "Queue", "podgroups": "PodGroup",
                  "priorityclasses": "PriorityClass", "bindrequests": "BindRequest", "configmaps": "ConfigMap",
                  "topologies": "Topology"}


@dataclass
class RawObjects:
    """Lists of raw Kubernetes objects (JSON dicts), one list per resource type."""

    nodes: list = field(default_factory=list)
    pods: list = field(default_factory=list)
    queues: list = field(default_factory=list)
    podgroups: list = field(default_factory=list)
    priorityclasses: list = field(default_factory=list)
    bindrequests: list = field(default_factory=list)
    configmaps: list = field(default_factory=list)
    topologies: list = field(default_factory=list)
    resourceclaims: list = field(default_factory=list)
    """DRA ResourceClaims (resource.k8s.io/v1): pods' GPU claims."""
    resourceslices: list = field(default_factory=list)
    """DRA ResourceSlices: the GPU devices each node publishes."""


@dataclass
class Conversion:
    """The result of reading a cluster: the snapshot plus what was skipped and what KAI itself reported."""

    snapshot: Snapshot
    warnings: list[SourceWarning] = field(default_factory=list)
    scheduling_conditions: dict[str, list[dict]] = field(default_factory=dict)
    """KAI's own verdicts per job key, from PodGroup ``status.schedulingConditions``."""
    external_pods: int = 0
    """Pods of other schedulers (or unschedulable KAI pods) counted as external load on nodes."""


# ---------------------------------------------------------------------------------------------- helpers

def _meta(obj: Any) -> tuple[Optional[str], Optional[str]]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None, None
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) and ns else None), (name if isinstance(name, str) and name else None)


def _dict(obj: Any, *path: str) -> dict:
    """``obj[path...]`` if every step is a mapping, else ``{}`` (absent sections are empty in Kubernetes JSON)."""
    cur = obj
    for depth, key in enumerate(path):
        if type(cur) is not dict:  # noqa: E721 - exact JSON dicts on the hot path
            if cur is None:
                return {}
            if not isinstance(cur, dict):
                raise BadField(".".join(path[:depth]) or "(object)", f"expected a mapping, got {type(cur).__name__}")
        cur = cur.get(key)
    if cur is None:
        return {}
    if not isinstance(cur, dict):
        raise BadField(".".join(path), f"expected a mapping, got {type(cur).__name__}")
    return cur


def _str_map(obj: Any, *path: str) -> dict[str, str]:
    m = _dict(obj, *path)
    for k, v in m.items():
        if not isinstance(v, str):
            raise BadField(".".join(path) + f".{k}", f"expected a string, got {v!r}")
    return m


def _creation_time(obj: dict) -> Optional[float]:
    value = _dict(obj, "metadata").get("creationTimestamp")
    return None if value is None else timestamp(value, "metadata.creationTimestamp")


class _Warnings:
    def __init__(self) -> None:
        self.items: list[SourceWarning] = []

    def add(self, kind: str, ns: Optional[str], name: Optional[str], fld: Optional[str], message: str,
            skipped: bool = True) -> None:
        self.items.append(SourceWarning(kind, ns, name, fld, message, skipped))


# ---------------------------------------------------------------------------------------------- resources

def _add(total: dict[str, float], requests: dict, where: str, limits: Optional[dict] = None) -> dict[str, float]:
    """``total`` plus one container's requests; a resource with only a limit requests its limit (API defaulting)."""
    out = dict(total)
    merged = {**(limits or {}), **requests}
    for name, value in merged.items():
        out[name] = out.get(name, 0.0) + quantity(value, f"{where}.{name}")
    return out


def _containers_of(spec: dict, key: str) -> list[dict]:
    """``spec[key]`` (``containers`` / ``initContainers``) as a list of mappings; anything else is a bad field."""
    return [as_mapping(c, f"spec.{key}[{i}]") for i, c in enumerate(as_list(spec.get(key), f"spec.{key}"))]


def pod_requests(spec: dict) -> dict[str, float]:
    """Effective pod requests per resource name (base units), as kube-scheduler and KAI compute them.

    Sum over regular containers (and restartable "sidecar" init containers), at least the largest plain init
    container plus the sidecars started before it, plus ``spec.overhead``.
    """
    regular: dict[str, float] = {}
    for i, c in enumerate(_containers_of(spec, "containers")):
        res = _dict(c, "resources")
        regular = _add(regular, _dict(res, "requests"), f"spec.containers[{i}].resources.requests",
                       _dict(res, "limits"))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for i, c in enumerate(_containers_of(spec, "initContainers")):
        res = _dict(c, "resources")
        one = _add({}, _dict(res, "requests"), f"spec.initContainers[{i}].resources.requests", _dict(res, "limits"))
        if c.get("restartPolicy") == "Always":
            sidecars = {n: sidecars.get(n, 0.0) + one.get(n, 0.0) for n in set(sidecars) | set(one)}
            continue
        for name, value in one.items():
            init_peak[name] = max(init_peak.get(name, 0.0), value + sidecars.get(name, 0.0))
    total = {name: regular.get(name, 0.0) + sidecars.get(name, 0.0) for name in set(regular) | set(sidecars)}
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0.0), value)
    for name, value in _dict(spec, "overhead").items():
        total[name] = total.get(name, 0.0) + quantity(value, f"spec.overhead.{name}")
    return total


def mig_requested(requests: dict[str, float]) -> dict[str, int]:
    """MIG instances requested by profile (``nvidia.com/mig-1g.10gb: 2`` → ``{"1g.10gb": 2}``)."""
    out = {}
    for name, value in requests.items():
        if MIG_RESOURCE.match(name) and value > 0:
            out[name[len("nvidia.com/mig-"):]] = int(value)
    return out


def gpu_devices_requested(requests: dict[str, float]) -> float:
    """Whole GPUs requested: ``nvidia.com/gpu`` plus MIG instances counted as G GPUs each (§e.6)."""
    total = requests.get(GPU_RESOURCE, 0.0)
    for name, value in requests.items():
        m = MIG_RESOURCE.match(name)
        if m:
            total += int(m.group(1)) * value
    return total


# ---------------------------------------------------------------------------------------------- nodes

def convert_node(obj: dict, warn: _Warnings) -> Node:
    """One Node object → :class:`Node` (raises :class:`BadField`)."""
    _, name = _meta(obj)
    if name is None:
        raise BadField("metadata.name", "missing")
    status = _dict(obj, "status")
    alloc = _dict(status, "allocatable") or _dict(status, "capacity")
    labels = _str_map(obj, "metadata", "labels")
    gpus_exact = quantity(alloc.get(GPU_RESOURCE, 0), f"status.allocatable.{GPU_RESOURCE}")
    gpus = int(gpus_exact)
    mig = 0
    instances: dict[str, int] = {}
    for res, value in alloc.items():
        m = MIG_RESOURCE.match(res)
        if m:
            count = int(quantity(value, f"status.allocatable.{res}"))
            mig += int(m.group(1)) * count
            if count > 0:
                instances[res[len("nvidia.com/mig-"):]] = count
    gpus += mig
    cpu_millis = quantity(alloc.get("cpu", 0), "status.allocatable.cpu") * 1000
    memory = quantity(alloc.get("memory", 0), "status.allocatable.memory")
    pods = int(quantity(alloc.get("pods", 110), "status.allocatable.pods"))
    gpu_memory = 0.0
    if gpus:
        label = labels.get("nvidia.com/gpu.memory")
        if label is None:
            gpu_memory = DEFAULT_GPU_MEMORY_MIB
            warn.add("Node", None, name, "metadata.labels.nvidia.com/gpu.memory",
                     "label missing: GPU memory taken as 100 MiB as KAI does (gpu-memory requests will not fit)",
                     skipped=False)
        else:
            try:
                gpu_memory = gpu_memory_label_mib(label, "metadata.labels.nvidia.com/gpu.memory")
            except BadField as exc:
                gpu_memory = DEFAULT_GPU_MEMORY_MIB
                warn.add("Node", None, name, exc.field, exc.message + "; taken as 100 MiB as KAI does", skipped=False)
        count_label = labels.get("nvidia.com/gpu.count")
        if count_label is not None and not mig and count_label.strip().isdigit() and int(count_label) != gpus:
            warn.add("Node", None, name, "metadata.labels.nvidia.com/gpu.count",
                     f"label says {count_label} GPUs but allocatable {GPU_RESOURCE} is {gpus}; using allocatable",
                     skipped=False)
    ready, why = node_readiness(status)  # Ready and no pressure condition (a node without conditions passes)
    if not ready:
        warn.add("Node", None, name, "status.conditions",
                 f"{'; '.join(why)}: KAI places no new pod on it (its pods still count); kept, marked not ready",
                 skipped=False)
    spec = _dict(obj, "spec")
    unschedulable = spec.get("unschedulable") is True
    taints = node_taints(spec)
    kept = {k: v for k, v in labels.items() if k.startswith(NODE_LABEL_PREFIXES)}
    return Node(name=name, gpus=gpus, gpu_memory_mib=gpu_memory, cpu_millis=cpu_millis, memory_bytes=memory,
                pods=pods, gpu_model=labels.get("nvidia.com/gpu.product") or None, labels=kept, ready=ready,
                unschedulable=unschedulable, taints=taints, mig=instances)


# ---------------------------------------------------------------------------------------------- queues

def _queue_resource(spec_resources: dict, res: str, memory: bool) -> QueueResource:
    block = spec_resources.get(res)
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise BadField(f"spec.resources.{res}", f"expected a mapping, got {type(block).__name__}")
    path = f"spec.resources.{res}"
    quota = number(block.get("quota", 0), f"{path}.quota", minimum=0, allow_minus_one=True)
    limit = number(block.get("limit", 0), f"{path}.limit", minimum=0, allow_minus_one=True)
    # The CRD sets no minimum and KAI uses a negative weight as it is (item 4 of issue 13): kept, not rejected.
    weight = number(block.get("overQuotaWeight", 0), f"{path}.overQuotaWeight")
    if memory:  # the CRD's memory is in megabytes (10^6 bytes); -1 stays -1
        quota = quota if quota == -1 else quota * 1e6
        limit = limit if limit == -1 else limit * 1e6
    return QueueResource(quota=quota, limit=limit, over_quota_weight=weight)


def convert_queue(obj: dict) -> Queue:
    """One Queue object → :class:`Queue` (raises :class:`BadField`)."""
    _, name = _meta(obj)
    if name is None:
        raise BadField("metadata.name", "missing")
    spec = _dict(obj, "spec")
    parent = spec.get("parentQueue") or None
    if parent is not None and not isinstance(parent, str):
        raise BadField("spec.parentQueue", f"expected a queue name, got {parent!r}")
    priority = spec.get("priority")
    priority = DEFAULT_QUEUE_PRIORITY if priority is None else integer(priority, "spec.priority")
    resources = _dict(spec, "resources")
    display = spec.get("displayName")
    if display is not None and not isinstance(display, str):
        raise BadField("spec.displayName", f"expected a string, got {display!r}")
    q = Queue(name=name, parent=parent, priority=priority, creation_time=_creation_time(obj) or 0.0,
              gpu=_queue_resource(resources, "gpu", False), cpu=_queue_resource(resources, "cpu", False),
              memory=_queue_resource(resources, "memory", True), display_name=display or None)
    for key, attr in (("preemptMinRuntime", "preempt_min_runtime_s"), ("reclaimMinRuntime", "reclaim_min_runtime_s")):
        if spec.get(key) is not None:
            seconds = duration(spec[key], f"spec.{key}")
            if seconds < 0:
                raise BadField(f"spec.{key}", f"must not be negative, got {spec[key]!r}")
            setattr(q, attr, seconds)
    return q


def _drop_orphan_queues(queues: list[Queue], warn: _Warnings) -> list[Queue]:
    """KAI drops queues whose parent is missing, with their whole subtree; a parent cycle is dropped too."""
    by_name = {q.name: q for q in queues}
    keep: dict[str, bool] = {}

    def ok(name: str, seen: tuple = ()) -> bool:
        if name in keep:
            return keep[name]
        q = by_name[name]
        if q.parent is None:
            result = True
        elif q.parent in seen or q.parent == name:
            result = False
        elif q.parent not in by_name:
            result = False
        else:
            result = ok(q.parent, seen + (name,))
        keep[name] = result
        return result

    out = []
    for q in queues:
        if ok(q.name):
            out.append(q)
        elif q.parent not in by_name:
            warn.add("Queue", None, q.name, "spec.parentQueue",
                     f"parent queue {q.parent!r} does not exist: queue and its subtree dropped as KAI does")
        else:
            warn.add("Queue", None, q.name, "spec.parentQueue",
                     f"ancestor queue missing or in a cycle (parent {q.parent!r}): dropped as KAI does")
    return out


# ---------------------------------------------------------------------------------------------- priority

@dataclass
class PriorityClasses:
    """PriorityClass values and the cluster default (globalDefault class, else KAI's 50)."""

    values: dict[str, int] = field(default_factory=dict)
    default: int = DEFAULT_JOB_PRIORITY

    def value(self, name: Optional[str]) -> int:
        if name and name in self.values:
            return self.values[name]
        return self.default


def convert_priority_classes(objs: Iterable[dict], warn: _Warnings) -> PriorityClasses:
    pcs = PriorityClasses()
    defaults = []
    for obj in objs:
        _, name = _meta(obj)
        try:
            if name is None:
                raise BadField("metadata.name", "missing")
            value = integer(obj.get("value"), "value")
        except BadField as exc:
            warn.add("PriorityClass", None, name, exc.field, exc.message)
            continue
        pcs.values[name] = value
        if obj.get("globalDefault") is True:
            defaults.append(value)
    if defaults:
        pcs.default = max(defaults)
    return pcs


# ---------------------------------------------------------------------------------------------- pod groups

@dataclass
class _Group:
    """A PodGroup (or a pod-grouper stand-in) before its tasks are attached."""

    job: Job
    kind: str = "PodGroup"
    conditions: list = field(default_factory=list)
    subgroup_names: set = field(default_factory=set)
    invalid: Optional[str] = None  # set when the PodGroup itself was malformed: its pods are not scheduled


def _preemptible(value: Any, fld: str) -> Optional[bool]:
    if value in (None, ""):
        return None
    if value == "preemptible":
        return True
    if value == "non-preemptible":
        return False
    raise BadField(fld, f"expected 'preemptible' or 'non-preemptible', got {value!r}")


def convert_pod_group(obj: dict, pcs: PriorityClasses, warn: _Warnings) -> _Group:
    """One PodGroup object → a job without tasks (raises :class:`BadField`)."""
    ns, name = _meta(obj)
    if name is None:
        raise BadField("metadata.name", "missing")
    spec = _dict(obj, "spec")
    ann = _str_map(obj, "metadata", "annotations")
    min_member = spec.get("minMember")
    min_member = 1 if min_member is None else integer(min_member, "spec.minMember", minimum=0)
    queue = spec.get("queue") or ""
    if not isinstance(queue, str):
        raise BadField("spec.queue", f"expected a queue name, got {queue!r}")
    pc_name = spec.get("priorityClassName")
    if pc_name is not None and not isinstance(pc_name, str):
        raise BadField("spec.priorityClassName", f"expected a string, got {pc_name!r}")
    if pc_name and pc_name not in pcs.values:
        warn.add("PodGroup", ns, name, "spec.priorityClassName",
                 f"PriorityClass {pc_name!r} does not exist; KAI uses the default priority {pcs.default}",
                 skipped=False)
    uid = _dict(obj, "metadata").get("uid")
    job = Job(name=name, namespace=ns, queue=queue, priority=pcs.value(pc_name),
              preemptible=_preemptible(spec.get("preemptibility"), "spec.preemptibility"),
              min_available=min_member, creation_time=_creation_time(obj) or 0.0,
              uid=uid if isinstance(uid, str) and uid else None)
    job.topology = topology_constraint(spec)
    group = _Group(job=job)
    subgroups = spec.get("subGroups") or []
    if not isinstance(subgroups, list):
        raise BadField("spec.subGroups", f"expected a list, got {type(subgroups).__name__}")
    for i, sg in enumerate(subgroups):
        if not isinstance(sg, dict) or not isinstance(sg.get("name"), str) or not sg.get("name"):
            raise BadField(f"spec.subGroups[{i}].name", "each subgroup needs a name")
        mm = sg.get("minMember")
        mm = 1 if mm is None else integer(mm, f"spec.subGroups[{i}].minMember", minimum=0)
        job.subgroups.append(SubGroup(name=sg["name"], min_available=mm))
        group.subgroup_names.add(sg["name"])
    # KAI's bookkeeping annotations: a bad one is dropped, the job kept.
    for key, attr in (("kai.scheduler/last-start-timestamp", "last_start_time"),
                      ("kai.scheduler/stale-podgroup-timestamp", "stale_since"),
                      ("kai.scheduler/last-eviction-timestamp", "last_eviction_time")):
        if key in ann:
            try:
                setattr(job, attr, timestamp(ann[key], f"metadata.annotations.{key}"))
            except BadField as exc:
                warn.add("PodGroup", ns, name, exc.field, exc.message + "; ignored", skipped=False)
    for spec_key, ann_key, attr in (("preemptionDelay", "kai.scheduler/preemption-delay", "preemption_delay_s"),
                                    ("stalenessGracePeriod", "kai.scheduler/staleness-grace-period",
                                     "stale_grace_period_s")):
        raw, fld = (spec[spec_key], f"spec.{spec_key}") if spec.get(spec_key) is not None else \
            (ann.get(ann_key), f"metadata.annotations.{ann_key}")
        if raw is None:
            continue
        try:
            seconds = duration(raw, fld)
            if attr == "preemption_delay_s" and seconds < 0:
                raise BadField(fld, f"must not be negative, got {raw!r}")
            setattr(job, attr, seconds)
        except BadField as exc:
            warn.add("PodGroup", ns, name, exc.field, exc.message + "; ignored", skipped=False)
    conds = _dict(obj, "status").get("schedulingConditions") or []
    if isinstance(conds, list):
        for c in conds:
            if not isinstance(c, dict):
                continue
            reasons = [{"reason": r.get("reason"), "message": r.get("message")}
                       for r in (c.get("reasons") or []) if isinstance(r, dict)]
            group.conditions.append({"type": c.get("type"), "node_pool": c.get("nodePool"),
                                     "message": c.get("message"), "reasons": reasons})
    return group


# ---------------------------------------------------------------------------------------------- pods

@dataclass
class _Pod:
    ns: str
    name: str
    obj: dict
    labels: dict
    annotations: dict
    node: Optional[str]
    phase: str
    deleting: bool
    requests: dict
    constraints: Any = None

    @property
    def key(self) -> str:
        return f"{self.ns}/{self.name}"


def _read_pod(obj: dict) -> _Pod:
    ns, name = _meta(obj)
    if name is None:
        raise BadField("metadata.name", "missing")
    spec = _dict(obj, "spec")
    status = _dict(obj, "status")
    node = spec.get("nodeName") or None
    if node is not None and not isinstance(node, str):
        raise BadField("spec.nodeName", f"expected a node name, got {node!r}")
    labels, annotations = _str_map(obj, "metadata", "labels"), _str_map(obj, "metadata", "annotations")
    return _Pod(ns=ns or "default", name=name, obj=obj, labels=labels, annotations=annotations, node=node,
                phase=str(status.get("phase") or "Pending"),
                deleting=_dict(obj, "metadata").get("deletionTimestamp") is not None,
                requests=pod_requests(spec))


def _kai_pod_constraints(pod: _Pod) -> None:
    """Read what KAI's predicates need from a KAI pod's spec (raises :class:`BadField`)."""
    pod.constraints = pod_constraints(_dict(pod.obj, "spec"), pod.labels, pod.annotations)


def _external_pod(pod: _Pod, pod_keys: set[str]) -> Optional[ExternalPod]:
    """What KAI's predicates see of another scheduler's pod on a node: labels some affinity selector reads, host
    ports and required anti-affinity; None when it has none of these."""
    spec = _dict(pod.obj, "spec")
    try:
        ports = host_ports(spec)
        anti = _dict(spec, "affinity", "podAntiAffinity").get("requiredDuringSchedulingIgnoredDuringExecution")
        constraints = pod_constraints(spec, {}, {}) if anti else None
    except BadField:
        return None
    labels = {k: v for k, v in pod.labels.items() if k in pod_keys}
    terms = constraints.pod_anti_affinity if constraints is not None else []
    if not (labels or ports or terms):
        return None
    return ExternalPod(namespace=pod.ns, labels=labels, host_ports=ports, pod_anti_affinity=terms)


def _is_utility(pod: _Pod) -> bool:
    return pod.ns == RESERVATION_NAMESPACE or pod.labels.get("app") in UTILITY_APP_LABEL_VALUES


def _is_active_on_node(pod: _Pod) -> bool:
    """KAI's ActiveUsed for a pod already on a node: running, bound, or releasing."""
    return pod.node is not None and pod.phase in ("Running", "Pending")


def _gpu_request(pod: _Pod) -> tuple[float, Optional[float], int]:
    """``(gpu, gpu_memory_mib, gpu_devices)`` of a KAI pod (raises :class:`BadField`)."""
    whole = gpu_devices_requested(pod.requests)
    ann = pod.annotations
    frac_raw, mem_raw, ndev_raw = ann.get(ANN_FRACTION), ann.get(ANN_GPU_MEMORY), ann.get(ANN_NUM_DEVICES)
    if frac_raw is not None and mem_raw is not None:
        raise BadField(f"metadata.annotations.{ANN_GPU_MEMORY}", f"both {ANN_FRACTION} and {ANN_GPU_MEMORY} are set")
    if (frac_raw is not None or mem_raw is not None) and whole:
        raise BadField(f"metadata.annotations.{ANN_FRACTION if frac_raw is not None else ANN_GPU_MEMORY}",
                       f"a shared-GPU annotation together with a {GPU_RESOURCE} request")
    ndev = 1
    if ndev_raw is not None:
        try:
            ndev = int(ndev_raw.strip())
        except ValueError:
            raise BadField(f"metadata.annotations.{ANN_NUM_DEVICES}", f"expected a whole number, got {ndev_raw!r}") from None
        if ndev < 1:
            raise BadField(f"metadata.annotations.{ANN_NUM_DEVICES}", f"must be at least 1, got {ndev_raw!r}")
    if frac_raw is not None:
        try:
            frac = float(frac_raw.strip())
        except ValueError:
            raise BadField(f"metadata.annotations.{ANN_FRACTION}", f"expected a number in (0, 1], got {frac_raw!r}") from None
        if not 0 < frac <= 1:
            raise BadField(f"metadata.annotations.{ANN_FRACTION}", f"expected a number in (0, 1], got {frac_raw!r}")
        if frac == 1:  # a full portion on each device is plain whole GPUs
            return float(ndev), None, 1
        return frac, None, ndev
    if mem_raw is not None:
        try:
            mem = float(mem_raw.strip())
        except ValueError:
            raise BadField(f"metadata.annotations.{ANN_GPU_MEMORY}", f"expected MiB as a number, got {mem_raw!r}") from None
        if not mem > 0 or mem != mem:
            raise BadField(f"metadata.annotations.{ANN_GPU_MEMORY}", f"expected a positive number of MiB, got {mem_raw!r}")
        return 0.0, mem, ndev
    if whole != int(whole):
        raise BadField(f"spec.containers.resources.requests.{GPU_RESOURCE}", f"whole GPUs only, got {whole:g}")
    return whole, None, 1


def _gpu_groups(pod: _Pod) -> list[str]:
    multi = sorted(k.split("/", 1)[1] for k in pod.labels if k.startswith(LABEL_GPU_GROUP + "/") and "/" in k)
    if multi:
        return multi
    single = pod.labels.get(LABEL_GPU_GROUP)
    return [single] if single else []


def _nominated_node(pod: _Pod) -> Optional[str]:
    value = _dict(pod.obj, "status").get("nominatedNodeName")
    return value if isinstance(value, str) and value else None


def _task_status(pod: _Pod, bind: Optional[dict]) -> Optional[str]:
    """KAI's ``getTaskStatus`` mapped to our statuses; ``None`` = not part of the snapshot."""
    if pod.phase == "Running":
        return "releasing" if pod.deleting else "running"
    if pod.phase == "Pending":
        if pod.deleting:
            return "releasing" if pod.node else None
        if pod.node:
            return "running"  # KAI's Bound: on a node, counted as allocated
        if bind is not None:
            return "binding"
        if _dict(pod.obj, "spec").get("schedulingGates"):
            return "gated"
        if _nominated_node(pod):
            return "pipelined"  # KAI pipelined it last cycle: a Pending pod with a nominated node
        return "pending"
    if pod.phase == "Succeeded":
        return "succeeded"
    if pod.phase == "Failed":
        return "failed"
    return "unknown"


# ---------------------------------------------------------------------------------------------- main

def convert(raw: RawObjects, *, scheduler_name: str = DEFAULT_SCHEDULER_NAME, time: float = 0.0,
            config: Optional[SchedulerConfig] = None, available: Optional[set[str]] = None,
            queue_label_key: str = DEFAULT_QUEUE_LABEL_KEY) -> Conversion:
    """Convert raw objects into a validated snapshot; bad objects become warnings.

    ``available`` names the resource types that were actually read (``"queues"``, ``"podgroups"``, ...); a type
    that could not be read (e.g. forbidden) is worked around rather than treated as empty: without queues, the
    queues jobs name are synthesised; without podgroups, pods are grouped by their ``pod-group-name`` annotation.
    One-shot: a live source keeps an :class:`IncrementalConverter` instead.
    """
    converter = IncrementalConverter(scheduler_name=scheduler_name, config=config, queue_label_key=queue_label_key)
    return converter.convert(raw, time=time, available=available)


# ---------------------------------------------------------------------------------------------- incremental

class _Entry:
    """One raw object and what it converts to on its own (cached while its resourceVersion is unchanged)."""

    __slots__ = ("key", "obj", "rv", "seq", "value", "warnings", "kind", "job_key", "keys")

    def __init__(self, key: str, obj: Any, seq: int) -> None:
        self.key, self.obj, self.seq = key, obj, seq
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self.rv = rv if isinstance(rv, str) and rv else None
        self.value: Any = None
        self.warnings: list[SourceWarning] = []
        self.kind: Optional[str] = None
        self.job_key: Optional[tuple[str, str]] = None
        self.keys: tuple = ((), ())  # node and pod label keys a KAI pod's constraints read


class _JobResult:
    """A job as built from its members and what it depended on (rebuilt when any of those change)."""

    __slots__ = ("job", "queue", "warnings", "conditions", "external", "nodes", "problems", "held_groups")

    def __init__(self) -> None:
        self.job: Optional[Job] = None
        self.queue: str = ""  # the queue its PodGroup (or pod) names, before any defaulting
        self.warnings: list[SourceWarning] = []
        self.conditions: list = []
        self.external: list[Task] = []  # active tasks counted as external load on their nodes
        self.nodes: set[str] = set()
        self.problems: list = []
        self.held_groups: set[tuple[str, str]] = set()  # (node, GPU group) of its running / releasing fractions


def _clone(obj):
    """Shallow copy of a plain dataclass instance (much cheaper than ``dataclasses.replace``)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


def _keyed(objects: Any) -> Iterable[tuple[str, Any]]:
    """``(key, object)`` pairs: a mapping as given (a watch cache: ``namespace/name`` keys), or a list keyed by
    ``namespace/name`` (repeated or missing names get position-based keys, so nothing is merged or lost)."""
    if isinstance(objects, dict):
        return objects.items()
    out = []
    seen: set[str] = set()
    for i, obj in enumerate(objects):
        ns, name = _meta(obj)
        key = f"{ns or ''}/{name}" if name is not None else f"\x00{i}"
        if key in seen:
            key = f"{key}\x00{i}"
        seen.add(key)
        out.append((key, obj))
    return out


class IncrementalConverter:
    """:func:`convert` that remembers: each object is converted (and validated) once per resourceVersion, and
    each job is rebuilt only when one of its inputs changed (its pods, its PodGroup, its BindRequests, the nodes
    its pods name, the reservation pods on those nodes); queues, priority classes or the readable resource types
    changing rebuild every job. The result is the same as a fresh :func:`convert` of the same objects.

    :meth:`convert` takes :class:`RawObjects` (lists) or ``{resource: {key: object}}`` (a watch cache). An object
    is unchanged when it is the same dict, or has the same key and resourceVersion. Snapshots of successive
    calls share unchanged :class:`~scheduler.model.Job`, :class:`~scheduler.model.Task` and queue objects
    (nodes are new each time): treat them as read-only. Thread-safe (calls are serialised).
    """

    def __init__(self, *, scheduler_name: str = DEFAULT_SCHEDULER_NAME, config: Optional[SchedulerConfig] = None,
                 queue_label_key: str = DEFAULT_QUEUE_LABEL_KEY) -> None:
        self.scheduler_name = scheduler_name
        self.config = config
        self.queue_label_key = queue_label_key
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._seq = itertools.count()
        self._stores: dict[str, dict[str, _Entry]] = {r: {} for r in ("nodes", "queues", "podgroups", "pods")}
        self._pcs_signature: Any = None
        self._inputs_signature: Any = None
        self._node_templates: dict[str, Node] = {}
        self._groups: dict[tuple[str, str], _Group] = {}
        self._group_warnings: list[SourceWarning] = []
        self._binds: dict[str, dict] = {}
        self._claims: Optional[ClaimIndex] = None
        self._reserved: dict[tuple[str, str], int] = {}
        self._members: dict[tuple[str, str], dict[str, _Entry]] = {}
        self._order: list[tuple[str, str]] = []  # job keys with members, sorted
        self._results: dict[tuple[str, str], _JobResult] = {}
        self._jobs_by_node: dict[str, set] = defaultdict(set)
        self._by_kind: dict[str, dict[str, _Entry]] = {"utility": {}, "external": {}}
        self._pod_warnings: dict[str, _Entry] = {}
        self._grouping_warnings: dict[str, tuple[int, SourceWarning]] = {}
        self._flagged: dict[str, set] = {"warnings": set(), "external": set(), "conditions": set(), "problems": set()}
        self._out_keys: list[tuple[str, str]] = []
        self._out_jobs: list[Job] = []
        self._name_counts: dict[str, dict[str, int]] = {"job": {}, "task": {}}
        self._repeated = {"job": 0, "task": 0}  # names held by more than one job / task
        self._versions: dict[str, Any] = {}
        self._node_keys: Counter = Counter()  # node label keys KAI pods' constraints read
        self._pod_keys: Counter = Counter()   # pod label keys their inter-pod affinity selectors read

    # ------------------------------------------------------------------------------------------ stage 1

    def _sync(self, resource: str, objects: Any, make, version: Any = None) -> tuple[list[_Entry], list[_Entry], bool]:
        """Bring one store up to date: ``(fresh entries, dropped entries, order kept)``. A modified object keeps
        its place (sequence number); new ones go last, as in the watch cache. ``version``: the caller's change
        counter for this resource; when it is the one of the last call, nothing is read."""
        if version is not None and self._versions.get(resource) == version:
            return [], [], True
        self._versions[resource] = version
        store = self._stores[resource]
        new: dict[str, _Entry] = {}
        fresh: list[_Entry] = []
        dropped: list[_Entry] = []
        last = -1
        ordered = True
        kept = 0
        for key, obj in _keyed(objects):
            e = store.get(key)
            if e is not None:
                kept += 1
                if e.obj is not obj:
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                    if e.rv is None or rv != e.rv:
                        dropped.append(e)
                        e = _Entry(key, obj, e.seq)
                        make(e)
                        fresh.append(e)
                    else:
                        e.obj = obj
            else:
                e = _Entry(key, obj, next(self._seq))
                make(e)
                fresh.append(e)
            if e.seq < last:
                ordered = False
            last = e.seq
            new[key] = e
        if kept != len(store):
            dropped.extend(e for k, e in store.items() if k not in new)
        if not ordered:  # a relist in another order: the new order is the raw order from now on
            for seq, e in enumerate(new.values()):
                e.seq = seq
        self._stores[resource] = new
        return fresh, dropped, ordered

    def _make_node(self, e: _Entry) -> None:
        warn = _Warnings()
        _, name = _meta(e.obj)
        try:
            e.value = convert_node(e.obj, warn)
        except BadField as exc:
            warn.add("Node", None, name, exc.field, exc.message)
        e.warnings = warn.items

    def _make_queue(self, e: _Entry) -> None:
        _, name = _meta(e.obj)
        try:
            e.value = convert_queue(e.obj)
        except BadField as exc:
            e.warnings = [SourceWarning("Queue", None, name, exc.field, exc.message, True)]

    def _make_podgroup(self, e: _Entry, pcs: "PriorityClasses") -> None:
        warn = _Warnings()
        ns, name = _meta(e.obj)
        try:
            g = convert_pod_group(e.obj, pcs, warn)
            e.job_key = (g.job.namespace or "default", g.job.name)
        except BadField as exc:
            warn.add("PodGroup", ns, name, exc.field, exc.message)
            g = None
            if name is not None:
                g = _Group(job=Job(name=name, namespace=ns, queue=""), invalid=f"{exc.field}: {exc.message}")
                e.job_key = (ns or "default", name)
        e.value = g
        e.warnings = warn.items

    def _make_pod(self, e: _Entry) -> None:
        obj = e.obj
        ns, name = _meta(obj)
        try:
            pod = _read_pod(obj)
        except BadField as exc:
            e.kind, e.warnings = "bad", [SourceWarning("Pod", ns, name, exc.field, exc.message, True)]
            return
        e.value = pod
        if _is_utility(pod):
            e.kind = "utility"
            group = pod.labels.get(LABEL_GPU_GROUP)
            idx = pod.annotations.get(ANN_RESERVED_INDEX)
            if pod.node and group and idx is not None and pod.phase in ("Running", "Pending"):
                device = idx.strip()
                if device.startswith(GPU_UUID_PREFIXES):
                    e.job_key = (pod.node, group, device)  # KAI's reservation binary writes the GPU's UUID
                    return
                try:
                    index = int(device)
                    if index < 0:
                        raise ValueError
                    e.job_key = (pod.node, group, index)  # a reservation: (node, group, device index)
                except ValueError:
                    e.job_key = (pod.node, group, None)  # a bad one removes the group's index
                    e.warnings = [SourceWarning("Pod", pod.ns, pod.name, f"metadata.annotations.{ANN_RESERVED_INDEX}",
                                                f"expected a GPU UUID (GPU-...) or index (whole number >= 0), "
                                                f"got {idx!r}", True)]
            return
        sched = _dict(obj, "spec").get("schedulerName") or "default-scheduler"
        if pod.phase == "Succeeded" and not _dict(obj, "spec") and ANN_POD_GROUP in pod.annotations:
            sched = self.scheduler_name   # KAI >= v0.17 compacts a Succeeded pod to name, phase, PodGroup
        if sched != self.scheduler_name:
            e.kind = "external"
            return
        try:
            _kai_pod_constraints(pod)
        except BadField as exc:
            e.kind, e.warnings = "bad", [SourceWarning("Pod", pod.ns, pod.name, exc.field, exc.message, True)]
            return
        e.kind = "kai"
        pg = pod.annotations.get(ANN_POD_GROUP)
        e.job_key = (pod.ns, pg or pod.name)
        node_keys, pod_keys = selector_label_keys(pod.constraints)
        e.keys = (tuple(node_keys), tuple(pod_keys))

    # ------------------------------------------------------------------------------------------ convert

    def convert(self, raw: Any, *, time: float = 0.0, available: Optional[set[str]] = None,
                versions: Optional[dict[str, Any]] = None) -> Conversion:
        """The snapshot of ``raw`` now (see the class docstring). ``versions``: a change counter per resource
        type (a watch cache's); a resource whose counter did not move since the last call is not re-read."""
        with self._lock:
            # The cyclic GC is paused while converting (as run_session does): conversion makes no reference
            # cycles, and each collection would walk every cached API object (about a third of the time).
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                return self._convert(raw, time, available, versions or {})
            finally:
                if was_enabled:
                    gc.enable()

    def _convert(self, raw: Any, time: float, available: Optional[set[str]], versions: dict[str, Any]) -> Conversion:
        def get(name: str):
            return getattr(raw, name) if isinstance(raw, RawObjects) else raw.get(name, ())

        available = set(RESOURCE_KINDS) if available is None else set(available)
        warn = _Warnings()
        pcs = convert_priority_classes(list(v for _, v in _keyed(get("priorityclasses"))), warn)
        self._pcs = pcs
        pcs_signature = (tuple(sorted(pcs.values.items())), pcs.default)
        if pcs_signature != self._pcs_signature:
            self._stores["podgroups"] = {}  # group priorities come from the classes
            self._versions.pop("podgroups", None)
        self._pcs_signature = pcs_signature

        # nodes: templates (converted once per version); duplicates keep the first, as before
        fresh_n, dropped_n, ordered_n = self._sync("nodes", get("nodes"), self._make_node, versions.get("nodes"))
        templates: dict[str, Node] = {}
        self._node_raw_labels = {}
        for e in self._stores["nodes"].values():
            warn.items.extend(e.warnings)
            node = e.value
            if node is None:
                continue
            if node.name in templates:
                warn.add("Node", None, node.name, "metadata.name", "duplicate node")
                continue
            templates[node.name] = node
            self._node_raw_labels[node.name] = _dict(e.obj, "metadata", "labels")
        old_templates = self._node_templates
        changed_nodes = {n for n, t in templates.items() if old_templates.get(n) is not t}
        dra_gpus = node_dra_gpus(_v for _, _v in _keyed(get("resourceslices")))
        for n, t in templates.items():  # DRA devices join the node's GPUs (KAI populateDRAGPUs); idempotent per template
            want = dra_gpus.get(n, 0)
            if t.dra_gpus != want:
                t.gpus += want - t.dra_gpus
                t.dra_gpus = want
                changed_nodes.add(n)
        changed_nodes.update(n for n in old_templates if n not in templates)
        self._node_templates = templates

        # queues: few; structure (names, parents) changes rebuild every job
        self._sync("queues", get("queues"), self._make_queue, versions.get("queues"))
        queues: list[Queue] = []
        seen_queues: set[str] = set()
        for e in self._stores["queues"].values():
            warn.items.extend(e.warnings)
            q = e.value
            if q is None:
                continue
            if q.name in seen_queues:
                warn.add("Queue", None, q.name, "metadata.name", "duplicate queue")
                continue
            seen_queues.add(q.name)
            queues.append(q)
        queues = _drop_orphan_queues(queues, warn)

        # pod groups
        fresh_g, dropped_g, ordered_g = self._sync("podgroups", get("podgroups"),
                                                   lambda e: self._make_podgroup(e, pcs), versions.get("podgroups"))
        old_groups = self._groups
        changed_groups: set[tuple[str, str]] = set()
        if fresh_g or dropped_g or not ordered_g:
            groups: dict[tuple[str, str], _Group] = {}
            group_warnings: list[SourceWarning] = []
            for e in self._stores["podgroups"].values():
                group_warnings.extend(e.warnings)
                if e.value is not None:
                    groups[e.job_key] = e.value
            self._groups, self._group_warnings = groups, group_warnings
            candidates = {e.job_key for e in fresh_g + dropped_g if e.job_key is not None}
            if not ordered_g or len(candidates) > len(groups) // 2:
                candidates = set(groups) | set(old_groups)
            changed_groups = {k for k in candidates if old_groups.get(k) is not groups.get(k)}
        groups = self._groups
        warn.items.extend(self._group_warnings)

        # bind requests: few, read every time
        binds: dict[str, dict] = {}
        for _, obj in _keyed(get("bindrequests")):
            ns, name = _meta(obj)
            spec = obj.get("spec") if isinstance(obj, dict) else None
            if not isinstance(spec, dict) or not isinstance(spec.get("podName"), str):
                warn.add("BindRequest", ns, name, "spec.podName", "missing")
                continue
            if _dict(obj, "status").get("phase") == "Failed":
                continue  # a failed bind leaves the pod pending
            binds[f"{ns or 'default'}/{spec['podName']}"] = spec
        changed_binds = {k for k, v in binds.items() if self._binds.get(k) is not v}
        changed_binds.update(k for k in self._binds if k not in binds)
        self._binds = binds

        # pods
        fresh_p, dropped_p, ordered_p = self._sync("pods", get("pods"), self._make_pod, versions.get("pods"))
        signature = (tuple((q.name, q.parent) for q in queues), frozenset(available), self.scheduler_name)
        full = (signature != self._inputs_signature or not (ordered_n and ordered_g and ordered_p)
                or pcs_signature != getattr(self, "_built_pcs", None))
        self._inputs_signature, self._built_pcs = signature, pcs_signature
        dirty: set[tuple[str, str]] = set(changed_groups)
        claims = ClaimIndex(_v for _, _v in _keyed(get("resourceclaims")))
        if claims.signature != getattr(self._claims, "signature", None):
            dirty.update(self._members)  # claims are few and change rarely: rebuild every job's pods
        self._claims = claims
        self._new_keys: list[tuple[str, str]] = []
        for e in dropped_p:
            self._unindex_pod(e, dirty)
        for e in fresh_p:
            self._index_pod(e, dirty)
        if len(self._new_keys) > 64:
            self._order = sorted(self._members)
        else:
            for k in self._new_keys:
                if k in self._members:
                    bisect.insort(self._order, k)
        pods_store = self._stores["pods"]
        for key in changed_binds:
            e = pods_store.get(key)
            if e is not None and e.kind == "kai":
                dirty.add(e.job_key)
        for e in sorted(self._pod_warnings.values(), key=lambda x: x.seq):
            warn.items.extend(e.warnings)

        # reservation pods -> GPU index of each (node, group), in pod order (a bad index removes the entry)
        reserved: dict[tuple[str, str], int] = {}
        for e in sorted(self._by_kind["utility"].values(), key=lambda x: x.seq):
            if e.job_key is not None:
                node, group, index = e.job_key
                if isinstance(index, str):  # a GPU UUID: its index is known only for UUIDs kaidash's export wrote
                    t = templates.get(node)
                    index = gpu_index_of_uuid(node, index, t.gpus if t is not None else 0)
                if index is None:
                    reserved.pop((node, group), None)
                else:
                    reserved[(node, group)] = index
        changed_nodes.update(n for (n, g), i in reserved.items() if self._reserved.get((n, g)) != i)
        changed_nodes.update(n for (n, g) in self._reserved if (n, g) not in reserved)
        self._reserved = reserved

        # this snapshot's nodes: fresh copies of the templates, with other schedulers' pods as external load
        topologies = []
        for _, obj in _keyed(get("topologies")):
            try:
                topologies.append(convert_topology(obj))
            except BadField as exc:
                ns, name = _meta(obj)
                warn.add("Topology", ns, name, exc.field, exc.message)
        node_keys = {k for k, c in self._node_keys.items() if c > 0} | level_labels(topologies)
        pod_keys = {k for k, c in self._pod_keys.items() if c > 0}
        raw_labels = self._node_raw_labels if node_keys else {}
        nodes = {}
        for name, t in templates.items():
            node = nodes[name] = _clone(t)
            node.external = _clone(t.external)
            extra = raw_labels.get(name)
            if extra:  # labels that some pod's selector, affinity or topology key, or a Topology, reads are kept too
                picked = {k: extra[k] for k in node_keys if k in extra and k not in t.labels}
                if picked:
                    node.labels = {**t.labels, **picked}
        external_pods = 0
        for e in sorted(self._by_kind["external"].values(), key=lambda x: x.seq):
            pod = e.value
            if _is_active_on_node(pod) and pod.node in nodes:
                target = nodes[pod.node]
                _add_external(target, pod.requests)
                external_pods += 1
                seen = _external_pod(pod, pod_keys)
                if seen is not None:
                    target.external_pods = [*target.external_pods, seen]

        if "queues" not in available:
            warn.add("queues.scheduling.run.ai", None, None, None,
                     "queues could not be read: queues named by jobs are synthesised (quota 0, no limit, weight 1)")

        # jobs: rebuild the dirty ones
        if full:
            dirty = set(self._members)
            self._results = {}
            self._jobs_by_node = defaultdict(set)
            for flagged in self._flagged.values():
                flagged.clear()
            self._name_counts = {"job": {}, "task": {}}
            self._repeated = {"job": 0, "task": 0}
        for node in changed_nodes:
            dirty.update(self._jobs_by_node.get(node, ()))
        queue_names = {q.name for q in queues}
        parents = {q.parent for q in queues if q.parent}
        for key in dirty:
            self._build_job(key, groups, binds, templates, reserved, available, queue_names, parents, count=not full)
        if full:
            self._count_all_names()
        for _, w in sorted(self._grouping_warnings.values(), key=lambda x: x[0]):
            warn.items.append(w)

        if "queues" not in available:  # synthesised from the queues the jobs name
            names = sorted({self._results[key].queue or DEFAULT_QUEUE_NAME for key in self._order})
            queues = [Queue(name=n, gpu=QueueResource(0, -1, 1), cpu=QueueResource(0, -1, 1),
                            memory=QueueResource(0, -1, 1)) for n in names]

        results = self._results
        jobs = self._output_jobs(dirty, full)
        self._count_orphan_reservations(nodes, results)
        for key in sorted(self._flagged["warnings"]):
            warn.items.extend(results[key].warnings)
        for key in sorted(self._flagged["external"]):
            external_pods += _tasks_to_external(results[key].external, nodes)
        conditions = {results[key].job.key: results[key].conditions for key in sorted(self._flagged["conditions"])}
        snap = Snapshot(nodes=list(nodes.values()), queues=queues, jobs=jobs, config=self.config or SchedulerConfig(),
                        time=time, topologies=topologies)
        if "configmaps" in available:  # KAI's ConfigMap predicate needs to know which exist
            snap.config_maps = sorted({f"{ns or 'default'}/{name}" for _, obj in _keyed(get("configmaps"))
                                       for ns, name in [_meta(obj)] if name})
        # Each job was validated when it was built (on its own, and against the nodes its tasks name: a node
        # change rebuilds the jobs on it). Per snapshot only the cross-object checks are left; anything wrong
        # takes the full check-and-prune path, which reports it exactly.
        errs = _Collector()
        objects_ok = (all(node_checked(n, i, errs) is n for i, n in enumerate(snap.nodes))
                      and all(queue_checked(q, i, errs) is q for i, q in enumerate(snap.queues)))
        if self._flagged["problems"] or not objects_ok or not self._cross_checks_pass(snap):
            _validate_or_prune(snap, warn)
        return Conversion(snapshot=snap, warnings=warn.items, scheduling_conditions=conditions,
                          external_pods=external_pods)

    def _count_orphan_reservations(self, nodes: dict[str, Node], results: dict) -> None:
        """A reservation pod holds a pod slot on its node (KAI counts it among the node's pods). The session
        counts one per GPU group a running or releasing fraction uses; a reservation pod whose group has no such
        pod (its pod failed, or is still binding) is counted here, as another pod on the node."""
        reservations = set()
        for e in self._by_kind["utility"].values():
            pod = e.value
            group = pod.labels.get(LABEL_GPU_GROUP) if pod is not None else None
            if group and _is_active_on_node(pod) and pod.node in nodes:
                reservations.add((pod.node, group))
        if not reservations:
            return
        held: set = set()
        for r in results.values():
            if r.held_groups:
                held |= r.held_groups
        for node, _ in sorted(reservations - held):
            nodes[node].external.pods += 1

    # ------------------------------------------------------------------------------------------ output

    def _output_jobs(self, dirty: set, full: bool) -> list[Job]:
        """The snapshot's job list (sorted by key): the previous one with the rebuilt jobs put in, taken out or
        replaced (a new list: earlier snapshots keep theirs)."""
        results = self._results
        if full or len(dirty) > 1000:
            pairs = [(k, j) for k in self._order if (j := results[k].job) is not None]
            keys = [k for k, _ in pairs]
            jobs = [j for _, j in pairs]
        else:
            keys, jobs = list(self._out_keys), list(self._out_jobs)
            for key in sorted(dirty):
                r = results.get(key)
                job = r.job if r is not None else None
                i = bisect.bisect_left(keys, key)
                present = i < len(keys) and keys[i] == key
                if job is None and present:
                    del keys[i], jobs[i]
                elif job is not None and present:
                    jobs[i] = job
                elif job is not None:
                    keys.insert(i, key)
                    jobs.insert(i, job)
        self._out_keys, self._out_jobs = keys, jobs
        return jobs

    def _cross_checks_pass(self, snap: Snapshot) -> bool:
        """The per-snapshot cross-object checks, on jobs each valid on its own and against its nodes and queue:
        nodes and queues (duplicates, parents, cycles), job keys and task names unique (counted as jobs are
        built)."""
        if cross_check_problems(Snapshot(nodes=snap.nodes, queues=snap.queues), placement=False):
            return False
        return self._repeated["job"] == 0 and self._repeated["task"] == 0

    def _count_all_names(self) -> None:
        jobs = [r.job for r in self._results.values() if r.job is not None]
        self._name_counts = {"job": Counter(j.key for j in jobs), "task": Counter(t.name for j in jobs for t in j.tasks)}
        self._repeated = {kind: sum(1 for n in counts.values() if n > 1) for kind, counts in self._name_counts.items()}

    def _count_names(self, r: "_JobResult", sign: int) -> None:
        if r.job is None:
            return
        for kind, names in (("job", (r.job.key,)), ("task", [t.name for t in r.job.tasks])):
            counts = self._name_counts[kind]
            for name in names:
                before = counts.get(name, 0)
                after = before + sign
                if after:
                    counts[name] = after
                else:
                    del counts[name]
                if before > 1 and after <= 1:
                    self._repeated[kind] -= 1
                elif before <= 1 and after > 1:
                    self._repeated[kind] += 1

    # ------------------------------------------------------------------------------------------ jobs

    def _index_pod(self, e: _Entry, dirty: set) -> None:
        if e.kind == "kai":
            self._node_keys.update(e.keys[0])
            self._pod_keys.update(e.keys[1])
            members = self._members.get(e.job_key)
            if members is None:
                members = self._members[e.job_key] = {}
                self._new_keys.append(e.job_key)
            members[e.key] = e
            dirty.add(e.job_key)
        elif e.kind in self._by_kind:
            self._by_kind[e.kind][e.key] = e
        if e.warnings:
            self._pod_warnings[e.key] = e

    def _unindex_pod(self, e: _Entry, dirty: set) -> None:
        if e.kind == "kai":
            self._node_keys.subtract(e.keys[0])
            self._pod_keys.subtract(e.keys[1])
            members = self._members.get(e.job_key)
            if members is not None and members.get(e.key) is e:
                del members[e.key]
                dirty.add(e.job_key)
                if not members:
                    del self._members[e.job_key]
                    i = bisect.bisect_left(self._order, e.job_key)
                    if i < len(self._order) and self._order[i] == e.job_key:
                        del self._order[i]
            self._grouping_warnings.pop(e.key, None)
        elif e.kind in self._by_kind and self._by_kind[e.kind].get(e.key) is e:
            del self._by_kind[e.kind][e.key]
        if self._pod_warnings.get(e.key) is e:
            del self._pod_warnings[e.key]

    def _group_of(self, key, members: list[_Entry], groups, check_groups: bool) -> _Group:
        group = groups.get(key)
        if group is not None:
            return group
        pod = members[0].value  # the first pod (raw order) stands for the job, as the pod-grouper would
        group = _standalone_group(pod, key[1], self._pcs, self.queue_label_key)
        # With PodGroups readable, a pod in none of them waits for the pod-grouper: KAI schedules PodGroups only.
        if check_groups:
            group.job.waiting_for = "pod-grouper"
        return group

    def _build_job(self, key, groups, binds, nodes, reserved, available, queue_names, parents,
                   count: bool = True) -> None:
        """(Re)build one job. ``count``: keep the name counts up to date (a full rebuild counts at the end)."""
        old = self._results.pop(key, None)
        flagged = self._flagged
        if old is not None:
            if count:
                self._count_names(old, -1)
            for n in old.nodes:
                self._jobs_by_node[n].discard(key)
            for keys in flagged.values():
                keys.discard(key)
        members_map = self._members.get(key)
        if not members_map:
            return
        members = list(members_map.values())
        if len(members) > 1:
            members.sort(key=_seq_of)
        r = _JobResult()
        self._results[key] = r
        try:
            self._fill_job(r, key, members, groups, binds, nodes, reserved, available, queue_names, parents)
        finally:
            if count:
                self._count_names(r, +1)
            if r.warnings:
                flagged["warnings"].add(key)
            if r.external:
                flagged["external"].add(key)
            if r.problems:
                flagged["problems"].add(key)
            if r.job is not None and r.conditions:
                flagged["conditions"].add(key)

    def _fill_job(self, r, key, members, groups, binds, nodes, reserved, available, queue_names, parents) -> None:
        pods = [m.value for m in members]
        check_groups = "podgroups" in available
        grouping = self._grouping_warnings
        for m in members:
            pod = m.value
            pg = pod.annotations.get(ANN_POD_GROUP)
            if pg and check_groups and (pod.ns, pg) not in groups:
                grouping[m.key] = (m.seq, SourceWarning(
                    "Pod", pod.ns, pod.name, f"metadata.annotations.{ANN_POD_GROUP}",
                    f"PodGroup {pg!r} not found: the pod waits for the pod-grouper (KAI does not schedule it)",
                    False))
            elif grouping and m.key in grouping:
                del grouping[m.key]
        group = self._group_of(key, members, groups, check_groups)
        r.queue = group.job.queue
        depends = {p.node for p in pods if p.node}
        if binds:
            depends.update(b["selectedNode"] for p in pods
                           if (b := binds.get(p.key)) is not None and isinstance(b.get("selectedNode"), str))
        r.nodes = depends
        by_node = self._jobs_by_node
        for n in depends:
            by_node[n].add(key)
        job = _clone(group.job)
        job.subgroups, job.tasks = list(job.subgroups), []
        warn = _Warnings()
        if "queues" not in available and not job.queue:
            job.queue = DEFAULT_QUEUE_NAME
        tasks: list[Task] = []
        if len(pods) > 1:
            pods.sort(key=_name_of)
        for pod in pods:
            task = _pod_task(pod, binds.get(pod.key), group, nodes, reserved, warn, self._claims)
            if task is not None:
                tasks.append(task)
        r.warnings = warn.items
        if not tasks:
            return
        kind, ns, name = group.kind, job.namespace, job.name
        if group.invalid:
            n_ext = _count_external(tasks, nodes)
            r.external = tasks
            if n_ext:
                warn.add(kind, ns, name, None, f"PodGroup is malformed: {n_ext} active pod(s) counted as external "
                         "load on their nodes")
            return
        problem = None
        if "queues" not in available or job.waiting_for:
            pass  # every job's queue is synthesised, or the pod-grouper has not chosen one yet
        elif job.queue not in queue_names:
            # KAI keeps the PodGroup with a QueueDoesNotExist fit error: not scheduled, in no queue's numbers,
            # its pods on nodes still counted there (and in the resources fair share divides)
            job.waiting_for = "queue"
            warn.add(kind, ns, name, "spec.queue", f"queue {job.queue!r} does not exist (KAI: QueueDoesNotExist): "
                     "not scheduled and not in fair share; its running pods keep their nodes", skipped=False)
        elif job.queue in parents:
            problem = f"queue {job.queue!r} is not a leaf queue (jobs go in leaf queues)"
        if problem:
            n_ext = _count_external(tasks, nodes)
            r.external = tasks
            warn.add(kind, ns, name, "spec.queue",
                     f"{problem}: not scheduled; {n_ext} active pod(s) counted as external load on their nodes")
            return
        job.tasks = tasks
        r.job = job
        r.conditions = group.conditions
        r.held_groups = {(t.node, g) for t in tasks if t.gpu_groups and t.status in ("running", "releasing")
                         for g in t.gpu_groups}
        errs = _Collector()
        if job_checked(job, 0, errs) is job:  # valid on its own; now against the nodes its tasks name
            r.problems = job_placement_problems(job, nodes) + [
                (f"jobs[{job.name}].tasks[{t.name}].node", f"task on unknown node {t.node!r}")
                for t in tasks if t.node is not None and t.node not in nodes]
            if "queues" in available and not job.waiting_for and (
                    job.queue not in queue_names or job.queue in parents):
                r.problems.append((f"jobs[{job.name}].queue", "not a leaf queue of the snapshot"))
        else:  # something unusual: the snapshot takes the exact (full) check
            r.problems = errs.problems or [(f"jobs[{job.name}]", "needs the full check")]


def _seq_of(e: _Entry) -> int:
    return e.seq


def _name_of(pod: _Pod) -> str:
    return pod.name


def _count_external(tasks: list[Task], nodes: dict[str, Node]) -> int:
    """How many of ``tasks`` :func:`_tasks_to_external` would count (active, on a known node)."""
    return sum(1 for t in tasks if t.node and t.status in ("running", "binding", "releasing") and t.node in nodes)


def _standalone_group(pod: _Pod, job_name: str, pcs: PriorityClasses, queue_label_key: str) -> _Group:
    """What KAI's pod-grouper makes of a pod with no PodGroup: a job of its own (minMember 1)."""
    labels = pod.labels
    queue = (labels.get(queue_label_key) or labels.get(DEFAULT_QUEUE_LABEL_KEY) or labels.get(LEGACY_QUEUE_LABEL_KEY)
             or labels.get(PROJECT_LABEL_KEY) or DEFAULT_QUEUE_NAME)
    spec_pc = _dict(pod.obj, "spec").get("priorityClassName")
    pc = labels.get(LABEL_PRIORITY_CLASS)
    if not pc or pc not in pcs.values:
        pc = spec_pc if isinstance(spec_pc, str) and spec_pc in pcs.values else FALLBACK_PRIORITY_CLASS
    try:
        preemptible = _preemptible(labels.get(LABEL_PREEMPTIBILITY), f"metadata.labels.{LABEL_PREEMPTIBILITY}")
    except BadField:
        preemptible = None
    try:
        created = _creation_time(pod.obj) or 0.0
    except BadField:
        created = 0.0
    job = Job(name=job_name, namespace=pod.ns, queue=queue, priority=pcs.value(pc), preemptible=preemptible,
              min_available=1, creation_time=created)
    return _Group(job=job, kind="Pod")


def _pod_task(pod: _Pod, bind: Optional[dict], group: _Group, nodes: dict[str, Node],
              reserved: dict[tuple[str, str], int], warn: _Warnings,
              claims: Optional[ClaimIndex] = None) -> Optional[Task]:
    try:
        status = _task_status(pod, bind)
        if status in (None, "gated", "unknown"):
            if status == "unknown":
                warn.add("Pod", pod.ns, pod.name, "status.phase", f"phase {pod.phase!r}: not scheduled")
            return None
        gpu, gpu_mem, ndev = _gpu_request(pod)
        node = pod.node
        groups = _gpu_groups(pod)
        if status == "binding":
            node = bind.get("selectedNode") or None
            groups = [g for g in (bind.get("selectedGPUGroups") or []) if isinstance(g, str)] or groups
            if node is None:
                raise BadField("BindRequest.spec.selectedNode", "missing")
        elif status == "pipelined":
            node, groups = _nominated_node(pod), []
        elif bind is not None and status in ("running", "releasing"):
            # KAI takes a pod's GPU groups from its BindRequest when it has one (pod_info.go)
            groups = [g for g in (bind.get("selectedGPUGroups") or []) if isinstance(g, str)] or groups
        created = _creation_time(pod.obj)
        uid = _dict(pod.obj, "metadata").get("uid")
    except BadField as exc:
        warn.add("Pod", pod.ns, pod.name, exc.field, exc.message)
        return None
    if status == "succeeded":
        node, groups = None, []  # KAI's informer compacts a Succeeded pod to its name and phase
    elif status == "failed":
        groups = []  # a Failed pod keeps its node (shown there; it holds nothing)
    task = Task(name=pod.key, gpu=gpu, gpu_memory_mib=gpu_mem, gpu_devices=ndev,
                cpu_millis=pod.requests.get("cpu", 0.0) * 1000, memory_bytes=pod.requests.get("memory", 0.0),
                status=status, node=node, creation_time=created, constraints=pod.constraints,
                uid=uid if isinstance(uid, str) and uid else None)
    spec_pc = _dict(pod.obj, "spec").get("priorityClassName") or ""
    if isinstance(spec_pc, str) and spec_pc != priority_class_name(group.job.priority):
        task.priority_class = spec_pc
    if not pod.requests.get(GPU_RESOURCE) and gpu_mem is None:  # MIG instances only: placed per profile
        task.mig = mig_requested(pod.requests)
    dra = claims.pod_claims(pod.obj) if claims is not None else []
    if dra and (task.gpu or task.gpu_memory_mib is not None or task.mig):
        warn.add("Pod", pod.ns, pod.name, "spec.resourceClaims",
                 "GPUs from both the device plugin and DRA claims: the claims are left out")
    elif dra:
        task.dra_claims = dra
        task.gpu = float(sum(c.gpus for c in dra))
    sg = pod.labels.get(LABEL_SUBGROUP)
    if sg:
        if sg in group.subgroup_names:
            task.subgroup = sg
        else:
            warn.add("Pod", pod.ns, pod.name, f"metadata.labels.{LABEL_SUBGROUP}",
                     f"subgroup {sg!r} is not declared by its PodGroup; label ignored", skipped=False)
    if node is None:
        return task
    target = nodes.get(node)
    if status == "pipelined" and (target is None or task.is_gpu and target.gpus == 0 or
                                  gpu_mem is not None and gpu_mem > target.gpu_memory_mib):
        task.status, task.node = "pending", None  # a nomination that cannot hold: KAI's bonus has no effect
        return task
    if target is None:
        warn.add("Pod", pod.ns, pod.name, "spec.nodeName", f"node {node!r} is not in the snapshot")
        return None
    if task.is_gpu and target.gpus == 0:
        warn.add("Pod", pod.ns, pod.name, "spec.nodeName", f"GPU pod on node {node!r}, which advertises no GPUs")
        return None
    if gpu_mem is not None and gpu_mem > target.gpu_memory_mib:
        warn.add("Pod", pod.ns, pod.name, f"metadata.annotations.{ANN_GPU_MEMORY}",
                 f"{gpu_mem:g} MiB exceeds node {node!r} GPU memory {target.gpu_memory_mib:g} MiB")
        return None
    if task.is_fractional and groups:
        task.gpu_groups = groups
        indices = [reserved.get((node, g)) for g in groups]
        if all(i is not None and i < target.gpus for i in indices):
            task.gpu_indices = indices  # type: ignore[assignment]
    return task


def _add_external(node: Node, requests: dict[str, float]) -> None:
    ext = node.external
    ext.gpus += gpu_devices_requested(requests)
    ext.cpu_millis += requests.get("cpu", 0.0) * 1000
    ext.memory_bytes += requests.get("memory", 0.0)
    ext.pods += 1


def _tasks_to_external(tasks: list[Task], nodes: dict[str, Node]) -> int:
    """Active tasks of a job KAI will not schedule still occupy their nodes: count them as external load."""
    n = 0
    for t in tasks:
        if t.node and t.status in ("running", "binding", "releasing") and t.node in nodes:
            node = nodes[t.node]
            ext = node.external
            ext.gpus += t.gpus_on(node.gpu_memory_mib)
            ext.cpu_millis += t.cpu_millis
            ext.memory_bytes += t.memory_bytes
            ext.pods += 1
            n += 1
    return n


_PATH_OBJECT = re.compile(r"^(nodes|queues|jobs)\[([^\]]+)\]")


def _validate_or_prune(snap: Snapshot, warn: _Warnings, passes: int = 3) -> None:
    """Safety net: validate, and drop any object the validator still rejects (with a warning)."""
    for _ in range(passes):
        try:
            validate(snap)
            return
        except SnapshotError as exc:
            bad: dict[str, dict[str, str]] = {"nodes": {}, "queues": {}, "jobs": {}}
            for path, message in exc.problems:
                m = _PATH_OBJECT.match(path)
                if not m:
                    raise SourceError(f"converted snapshot is invalid at {path}: {message}") from None
                bad[m.group(1)].setdefault(m.group(2), f"{path}: {message}")
            for name, msg in bad["jobs"].items():
                for j in [j for j in snap.jobs if j.name == name]:
                    warn.add("PodGroup", j.namespace, j.name, None, f"rejected by snapshot validation: {msg}")
                snap.jobs = [j for j in snap.jobs if j.name != name]
            for name, msg in bad["queues"].items():
                warn.add("Queue", None, name, None, f"rejected by snapshot validation: {msg}")
                snap.queues = [q for q in snap.queues if q.name != name]
            for name, msg in bad["nodes"].items():
                warn.add("Node", None, name, None, f"rejected by snapshot validation: {msg}")
                snap.nodes = [n for n in snap.nodes if n.name != name]
    validate(snap)
