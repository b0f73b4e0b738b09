"""Write a snapshot as a KAI ``/get-snapshot`` zip: the objects KAI's informers would hold for that cluster.

The inverse of :mod:`scheduler.sources.kai_snapshot`: any kaidash snapshot (a what-if, a generated cluster, a
captured one) becomes a zip that KAI's own offline ``snapshot-tool`` replays, and that ``kaidash schedule`` reads
back as the same snapshot. What is written, per snapshot object:

=========================== =============================================================================
snapshot                    KAI objects (``rawObjects``)
=========================== =============================================================================
node                        Node: allocatable ``cpu`` / ``memory`` / ``pods`` / ``nvidia.com/gpu``, labels
                            (``nvidia.com/gpu.memory``, ``.product``, ``.count`` from the GPU fields), Ready
                            condition, taints, ``spec.unschedulable``; ``external`` usage and ``external_pods``
                            as Running pods of ``default-scheduler`` (one per pod slot)
config_maps                 ConfigMaps
queue                       Queue ``scheduling.run.ai/v2`` (memory quota/limit in MB, as the CRD has it)
job                         PodGroup ``scheduling.run.ai/v2alpha2`` (minMember, queue, priority class,
                            preemptibility, subGroups, KAI's timestamp annotations and durations,
                            ``topologyConstraint``)
topologies                  Topology ``kai.scheduler/v1alpha1`` (levels: node label, alias)
job priority                PriorityClass: KAI's ``train`` 50, ``build-preemptible`` 75, ``build`` 100,
                            ``inference`` 125, else ``kaidash-priority-<value>``
task                        Pod of ``kai-scheduler`` with the ``pod-group-name`` annotation, the queue label,
                            ``gpu-fraction`` / ``gpu-memory`` / ``gpu-fraction-num-devices`` annotations,
                            ``runai-gpu-group`` label(s), the sub-group label, its ``constraints`` (labels,
                            tolerations, node selector, affinity, host ports, ConfigMap volumes); a job
                            ``waiting_for: pod-grouper`` gets no PodGroup; status as KAI reads it:
                            pending = Pending, running = Running on its node, releasing = Running with a
                            deletionTimestamp, binding = Pending + a BindRequest, pipelined = Pending with
                            ``status.nominatedNodeName``, failed / succeeded = that phase
shared GPU group            reservation Pod in ``kai-resource-reservation`` (``nvidia.com/gpu: 1``) whose
                            ``run.ai/reserve_for_gpu_index`` holds a GPU UUID, as KAI's reservation binary writes
                            it: ``GPU-<uuid5(node, index)>`` (:func:`gpu_uuid`), which the importer maps back
config                      ``config`` (actions, plugin tiers in the operator's order with nodeplacement /
                            gpupack|gpuspread / proportion kValue / minruntime arguments, scenario search
                            budgets) and ``schedulerParams``
=========================== =============================================================================

Names: KAI needs a namespace for every pod and pod group. A job without a namespace is written to ``default``; a
task named ``<namespace>/<pod>`` becomes pod ``<pod>``, any other task name becomes the pod name as is. A snapshot
whose jobs have namespaces and whose task names are ``<namespace>/<pod>`` (what every kube or zip import produces)
comes back unchanged; others come back under those names (:func:`kai_names` gives the mapping).

A pod's Kubernetes UID is KAI's last tie-breaker in task order (jobs tie-break on the PodGroup's name): a task
or job with ``uid`` keeps it; one without gets a generated UID that sorts in kaidash's own fallback order (task
name; job key), so KAI breaks ties the way kaidash does.
"""

from __future__ import annotations

import io
import json
import math
import uuid
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from ..model import (ExternalPod, HostPort, Job, LabelSelector, Node, PodAffinityTerm, PodConstraints, Queue,
                     SchedulerConfig, Snapshot, Task, Topology, has_gpu_memory_value, mig_gpu_total)
from ..snapshot_io import requirement_to_dict

