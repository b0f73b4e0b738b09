"""The synthetic demo's snapshot-1.2 pools: topology-aware gangs, MIG-sliced inference and DRA pods.

:func:`extension_nodes` adds three small pools to a synthetic cluster and :func:`extension_jobs` the work on
them, laid out by hand so that every new path of the engine and the dashboard has something to show:

- ``h100-nv``: 16 H100 nodes labelled by zone / block / rack (2 × 2 × 2, two nodes = 16 GPUs per rack) and a KAI
  ``Topology`` (:data:`TOPOLOGY`) over them. LLM training gangs require one rack (preferring one node): four
  racks run a 16-GPU gang, the other four are partly used, so a pending 16-GPU rack gang finds 24 free GPUs but
  no rack with 16 ("no rack with 16 free GPUs; largest 8"), while a pending 8-GPU one fits;
- ``a100-mig``: 4 A100 80 GB nodes whose GPUs are MIG-sliced (``nvidia.com/mig-<profile>``), each node 8
  GPU-equivalents as KAI counts them (a ``3g.40gb`` instance is 3); inference servers each hold one instance,
  and one asks for a ``3g.40gb`` that no node has free;
- ``gb200-dra``: 2 nodes publishing their GPUs through DRA ResourceSlices; inference pods get GPUs through
  ResourceClaims (one made from a template per pod, one claim shared by two pods), and one names a claim the
  DRA controller has not made yet.

Everything here is deterministic apart from the pods' real usage (drawn from the scenario's generator).
"""

from __future__ import annotations

import random
from typing import Optional

from ..model import (DraClaim, Job, Node, Task, TaskUsage, Topology, TopologyConstraint, TopologyLevel, mig_gpus,
                     mig_memory_mib)

GIB = 2**30
ZONE, BLOCK, RACK, HOST = ("topology.kubernetes.io/zone", "network.example.com/block", "network.example.com/rack",
                           "kubernetes.io/hostname")
TOPOLOGY = Topology(name="dc-net", levels=[TopologyLevel(ZONE, "zone"), TopologyLevel(BLOCK, "block"),
                                           TopologyLevel(RACK, "rack"), TopologyLevel(HOST, "hostname")])
"""The H100 pool's network: zone → block → rack → node."""

H100 = dict(gpus=8, gpu_memory_mib=81500, cpu_millis=190_000, memory_bytes=1900 * GIB, gpu_model="NVIDIA-H100-80GB-HBM3")
A100 = dict(gpu_memory_mib=81900, cpu_millis=254_000, memory_bytes=1900 * GIB, gpu_model="NVIDIA-A100-SXM4-80GB")
GB200 = dict(gpus=4, dra_gpus=4, gpu_memory_mib=189_400, cpu_millis=144_000, memory_bytes=960 * GIB,
             gpu_model="NVIDIA-GB200")
MIG_LAYOUTS = ({"1g.10gb": 7}, {"3g.40gb": 2}, {"2g.20gb": 3, "1g.10gb": 1}, {"7g.80gb": 1})
"""MIG instances per node (one sliced GPU each, or two for ``3g.40gb``); the node's other GPUs stay whole so that
each node holds 8 GPU-equivalents."""
MIG_NODE_GPUS = 8


def extension_nodes() -> list[Node]:
    """The three extension pools' nodes (22 nodes, 168 GPU-equivalents)."""
    nodes = []
    for i in range(16):
        zone, block, rack = i // 8, i // 4, i // 2
        labels = {"kai.scheduler/node-pool": "h100-nv", "nvidia.com/gpu.product": H100["gpu_model"],
                  "nvidia.com/gpu.count": "8", ZONE: f"zone-{'ab'[zone]}", BLOCK: f"block-{'ab'[zone]}{block % 2 + 1}",
                  RACK: f"rack-{'ab'[zone]}{block % 2 + 1}{'xy'[rack % 2]}", HOST: f"h100-nv-{i:03d}"}
        nodes.append(Node(name=f"h100-nv-{i:03d}", pods=110, labels=labels, **H100))
    for i, layout in enumerate(MIG_LAYOUTS):
        labels = {"kai.scheduler/node-pool": "a100-mig", "nvidia.com/gpu.product": A100["gpu_model"],
                  "nvidia.com/mig.strategy": "mixed"}
        nodes.append(Node(name=f"a100-mig-{i:03d}", gpus=MIG_NODE_GPUS, pods=110, labels=labels, mig=dict(layout),
                          **A100))
    for i in range(2):
        labels = {"kai.scheduler/node-pool": "gb200-dra", "nvidia.com/gpu.product": GB200["gpu_model"]}
        nodes.append(Node(name=f"gb200-dra-{i:03d}", pods=110, labels=labels, **GB200))
    return nodes


def _task(name: str, gpu: float, cpu: float, mem_gib: float, node: Optional[str] = None,
          indices: Optional[list[int]] = None, **kw) -> Task:
    return Task(name=name, gpu=gpu, cpu_millis=cpu, memory_bytes=mem_gib * GIB, node=node,
                status="running" if node else "pending", gpu_indices=list(indices or []), **kw)


def _job(name: str, queue: str, priority: int, tasks: list[Task], created: float, started: Optional[float],
         duration_s: float, topology: Optional[TopologyConstraint] = None) -> Job:
    return Job(name=name, namespace=queue, queue=queue, priority=priority, min_available=len(tasks),
               creation_time=created, last_start_time=started, duration_s=round(duration_s), tasks=tasks,
               topology=topology)


RACK_GANG = TopologyConstraint(topology="dc-net", required_level="rack", preferred_level="hostname")

