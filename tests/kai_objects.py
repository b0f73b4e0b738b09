"""Builders of Kubernetes / KAI objects in the JSON shapes a real API server returns, and KAI snapshot zips.

Shared by the kube-source tests (served by ``kube_fake_server``) and the KAI zip tests. Objects carry
``apiVersion``, ``kind`` and ``metadata`` with uid, resourceVersion, creationTimestamp (and generation for CRDs),
as ``kubectl get -o json`` shows them.
"""

from __future__ import annotations

import io
import itertools
import json
import uuid
import zipfile
from typing import Any, Optional

T0 = "2026-01-01T00:00:00Z"
T0_EPOCH = 1767225600.0
_rv = itertools.count(1000)


def _metadata(name: str, namespace: Optional[str] = None, labels=None, annotations=None,
              created: str = T0, generation: Optional[int] = None, **extra) -> dict:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta.update(uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}/{name}")),
                resourceVersion=str(next(_rv)), creationTimestamp=created)
    if generation is not None:
        meta["generation"] = generation
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    meta.update(extra)
    return meta


def node(name: str, gpus: int = 8, gpu_memory: Optional[str] = "81559", product: str = "NVIDIA-H100-80GB-HBM3",
         cpu: str = "191500m", memory: str = "2113158772Ki", pods: str = "110", ready: bool = True,
         labels: Optional[dict] = None, allocatable: Optional[dict] = None) -> dict:
    """A GPU node as GPU feature discovery labels it (``nvidia.com/gpu.*``)."""
    lab = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
           "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"}
    if gpus:
        lab.update({"nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.present": "true", "nvidia.com/cuda.driver.major": "550"})
        if gpu_memory is not None:
            lab["nvidia.com/gpu.memory"] = gpu_memory
    lab.update(labels or {})
    alloc = {"cpu": cpu, "ephemeral-storage": "1889760349266", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
             "memory": memory, "pods": pods}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    alloc.update(allocatable or {})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": _metadata(name, labels=lab, annotations={"node.alpha.kubernetes.io/ttl": "0"}),
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "allocatable": alloc, "capacity": dict(alloc),
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": T0, "lastTransitionTime": T0},
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else "KubeletNotReady",
                 "lastHeartbeatTime": T0, "lastTransitionTime": T0},
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.4", "containerRuntimeVersion": "containerd://1.7.22"},
        },
    }


def pod(name: str, namespace: str = "team-a", *, gpu: Optional[int] = None, cpu: str = "1", memory: str = "1Gi",
        node: Optional[str] = None, phase: Optional[str] = None, scheduler: str = "kai-scheduler",
        queue: Optional[str] = "team-a", pod_group: Optional[str] = None, annotations: Optional[dict] = None,
        labels: Optional[dict] = None, priority_class: Optional[str] = None, deleting: bool = False,
        created: str = T0, init_containers: Optional[list] = None, extra_requests: Optional[dict] = None) -> dict:
    """A pod as the API returns it (``spec.containers[].resources``, ``status.phase``)."""
    lab = {"app": name.rsplit("-", 1)[0]}
    if queue:
        lab["kai.scheduler/queue"] = queue
    lab.update(labels or {})
    ann = {}
    if pod_group:
        ann["pod-group-name"] = pod_group
    ann.update(annotations or {})
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    limits: dict[str, Any] = {}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
        limits["nvidia.com/gpu"] = str(gpu)
    requests.update(extra_requests or {})
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                        "resources": {"requests": requests, **({"limits": limits} if limits else {})}}],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "serviceAccountName": "default",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if init_containers:
        spec["initContainers"] = init_containers
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    phase = phase or ("Running" if node else "Pending")
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if phase == "Running":
        status.update(startTime=created, hostIP="10.0.0.10", podIP="10.244.1.7")
    meta = _metadata(name, namespace, labels=lab, annotations=ann, created=created)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:05:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def reservation_pod(node_name: str, group: str, index: int) -> dict:
    """KAI's GPU reservation pod for a shared GPU group (namespace ``kai-resource-reservation``)."""
    p = pod(f"gpu-reservation-{node_name}-{group[:5]}", "kai-resource-reservation", gpu=1, cpu="2m", memory="20Mi",
            node=node_name, queue=None, labels={"app": "kai-resource-reservation", "runai-gpu-group": group},
            annotations={"run.ai/reserve_for_gpu_index": str(index)})
    return p


def queue(name: str, parent: Optional[str] = None, gpu: Optional[dict] = None, cpu: Optional[dict] = None,
          memory: Optional[dict] = None, priority: Optional[int] = None, **spec_extra) -> dict:
    """A KAI Queue (``scheduling.run.ai/v2``, cluster-scoped); resources as given (memory in MB)."""
    spec: dict[str, Any] = {}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    resources = {}
    for key, val in (("gpu", gpu), ("cpu", cpu), ("memory", memory)):
        if val is not None:
            resources[key] = val
    spec["resources"] = resources
    spec.update(spec_extra)
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": _metadata(name, generation=1), "spec": spec,
            "status": {"allocated": {"cpu": "0", "memory": "0", "nvidia.com/gpu": "0"}}}