MEMBER = "snapshot.json"
SCHEDULER_NAME = "kai-scheduler"
RESERVATION_NAMESPACE = "kai-resource-reservation"
EXTERNAL_NAMESPACE = "kaidash-external"
DEFAULT_NAMESPACE = "default"
NODE_POOL_LABEL = "kai.scheduler/node-pool"

KAI_PRIORITY_CLASSES = {50: "train", 75: "build-preemptible", 100: "build", 125: "inference"}
"""The classes KAI's helm chart installs (kai-semantics §f); other values get ``kaidash-priority-<v>``."""

PLUGIN_ORDER = ("predicates", "proportion", "priority", "nodeavailability", "resourcetype", "podaffinity", "elastic",
                "kubeflow", "ray", "subgrouporder", "taskorder", "nominatednode", "dynamicresources", "minruntime",
                "topology", "snapshot", "sg-nodelocalgreedy", "sg-multinodegang")
"""KAI operator's default plugins by priority (``apis/kai/v1/schedulingshard_types.go``), before the GPU-placement
ones (``gpupack`` / ``gpuspread``, ``nodeplacement``, ``gpusharingorder`` for bin-packing)."""

SCENARIO_SEARCH_BUDGETS = {"maxActionSearchDuration": {"default": "5m0s"}, "maxJobSearchDuration": "4m0s",
                           "minJobSearchDuration": "0s",
                           "maxGeneratorSearchDuration": {"default": "2m0s", "NodeLocalGreedy": "30s",
                                                          "MultiNodeGang": "2m0s"}}
"""``DefaultScenarioSearchBudgets``: what a running scheduler's config holds after loading."""

_UUID_NS = uuid.UUID("6f0c3c64-5d7e-4b7a-9a51-0b9a4b8f2d11")
NS_PER_S = 1_000_000_000


def gpu_uuid(node: str, index: int) -> str:
    """The GPU UUID the export writes for device ``index`` of ``node`` (nvidia-smi style ``GPU-…``)."""
    return f"GPU-{uuid.uuid5(_UUID_NS, f'{node}/{index}')}"


def gpu_index_of_uuid(node: str, value: str, gpus: int) -> Optional[int]:
    """The device index behind a UUID written by :func:`gpu_uuid` for ``node``, else None (a real GPU's UUID)."""
    for i in range(gpus):
        if gpu_uuid(node, i) == value:
            return i
    return None


def kai_names(snap: Snapshot) -> tuple[dict[str, str], dict[str, str]]:
    """``(job key → key after a round trip, task name → name after a round trip)`` (see the module doc)."""
    jobs, tasks = {}, {}
    for job in snap.jobs:
        ns = job.namespace or DEFAULT_NAMESPACE
        jobs[job.key] = f"{ns}/{job.name}"
        for t in job.tasks:
            tasks[t.name] = f"{ns}/{_pod_name(t, ns)}"
    return jobs, tasks


def _pod_name(t: Task, ns: str) -> str:
    prefix = f"{ns}/"
    return t.name[len(prefix):] if t.name.startswith(prefix) else t.name


