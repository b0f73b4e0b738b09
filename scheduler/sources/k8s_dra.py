"""DRA objects (``resource.k8s.io/v1`` ResourceClaims and ResourceSlices) as KAI reads them for GPUs.

KAI (``pkg/common/resources/dra.go``, ``api/resource_info/dra_resource_utils.go``, ``cache/cluster_info``):
a node's GPU capacity gains the devices of its ResourceSlices whose driver is a GPU one; a pod's GPU request gains
the devices its claims request of a GPU DeviceClass. "GPU" is a name containing ``gpu`` (any case). A pod's claims
are those its spec names (directly, or through the claim a ResourceClaimTemplate made, named in
``status.resourceClaimStatuses``) and those that name the pod as owner or in ``status.reservedFor``.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from ..model import DraClaim, is_gpu_device_class

QUEUE_LABEL = "kai.scheduler/queue"
"""The label a shared GPU claim names its queue with (KAI's DRA plugin schedules its pods only in that queue)."""
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
"""Annotation of the claims kube-scheduler makes for extended resources backed by DRA: their GPUs are already in
the pod's resource requests, so KAI skips them."""


def _d(obj: Any, *path: str) -> dict:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _l(obj: Any, *path: str) -> list:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, list) else []


def node_dra_gpus(slices: Iterable[Any]) -> dict[str, int]:
    """GPU devices per node: the devices of each slice with a ``spec.nodeName`` and a GPU driver."""
    out: dict[str, int] = {}
    for s in slices:
        spec = _d(s, "spec")
        node, driver = spec.get("nodeName"), spec.get("driver")
        if isinstance(node, str) and node and isinstance(driver, str) and is_gpu_device_class(driver):
            out[node] = out.get(node, 0) + len(_l(spec, "devices"))
    return {n: c for n, c in out.items() if c > 0}


def claim_gpus(claim: Any) -> tuple[int, str]:
    """``(GPU devices, DeviceClass)`` a claim requests: per request of a GPU class, ``exactly.count`` for
    ``ExactCount`` (1 when missing) and 1 for ``All``; other modes count nothing (KAI ``countGPUDevicesFromClaim``)."""
    if _d(claim, "metadata", "annotations").get(EXTENDED_RESOURCE_CLAIM) == "true":
        return 0, ""
    total, device_class = 0, ""
    for req in _l(claim, "spec", "devices", "requests"):
        exactly = _d(req, "exactly")
        cls = exactly.get("deviceClassName")
        if not (isinstance(cls, str) and is_gpu_device_class(cls)):
            continue
        mode = exactly.get("allocationMode") or "ExactCount"
        count = exactly.get("count")
        if mode == "ExactCount":
            total += count if type(count) is int and count > 0 else 1
        elif mode == "All":
            total += 1
        else:
            continue
        device_class = device_class or cls
    return total, device_class


class ClaimIndex:
    """The GPU claims of a cluster, looked up per pod."""

    def __init__(self, claims: Iterable[Any]) -> None:
        self.by_key: dict[str, tuple[int, str, Optional[str]]] = {}
        self.by_pod_uid: dict[str, list[str]] = {}
        self.existing: set[str] = set()
        for c in claims:
            meta = _d(c, "metadata")
            ns, name = meta.get("namespace") or "default", meta.get("name")
            if not isinstance(name, str) or not name:
                continue
            key = f"{ns}/{name}"
            self.existing.add(key)
            gpus, cls = claim_gpus(c)
            if gpus <= 0:
                continue
            queue = _d(meta, "labels").get(QUEUE_LABEL)
            self.by_key[key] = (gpus, cls, queue if isinstance(queue, str) and queue else None)
            owner = next((o.get("uid") for o in _l(meta, "ownerReferences")
                          if isinstance(o, dict) and o.get("kind") == "Pod"), None)
            if owner is None:
                owner = next((r.get("uid") for r in _l(c, "status", "reservedFor")
                              if isinstance(r, dict) and r.get("resource") == "pods"), None)
            if isinstance(owner, str) and owner:
                self.by_pod_uid.setdefault(owner, []).append(key)
        self.signature = tuple(sorted(self.by_key.items())), tuple(sorted(
            (k, tuple(v)) for k, v in self.by_pod_uid.items())), tuple(sorted(self.existing))

    def pod_claims(self, pod: Any) -> list[DraClaim]:
        """The pod's GPU claims, in spec order, then those that name the pod only as owner or consumer. A claim the
        pod names that does not exist (a template's claim the DRA controller has not made yet) is ``missing``."""
        refs = _l(pod, "spec", "resourceClaims")
        if not self.by_key and not refs:
            return []
        meta = _d(pod, "metadata")
        ns = meta.get("namespace") or "default"
        made = {s.get("name"): s.get("resourceClaimName") for s in _l(pod, "status", "resourceClaimStatuses")
                if isinstance(s, dict)}
        out: dict[str, DraClaim] = {}
        for ref in refs:
            if not isinstance(ref, dict):
                continue
            direct = ref.get("resourceClaimName")
            name = direct if isinstance(direct, str) and direct else made.get(ref.get("name"))
            key = f"{ns}/{name}" if isinstance(name, str) and name else None
            if key is None or key not in self.existing:
                shown = key or f"{ns}/{ref.get('name')} (from ResourceClaimTemplate {ref.get('resourceClaimTemplateName')})"
                out.setdefault(shown, DraClaim(name=shown, gpus=0, missing=True, shared=bool(direct)))
            elif key in self.by_key and key not in out:
                gpus, cls, queue = self.by_key[key]
                out[key] = DraClaim(name=key, gpus=gpus, device_class=cls, shared=bool(direct),
                                    queue=queue if direct else None)
        for key in self.by_pod_uid.get(meta.get("uid") or "", ()):
            if key not in out:
                gpus, cls, _ = self.by_key[key]
                out[key] = DraClaim(name=key, gpus=gpus, device_class=cls)
        return list(out.values())
