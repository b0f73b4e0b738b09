"""DRA objects of a KAI ``/get-snapshot`` zip (``resource.k8s.io/v1``) for a snapshot's ``dra_gpus`` / ``dra_claims``.

Read back by :mod:`scheduler.sources.k8s_dra` as the same fields:

=============================  =====================================================================================
snapshot                       KAI objects
=============================  =====================================================================================
node ``dra_gpus: N``           a ResourceSlice of driver ``gpu.nvidia.com``, pool = the node, devices ``gpu-0..N-1``
claim (not shared)             a ResourceClaim ``<pod>-<k>`` owned by the pod, named in its
                               ``status.resourceClaimStatuses`` (as the DRA controller makes one from a template)
claim ``shared``               a ResourceClaim the pods name directly; ``queue`` → its ``kai.scheduler/queue`` label
claim ``missing``              a template reference with no claim made
claim held by a placed task    ``status.reservedFor`` the holders, ``status.allocation`` of free devices of the node
device classes                 one DeviceClass per class claims use, selecting devices of driver ``gpu.nvidia.com``
=============================  =====================================================================================
"""

from __future__ import annotations

import uuid
from typing import Any

from ..model import Snapshot
from .kai_export import _UUID_NS, DEFAULT_NAMESPACE, _meta

DRIVER = "gpu.nvidia.com"
HOLDS = ("running", "releasing", "binding")


def slice_objects(snap: Snapshot, time: float) -> list[dict]:
    """One GPU ResourceSlice per node with DRA devices."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": _meta(f"{n.name}-{DRIVER}", None, str(uuid.uuid5(_UUID_NS, f"slice/{n.name}")), time),
             "spec": {"nodeName": n.name, "driver": DRIVER,
                      "pool": {"name": n.name, "generation": 1, "resourceSliceCount": 1},
                      "devices": [{"name": f"gpu-{k}"} for k in range(n.dra_gpus)]}}
            for n in snap.nodes if n.dra_gpus]


def add_claims(snap: Snapshot, pods: dict[str, dict], time: float) -> tuple[list[dict], list[dict]]:
    """Add each DRA task's claim references to its pod (``pods``: task name → pod object); return the
    ResourceClaims and DeviceClasses."""
    claims: dict[str, dict] = {}
    classes: set[str] = set()
    next_device = {n.name: 0 for n in snap.nodes}
    for job in snap.jobs:
        for t in job.tasks:
            pod = pods.get(t.name)
            if pod is None or not t.dra_claims:
                continue
            ns = pod["metadata"].get("namespace") or DEFAULT_NAMESPACE
            refs, made = [], []
            for k, c in enumerate(t.dra_claims):
                ref_name = f"gpu-{k}"
                short = c.name.split("/", 1)[1] if "/" in c.name else c.name
                if c.missing:
                    refs.append({"name": ref_name, "resourceClaimTemplateName": "gpu"})
                    continue
                if c.shared:
                    refs.append({"name": ref_name, "resourceClaimName": short})
                else:
                    short = f"{pod['metadata']['name']}-{ref_name}"
                    refs.append({"name": ref_name, "resourceClaimTemplateName": "gpu"})
                    made.append({"name": ref_name, "resourceClaimName": short})
                classes.add(c.device_class)
                key = f"{ns}/{short}"
                obj = claims.get(key)
                if obj is None:
                    obj = claims[key] = _claim(short, ns, c, pod, time)
                if t.status in HOLDS and t.node:
                    _hold(obj, pod, t.node, c.gpus, next_device)
            pod["spec"]["resourceClaims"] = refs
            if made:
                pod["status"]["resourceClaimStatuses"] = made
    device_classes = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                       "metadata": _meta(name, None, str(uuid.uuid5(_UUID_NS, f"deviceclass/{name}")), time),
                       "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
                      for name in sorted(classes)]
    return list(claims.values()), device_classes


def _claim(name: str, ns: str, c: Any, pod: dict, time: float) -> dict:
    labels = {"kai.scheduler/queue": c.queue} if c.shared and c.queue else None
    meta = _meta(name, ns, str(uuid.uuid5(_UUID_NS, f"claim/{ns}/{name}")), time, labels=labels)
    if not c.shared:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                    "uid": pod["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": c.device_class, "allocationMode": "ExactCount", "count": c.gpus}}]}},
            "status": {}}


def _hold(obj: dict, pod: dict, node: str, gpus: int, next_device: dict[str, int]) -> None:
    """Reserve the claim for the pod; allocate it on the pod's node the first time."""
    status = obj["status"]
    status.setdefault("reservedFor", []).append({"resource": "pods", "name": pod["metadata"]["name"],
                                                 "uid": pod["metadata"]["uid"]})
    if "allocation" in status:
        return
    first = next_device.get(node, 0)
    next_device[node] = first + gpus
    status["allocation"] = {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{k}"}
                                for k in range(first, first + gpus)]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