def _rfc3339(seconds: float) -> str:
    dt = datetime.fromtimestamp(seconds, tz=timezone.utc)
    if seconds == math.floor(seconds):
        return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _go_duration(seconds: float) -> str:
    """A Go duration string (``90s`` → ``1m30s``), as ``metav1.Duration`` marshals."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    out = ""
    if h:
        out += f"{int(h)}h"
    if h or m:
        out += f"{int(m)}m"
    out += f"{sec:g}s"
    return sign + out


def _millis(value: float) -> str:
    """CPU millicores as a quantity (``1500m``)."""
    return f"{int(value)}m" if value == int(value) else f"{value:g}m"


def _bytes(value: float) -> str:
    """Bytes as a quantity (integral bytes; a fraction of a byte as milli-bytes)."""
    return str(int(value)) if value == int(value) else f"{round(value * 1000)}m"


def _number(value: float) -> Any:
    return int(value) if value == int(value) else value


class _Uids:
    """UIDs for objects without one: deterministic, sorting in the order of the given keys."""

    def __init__(self, kind: str, keys: list[str]):
        self._rank = {k: i for i, k in enumerate(sorted(set(keys)))}
        self._kind = kind

    def __call__(self, key: str, given: Optional[str]) -> str:
        if given:
            return given
        tail = uuid.uuid5(_UUID_NS, f"{self._kind}/{key}").hex
        return f"{self._rank[key]:08x}-{tail[8:12]}-{tail[12:16]}-{tail[16:20]}-{tail[20:32]}"


def _meta(name: str, namespace: Optional[str], uid: str, created: float, *, labels: Optional[dict] = None,
          annotations: Optional[dict] = None, generation: Optional[int] = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["uid"] = uid
    meta["resourceVersion"] = "1"
    if generation is not None:
        meta["generation"] = generation
    meta["creationTimestamp"] = _rfc3339(created)
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# ---------------------------------------------------------------------------------------------- objects

def node_object(n: Node, time: float) -> dict:
    """A Node as the API returns it (allocatable, GPU feature-discovery labels, conditions, taints)."""
    labels = {"kubernetes.io/hostname": n.name, **n.labels}
    alloc = {"cpu": _millis(n.cpu_millis), "memory": _bytes(n.memory_bytes), "pods": str(n.pods)}
    device_plugin = n.gpus - n.dra_gpus  # DRA devices are published in ResourceSlices (kai_export_dra)
    if device_plugin:
        whole = device_plugin - mig_gpu_total(n.mig)  # MIG instances are their own resources
        alloc["nvidia.com/gpu"] = str(whole)
        for prof, count in sorted(n.mig.items()):
            alloc[f"nvidia.com/mig-{prof}"] = str(count)
        labels["nvidia.com/gpu.count"] = str(device_plugin)
        labels["nvidia.com/gpu.present"] = "true"
        if has_gpu_memory_value(n.gpu_memory_mib):  # KAI's 100 MiB default stands for "no label"
            labels["nvidia.com/gpu.memory"] = str(int(n.gpu_memory_mib))
        if n.gpu_model:
            labels["nvidia.com/gpu.product"] = n.gpu_model
    elif n.gpu_model:
        labels["nvidia.com/gpu.product"] = n.gpu_model
    spec: dict[str, Any] = {}
    if n.taints:
        spec["taints"] = [_taint_dict(t) for t in n.taints]
    if n.unschedulable:
        spec["unschedulable"] = True
    stamp = _rfc3339(time)
    ready = "True" if n.ready else "False"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": _meta(n.name, None, str(uuid.uuid5(_UUID_NS, f"node/{n.name}")), time, labels=labels),
            "spec": spec,
            "status": {"allocatable": alloc, "capacity": dict(alloc),
                       "conditions": [{"type": "Ready", "status": ready,
                                       "reason": "KubeletReady" if n.ready else "KubeletNotReady",
                                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}


def _taint_dict(t: Any) -> dict:
    d = {"key": t.key, "effect": t.effect}
    if t.value:
        d["value"] = t.value
    return d


def external_pod_objects(n: Node, time: float) -> list[dict]:
    """Pods of another scheduler holding the node's ``external`` usage (one per pod slot; the first carries all
    the resources), carrying the labels, host ports and anti-affinity of ``external_pods`` in order."""
    ext = n.external
    if not (ext.gpus or ext.cpu_millis or ext.memory_bytes or ext.pods or n.external_pods):
        return []
    pods = max(int(ext.pods), len(n.external_pods), 1)
    out = []
    for k in range(pods):
        requests: dict[str, str] = {}
        if k == 0:
            requests = {"cpu": _millis(ext.cpu_millis), "memory": _bytes(ext.memory_bytes)}
            if ext.gpus:
                requests["nvidia.com/gpu"] = str(_number(ext.gpus))
        seen = n.external_pods[k] if k < len(n.external_pods) else ExternalPod(EXTERNAL_NAMESPACE)
        name = f"external-{n.name}-{k}"
        container: dict[str, Any] = {"name": "main", "resources": {"requests": requests}}
        if seen.host_ports:
            container["ports"] = [_port_dict(h) for h in seen.host_ports]
        spec: dict[str, Any] = {"schedulerName": "default-scheduler", "nodeName": n.name, "containers": [container]}
        if seen.pod_anti_affinity:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                _affinity_term_dict(t) for t in seen.pod_anti_affinity]}}
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": _meta(name, seen.namespace, str(uuid.uuid5(_UUID_NS, f"external/{name}")), time,
                                      labels=seen.labels or {"app": "kaidash-external"}),
                    "spec": spec, "status": {"phase": "Running"}})
    return out


def _port_dict(h: HostPort) -> dict:
    d: dict[str, Any] = {"containerPort": h.port, "hostPort": h.port, "protocol": h.protocol}
    if h.host_ip:
        d["hostIP"] = h.host_ip
    return d


def _selector_dict(sel: LabelSelector) -> dict:
    d: dict[str, Any] = {}
    if sel.match_labels:
        d["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        d["matchExpressions"] = [requirement_to_dict(r) for r in sel.match_expressions]
    return d


def _affinity_term_dict(t: PodAffinityTerm) -> dict:
    d: dict[str, Any] = {"labelSelector": _selector_dict(t.selector), "topologyKey": t.topology_key}
    if t.namespaces:
        d["namespaces"] = list(t.namespaces)
    if t.all_namespaces:
        d["namespaceSelector"] = {}
    return d


def _affinity_block(required: list[PodAffinityTerm], preferred: list[PodAffinityTerm]) -> dict:
    d: dict[str, Any] = {}
    if required:
        d["requiredDuringSchedulingIgnoredDuringExecution"] = [_affinity_term_dict(t) for t in required]
    if preferred:
        d["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": t.weight, "podAffinityTerm": _affinity_term_dict(t)} for t in preferred]
    return d


def _apply_constraints(c: PodConstraints, spec: dict, container: dict) -> None:
    """Write a task's constraints into its pod spec, as the API holds them."""
    if c.tolerations:
        spec["tolerations"] = [{k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value),
                                                   ("effect", t.effect)) if v} for t in c.tolerations]
    if c.node_selector:
        spec["nodeSelector"] = dict(c.node_selector)
    affinity: dict[str, Any] = {}
    if c.node_affinity:
        terms = []
        for term in c.node_affinity:
            t: dict[str, Any] = {}
            if term.match_expressions:
                t["matchExpressions"] = [requirement_to_dict(r) for r in term.match_expressions]
            if term.match_fields:
                t["matchFields"] = [requirement_to_dict(r) for r in term.match_fields]
            terms.append(t)
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    pa = _affinity_block(c.pod_affinity, c.preferred_pod_affinity)
    if pa:
        affinity["podAffinity"] = pa
    anti = _affinity_block(c.pod_anti_affinity, c.preferred_pod_anti_affinity)
    if anti:
        affinity["podAntiAffinity"] = anti
    if affinity:
        spec["affinity"] = affinity
    if c.host_ports:
        container["ports"] = [_port_dict(h) for h in c.host_ports]
    if c.config_maps:
        spec["volumes"] = [{"name": f"cm-{k}", "configMap": {"name": name}} for k, name in enumerate(c.config_maps)]
        container["volumeMounts"] = [{"name": f"cm-{k}", "mountPath": f"/etc/kaidash/cm-{k}"}
                                     for k in range(len(c.config_maps))]


