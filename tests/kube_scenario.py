"""A KAI-scheduled GPU cluster written into a real API server the way KAI's components write it.

The objects are the shapes of ``tests/kai_objects.py``, created through the API in KAI's order: the queues and
priority classes an admin installs; PodGroups as the pod-grouper makes them (scheduling conditions written to
the status subresource, as the scheduler does); a BindRequest named after its pod with an owner reference to it
(the scheduler); pods bound through the ``binding`` subresource (the binder, or the default scheduler for other
schedulers' pods); GPU reservation pods created directly on their node in ``kai-resource-reservation`` and then
annotated with the GPU's UUID (``run.ai/reserve_for_gpu_index``, KAI's reservation binary); nodes registered with
their capacity and GPU-feature-discovery labels, run by kwok, and one NotReady node that nothing runs.

:data:`EXPECTED` is what kaidash must make of it, worked out by hand.
"""

from __future__ import annotations

import copy
import hashlib
import time
from typing import Any, Optional

from kubernetes import client as k8s

from kai_objects import kai_priority_classes, node, pod, pod_group, small_cluster
from kube_cluster import KWOK_NODE_ANNOTATION, wait_for

RESERVATION_NS = "kai-resource-reservation"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GROUP_CHAT = "6b4c0f6e-1f1e-4c1a-9d55-0d7f3a1c2b10"     # a shared GPU: chat-0 (0.5) and chat-1 (0.25)
GROUP_EMBED = "0e1d2c3b-4a59-4687-9a1b-2c3d4e5f6a7b"    # another GPU of the same node: embed-0 (0.5)
GPU_UUIDS = {GROUP_CHAT: "GPU-8f1c9a02-3b7d-4e61-a5c4-0d2e9b7f6a13",    # what KAI's reservation binary writes
             GROUP_EMBED: "GPU-2d7e4b19-c6a8-4f30-9e15-7b3a0c8d5e24"}
NAMESPACES = ("llm", "vision", "serving", "ml-legacy", "gpu-operator", RESERVATION_NS)
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "selfLink")


def creatable(obj: dict) -> dict:
    """A copy of a ``kai_objects`` object without the fields only the server sets (uid, resourceVersion, ...)."""
    obj = copy.deepcopy(obj)
    for key in SERVER_FIELDS:
        obj["metadata"].pop(key, None)
    return obj


def gpu_node(name: str, *, kwok: bool = True, taint: bool = True, ready: bool = True, **kw) -> dict:
    """A GPU node as the kubelet registers it (capacity in status), with the GPU operator's taint."""
    obj = creatable(node(name, ready=ready, **kw))
    del obj["status"]["nodeInfo"]         # the kubelet's (kwok's) to report
    if kwok:
        key, value = KWOK_NODE_ANNOTATION
        obj["metadata"]["annotations"][key] = value
        del obj["status"]["conditions"]   # kwok reports them, as a kubelet would
    if taint and int(obj["status"]["allocatable"].get("nvidia.com/gpu", 0)):
        obj["spec"]["taints"] = [dict(GPU_TAINT)]
    return obj


def kai_pod(name: str, namespace: str, **kw) -> tuple[dict, Optional[str]]:
    """A pod as its owner creates it (no node, no status) and the node it is bound to, if any."""
    obj = creatable(pod(name, namespace, **kw))
    obj.pop("status")
    return obj, obj["spec"].pop("nodeName", None)


def reservation_pod(node_name: str, group: str, source_tolerations: list) -> dict:
    """KAI's binder's GPU reservation pod for a shared GPU group: created on the node, 1 whole GPU."""
    digest = hashlib.sha256(f"{node_name}/{group}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"gpu-reservation-{digest}", "namespace": RESERVATION_NS,
                     "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group},
                     "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
        "spec": {"nodeName": node_name, "tolerations": source_tolerations,
                 "serviceAccountName": "kai-resource-reservation",
                 "containers": [{
                     "name": "resource-reservation", "image": "registry/local/kai-scheduler/resource-reservation",
                     "imagePullPolicy": "IfNotPresent",
                     "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                 }]},
    }


def bind_request_for(pod_obj: dict, node_name: str, gpus: int) -> dict:
    """The scheduler's BindRequest for a whole-GPU pod: named after the pod, owned by it."""
    meta = pod_obj["metadata"]
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": {"selected-node": node_name},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"]}]},
            "spec": {"podName": meta["name"], "selectedNode": node_name, "receivedResourceType": "Regular",
                     "receivedGPU": {"count": gpus, "portion": "1.00"}}}


# ---------------------------------------------------------------------------------------------- the cluster

def nodes() -> list[dict]:
    return [gpu_node("h100-0"), gpu_node("h100-1"),
            gpu_node("l4-0", gpus=4, gpu_memory="23034", product="NVIDIA-L4", cpu="47500m", memory="196Gi"),
            gpu_node("cpu-0", gpus=0, cpu="63", memory="256Gi"),
            # registered, then its kubelet stopped reporting Ready: nothing (not kwok) runs it
            gpu_node("a100-0", kwok=False, ready=False, gpu_memory="81920", product="NVIDIA-A100-SXM4-80GB")]