def pod_group(name: str, namespace: str = "team-a", queue: str = "team-a", min_member: Optional[int] = 1,
              priority_class: Optional[str] = "train", annotations: Optional[dict] = None,
              sub_groups: Optional[list] = None, conditions: Optional[list] = None, **spec_extra) -> dict:
    """A KAI PodGroup (``scheduling.run.ai/v2alpha2``) as the pod-grouper creates it."""
    spec: dict[str, Any] = {"queue": queue}
    if min_member is not None:
        spec["minMember"] = min_member
    if priority_class:
        spec["priorityClassName"] = priority_class
    if sub_groups:
        spec["subGroups"] = sub_groups
    spec.update(spec_extra)
    ann = {"kai.scheduler/top-owner-metadata": json.dumps({"name": name, "kind": "Job"})}
    ann.update(annotations or {})
    obj = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
           "metadata": _metadata(name, namespace, annotations=ann, generation=1,
                                 labels={"kai.scheduler/queue": queue}), "spec": spec}
    if conditions:
        obj["status"] = {"schedulingConditions": conditions}
    return obj


def priority_class(name: str, value: int, global_default: bool = False) -> dict:
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": _metadata(name),
           "value": value, "preemptionPolicy": "PreemptLowerPriority"}
    if global_default:
        obj["globalDefault"] = True
    return obj


def kai_priority_classes() -> list[dict]:
    """The four classes KAI's helm chart installs (kai-semantics §f)."""
    return [priority_class("train", 50), priority_class("build-preemptible", 75), priority_class("build", 100),
            priority_class("inference", 125)]


def bind_request(pod_name: str, namespace: str, node_name: str, groups: Optional[list] = None,
                 phase: str = "Pending") -> dict:
    spec: dict[str, Any] = {"podName": pod_name, "selectedNode": node_name,
                            "receivedResourceType": "Fraction" if groups else "Regular"}
    if groups:
        spec["selectedGPUGroups"] = groups
        spec["receivedGPU"] = {"count": len(groups), "portion": "0.5"}
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": _metadata(f"{pod_name}-bind", namespace), "spec": spec, "status": {"phase": phase}}


def status_failure(code: int, reason: str, message: str, kind: Optional[str] = None, name: str = "") -> dict:
    """A ``Status`` object as the API server returns it for errors."""
    obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
           "reason": reason, "code": code}
    if kind:
        obj["details"] = {"group": "scheduling.run.ai", "kind": kind}
    return obj


# ---------------------------------------------------------------------------------------------- a cluster