def queue_object(q: Queue, uid: str) -> dict:
    """A KAI Queue (``scheduling.run.ai/v2``, cluster-scoped)."""
    spec: dict[str, Any] = {}
    if q.display_name:
        spec["displayName"] = q.display_name
    if q.parent:
        spec["parentQueue"] = q.parent
    spec["priority"] = q.priority
    resources = {}
    for res in ("gpu", "cpu", "memory"):
        r = q.resource(res)
        scale = 1e6 if res == "memory" else 1.0
        quota = r.quota if r.quota == -1 else r.quota / scale
        limit = r.limit if r.limit == -1 else r.limit / scale
        resources[res] = {"quota": _number(quota), "limit": _number(limit),
                          "overQuotaWeight": _number(r.over_quota_weight)}
    spec["resources"] = resources
    if q.preempt_min_runtime_s is not None:
        spec["preemptMinRuntime"] = _go_duration(q.preempt_min_runtime_s)
    if q.reclaim_min_runtime_s is not None:
        spec["reclaimMinRuntime"] = _go_duration(q.reclaim_min_runtime_s)
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": _meta(q.name, None, uid, q.creation_time, generation=1), "spec": spec}


def priority_class_name(value: int) -> str:
    """The PriorityClass the export gives a job priority."""
    if value in KAI_PRIORITY_CLASSES:
        return KAI_PRIORITY_CLASSES[value]
    return f"kaidash-priority-{value}" if value >= 0 else f"kaidash-priority-minus-{-value}"