def queues() -> list[dict]:
    return [creatable(q) for q in small_cluster()["queues"]]


SUBGROUPS = [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 2}]
SWEEP_CONDITION = {"type": "UnschedulableOnNodePool", "nodePool": "default", "status": "True",
                   "lastTransitionTime": "2026-01-01T00:02:00Z", "transitionID": "0",
                   "reason": "Unschedulable", "message": "Resources were found for 0 pods while 2 are required",
                   "reasons": [{"reason": "OverCapacity", "message": "not enough free GPUs"}]}


def pod_groups() -> list[dict]:
    return [creatable(pg) for pg in (
        pod_group("pg-pretrain", "llm", "llm", min_member=3, sub_groups=SUBGROUPS,
                  annotations={"kai.scheduler/last-start-timestamp": "2026-01-01T00:01:40Z"}),
        pod_group("pg-sweep", "vision", "vision", min_member=2),
        pod_group("pg-eval", "vision", "vision", min_member=1),
        pod_group("pg-chat", "serving", "inference", min_member=1, priority_class="inference"),
        pod_group("pg-chat-b", "serving", "inference", min_member=1, priority_class="inference"),
        pod_group("pg-embed", "serving", "inference", min_member=1, priority_class="inference"),
    )]


def pods() -> list[tuple[dict, Optional[str]]]:
    """(pod, node to bind it to) in the order their owners create them."""
    frac = {"queue": "inference", "cpu": "2", "memory": "16Gi"}
    return [
        kai_pod("pretrain-leader-0", "llm", gpu=1, cpu="8", memory="64Gi", node="h100-0", queue="llm",
                pod_group="pg-pretrain", labels={"kai.scheduler/subgroup-name": "leader"}),
        kai_pod("pretrain-worker-0", "llm", gpu=4, cpu="32", memory="256Gi", node="h100-0", queue="llm",
                pod_group="pg-pretrain", labels={"kai.scheduler/subgroup-name": "workers"}),
        kai_pod("pretrain-worker-1", "llm", gpu=4, cpu="32", memory="256Gi", node="h100-1", queue="llm",
                pod_group="pg-pretrain", labels={"kai.scheduler/subgroup-name": "workers"}),
        kai_pod("sweep-0", "vision", gpu=2, cpu="8", memory="64Gi", queue="vision", pod_group="pg-sweep"),
        kai_pod("sweep-1", "vision", gpu=2, cpu="8", memory="64Gi", queue="vision", pod_group="pg-sweep"),
        kai_pod("eval-0", "vision", gpu=1, cpu="4", memory="32Gi", queue="vision", pod_group="pg-eval"),
        kai_pod("chat-0", "serving", node="l4-0", pod_group="pg-chat", annotations={"gpu-fraction": "0.5"},
                labels={"runai-gpu-group": GROUP_CHAT}, **frac),
        kai_pod("chat-1", "serving", node="l4-0", pod_group="pg-chat-b", annotations={"gpu-fraction": "0.25"},
                labels={"runai-gpu-group": GROUP_CHAT}, **frac),
        kai_pod("embed-0", "serving", node="l4-0", pod_group="pg-embed", annotations={"gpu-fraction": "0.5"},
                labels={"runai-gpu-group": GROUP_EMBED}, **frac),
        kai_pod("dcgm-exporter-x7k2p", "gpu-operator", cpu="100m", memory="128Mi", node="h100-1",
                scheduler="default-scheduler", queue=None),
        kai_pod("other-trainer-0", "ml-legacy", gpu=2, cpu="16", memory="64Gi", node="h100-1",
                scheduler="default-scheduler", queue=None),
    ]


EXPECTED = {
    "nodes": {"h100-0": (8, 81500, True), "h100-1": (8, 81500, True), "l4-0": (4, 23000, True),
              "cpu-0": (0, 0.0, True), "a100-0": (8, 81900, False)},   # (gpus, GPU memory MiB, ready)
    "queues": {"research": None, "llm": "research", "vision": "research", "inference": None},
    # job: {task: (status, node, gpu, subgroup)}
    "jobs": {
        "llm/pg-pretrain": {"llm/pretrain-leader-0": ("running", "h100-0", 1, "leader"),
                            "llm/pretrain-worker-0": ("running", "h100-0", 4, "workers"),
                            "llm/pretrain-worker-1": ("running", "h100-1", 4, "workers")},
        "vision/pg-sweep": {"vision/sweep-0": ("pending", None, 2, None), "vision/sweep-1": ("pending", None, 2, None)},
        "vision/pg-eval": {"vision/eval-0": ("binding", "h100-1", 1, None)},
        "serving/pg-chat": {"serving/chat-0": ("running", "l4-0", 0.5, None)},
        "serving/pg-chat-b": {"serving/chat-1": ("running", "l4-0", 0.25, None)},
        "serving/pg-embed": {"serving/embed-0": ("running", "l4-0", 0.5, None)},
    },
    "gpu_groups": {"serving/chat-0": [GROUP_CHAT], "serving/chat-1": [GROUP_CHAT], "serving/embed-0": [GROUP_EMBED]},
    "external_gpus": {"h100-1": 2},           # other-trainer-0 (default-scheduler)
}