def small_cluster() -> dict[str, list[dict]]:
    """A realistic little cluster with KAI installed: the expected snapshot is worked out in the tests.

    - nodes: h100-0 (8 GPUs, 81559 MiB label → 81500), h100-1 (8 GPUs), l4-0 (4 GPUs, 23034 MiB → 23000),
      cpu-0 (no GPUs)
    - queues: research (gpu quota 12, limit -1, weight 2) → llm (8, 16, 1), vision (4, -1, 1);
      inference (gpu 6, limit 8; memory quota 100000 MB)
    - jobs: llm/pretrain gang (2 × 8 GPUs, running on h100-0, h100-1), vision/sweep (2 × 2 GPUs pending),
      inference/chat (gpu-fraction 0.5 on l4-0 GPU group g-chat = index 2), a pod of another scheduler on
      h100-1 (2 GPUs), a bare KAI pod with no PodGroup (notebook, priority class build)
    """
    g_chat = "6b4c0f6e-1f1e-4c1a-9d55-0d7f3a1c2b10"
    return {
        "nodes": [node("h100-0"), node("h100-1"),
                  node("l4-0", gpus=4, gpu_memory="23034", product="NVIDIA-L4", cpu="47500m", memory="196Gi"),
                  node("cpu-0", gpus=0, cpu="63", memory="256Gi")],
        "queues": [queue("research", gpu={"quota": 12, "limit": -1, "overQuotaWeight": 2},
                         cpu={"quota": -1, "limit": -1, "overQuotaWeight": 1},
                         memory={"quota": -1, "limit": -1, "overQuotaWeight": 1}),
                   queue("llm", "research", gpu={"quota": 8, "limit": 16, "overQuotaWeight": 1},
                         cpu={"quota": -1, "limit": -1, "overQuotaWeight": 1},
                         memory={"quota": -1, "limit": -1, "overQuotaWeight": 1}, reclaimMinRuntime="10m"),
                   queue("vision", "research", gpu={"quota": 4, "limit": -1, "overQuotaWeight": 1},
                         cpu={"quota": -1, "limit": -1, "overQuotaWeight": 1},
                         memory={"quota": -1, "limit": -1, "overQuotaWeight": 1}),
                   queue("inference", gpu={"quota": 6, "limit": 8, "overQuotaWeight": 1},
                         cpu={"quota": -1, "limit": -1, "overQuotaWeight": 1},
                         memory={"quota": 100000, "limit": -1, "overQuotaWeight": 1}, priority=200)],
        "priorityclasses": kai_priority_classes(),
        "podgroups": [
            pod_group("pg-pretrain-1a2b", "llm", "llm", min_member=2,
                      annotations={"kai.scheduler/last-start-timestamp": "2026-01-01T00:01:40Z"}),
            pod_group("pg-sweep-3c4d", "vision", "vision", min_member=2, conditions=[
                {"type": "UnschedulableOnNodePool", "nodePool": "default", "message": "not enough GPUs",
                 "reasons": [{"reason": "OverCapacity", "message": "not enough free GPUs"}]}]),
            pod_group("pg-chat-5e6f", "serving", "inference", min_member=1, priority_class="inference"),
        ],
        "pods": [
            pod("pretrain-0", "llm", gpu=8, cpu="64", memory="512Gi", node="h100-0", queue="llm",
                pod_group="pg-pretrain-1a2b"),
            pod("pretrain-1", "llm", gpu=8, cpu="64", memory="512Gi", node="h100-1", queue="llm",
                pod_group="pg-pretrain-1a2b"),
            pod("sweep-0", "vision", gpu=2, cpu="8", memory="64Gi", queue="vision", pod_group="pg-sweep-3c4d"),
            pod("sweep-1", "vision", gpu=2, cpu="8", memory="64Gi", queue="vision", pod_group="pg-sweep-3c4d"),
            pod("chat-0", "serving", cpu="4", memory="32Gi", node="l4-0", queue="inference",
                pod_group="pg-chat-5e6f", annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": g_chat}),
            reservation_pod("l4-0", g_chat, 2),
            pod("dcgm-exporter-x7k2p", "gpu-operator", cpu="100m", memory="128Mi", node="h100-1",
                scheduler="default-scheduler", queue=None),
            pod("other-trainer-0", "ml-legacy", gpu=2, cpu="16", memory="64Gi", node="h100-1",
                scheduler="default-scheduler", queue=None),
            pod("notebook-0", "research-nb", cpu="2", memory="8Gi", queue="vision", priority_class="build",
                annotations={"gpu-fraction": "0.25"}),
        ],
        "bindrequests": [],
    }


# ---------------------------------------------------------------------------------------------- KAI zip

DEFAULT_KAI_CONFIG = {
    "actions": "allocate, consolidation, reclaim, preempt, stalegangeviction",
    "tiers": [{"plugins": [
        {"name": "predicates"}, {"name": "proportion", "arguments": {"kValue": "1"}}, {"name": "priority"},
        {"name": "nodeavailability"}, {"name": "resourcetype"}, {"name": "podaffinity"}, {"name": "elastic"},
        {"name": "kubeflow"}, {"name": "ray"}, {"name": "subgrouporder"}, {"name": "taskorder"},
        {"name": "nominatednode"}, {"name": "dynamicresources"}, {"name": "minruntime"}, {"name": "topology"},
        {"name": "snapshot"}, {"name": "gpupack"}, {"name": "nodeplacement", "arguments": {"gpu": "binpack", "cpu": "binpack"}},
        {"name": "gpusharingorder"},
    ]}],
}

DEFAULT_SCHEDULER_PARAMS = {
    "schedulerName": "kai-scheduler",
    "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
    "fullHierarchyFairness": True, "allowConsolidatingReclaim": True, "maxNumberConsolidationPreemptees": 16,
    "useSchedulingSignatures": True, "globalDefaultStalenessGracePeriod": 60_000_000_000,
    "schedulePeriod": 1_000_000_000, "queueLabelKey": "kai.scheduler/queue",
}

RAW_OBJECT_KEYS = ("pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses", "configMaps",
                   "persistentVolumes", "persistentVolumeClaims", "csiStorageCapacities", "storageClasses",
                   "csiDrivers", "resourceClaims", "resourceSlices", "deviceClasses", "topologies",
                   "nodeResourceTopologies")


def kai_snapshot_doc(objects: dict[str, list[dict]], config: Optional[dict] = None,
                     params: Optional[dict] = None) -> dict:
    """``snapshot.json`` as KAI's snapshot plugin writes it (keys config, schedulerParams, rawObjects, discovery)."""
    names = {"podgroups": "podGroups", "bindrequests": "bindRequests", "priorityclasses": "priorityClasses"}
    raw = {k: [] for k in RAW_OBJECT_KEYS}
    for key, items in objects.items():
        raw[names.get(key, key)] = items
    return {"config": config or DEFAULT_KAI_CONFIG, "schedulerParams": params or DEFAULT_SCHEDULER_PARAMS,
            "rawObjects": raw, "discovery": {"serverVersion": {"major": "1", "minor": "31"}, "resources": []}}


def kai_zip_bytes(doc: Any, member: str = "snapshot.json") -> bytes:
    """A zip holding one member, as ``/get-snapshot`` serves it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, doc if isinstance(doc, (str, bytes)) else json.dumps(doc))
    return buf.getvalue()