def priority_class_object(value: int) -> dict:
    name = priority_class_name(value)
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": _meta(name, None, str(uuid.uuid5(_UUID_NS, f"pc/{name}")), 0.0),
            "value": value, "preemptionPolicy": "PreemptLowerPriority"}


def pod_group_object(job: Job, ns: str, uid: str) -> dict:
    """A PodGroup (``scheduling.run.ai/v2alpha2``) as the pod-grouper creates it."""
    spec: dict[str, Any] = {"minMember": job.min_available, "queue": job.queue,
                            "priorityClassName": priority_class_name(job.priority)}
    if job.preemptible is not None:
        spec["preemptibility"] = "preemptible" if job.preemptible else "non-preemptible"
    if job.subgroups:
        spec["subGroups"] = [{"name": sg.name, "minMember": sg.min_available} for sg in job.subgroups]
    if job.preemption_delay_s is not None:
        spec["preemptionDelay"] = _go_duration(job.preemption_delay_s)
    if job.stale_grace_period_s is not None:
        spec["stalenessGracePeriod"] = _go_duration(job.stale_grace_period_s)
    if job.topology is not None:
        c = job.topology
        spec["topologyConstraint"] = {"topology": c.topology,
                                      **({"requiredTopologyLevel": c.required_level} if c.required_level else {}),
                                      **({"preferredTopologyLevel": c.preferred_level} if c.preferred_level else {})}
    ann = {}
    for attr, key in (("last_start_time", "kai.scheduler/last-start-timestamp"),
                      ("stale_since", "kai.scheduler/stale-podgroup-timestamp"),
                      ("last_eviction_time", "kai.scheduler/last-eviction-timestamp")):
        value = getattr(job, attr)
        if value is not None:
            ann[key] = _rfc3339(value)
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": _meta(job.name, ns, uid, job.creation_time, labels={"kai.scheduler/queue": job.queue},
                              annotations=ann, generation=1),
            "spec": spec}


def _requests(t: Task) -> tuple[dict, dict]:
    requests = {"cpu": _millis(t.cpu_millis), "memory": _bytes(t.memory_bytes)}
    limits = {}
    if t.mig:
        for prof, count in sorted(t.mig.items()):
            requests[f"nvidia.com/mig-{prof}"] = limits[f"nvidia.com/mig-{prof}"] = str(count)
    elif t.gpu_memory_mib is None and t.gpu >= 1 and not t.dra_claims:  # claims ask for DRA devices
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(int(t.gpu))
    return requests, limits


