"""MIG for the KAI differential test's random clusters (``python -m bench.kai_diff --mig``).

Applied to a generated ``snapshot.json`` document after :mod:`bench.kai_diff_gen` built it, with its own random
stream (clusters without ``--mig`` are unchanged). It turns up to half of the H100 / A100 nodes that hold no GPU pod
into MIG nodes — some or all of their GPUs sliced in one layout per GPU (7 × 1g, 3 × 2g, 2 × 3g, 1 × 7g or a mixed
3g + 2g + 1g + 1g), the rest left whole — and adds single-pod PodGroups asking for one or two instances of a profile
(some of which no node offers), part of them running on MIG nodes that have the instances free.
"""

from __future__ import annotations

import random
import uuid

PROFILES = {  # product -> per-slice memory (GB) of the 1g, 2g, 3g, 7g profiles
    "NVIDIA-H100-80GB-HBM3": {1: 10, 2: 20, 3: 40, 7: 80},
    "NVIDIA-A100-SXM4-40GB": {1: 5, 2: 10, 3: 20, 7: 40},
}
LAYOUTS = [{1: 7}, {2: 3}, {3: 2}, {7: 1}, {3: 1, 2: 1, 1: 2}]


def _profile(product: str, g: int) -> str:
    return f"{g}g.{PROFILES[product][g]}gb"


def add_mig(doc: dict, seed: int, now: float) -> dict:
    """``doc`` with MIG nodes and MIG pods (see the module doc); modified in place."""
    rng = random.Random(seed * 104729 + 3)
    raw = doc["rawObjects"]
    busy = {p["spec"].get("nodeName") for p in raw["pods"]
            if p["spec"].get("nodeName") and any("nvidia.com/gpu" in (c.get("resources") or {}).get("requests", {})
                                                 for c in p["spec"]["containers"])}
    busy |= {p["spec"].get("nodeName") for p in raw["pods"] if (p["metadata"].get("annotations") or {}).get("gpu-fraction")
             or (p["metadata"].get("annotations") or {}).get("gpu-memory")}
    free_instances: dict[str, dict[str, int]] = {}
    for node in raw["nodes"]:
        labels = node["metadata"].get("labels") or {}
        product = labels.get("nvidia.com/gpu.product")
        if product not in PROFILES or node["metadata"]["name"] in busy or rng.random() < 0.5:
            continue
        gpus = int(node["status"]["allocatable"]["nvidia.com/gpu"])
        sliced = rng.randint(1, gpus)
        counts: dict[str, int] = {}
        for _ in range(sliced):
            for g, k in rng.choice(LAYOUTS).items():
                counts[_profile(product, g)] = counts.get(_profile(product, g), 0) + k
        for key in ("allocatable", "capacity"):
            res = node["status"][key]
            res["nvidia.com/gpu"] = str(gpus - sliced)
            for prof, k in counts.items():
                res[f"nvidia.com/mig-{prof}"] = str(k)
        labels["nvidia.com/mig.strategy"] = "mixed"
        free_instances[node["metadata"]["name"]] = dict(counts)
    if not free_instances:
        return doc
    offered = sorted({p for c in free_instances.values() for p in c})
    queues = sorted({g["spec"]["queue"] for g in raw["podGroups"]})
    for k in range(rng.randint(3, 12)):
        prof = rng.choice(offered) if rng.random() > 0.1 else "4g.40gb"
        count = 1 if rng.random() < 0.8 else 2
        name, ns = f"mig-{k:03d}", rng.choice(["team-a", "team-b", "team-c"])
        queue = rng.choice(queues)
        created = now - rng.randint(60, 3600)
        node = None
        if rng.random() < 0.4:
            hosts = [n for n, c in sorted(free_instances.items()) if c.get(prof, 0) >= count]
            if hosts:
                node = rng.choice(hosts)
                free_instances[node][prof] -= count
        _add_pod_group(raw, rng, name, ns, queue, created, prof, count, node, now)
    return doc


def _ts(t: float) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _add_pod_group(raw, rng, name, ns, queue, created, prof, count, node, now) -> None:
    uid = lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4))  # noqa: E731
    raw["podGroups"].append({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": uid(), "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": _ts(created), "labels": {"kai.scheduler/queue": queue}},
        "spec": {"minMember": 1, "queue": queue, "priorityClassName": "inference"}})
    resource = f"nvidia.com/mig-{prof}"
    spec = {"schedulerName": "kai-scheduler", "restartPolicy": "Never", "priorityClassName": "inference",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "2000m", "memory": "8589934592",
                                                                        resource: str(count)},
                                                           "limits": {resource: str(count)}}}]}
    status = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": _ts(now - 60)}
    raw["pods"].append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"{name}-0", "namespace": ns, "uid": uid(), "resourceVersion": "1",
                                     "creationTimestamp": _ts(created),
                                     "labels": {"app": "inference", "kai.scheduler/queue": queue},
                                     "annotations": {"pod-group-name": name}},
                        "spec": spec, "status": status})