# ---------------------------------------------------------------------------------------------- loading

def ensure_namespace(api: k8s.ApiClient, name: str) -> None:
    """Create a namespace and wait for its ``default`` ServiceAccount (the controller manager makes it;
    pods are refused until it exists)."""
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": name}})
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise

    def has_sa():
        try:
            return core.read_namespaced_service_account("default", name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
    wait_for(has_sa, 60, f"ServiceAccount {name}/default")


def bind(api: k8s.ApiClient, name: str, namespace: str, node_name: str) -> None:
    """Bind a pod to a node through the ``binding`` subresource, as a scheduler's binder does."""
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
    # The generated client cannot decode the (Status) reply of pods/binding; the request itself is what counts.
    k8s.CoreV1Api(api).create_namespaced_pod_binding(name, namespace, body, _preload_content=False)


def create_pod(api: k8s.ApiClient, obj: dict, node_name: Optional[str]) -> dict:
    core = k8s.CoreV1Api(api)
    created = api.sanitize_for_serialization(core.create_namespaced_pod(obj["metadata"]["namespace"], obj))
    if node_name:
        bind(api, obj["metadata"]["name"], obj["metadata"]["namespace"], node_name)
    return created


def pod_phase(api: k8s.ApiClient, name: str, namespace: str) -> Optional[str]:
    try:
        return k8s.CoreV1Api(api).read_namespaced_pod(name, namespace).status.phase
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def load(api: k8s.ApiClient) -> None:
    """Write the whole cluster and wait until kwok runs what is bound (nodes Ready, pods Running)."""
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    sched = k8s.SchedulingV1Api(api)
    for ns in NAMESPACES:
        ensure_namespace(api, ns)
    core.create_namespaced_service_account(RESERVATION_NS, {"metadata": {"name": "kai-resource-reservation"}})
    for pc in kai_priority_classes():
        sched.create_priority_class(creatable(pc))
    for n in nodes():
        core.create_node(n)
    for q in queues():
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", q)
    for pg in pod_groups():
        custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", pg["metadata"]["namespace"],
                                               "podgroups", pg)
    custom.patch_namespaced_custom_object_status("scheduling.run.ai", "v2alpha2", "vision", "podgroups", "pg-sweep",
                                                 {"status": {"schedulingConditions": [SWEEP_CONDITION]}})
    created = {}
    for obj, node_name in pods():
        created[obj["metadata"]["name"]] = create_pod(api, obj, node_name)
    custom.create_namespaced_custom_object("scheduling.run.ai", "v1alpha2", "vision", "bindrequests",
                                           bind_request_for(created["eval-0"], "h100-1", 1))
    tolerations = created["chat-0"]["spec"]["tolerations"]
    for group in (GROUP_CHAT, GROUP_EMBED):
        core.create_namespaced_pod(RESERVATION_NS, reservation_pod("l4-0", group, tolerations))
    wait_for(lambda: all(_ready(n) and not _taint_keys(n) & {"node.kubernetes.io/not-ready"}
                         for n in core.list_node().items if n.metadata.name != "a100-0"), 60,
             "kwok to report the nodes Ready and the controller manager to lift their not-ready taint")
    wait_for(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(RESERVATION_NS).items), 60,
             "the reservation pods to run")
    # what KAI's reservation binary does once it runs: write the GPU's UUID on its own pod
    for p in core.list_namespaced_pod(RESERVATION_NS).items:
        uuid = GPU_UUIDS[p.metadata.labels["runai-gpu-group"]]
        core.patch_namespaced_pod(p.metadata.name, RESERVATION_NS,
                                  {"metadata": {"annotations": {"run.ai/reserve_for_gpu_index": uuid}}})
    bound = [(o["metadata"]["name"], o["metadata"]["namespace"]) for o, n in pods() if n]
    wait_for(lambda: all(pod_phase(api, name, ns) == "Running" for name, ns in bound), 60, "bound pods to run")


def _taint_keys(n: Any) -> set:
    return {t.key for t in (n.spec.taints or [])}


def _ready(n: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))


def set_node_ready(api: k8s.ApiClient, name: str, ready: bool) -> None:
    """Post a node's Ready condition as its kubelet would (the node must not be run by kwok)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cond = {"type": "Ready", "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status" if ready else "PLEG is not healthy",
            "lastHeartbeatTime": now, "lastTransitionTime": now}
    k8s.CoreV1Api(api).patch_node_status(name, {"status": {"conditions": [cond]}})