def pod_object(job: Job, t: Task, ns: str, uid: str, time: Optional[float] = None) -> dict:
    """A KAI pod for task ``t`` of ``job`` (see the module table for the status mapping)."""
    labels = {"kai.scheduler/queue": job.queue}
    if t.constraints is not None:
        labels.update(t.constraints.labels)
    ann = {} if _bare_pod(job, t, ns) else {"pod-group-name": job.name}
    if t.gpu_memory_mib is not None:
        ann["gpu-memory"] = str(_number(t.gpu_memory_mib))
    elif 0 < t.gpu < 1:
        ann["gpu-fraction"] = repr(t.gpu) if t.gpu != round(t.gpu, 6) else f"{t.gpu:g}"
    if t.is_fractional and t.gpu_devices != 1:
        ann["gpu-fraction-num-devices"] = str(t.gpu_devices)
    if t.subgroup:
        labels["kai.scheduler/subgroup-name"] = t.subgroup
    groups = t.gpu_groups if t.status in ("running", "releasing") else []
    if len(groups) == 1:
        labels["runai-gpu-group"] = groups[0]
    elif groups:
        for g in groups:
            labels[f"runai-gpu-group/{g}"] = g
    requests, limits = _requests(t)
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    container: dict[str, Any] = {"name": "main", "resources": resources}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER_NAME, "containers": [container], "restartPolicy": "Never"}
    pod_class = priority_class_name(job.priority) if t.priority_class is None else t.priority_class
    if pod_class:
        spec["priorityClassName"] = pod_class
    if t.constraints is not None:
        _apply_constraints(t.constraints, spec, container)
    status: dict[str, Any] = {}
    meta = _meta(_pod_name(t, ns), ns, uid,
                 t.creation_time if t.creation_time is not None else job.creation_time,
                 labels=labels, annotations=ann)
    s = t.status
    if s in ("running", "releasing"):
        spec["nodeName"] = t.node
        status["phase"] = "Running"
        if s == "releasing":
            # deleted at the snapshot's time: KAI takes a pod deleted more than 2 minutes before *its* clock as
            # StuckInReleasing (no longer pipelinable), so a replay long after the snapshot sees it stuck
            meta["deletionTimestamp"] = _rfc3339(time if time is not None else t.creation_time or job.creation_time)
            meta["deletionGracePeriodSeconds"] = 30
    elif s == "pipelined":
        status["phase"] = "Pending"
        status["nominatedNodeName"] = t.node
    elif s == "failed":
        status["phase"] = "Failed"
        if t.node:
            spec["nodeName"] = t.node
    elif s == "succeeded":
        status["phase"] = "Succeeded"
    else:  # pending, binding (the BindRequest says where)
        status["phase"] = "Pending"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _bare_pod(job: Job, t: Task, ns: str) -> bool:
    """A job awaiting the pod-grouper whose single pod is the job (no ``pod-group-name`` annotation at all)."""
    return job.waiting_for == "pod-grouper" and len(job.tasks) == 1 and _pod_name(t, ns) == job.name


def bind_request_object(t: Task, pod: dict) -> dict:
    """The BindRequest of a task KAI allocated but did not bind yet (``binding``)."""
    meta = pod["metadata"]
    spec: dict[str, Any] = {"podName": meta["name"], "selectedNode": t.node,
                            "receivedResourceType": "Fraction" if t.is_fractional else "Regular"}
    if t.is_fractional and t.gpu_groups:
        spec["selectedGPUGroups"] = list(t.gpu_groups)
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": str(uuid.uuid5(_UUID_NS, f"bind/{meta['uid']}")), "resourceVersion": "1",
                         "creationTimestamp": meta["creationTimestamp"],
                         "labels": {"selected-node": t.node}},
            "spec": spec, "status": {"phase": "Pending"}}


