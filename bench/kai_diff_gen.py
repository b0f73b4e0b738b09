"""Seeded random clusters for the KAI differential test, written as KAI ``/get-snapshot`` documents.

The generator builds Kubernetes / KAI objects directly (not kaidash snapshots), so it can hold what kaidash does
not model and both schedulers read the same thing. One seed gives one cluster; the same seed always gives the same
objects, with times relative to ``now`` (KAI's replay compares minimum runtimes, staleness and deletion times with
the wall clock, so ``now`` is the wall clock when the cluster is written).

What a cluster holds (each feature drawn per cluster and per object, so easy and hard cases mix):

- 2-60 nodes of a few GPU types (8 × H100, 8 × A100-40GB, 4 × L4, 4 × T4) and CPU-only nodes; some GPU nodes
  without the ``nvidia.com/gpu.memory`` label; small pod limits on some nodes; NotReady / cordoned / memory
  pressure nodes with the taints the node controller adds; GPU taints (``nvidia.com/gpu``), dedicated taints,
  ``PreferNoSchedule`` taints; zone, product and team labels;
- queue trees one to three levels deep with quotas -1 / 0 / n, limits -1 / 0 / n and over-quota weights 0, 1, 2, 3
  and negative ones, per resource; equal and distinct creation times and priorities;
- jobs: single pods and gangs (min below the task count too), sub-groups, whole GPUs (1-8), fractions, gpu-memory
  requests, multi-device fractions, CPU-only pods, priority classes and explicit preemptibility, pods without a
  PodGroup, jobs in missing queues;
- running state: jobs placed by a first-fit that honours capacity and constraints, shared GPUs with reservation
  pods (GPU UUID annotation) and Succeeded BindRequests, releasing pods, pods of other schedulers, failed pods,
  pipelined pods (nominated node), binding pods (pending BindRequest), stale gangs;
- pod constraints: tolerations, node selectors, required node affinity (In / NotIn / Exists), required and
  preferred inter-pod affinity and anti-affinity, host ports, mounted ConfigMaps (present or missing).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

GPU_TYPES = [  # product, GPUs per node, nvidia.com/gpu.memory label (MiB), CPU cores, memory GiB
    ("NVIDIA-H100-80GB-HBM3", 8, 81559, 192, 2048),
    ("NVIDIA-A100-SXM4-40GB", 8, 40960, 128, 1024),
    ("NVIDIA-L4", 4, 23034, 48, 192),
    ("Tesla-T4", 4, 15360, 32, 128),
]
ZONES = ("zone-a", "zone-b", "zone-c")
TEAMS = ("red", "blue")
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
GIB = 2**30


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Node:
    name: str
    gpus: int
    gpu_mem: int          # MiB as KAI reads it (0 when the label is missing)
    product: Optional[str]
    cpu: int              # millicores
    mem: int              # bytes
    pods: int
    labels: dict
    taints: list
    ready: bool = True
    schedulable: bool = True
    used_cpu: int = 0
    used_mem: int = 0
    used_pods: int = 0
    whole_used: set = field(default_factory=set)
    shared: dict = field(default_factory=dict)     # device -> [group, used MiB]
    ports: set = field(default_factory=set)
    pod_labels: list = field(default_factory=list)  # labels of pods placed here (inter-pod affinity)

    def free_devices(self) -> list[int]:
        return [d for d in range(self.gpus) if d not in self.whole_used and d not in self.shared]


@dataclass
class _Pod:
    name: str
    cpu: int
    mem: int
    gpu: int = 0
    fraction: Optional[float] = None
    gpu_memory: Optional[int] = None
    devices: int = 1
    labels: dict = field(default_factory=dict)
    tolerations: list = field(default_factory=list)
    node_selector: dict = field(default_factory=dict)
    node_affinity: Optional[list] = None
    pod_affinity: Optional[dict] = None
    pod_anti_affinity: Optional[dict] = None
    preferred: list = field(default_factory=list)  # [("podAffinity" | "podAntiAffinity", weight, term)]
    host_port: Optional[int] = None
    config_map: Optional[str] = None
    subgroup: Optional[str] = None
    created: float = 0.0


class ClusterGenerator:
    """One random cluster per seed (see the module doc); :meth:`document` is the ``snapshot.json`` object."""

    def __init__(self, seed: int, now: float, actions: str = "allocate"):
        self.rng = random.Random(seed)
        self.seed = seed
        self.now = float(int(now))
        self.actions = actions
        self.nodes: list[_Node] = []
        self.pods: list[dict] = []
        self.pod_groups: list[dict] = []
        self.bind_requests: list[dict] = []
        self.config_maps: list[dict] = []
        self.queue_objs: list[dict] = []
        self.leaves: list[str] = []
        self._n = 0

    # ------------------------------------------------------------------ helpers

    def _uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _meta(self, name: str, ns: Optional[str], created: float, **extra) -> dict:
        meta: dict[str, Any] = {"name": name}
        if ns:
            meta["namespace"] = ns
        meta.update(uid=self._uid(), resourceVersion=str(1000 + len(self.pods) + len(self.pod_groups)),
                    creationTimestamp=_ts(created))
        meta.update({k: v for k, v in extra.items() if v})
        return meta

    def _chance(self, p: float) -> bool:
        return self.rng.random() < p

    # ------------------------------------------------------------------ nodes

    def make_nodes(self) -> None:
        rng = self.rng
        n_nodes = rng.randint(2, 60)
        kinds = rng.sample(range(len(GPU_TYPES)), rng.randint(1, 3))
        cpu_share = rng.choice([0.0, 0.1, 0.25])
        gpu_taint_rate = rng.choice([0.0, 0.5, 1.0])
        self.missing_mem_rate = rng.choice([0.0, 0.0, 0.1, 0.3])
        tight_pods = self._chance(0.25)
        for i in range(n_nodes):
            zone = rng.choice(ZONES)
            labels = {"kubernetes.io/hostname": "", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": zone,
                      "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"}
            taints: list[dict] = []
            if rng.random() < cpu_share or i == n_nodes - 1 and cpu_share and not any(n.gpus == 0 for n in self.nodes):
                name = f"cpu-{i:02d}"
                node = _Node(name, 0, 0, None, rng.choice([16, 32, 64]) * 1000, rng.choice([64, 128, 256]) * GIB,
                             110, labels, taints)
            else:
                product, gpus, mem_label, cores, mem_gib = GPU_TYPES[rng.choice(kinds)]
                name = f"{product.split('-')[1].lower()}-{i:02d}"
                labels.update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
                               "nvidia.com/gpu.present": "true"})
                gpu_mem = 0
                if not self._chance(self.missing_mem_rate):
                    labels["nvidia.com/gpu.memory"] = str(mem_label)
                    gpu_mem = mem_label // 100 * 100
                if self._chance(gpu_taint_rate):
                    taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
                node = _Node(name, gpus, gpu_mem, product, cores * 1000 - rng.choice([0, 500, 2500]), mem_gib * GIB,
                             110, labels, taints)
            labels["kubernetes.io/hostname"] = node.name
            if tight_pods and self._chance(0.4):
                node.pods = rng.choice([4, 6, 8, 12])
            if self._chance(0.1):
                team = rng.choice(TEAMS)
                labels["team"] = team
                if self._chance(0.6):
                    taints.append({"key": "dedicated", "value": team, "effect": "NoSchedule"})
            if self._chance(0.08):
                taints.append({"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"})
            r = rng.random()
            if r < 0.04:
                node.ready = False
                taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
            elif r < 0.08:
                node.schedulable = False
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            self.nodes.append(node)
        self.memory_pressure = {n.name for n in self.nodes if self._chance(0.02)}

    def node_objects(self) -> list[dict]:
        out = []
        for n in self.nodes:
            alloc = {"cpu": f"{n.cpu}m", "memory": str(n.mem), "pods": str(n.pods), "ephemeral-storage": "1000Gi"}
            if n.gpus:
                alloc["nvidia.com/gpu"] = str(n.gpus)
            stamp = _ts(self.now)
            conds = [{"type": "MemoryPressure", "status": "True" if n.name in self.memory_pressure else "False",
                      "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
                     {"type": "Ready", "status": "True" if n.ready else "False", "lastHeartbeatTime": stamp,
                      "lastTransitionTime": stamp}]
            spec: dict[str, Any] = {}
            if n.taints:
                spec["taints"] = n.taints
            if not n.schedulable:
                spec["unschedulable"] = True
            out.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": self._meta(n.name, None, self.now - 86400, labels=n.labels), "spec": spec,
                        "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": conds}})
        return out

    # ------------------------------------------------------------------ queues

    def make_queues(self) -> None:
        rng = self.rng
        total_gpus = sum(n.gpus for n in self.nodes) or 1
        total_cpu = sum(n.cpu for n in self.nodes)
        total_mem_mb = sum(n.mem for n in self.nodes) / 1e6
        base = self.now - 30 * 86400
        same_time = self._chance(0.3)

        def resource(total: float, parent_quota: Optional[float]) -> dict:
            r = rng.random()
            if r < 0.15:
                quota = -1
            elif r < 0.35:
                quota = 0
            else:
                cap = parent_quota if parent_quota not in (None, -1) else total
                quota = round(rng.uniform(0, 0.6) * max(cap, 1))
            r = rng.random()
            if r < 0.6:
                limit = -1
            elif r < 0.65:
                limit = 0
            else:
                limit = max(quota, 0) + round(rng.uniform(0, 0.5) * total)
            weight = rng.choice([1, 1, 1, 2, 3, 0, -1]) if self._chance(0.5) else 1
            return {"quota": quota, "limit": limit, "overQuotaWeight": weight}

        def queue(name: str, parent: Optional[str], parent_res: Optional[dict], k: int) -> dict:
            res = {"gpu": resource(total_gpus, parent_res and parent_res["gpu"]["quota"])}
            for key, total in (("cpu", total_cpu), ("memory", total_mem_mb)):
                res[key] = resource(total, parent_res and parent_res[key]["quota"]) if self._chance(0.4) else \
                    {"quota": -1 if self._chance(0.5) else 0, "limit": -1, "overQuotaWeight": 1}
            spec: dict[str, Any] = {"resources": res}
            if parent:
                spec["parentQueue"] = parent
            if self._chance(0.2):
                spec["priority"] = rng.choice([50, 100, 150, 200])
            created = base if same_time else base + k * rng.choice([1, 60, 3600])
            self.queue_objs.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                                    "metadata": self._meta(name, None, created, generation=1), "spec": spec})
            return res

        k = 0
        for t in range(rng.randint(1, 4)):
            top = f"dept-{t}"
            top_res = queue(top, None, None, k)
            k += 1
            kids = rng.choice([0, 1, 2, 2, 3])
            if kids == 0:
                self.leaves.append(top)
                continue
            for c in range(kids):
                mid = f"{top}-q{c}"
                mid_res = queue(mid, top, top_res, k)
                k += 1
                if self._chance(0.2):
                    for g in range(rng.randint(1, 2)):
                        leaf = f"{mid}-t{g}"
                        queue(leaf, mid, mid_res, k)
                        k += 1
                        self.leaves.append(leaf)
                else:
                    self.leaves.append(mid)

    # ------------------------------------------------------------------ pods

    def _tolerations(self, gpu: bool) -> list:
        tol = []
        if gpu and self._chance(0.85) or not gpu and self._chance(0.2):
            tol.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        if self._chance(0.15):
            tol.append({"key": "dedicated", "operator": "Equal", "value": self.rng.choice(TEAMS),
                        "effect": "NoSchedule"})
        if self._chance(0.03):
            tol.append({"operator": "Exists"})
        return tol

    def _constraints(self, p: _Pod, job_label: str, gang: bool) -> None:
        rng = self.rng
        gpu = bool(p.gpu or p.fraction or p.gpu_memory)
        p.tolerations = self._tolerations(gpu)
        products = sorted({n.product for n in self.nodes if n.product})
        if self._chance(0.12):
            if gpu and products and self._chance(0.6):
                p.node_selector = {"nvidia.com/gpu.product": rng.choice(products)}
            else:
                p.node_selector = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
        if self._chance(0.1):
            kind = rng.random()
            if kind < 0.4:
                expr = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": rng.sample(ZONES, 2)}
            elif kind < 0.7 and products:
                expr = {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": [rng.choice(products)]}
            elif kind < 0.85:
                expr = {"key": "team", "operator": "Exists"}
            else:
                expr = {"key": "team", "operator": "DoesNotExist"}
            terms = [{"matchExpressions": [expr]}]
            if self._chance(0.2):
                terms.append({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                    "values": [rng.choice(ZONES)]}]})
            p.node_affinity = terms
        if gang and self._chance(0.15):
            p.pod_anti_affinity = {"labelSelector": {"matchLabels": {"job": job_label}},
                                   "topologyKey": "kubernetes.io/hostname"}
        elif self._chance(0.04):
            p.pod_anti_affinity = {"labelSelector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": [rng.choice(["web", "db", "cache"])]}]},
                "topologyKey": rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"])}
        if self._chance(0.04):
            p.pod_affinity = {"labelSelector": {"matchLabels": {"app": rng.choice(["web", "db", "cache"])}},
                              "topologyKey": rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"])}
        for kind, chance in (("podAffinity", 0.06), ("podAntiAffinity", 0.04)):
            if self._chance(chance):
                p.preferred.append((kind, rng.randint(1, 100), {
                    "labelSelector": {"matchLabels": {"app": rng.choice(["web", "db", "cache", "train"])}},
                    "topologyKey": rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"])}))
        if self._chance(0.05):
            p.host_port = rng.choice([8080, 9090])
        if self._chance(0.08):
            p.config_map = f"cfg-{rng.randint(0, 3)}"

    def _pod_object(self, p: _Pod, ns: str, queue: Optional[str], pg: Optional[str], pc: Optional[str]) -> dict:
        labels = dict(p.labels)
        if queue:
            labels["kai.scheduler/queue"] = queue
        if p.subgroup:
            labels["kai.scheduler/subgroup-name"] = p.subgroup
        ann = {}
        if pg:
            ann["pod-group-name"] = pg
        if p.fraction is not None:
            ann["gpu-fraction"] = f"{p.fraction:g}"
        if p.gpu_memory is not None:
            ann["gpu-memory"] = str(p.gpu_memory)
        if p.devices > 1:
            ann["gpu-fraction-num-devices"] = str(p.devices)
        requests: dict[str, str] = {"cpu": f"{p.cpu}m", "memory": str(p.mem)}
        limits: dict[str, str] = {}
        if p.gpu:
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(p.gpu)
        container: dict[str, Any] = {"name": "main", "resources": {"requests": requests}}
        if limits:
            container["resources"]["limits"] = limits
        spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [container], "restartPolicy": "Never"}
        if pc:
            spec["priorityClassName"] = pc
        if p.tolerations:
            spec["tolerations"] = p.tolerations
        if p.node_selector:
            spec["nodeSelector"] = p.node_selector
        affinity: dict[str, Any] = {}
        if p.node_affinity:
            affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": p.node_affinity}}
        if p.pod_affinity:
            affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [p.pod_affinity]}
        if p.pod_anti_affinity:
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [p.pod_anti_affinity]}
        for kind, weight, term in p.preferred:
            affinity.setdefault(kind, {}).setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": weight, "podAffinityTerm": term})
        if affinity:
            spec["affinity"] = affinity
        if p.host_port:
            container["ports"] = [{"containerPort": p.host_port, "hostPort": p.host_port, "protocol": "TCP"}]
        if p.config_map:
            spec["volumes"] = [{"name": "cfg", "configMap": {"name": p.config_map}}]
            container["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cfg"}]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": self._meta(p.name, ns, p.created, labels=labels, annotations=ann),
                "spec": spec, "status": {"phase": "Pending"}}

    # ------------------------------------------------------------------ placement (the cluster's past)

    def _matches(self, sel: dict, labels: dict) -> bool:
        for k, v in (sel.get("matchLabels") or {}).items():
            if labels.get(k) != v:
                return False
        for e in sel.get("matchExpressions") or []:
            if e["operator"] == "In" and labels.get(e["key"]) not in e["values"]:
                return False
        return True

    def _node_ok(self, n: _Node, p: _Pod) -> bool:
        if not n.ready or not n.schedulable or n.name in self.memory_pressure:
            return False
        for t in n.taints:
            if t["effect"] == "PreferNoSchedule":
                continue
            if not any(tol.get("operator") == "Exists" and (tol.get("key") in (None, t["key"]))
                       or tol.get("key") == t["key"] and tol.get("value") == t.get("value") for tol in p.tolerations):
                return False
        for k, v in p.node_selector.items():
            if n.labels.get(k) != v:
                return False
        if p.node_affinity:
            def term_ok(term):
                for e in term["matchExpressions"]:
                    val = n.labels.get(e["key"])
                    op = e["operator"]
                    if op == "In" and val not in e["values"] or op == "NotIn" and val in e["values"] \
                            or op == "Exists" and val is None or op == "DoesNotExist" and val is not None:
                        return False
                return True
            if not any(term_ok(t) for t in p.node_affinity):
                return False
        if p.host_port and p.host_port in n.ports:
            return False
        for aff in (p.pod_anti_affinity,):
            if aff and aff["topologyKey"] == "kubernetes.io/hostname" and \
                    any(self._matches(aff["labelSelector"], lab) for lab in n.pod_labels):
                return False
        return True

    def _fit(self, n: _Node, p: _Pod) -> Optional[list]:
        """Devices the pod would take on ``n`` (``[]`` for CPU-only), or None."""
        if n.used_cpu + p.cpu > n.cpu or n.used_mem + p.mem > n.mem or n.used_pods + 1 > n.pods:
            return None
        if p.gpu:
            free = n.free_devices()
            return free[:p.gpu] if len(free) >= p.gpu else None
        if p.fraction is not None or p.gpu_memory is not None:
            if n.gpus == 0 or n.gpu_mem == 0:
                return None
            need = p.gpu_memory if p.gpu_memory is not None else int(p.fraction * n.gpu_mem)
            if need > n.gpu_mem:
                return None
            out = []
            for d, (_, used) in sorted(n.shared.items()):
                if used + need <= n.gpu_mem and len(out) < p.devices:
                    out.append(d)
            for d in n.free_devices():
                if len(out) < p.devices:
                    out.append(d)
            if len(out) < p.devices or n.used_pods + 1 + sum(d not in n.shared for d in out) > n.pods:
                return None
            return out
        return []

    def _place(self, n: _Node, p: _Pod, devices: list) -> list[str]:
        n.used_cpu += p.cpu
        n.used_mem += p.mem
        n.used_pods += 1
        n.pod_labels.append(p.labels)
        if p.host_port:
            n.ports.add(p.host_port)
        groups = []
        if p.gpu:
            n.whole_used.update(devices)
        elif devices:
            need = p.gpu_memory if p.gpu_memory is not None else int(p.fraction * n.gpu_mem)
            for d in devices:
                if d not in n.shared:
                    group = self._uid()
                    n.shared[d] = [group, 0]
                    n.used_pods += 1
                    self._reservation(n, d, group)
                n.shared[d][1] += need
                groups.append(n.shared[d][0])
        return groups

    def _reservation(self, n: _Node, device: int, group: str) -> None:
        name = f"gpu-reservation-{n.name}-{group[:5]}"
        meta = self._meta(name, "kai-resource-reservation", self.now - 3600,
                          labels={"app": "kai-resource-reservation", "runai-gpu-group": group},
                          annotations={"run.ai/reserve_for_gpu_index": f"GPU-{self._uid()}"})
        self.pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                          "spec": {"nodeName": n.name, "schedulerName": "default-scheduler",
                                   "containers": [{"name": "resource-reservation", "resources": {
                                       "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
                          "status": {"phase": "Running"}})

    # ------------------------------------------------------------------ jobs

    def _pod_shape(self, kind: str, gpu_nodes: list[_Node]) -> dict:
        rng = self.rng
        if kind == "cpu":
            return {"cpu": rng.choice([250, 500, 1000, 2000, 4000]), "mem": rng.choice([1, 2, 4, 8]) * GIB}
        if kind == "whole":
            biggest = max((n.gpus for n in gpu_nodes), default=1)
            g = rng.choice([1, 1, 2, 4, 8] if biggest >= 8 else [1, 1, 2, 4])
            return {"gpu": g, "cpu": g * rng.choice([4000, 8000, 12000]), "mem": g * rng.choice([16, 32, 64]) * GIB}
        if kind == "fraction":
            return {"fraction": rng.choice([0.1, 0.2, 0.25, 0.3, 0.5, 0.5, 0.75]),
                    "devices": 2 if self._chance(0.1) else 1, "cpu": rng.choice([1000, 2000]), "mem": 8 * GIB}
        mems = sorted({n.gpu_mem for n in gpu_nodes if n.gpu_mem})
        top = mems[-1] if mems else 16000
        return {"gpu_memory": rng.choice([1000, 2000, 4000, 8000, 10000, 20000, 40000]) if top > 40000 else
                rng.choice([1000, 2000, 4000, 8000]), "devices": 2 if self._chance(0.05) else 1,
                "cpu": 1000, "mem": 8 * GIB}

    def make_jobs(self) -> None:
        rng = self.rng
        gpu_nodes = [n for n in self.nodes if n.gpus]
        n_jobs = max(2, int(len(self.nodes) * rng.uniform(0.8, 3.0)))
        running_share = rng.uniform(0.2, 0.8)
        no_group_pods = rng.choice([0, 0, 1, 2, 3])
        same_second = self._chance(0.3)
        kinds = ["whole", "whole", "whole", "fraction", "memory", "cpu"] if gpu_nodes else ["cpu"]
        if gpu_nodes and self._chance(0.3):
            kinds += ["fraction", "fraction", "memory"]
        for k in range(n_jobs + no_group_pods):
            kind = rng.choice(kinds)
            ns = rng.choice(["team-a", "team-b", "team-c"])
            queue = rng.choice(self.leaves) if not self._chance(0.02) else "no-such-queue"
            pc = rng.choice(list(PRIORITY_CLASSES)) if self._chance(0.8) else None
            created = self.now - (600 if same_second and self._chance(0.5) else rng.randint(60, 7200))
            name = f"job-{k:03d}"
            gang = kind == "whole" and self._chance(0.3)
            n_tasks = rng.randint(2, 6) if gang else (rng.randint(2, 4) if self._chance(0.1) else 1)
            min_member = n_tasks if gang and self._chance(0.8) else max(1, n_tasks - rng.randint(0, n_tasks - 1))
            subgroups = None
            if n_tasks >= 3 and self._chance(0.15):
                subgroups = [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": n_tasks - 2}]
            shape = self._pod_shape(kind, gpu_nodes)
            pods = []
            app = rng.choice(["web", "db", "cache", "train"])
            for t in range(n_tasks):
                p = _Pod(name=f"{name}-{t}", cpu=shape["cpu"], mem=shape["mem"], gpu=shape.get("gpu", 0),
                         fraction=shape.get("fraction"), gpu_memory=shape.get("gpu_memory"),
                         devices=shape.get("devices", 1), labels={"job": name, "app": app},
                         created=created if self._chance(0.7) else created + rng.randint(0, 5))
                if subgroups:
                    p.subgroup = "leader" if t == 0 else "workers"
                pods.append(p)
            self._constraints(pods[0], name, gang or n_tasks > 1)
            for p in pods[1:]:
                p.tolerations, p.node_selector, p.node_affinity = pods[0].tolerations, pods[0].node_selector, \
                    pods[0].node_affinity
                p.pod_affinity, p.pod_anti_affinity = pods[0].pod_affinity, pods[0].pod_anti_affinity
                p.preferred = pods[0].preferred
                p.host_port, p.config_map = pods[0].host_port, pods[0].config_map
            grouped = k < n_jobs
            if grouped:
                self._pod_group(name, ns, queue, pc, min_member, subgroups, created)
            state = "running" if self._chance(running_share) else "pending"
            self._realise(pods, ns, queue if grouped or self._chance(0.8) else None, name if grouped else None,
                          pc, state, min_member)

    def _pod_group(self, name, ns, queue, pc, min_member, subgroups, created) -> None:
        spec: dict[str, Any] = {"minMember": min_member, "queue": queue}
        if pc:
            spec["priorityClassName"] = pc
        if subgroups:
            spec["subGroups"] = subgroups
        if self._chance(0.1):
            spec["preemptibility"] = self.rng.choice(["preemptible", "non-preemptible"])
        ann = {"kai.scheduler/top-owner-metadata": '{"kind":"Job"}'}
        self.pod_groups.append({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                "metadata": self._meta(name, ns, created, labels={"kai.scheduler/queue": queue},
                                                       annotations=ann, generation=1),
                                "spec": spec})
        self._last_group = self.pod_groups[-1]

    def _realise(self, pods: list[_Pod], ns, queue, pg, pc, state: str, min_member: int) -> None:
        rng = self.rng
        placed: list[tuple[_Pod, _Node, list]] = []
        if state == "running":
            nodes = list(self.nodes)
            rng.shuffle(nodes)
            for p in pods:
                for n in nodes:
                    if self._node_ok(n, p):
                        devices = self._fit(n, p)
                        if devices is not None:
                            placed.append((p, n, self._place(n, p, devices)))
                            break
                else:
                    break
            # a job that did not fit whole stays partly placed: stale gangs, elastic jobs
        if placed and pg and self._chance(0.8):
            ann = self._last_group["metadata"].setdefault("annotations", {})
            ann["kai.scheduler/last-start-timestamp"] = _ts(self.now - rng.randint(10, 7200))
            if len(placed) < min_member:
                ann["kai.scheduler/stale-podgroup-timestamp"] = _ts(self.now - rng.choice([10, 300, 3600]))
        by_pod = {p.name: (n, groups) for p, n, groups in placed}
        for p in pods:
            obj = self._pod_object(p, ns, queue, pg, pc)
            spec, status, meta = obj["spec"], obj["status"], obj["metadata"]
            if p.name in by_pod:
                n, groups = by_pod[p.name]
                r = rng.random()
                if r < 0.05 and not groups:  # allocated last cycle, not bound yet
                    self._bind_request(meta, n.name, groups, "Pending")
                else:
                    spec["nodeName"] = n.name
                    status.update(phase="Running", startTime=_ts(self.now - 60))
                    if len(groups) == 1:
                        meta.setdefault("labels", {})["runai-gpu-group"] = groups[0]
                    elif groups:
                        for g in groups:
                            meta.setdefault("labels", {})[f"runai-gpu-group/{g}"] = g
                    self._bind_request(meta, n.name, groups, "Succeeded")
                    if r > 0.93:
                        meta["deletionTimestamp"] = _ts(self.now)
                        meta["deletionGracePeriodSeconds"] = 30
                    elif r > 0.91:
                        status["phase"] = "Failed"
            elif state == "running" and self._chance(0.05):
                status["nominatedNodeName"] = rng.choice(self.nodes).name  # pipelined last cycle
            self.pods.append(obj)

    def _bind_request(self, pod_meta: dict, node: str, groups: list, phase: str) -> None:
        spec: dict[str, Any] = {"podName": pod_meta["name"], "selectedNode": node,
                                "receivedResourceType": "Fraction" if groups else "Regular"}
        if groups:
            spec["selectedGPUGroups"] = list(groups)
        self.bind_requests.append({"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                                   "metadata": self._meta(pod_meta["name"], pod_meta["namespace"], self.now - 60,
                                                          labels={"selected-node": node}),
                                   "spec": spec, "status": {"phase": phase}})

    def make_external_pods(self) -> None:
        rng = self.rng
        for n in self.nodes:
            for k in range(rng.choice([0, 1, 1, 2])):
                cpu, mem = rng.choice([100, 250, 500]), rng.choice([128, 256, 512]) * 2**20
                if n.used_cpu + cpu > n.cpu or n.used_pods + 1 > n.pods:
                    continue
                requests = {"cpu": f"{cpu}m", "memory": str(mem)}
                free = n.free_devices()
                if free and self._chance(0.05):
                    requests["nvidia.com/gpu"] = "1"
                    n.whole_used.add(free[0])
                n.used_cpu += cpu
                n.used_mem += mem
                n.used_pods += 1
                app = rng.choice(["web", "db", "cache", "node-exporter"])
                n.pod_labels.append({"app": app})
                container: dict[str, Any] = {"name": "main", "resources": {"requests": requests}}
                if self._chance(0.1) and 8080 not in n.ports:
                    container["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
                    n.ports.add(8080)
                self.pods.append({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": self._meta(f"{app}-{n.name}-{k}", "kube-system", self.now - 86400,
                                                         labels={"app": app}),
                                  "spec": {"schedulerName": "default-scheduler", "nodeName": n.name,
                                           "containers": [container]},
                                  "status": {"phase": "Running"}})

    def make_config_maps(self) -> None:
        for ns in ("team-a", "team-b", "team-c"):
            for k in range(4):
                if self._chance(0.6):
                    self.config_maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": self._meta(f"cfg-{k}", ns, self.now - 86400)})

    # ------------------------------------------------------------------ document

    def document(self) -> dict:
        self.make_nodes()
        self.make_queues()
        self.make_external_pods()
        self.make_jobs()
        self.make_config_maps()
        rng = self.rng
        spread = self._chance(0.25)
        plugins = [{"name": n} for n in ("predicates", "proportion", "priority", "nodeavailability", "resourcetype",
                                         "podaffinity", "elastic", "kubeflow", "ray", "subgrouporder", "taskorder",
                                         "nominatednode", "dynamicresources", "minruntime", "topology", "snapshot",
                                         "sg-nodelocalgreedy", "sg-multinodegang")]
        plugins[1]["arguments"] = {"kValue": "1"}
        plugins.append({"name": "gpuspread" if spread else "gpupack"})
        strategy = "spread" if spread else "binpack"
        plugins.append({"name": "nodeplacement", "arguments": {"gpu": strategy, "cpu": strategy}})
        if not spread:
            plugins.append({"name": "gpusharingorder"})
        pcs = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": self._meta(name, None, self.now - 86400), "value": value,
                "preemptionPolicy": "PreemptLowerPriority"} for name, value in PRIORITY_CLASSES.items()]
        raw = {"pods": self.pods, "nodes": self.node_objects(), "queues": self.queue_objs,
               "podGroups": self.pod_groups, "bindRequests": self.bind_requests, "priorityClasses": pcs,
               "configMaps": self.config_maps}
        for key in ("persistentVolumes", "persistentVolumeClaims", "csiStorageCapacities", "storageClasses",
                    "csiDrivers", "resourceClaims", "resourceSlices", "deviceClasses", "topologies",
                    "nodeResourceTopologies"):
            raw[key] = []
        rng.shuffle(raw["pods"])  # informer order carries no meaning
        actions = self.actions
        if spread:  # KAI's operator disables consolidation under spread placement (schedulingshard_types.go)
            actions = ", ".join(a.strip() for a in actions.split(",") if a.strip() != "consolidation")
        config = {"actions": actions, "tiers": [{"plugins": plugins}],
                  "scenarioSearchBudgets": {"maxActionSearchDuration": {"default": "5m0s"},
                                            "maxJobSearchDuration": "4m0s", "minJobSearchDuration": "0s",
                                            "maxGeneratorSearchDuration": {"default": "2m0s",
                                                                           "NodeLocalGreedy": "30s",
                                                                           "MultiNodeGang": "2m0s"}}}
        params = {"schedulerName": "kai-scheduler",
                  "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
                  "maxNumberConsolidationPreemptees": 16, "useSchedulingSignatures": True,
                  "fullHierarchyFairness": True, "allowConsolidatingReclaim": True,
                  "numOfStatusRecordingWorkers": 5, "globalDefaultStalenessGracePeriod": 60_000_000_000,
                  "schedulePeriod": 1_000_000_000, "detailedFitErrors": True, "queueLabelKey": "kai.scheduler/queue"}
        return {"config": config, "schedulerParams": params, "rawObjects": raw}


def generate_document(seed: int, now: float, actions: str = "allocate") -> dict:
    """The ``snapshot.json`` document of cluster ``seed`` (see the module doc)."""
    return ClusterGenerator(seed, now, actions).document()