# Running work on the H100 pool, by node index: (job suffix, GPUs per pod, node indices, first GPU)
H100_RUNNING = (
    ("00", 8, (0, 1), 0), ("01", 8, (2, 3), 0), ("02", 8, (4, 5), 0), ("03", 8, (6, 7), 0),   # four full racks
    ("04", 8, (8,), 0), ("05", 4, (9,), 0), ("06", 8, (10,), 0), ("07", 4, (11,), 0),          # 4 free each
    ("08", 8, (12,), 0), ("09", 8, (14,), 0),                                                  # 8 free each
)


def extension_jobs(time: float, rng: random.Random, train_priority: int, inference_priority: int) -> list[Job]:
    """Running and pending work on the extension pools (queues ``llm`` and ``inference``)."""
    jobs = []
    for suffix, per_pod, hosts, first in H100_RUNNING:
        started = time - 3600 * (1 + int(suffix) % 5)
        tasks = [_task(f"llm/llm-train-nv-{suffix}-{k}", float(per_pod), per_pod * 19_000.0, per_pod * 190.0,
                       node=f"h100-nv-{h:03d}", indices=list(range(first, first + per_pod)))
                 for k, h in enumerate(hosts)]
        jobs.append(_job(f"llm-train-nv-{suffix}", "llm", train_priority, tasks, started - 120, started,
                         6 * 3600 + 1800 * int(suffix), RACK_GANG))
    for suffix, gpus in (("10", 16), ("11", 8)):
        tasks = [_task(f"llm/llm-train-nv-{suffix}-{k}", 8.0, 152_000.0, 1520.0) for k in range(gpus // 8)]
        jobs.append(_job(f"llm-train-nv-{suffix}", "llm", train_priority, tasks, time - 900, None, 8 * 3600,
                         RACK_GANG))
    jobs.extend(_mig_jobs(time, inference_priority))
    jobs.extend(_dra_jobs(time, inference_priority))
    for job in jobs:
        for t in job.tasks:
            if t.node is not None:
                t.usage = _usage(t, rng)
    return jobs


def _mig_jobs(time: float, priority: int) -> list[Job]:
    """One server per MIG instance on the first three nodes (the last instance of each left free), and a pending
    one asking for a ``3g.40gb`` (both of them are taken)."""
    jobs = []
    k = 0
    for n, layout in enumerate(MIG_LAYOUTS[:3]):
        cell = 0
        instances = [(p, mig_gpus(p)) for p, c in layout.items() for _ in range(c)]
        for j, (profile, g) in enumerate(instances):
            if j < len(instances) - 1 or profile == "3g.40gb":
                task = _task(f"inference/inference-serve-mig-{k:02d}-0", float(g), 4000.0, 24.0,
                             node=f"a100-mig-{n:03d}", indices=list(range(cell, cell + g)), mig={profile: 1})
                jobs.append(_job(f"inference-serve-mig-{k:02d}", "inference", priority, [task], time - 7200,
                                 time - 7000, 20 * 3600))
                k += 1
            cell += g
    task = _task(f"inference/inference-serve-mig-{k:02d}-0", 3.0, 4000.0, 24.0, mig={"3g.40gb": 1})
    jobs.append(_job(f"inference-serve-mig-{k:02d}", "inference", priority, [task], time - 600, None, 12 * 3600))
    return jobs


def _dra_jobs(time: float, priority: int) -> list[Job]:
    """DRA pods: two with a claim of 2 GPUs each from a ResourceClaimTemplate, two sharing one claimed GPU, and a
    pending one whose claim the DRA controller has not made yet."""
    specs = [("00", "gb200-dra-000", [0, 1], DraClaim("inference/serve-dra-00-0-gpu-7xk2p", gpus=2)),
             ("01", "gb200-dra-000", [2, 3], DraClaim("inference/serve-dra-01-0-gpu-m4q9z", gpus=2)),
             ("02", "gb200-dra-001", [0], DraClaim("inference/shared-gpu", gpus=1, shared=True, queue="inference")),
             ("03", "gb200-dra-001", [0], DraClaim("inference/shared-gpu", gpus=1, shared=True, queue="inference"))]
    jobs = []
    for suffix, node, indices, claim in specs:
        task = _task(f"inference/inference-serve-dra-{suffix}-0", float(claim.gpus), 8000.0, 64.0, node=node,
                     indices=indices, dra_claims=[claim])
        jobs.append(_job(f"inference-serve-dra-{suffix}", "inference", priority, [task], time - 5400, time - 5300,
                         16 * 3600))
    task = _task("inference/inference-serve-dra-04-0", 0.0, 8000.0, 64.0,
                 dra_claims=[DraClaim("inference/gpu-0 (from ResourceClaimTemplate gpu)", gpus=0, missing=True)])
    jobs.append(_job("inference-serve-dra-04", "inference", priority, [task], time - 300, None, 8 * 3600))
    return jobs


def _usage(task: Task, rng: random.Random) -> TaskUsage:
    """Real usage per device: training busy, servers moderately; a MIG server within its instance's memory."""
    if task.mig:
        profile = next(iter(task.mig))
        instance_mib = mig_memory_mib(profile)
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0.5, 0.9) * instance_mib),
                         gpu_util=round(rng.uniform(0.2, 0.7), 2))
    if task.dra_claims:
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0.4, 0.8) * GB200["gpu_memory_mib"]),
                         gpu_util=round(rng.uniform(0.3, 0.8), 2))
    return TaskUsage(gpu_memory_mib=round(rng.uniform(0.6, 0.95) * H100["gpu_memory_mib"]),
                     gpu_util=round(rng.uniform(0.8, 0.98), 2))


__all__ = ["TOPOLOGY", "MIG_LAYOUTS", "extension_nodes", "extension_jobs"]