def reservation_pod_object(node: str, group: str, index: Optional[int], time: float) -> dict:
    """KAI's GPU reservation pod of a shared GPU group (the binder creates one per group)."""
    name = f"gpu-reservation-{node}-{uuid.uuid5(_UUID_NS, group).hex[:5]}"
    ann = {"karpenter.sh/do-not-disrupt": "true"}
    if index is not None:
        ann["run.ai/reserve_for_gpu_index"] = gpu_uuid(node, index)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta(name, RESERVATION_NAMESPACE, str(uuid.uuid5(_UUID_NS, f"reservation/{node}/{group}")),
                              time, labels={"app": "kai-resource-reservation", "runai-gpu-group": group},
                              annotations=ann),
            "spec": {"nodeName": node, "schedulerName": "default-scheduler",
                     "containers": [{"name": "resource-reservation",
                                     "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                   "limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


# ---------------------------------------------------------------------------------------------- config

def kai_config(cfg: SchedulerConfig) -> dict:
    """KAI's ``config`` section (SchedulerConfiguration) for kaidash's scheduler knobs."""
    plugins: list[dict] = []
    for name in PLUGIN_ORDER:
        p: dict[str, Any] = {"name": name}
        if name == "proportion":
            p["arguments"] = {"kValue": f"{cfg.k_value:g}"}
        elif name == "minruntime":
            args = {}
            if cfg.default_preempt_min_runtime_s:
                args["defaultPreemptMinRuntime"] = _go_duration(cfg.default_preempt_min_runtime_s)
            if cfg.default_reclaim_min_runtime_s:
                args["defaultReclaimMinRuntime"] = _go_duration(cfg.default_reclaim_min_runtime_s)
            if cfg.min_runtime_resolve != "lca":
                args["reclaimResolveMethod"] = cfg.min_runtime_resolve
            if args:
                p["arguments"] = args
        plugins.append(p)
    plugins.append({"name": "gpuspread" if cfg.gpu_device_order == "spread" else "gpupack"})
    plugins.append({"name": "nodeplacement", "arguments": {"gpu": cfg.placement.gpu, "cpu": cfg.placement.cpu}})
    if cfg.placement.gpu == "binpack":
        plugins.append({"name": "gpusharingorder"})
    actions = list(cfg.actions)
    if "spread" in (cfg.placement.gpu, cfg.placement.cpu):
        # KAI's operator disables consolidation under spread placement, and kaidash's engine skips it there too
        actions = [a for a in actions if a != "consolidation"]
    return {"actions": ", ".join(actions), "tiers": [{"plugins": plugins}],
            "scenarioSearchBudgets": json.loads(json.dumps(SCENARIO_SEARCH_BUDGETS))}


def kai_scheduler_params(cfg: SchedulerConfig, node_pool_key: str = NODE_POOL_LABEL) -> dict:
    """KAI's ``schedulerParams`` for kaidash's scheduler knobs (durations in nanoseconds)."""
    return {"schedulerName": SCHEDULER_NAME,
            "partitionParams": {"NodePoolLabelKey": node_pool_key, "NodePoolLabelValue": ""},
            "maxNumberConsolidationPreemptees": cfg.max_consolidation_preemptees,
            "useSchedulingSignatures": cfg.use_scheduling_signatures,
            "fullHierarchyFairness": True,
            "allowConsolidatingReclaim": cfg.allow_consolidating_reclaim,
            "numOfStatusRecordingWorkers": 5,
            "globalDefaultStalenessGracePeriod": round(cfg.stale_grace_period_s * NS_PER_S),
            "schedulePeriod": round(cfg.schedule_period_s * NS_PER_S),
            "detailedFitErrors": True,
            "queueLabelKey": "kai.scheduler/queue"}


# ---------------------------------------------------------------------------------------------- document

def topology_object(t: Topology, time: float) -> dict:
    """A ``Topology`` (``kai.scheduler/v1alpha1``, cluster-scoped)."""
    levels = [{"nodeLabel": lv.node_label, **({"alias": lv.alias} if lv.alias else {})} for lv in t.levels]
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
            "metadata": _meta(t.name, None, str(uuid.uuid5(_UUID_NS, f"topology/{t.name}")), time),
            "spec": {"levels": levels}}


def export_kai_document(snap: Snapshot) -> dict:
    """The ``snapshot.json`` document of a KAI ``/get-snapshot`` zip for ``snap``."""
    time = snap.time
    job_uids = _Uids("job", [j.key for j in snap.jobs])
    task_uids = _Uids("task", [t.name for _, t in snap.iter_tasks()])
    queue_uids = _Uids("queue", [q.name for q in snap.queues])
    pods: list[dict] = []
    pod_groups: list[dict] = []
    binds: list[dict] = []
    config_maps: list[dict] = []
    nodes = snap.node_map()
    dra_pods: dict[str, dict] = {}
    groups: dict[tuple[str, str], Optional[int]] = {}
    for job in snap.jobs:
        ns = job.namespace or DEFAULT_NAMESPACE
        if job.waiting_for != "pod-grouper":  # the pod-grouper has not made a PodGroup for those pods yet
            pod_groups.append(pod_group_object(job, ns, job_uids(job.key, job.uid)))
        for t in job.tasks:
            pod = pod_object(job, t, ns, task_uids(t.name, t.uid), time)
            pods.append(pod)
            if t.dra_claims:
                dra_pods[t.name] = pod
            if t.status == "binding":
                binds.append(bind_request_object(t, pod))
            if t.is_fractional and t.status in ("running", "releasing") and t.node:
                for k, g in enumerate(t.gpu_groups):
                    idx = t.gpu_indices[k] if k < len(t.gpu_indices) else None
                    if groups.get((t.node, g)) is None:
                        groups[(t.node, g)] = idx
    for (node, group), idx in groups.items():
        if node in nodes:
            pods.append(reservation_pod_object(node, group, idx, time))
    for n in snap.nodes:
        pods.extend(external_pod_objects(n, time))
    for ref in sorted(set(snap.config_maps or [])):
        ns, _, name = ref.rpartition("/")
        ns = ns or DEFAULT_NAMESPACE
        config_maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": _meta(name, ns, str(uuid.uuid5(_UUID_NS, f"cm/{ns}/{name}")), time)})
    from .kai_export_dra import add_claims, slice_objects  # it builds on this module's object helpers
    claims, device_classes = add_claims(snap, dra_pods, time)
    values = sorted({j.priority for j in snap.jobs} | set(KAI_PRIORITY_CLASSES))
    pool_labelled = any(NODE_POOL_LABEL in n.labels for n in snap.nodes)
    raw = {"pods": pods, "nodes": [node_object(n, time) for n in snap.nodes],
           "queues": [queue_object(q, queue_uids(q.name, None)) for q in snap.queues],
           "podGroups": pod_groups, "bindRequests": binds,
           "priorityClasses": [priority_class_object(v) for v in values],
           "configMaps": config_maps, "persistentVolumes": [], "persistentVolumeClaims": [],
           "csiStorageCapacities": [], "storageClasses": [], "csiDrivers": [], "resourceClaims": claims,
           "resourceSlices": slice_objects(snap, time), "deviceClasses": device_classes, "topologies": [topology_object(t, time) for t in snap.topologies],
           "nodeResourceTopologies": []}
    # kaidash schedules every node together; KAI's default shard skips nodes carrying the node-pool label, so a
    # snapshot that uses the label is exported without node-pool partitioning.
    params = kai_scheduler_params(snap.config, "" if pool_labelled else NODE_POOL_LABEL)
    return {"config": kai_config(snap.config), "schedulerParams": params, "rawObjects": raw}


def export_kai_zip_bytes(snap: Snapshot) -> bytes:
    """The zip (one ``snapshot.json`` member, as ``/get-snapshot`` serves it) for ``snap``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(MEMBER, date_time=(2026, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, json.dumps(export_kai_document(snap), separators=(",", ":")))
    return buf.getvalue()


def write_kai_zip(snap: Snapshot, path: str | Path) -> None:
    """Write ``snap`` as a KAI ``/get-snapshot`` zip at ``path``."""
    Path(path).write_bytes(export_kai_zip_bytes(snap))
