"""Seeded, reproducible synthetic clusters and workloads: the dashboard's embedded default scenario.

``generate_scenario(seed, nodes)`` builds a busy organisation's GPU cluster at one moment plus the jobs that will
arrive after it:

- node pools: 8×H100 80 GB and 8×A100 80 GB training nodes, 8×A100 40 GB nodes, small L4 (24 GB) and T4 (16 GB)
  inference nodes, a few CPU nodes (GPU memory as KAI reads the ``nvidia.com/gpu.memory`` label, floored to
  100 MiB);
- queues like a real organisation: Research → LLM, Vision; Data Science → Analytics, Inference; Infrastructure,
  with GPU quotas summing to 95% of the cluster, limits, over-quota weights, priorities and min runtimes;
- a workload mix: distributed training gangs of 4-64 GPUs (8 GPUs per pod on H100/A100), fractional inference
  servers (``gpu`` 0.2-0.7 or ``gpu_memory_mib``, priority ``inference`` = 125, non-preemptible), interactive
  notebooks (``build`` = 100, non-preemptible, fractional), batch jobs (``train`` = 50), CPU-only jobs;
- at t=0 about 70-90% of the GPUs are allocated, LLM borrows beyond its quota, Vision is starved with pending
  training, and a few pending jobs wait for varied reasons (too big a gang, over a queue limit, non-preemptible
  over quota, fragmentation);
- per running pod, what it really uses (``Task.usage``, GPU memory in MiB **per device** and utilisation): some
  allocated GPUs sit idle, and some inference servers use more memory than their share, as vLLM does without
  ``--gpu-memory-utilization``;
- arrivals: a Poisson stream of future jobs (``Arrival(offset_s, job, duration_s)``) with durations per kind, at
  rates balanced per queue so that the long-run demand stays below what the cluster completes
  (:data:`OFFERED_LOAD`); :func:`usage_for` gives a job started later the same kind of real usage.

Running jobs are placed here, consistently, without the engine: a GPU is never over-allocated (per-GPU shares
<= 1; a GPU holds either one whole-GPU task or fractional tasks of one GPU group), CPU, memory and pod counts stay
within each node's allocatable, and non-preemptible jobs stay within their queues' deserved GPUs (as KAI
enforces). The same seed and arguments always give the same scenario.
"""

from __future__ import annotations

import copy
import math
import random
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Optional

from ..model import (
    Job,
    Node,
    PlacementConfig,
    Queue,
    QueueResource,
    SchedulerConfig,
    Snapshot,
    Task,
    TaskUsage,
    memory_to_fraction,
    mig_memory_total_mib,
)
from .synthetic_extensions import TOPOLOGY, extension_jobs, extension_nodes

SCENARIO_TIME = 1767225600.0
"""2026-01-01T00:00:00Z: every scenario describes this moment, so output is reproducible."""

PRIORITY = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
"""KAI's default priority classes (kai-semantics §f)."""

GIB = 2**30


@dataclass(frozen=True)
class Pool:
    """A node pool: hardware per node and its share of the cluster's nodes."""

    name: str
    weight: float
    gpus: int
    gpu_memory_mib: float
    gpu_model: Optional[str]
    cpu_millis: float
    memory_bytes: float
    minimum: int = 0


POOLS = (
    Pool("h100", 0.40, 8, 81500, "NVIDIA-H100-80GB-HBM3", 190_000, 1900 * GIB, minimum=1),
    Pool("a100-80", 0.20, 8, 81900, "NVIDIA-A100-SXM4-80GB", 254_000, 1900 * GIB),
    Pool("a100-40", 0.10, 8, 40900, "NVIDIA-A100-SXM4-40GB", 94_000, 1100 * GIB),
    Pool("l4", 0.15, 4, 23000, "NVIDIA-L4", 47_000, 186 * GIB, minimum=1),
    Pool("t4", 0.08, 4, 15300, "Tesla-T4", 47_000, 180 * GIB),
    Pool("cpu", 0.07, 0, 0, None, 94_000, 370 * GIB, minimum=1),
)

TRAIN_POOLS = ("h100", "a100-80")
SMALL_GPU_POOLS = ("a100-40", "l4", "t4", "a100-80")
INFERENCE_POOLS = ("l4", "t4", "a100-40", "a100-80")


@dataclass
class Arrival:
    """A job that arrives ``offset_s`` seconds after the snapshot's time and runs ``duration_s`` once started."""

    offset_s: float
    job: Job
    duration_s: float


@dataclass
class Scenario:
    """A synthetic cluster: the state at t=0 and the jobs still to come."""

    snapshot: Snapshot
    arrivals: list[Arrival] = field(default_factory=list)
    seed: int = 0

    @property
    def horizon_s(self) -> float:
        return max((a.offset_s for a in self.arrivals), default=0.0)


# ---------------------------------------------------------------------------------------------- nodes

def pool_sizes(n_nodes: int) -> dict[str, int]:
    """Nodes per pool: weights by largest remainder, each pool's minimum honoured while nodes allow."""
    counts = {p.name: 0 for p in POOLS}
    left = n_nodes
    for p in sorted(POOLS, key=lambda p: -p.weight):  # minimums first, biggest pools first
        if p.minimum and left > 0:
            counts[p.name] = min(p.minimum, left)
            left -= counts[p.name]
    raw = {p.name: max(0.0, p.weight * n_nodes - counts[p.name]) for p in POOLS}
    total_raw = sum(raw.values()) or 1.0
    share = {k: v / total_raw * left for k, v in raw.items()}
    for k in counts:
        counts[k] += int(share[k])
    rest = n_nodes - sum(counts.values())
    for k in sorted(share, key=lambda k: (-(share[k] - int(share[k])), k))[:rest]:
        counts[k] += 1
    return counts


def make_nodes(n_nodes: int) -> list[Node]:
    nodes = []
    for pool in POOLS:
        for i in range(pool_sizes(n_nodes)[pool.name]):
            labels = {"kai.scheduler/node-pool": pool.name}
            if pool.gpus:
                labels.update({"nvidia.com/gpu.product": pool.gpu_model, "nvidia.com/gpu.count": str(pool.gpus)})
            nodes.append(Node(name=f"{pool.name}-{i:03d}", gpus=pool.gpus, gpu_memory_mib=pool.gpu_memory_mib,
                              cpu_millis=pool.cpu_millis, memory_bytes=pool.memory_bytes, pods=110,
                              gpu_model=pool.gpu_model, labels=labels))
    return nodes


# ---------------------------------------------------------------------------------------------- queues

# name, parent, share of the parent's GPU quota, limit as a multiple of the quota (-1 = none), weight, priority
QUEUE_TREE = (
    ("research", None, 0.50, -1, 2, 100),
    ("llm", "research", 0.65, -1, 1, 100),
    ("vision", "research", 0.35, -1, 1, 100),
    ("data-science", None, 0.35, -1, 1, 100),
    ("analytics", "data-science", 0.40, 1.5, 1, 100),
    ("inference", "data-science", 0.60, -1, 1, 120),
    ("infrastructure", None, 0.10, 2.0, 1, 90),
)
DISPLAY = {"research": "Research", "llm": "LLM", "vision": "Vision", "data-science": "Data Science",
           "analytics": "Analytics", "inference": "Inference", "infrastructure": "Infrastructure"}
MIN_RUNTIMES = {"llm": (600.0, 1800.0), "inference": (None, 300.0)}
"""Queue → (preempt_min_runtime_s, reclaim_min_runtime_s) where set."""

CLUSTER_QUOTA_SHARE = 0.95
UNLIMITED_RESOURCE = QueueResource(quota=-1, limit=-1, over_quota_weight=1)


def make_queues(total_gpus: int) -> list[Queue]:
    """Quotas: 95% of the GPUs across departments, each department's quota split among its teams (floors)."""
    quota: dict[str, float] = {}
    queues = []
    for i, (name, parent, share, limit_x, weight, priority) in enumerate(QUEUE_TREE):
        base = total_gpus * CLUSTER_QUOTA_SHARE if parent is None else quota[parent]
        quota[name] = float(math.floor(base * share))
        limit = -1.0 if limit_x == -1 else float(max(1, math.ceil(quota[name] * limit_x)))
        q = Queue(name=name, parent=parent, priority=priority, creation_time=SCENARIO_TIME - 90 * 86400 + i * 60,
                  gpu=QueueResource(quota=quota[name], limit=limit, over_quota_weight=weight),
                  cpu=QueueResource(**vars(UNLIMITED_RESOURCE)), memory=QueueResource(**vars(UNLIMITED_RESOURCE)),
                  display_name=DISPLAY[name])
        if name in MIN_RUNTIMES:
            q.preempt_min_runtime_s, q.reclaim_min_runtime_s = MIN_RUNTIMES[name]
        queues.append(q)
    return queues


# ---------------------------------------------------------------------------------------------- placement

class _GPUState:
    """One node's occupancy while jobs are placed."""

    def __init__(self, node: Node, pool: str) -> None:
        self.node = node
        self.pool = pool
        self.whole = [False] * node.gpus           # GPU held by a whole-GPU task
        self.shared: dict[int, list] = {}          # GPU index -> [group id, portion used]
        self.cpu = 0.0
        self.memory = 0.0
        self.pods = 0
        self.used = 0.0  # GPUs allocated (whole + shared portions), kept in step with whole/shared

    def free_whole(self) -> list[int]:
        return [i for i in range(self.node.gpus) if not self.whole[i] and i not in self.shared]

    def allocated_gpus(self) -> float:
        return self.used

    def fits_host(self, task: Task) -> bool:
        n = self.node
        return (self.cpu + task.cpu_millis <= n.cpu_millis and self.memory + task.memory_bytes <= n.memory_bytes
                and self.pods + 1 <= n.pods)


class _Placer:
    """Binpack placement of whole jobs (all-or-nothing) with an undo log."""

    def __init__(self, nodes: list[Node], rng: random.Random) -> None:
        self.rng = rng
        self.states = {n.name: _GPUState(n, n.labels["kai.scheduler/node-pool"]) for n in nodes}
        self.by_pool: dict[str, list[_GPUState]] = {}
        for s in self.states.values():
            self.by_pool.setdefault(s.pool, []).append(s)
        self._allocated = 0.0

    def _group_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _place_task(self, task: Task, pools: tuple[str, ...], undo: list) -> bool:
        for pool in pools:
            candidates = self.by_pool.get(pool, [])
            if task.is_fractional:  # gpupack: fullest nodes first, so shared GPUs fill up
                ordered = sorted(candidates, key=lambda s: (s.node.gpus - s.allocated_gpus(), s.node.name))
            else:  # a cluster with history: whole-GPU work lies where churn left room, fragmenting free GPUs
                ordered = list(candidates)
                self.rng.shuffle(ordered)
            for st in ordered:
                if st.fits_host(task) and self._place_on(st, task, undo):
                    return True
        return False

    def _place_on(self, st: _GPUState, task: Task, undo: list) -> bool:
        node = st.node
        if task.is_fractional:
            portion = memory_to_fraction(task.gpu_memory_mib, node.gpu_memory_mib) if task.gpu_memory_mib is not None \
                else task.gpu
            if portion > 1:
                return False
            shared = sorted(((p, i) for i, (_, p) in st.shared.items() if p + portion <= 1 + 1e-9), reverse=True)
            if shared:
                index = shared[0][1]
                group = st.shared[index][0]
                st.shared[index][1] += portion
                st.used += portion
                undo.append(("share", st, index, portion))
            else:
                free = st.free_whole()
                if not free:
                    return False
                index, group = free[0], self._group_id()
                st.shared[index] = [group, portion]
                st.used += portion
                undo.append(("open", st, index))
            task.gpu_groups, task.gpu_indices = [group], [index]
        elif task.gpu >= 1:
            free = st.free_whole()
            if len(free) < task.gpu:
                return False
            chosen = free[: int(task.gpu)]
            for i in chosen:
                st.whole[i] = True
            st.used += len(chosen)
            undo.append(("whole", st, chosen))
            task.gpu_indices = list(chosen)
        elif node.gpus and task.gpu == 0 and st.pool != "cpu":
            return False  # CPU-only work goes to CPU nodes
        st.cpu += task.cpu_millis
        st.memory += task.memory_bytes
        st.pods += 1
        undo.append(("host", st, task))
        task.node = node.name
        task.status = "running"
        return True

    def place_job(self, job: Job, pools: tuple[str, ...]) -> bool:
        undo: list = []
        for task in job.tasks:
            if not self._place_task(task, pools, undo):
                self._rollback(undo, job)
                return False
        self._recount()
        return True

    def _rollback(self, undo: list, job: Job) -> None:
        for entry in reversed(undo):
            kind, st = entry[0], entry[1]
            if kind == "share":
                st.shared[entry[2]][1] -= entry[3]
                st.used -= entry[3]
            elif kind == "open":
                st.used -= st.shared.pop(entry[2])[1]
            elif kind == "whole":
                for i in entry[2]:
                    st.whole[i] = False
                st.used -= len(entry[2])
            elif kind == "host":
                task = entry[2]
                st.cpu -= task.cpu_millis
                st.memory -= task.memory_bytes
                st.pods -= 1
        for task in job.tasks:
            task.node, task.status, task.gpu_groups, task.gpu_indices = None, "pending", [], []

    def allocated(self) -> float:
        return self._allocated

    def _recount(self) -> None:
        self._allocated = sum(s.used for s in self.states.values())


# ---------------------------------------------------------------------------------------------- jobs

@dataclass
class _Template:
    """A kind of job: where it runs, its priority class, how big it is and how long it runs."""

    kind: str
    priority_class: str
    pools: tuple[str, ...]


def _host(pool: Pool, gpus: float) -> tuple[float, float]:
    """CPU millis and memory bytes a pod asks for per its GPU share: ~80% of the node's per-GPU host share."""
    if not pool.gpus:
        return 4000.0, 16 * GIB
    per_gpu_cpu = pool.cpu_millis * 0.8 / pool.gpus
    per_gpu_mem = pool.memory_bytes * 0.8 / pool.gpus
    share = max(gpus, 0.125)
    return float(max(1000, round(per_gpu_cpu * share / 1000) * 1000)), float(max(4, round(per_gpu_mem * share / GIB)) * GIB)


POOL_BY_NAME = {p.name: p for p in POOLS}


class _JobFactory:
    """Builds jobs of each kind for each queue, with names, sizes, durations and real usage."""

    def __init__(self, rng: random.Random, pool_gpus: dict[str, int]) -> None:
        self.rng = rng
        self.pool_gpus = pool_gpus
        self.counter: dict[str, int] = {}

    def _name(self, queue: str, kind: str) -> str:
        n = self.counter.get(queue, 0)
        self.counter[queue] = n + 1
        return f"{queue}-{kind}-{n:04d}"

    def _job(self, queue: str, kind: str, priority_class: str, tasks_spec: list[dict], min_available: int,
             duration_s: float, created: float) -> Job:
        name = self._name(queue, kind)
        tasks = [Task(name=f"{queue}/{name}-{i}", **spec) for i, spec in enumerate(tasks_spec)]
        return Job(name=name, namespace=queue, queue=queue, priority=PRIORITY[priority_class],
                   min_available=min_available, creation_time=created, duration_s=round(duration_s), tasks=tasks)

    def _pool_for(self, pools: tuple[str, ...]) -> Pool:
        for p in pools:
            if self.pool_gpus.get(p, 0):
                return POOL_BY_NAME[p]
        return POOL_BY_NAME[pools[0]]

    # each maker returns (job, pools)

    def training(self, queue: str, created: float, big: bool = False) -> tuple[Job, tuple[str, ...]]:
        rng = self.rng
        pools = TRAIN_POOLS
        biggest = max(self.pool_gpus.get("h100", 0), self.pool_gpus.get("a100-80", 0))
        sizes = [64] if big else [4, 8, 8, 16, 16, 32, 64]
        sizes = [s for s in sizes if s <= biggest] or [min(4, biggest) or 1]
        gpus = rng.choice(sizes) if not big else sizes[-1]
        pool = self._pool_for(pools)
        per_pod = min(8, gpus)
        n_pods = max(1, gpus // per_pod)
        cpu, mem = _host(pool, per_pod)
        spec = [dict(gpu=float(per_pod), cpu_millis=cpu, memory_bytes=mem) for _ in range(n_pods)]
        duration = rng.lognormvariate(math.log(6 * 3600), 0.7)
        return self._job(queue, "train", "train", spec, n_pods, duration, created), pools

    def batch(self, queue: str, created: float) -> tuple[Job, tuple[str, ...]]:
        rng = self.rng
        gpus = rng.choice([1, 1, 2, 4])
        pools = ("a100-40", "a100-80", "l4", "t4", "h100")
        cpu, mem = _host(self._pool_for(pools), gpus)
        duration = rng.uniform(10 * 60, 90 * 60)
        return self._job(queue, "batch", "train", [dict(gpu=float(gpus), cpu_millis=cpu, memory_bytes=mem)], 1,
                         duration, created), pools

    def notebook(self, queue: str, created: float) -> tuple[Job, tuple[str, ...]]:
        rng = self.rng
        frac = rng.choice([0.25, 0.25, 0.5])
        pools = ("a100-40", "l4", "a100-80")
        spec = dict(gpu=frac, cpu_millis=4000.0, memory_bytes=32.0 * GIB)
        return self._job(queue, "nb", "build", [spec], 1, rng.uniform(1800, 4 * 3600), created), pools

    def inference(self, queue: str, created: float, whole: bool = False) -> tuple[Job, tuple[str, ...]]:
        rng = self.rng
        pools = INFERENCE_POOLS
        if whole:
            spec = dict(gpu=1.0, cpu_millis=8000.0, memory_bytes=48.0 * GIB)
        elif rng.random() < 0.35:
            spec = dict(gpu_memory_mib=float(rng.choice([4000, 6000, 8000, 10000])), cpu_millis=4000.0,
                        memory_bytes=24.0 * GIB)
        else:
            spec = dict(gpu=round(rng.uniform(0.2, 0.7), 1), cpu_millis=4000.0, memory_bytes=24.0 * GIB)
        return self._job(queue, "serve", "inference", [spec], 1, rng.uniform(4 * 3600, 24 * 3600), created), pools

    def cpu_job(self, queue: str, created: float) -> tuple[Job, tuple[str, ...]]:
        rng = self.rng
        spec = dict(cpu_millis=float(rng.choice([4000, 8000, 16000])), memory_bytes=float(rng.choice([16, 32, 64])) * GIB)
        return self._job(queue, "etl", "train", [spec], 1, rng.uniform(15 * 60, 2 * 3600), created), ("cpu",)

    def sized(self, job: Job, gpus: int, per_pod: int) -> Job:
        """``job`` resized to ``gpus`` whole GPUs as a gang of pods of ``per_pod`` GPUs (same host share per GPU)."""
        first = job.tasks[0]
        per_gpu_cpu, per_gpu_mem = first.cpu_millis / max(first.gpu, 1), first.memory_bytes / max(first.gpu, 1)
        sizes = [per_pod] * (gpus // per_pod) + ([gpus % per_pod] if gpus % per_pod else [])
        prefix = first.name.rsplit("-", 1)[0]
        job.tasks = [Task(name=f"{prefix}-{i}", gpu=float(g), cpu_millis=per_gpu_cpu * g, memory_bytes=per_gpu_mem * g)
                     for i, g in enumerate(sizes)]
        job.min_available = len(job.tasks)
        return job

    def for_queue(self, queue: str, created: float) -> tuple[Job, tuple[str, ...]]:
        """A job of the mix a team in ``queue`` submits."""
        r = self.rng.random()
        if queue == "llm":
            return self.training(queue, created) if r < 0.85 else self.notebook(queue, created)
        if queue == "vision":
            return self.training(queue, created) if r < 0.5 else (
                self.batch(queue, created) if r < 0.85 else self.notebook(queue, created))
        if queue == "analytics":
            return self.batch(queue, created) if r < 0.5 else (
                self.cpu_job(queue, created) if r < 0.8 else self.notebook(queue, created))
        if queue == "inference":
            return self.inference(queue, created, whole=r < 0.15)
        return self.cpu_job(queue, created) if r < 0.5 else self.batch(queue, created)


# ---------------------------------------------------------------------------------------------- usage

def _usage(job: Job, task: Task, node: Node, kind: str, rng: random.Random) -> Optional[TaskUsage]:
    """What the pod really uses of each of its GPUs (memory MiB per device, utilisation 0..1)."""
    if not task.is_gpu:
        return None
    device_mib = node.gpu_memory_mib
    if task.mig:   # a MIG pod sees its instance only: its memory is all the pod can use
        device_mib = mig_memory_total_mib(task.mig)
    share_mib = device_mib * (task.gpu if task.gpu_memory_mib is None else
                              memory_to_fraction(task.gpu_memory_mib, device_mib)) if task.is_fractional else device_mib
    idle = rng.random() < 0.08  # allocated but doing nothing (stuck job, forgotten notebook)
    if idle:
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0, 0.02) * share_mib), gpu_util=0.0)
    if kind == "serve":
        if rng.random() < 0.2:  # vLLM without --gpu-memory-utilization grabs ~90% of the whole device
            return TaskUsage(gpu_memory_mib=round(0.9 * device_mib), gpu_util=round(rng.uniform(0.3, 0.7), 2))
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0.6, 0.95) * share_mib), gpu_util=round(rng.uniform(0.15, 0.6), 2))
    if kind == "nb":
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0.1, 0.6) * share_mib), gpu_util=round(rng.uniform(0, 0.15), 2))
    if kind == "train":
        return TaskUsage(gpu_memory_mib=round(rng.uniform(0.6, 0.95) * share_mib), gpu_util=round(rng.uniform(0.8, 0.98), 2))
    return TaskUsage(gpu_memory_mib=round(rng.uniform(0.3, 0.8) * share_mib), gpu_util=round(rng.uniform(0.5, 0.9), 2))


JOB_KINDS = ("train", "batch", "nb", "serve", "etl")


def _kind(job: Job) -> str:
    """The kind of a synthetic job from its name (``llm-train-0003``, also with a suffix such as ``-r2``)."""
    return next((p for p in job.name.split("-") if p in JOB_KINDS), "batch")


# ---------------------------------------------------------------------------------------------- scenario

RUNNING_TARGET = {"llm": 1.45, "vision": 0.4, "analytics": 0.9, "inference": 0.95, "infrastructure": 1.0}
"""Running GPUs per leaf queue at t=0, as a multiple of its GPU quota: LLM borrows, Vision is starved."""


def generate_scenario(seed: int = 0, nodes: int = 64, *, horizon_s: float = 4 * 3600.0,
                      arrivals_per_node_hour: Optional[float] = None, offered_load: float = 1.0,
                      time: float = SCENARIO_TIME, extensions: bool = False) -> Scenario:
    """A busy synthetic cluster of ``nodes`` nodes (8 to 1,000+) at ``time``, and arrivals over ``horizon_s``.

    Arrivals are balanced by default: each leaf queue's jobs arrive at the rate that offers its
    :data:`OFFERED_LOAD` share of the cluster's GPUs (times ``offered_load``) over the long run, so a cluster
    run for days keeps a steady backlog instead of a growing one. ``arrivals_per_node_hour`` instead sets one
    Poisson rate for all queues (weights 3:3:3:3:1), whatever the cluster can complete.

    ``extensions`` adds the snapshot-1.2 pools (:mod:`.synthetic_extensions`: a topology-labelled H100 pool with
    rack-constrained gangs, a MIG-sliced A100 pool, DRA nodes and pods); queue quotas then cover their GPUs too.
    Arrivals never go to them. Off by default: the plain scenario stays exactly as it was.

    Reproducible: the same arguments always give the same scenario.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    rng = random.Random(seed)
    node_list = make_nodes(nodes)
    base_gpus = sum(n.gpus for n in node_list)
    if extensions:
        node_list += extension_nodes()
    total_gpus = sum(n.gpus for n in node_list)
    queues = make_queues(total_gpus)
    qmap = {q.name: q for q in queues}
    pool_gpus: dict[str, int] = {}
    for n in node_list:
        pool_gpus[n.labels["kai.scheduler/node-pool"]] = pool_gpus.get(n.labels["kai.scheduler/node-pool"], 0) + n.gpus
    placer = _Placer(node_list, rng)
    factory = _JobFactory(rng, pool_gpus)
    jobs: list[Job] = []
    node_by_name = {n.name: n for n in node_list}

    # 1. running jobs, queue by queue, until each reaches its target share of its quota
    running_gpus = {q: 0.0 for q in RUNNING_TARGET}
    nonpreemptible = {q: 0.0 for q in RUNNING_TARGET}
    target_total = total_gpus * rng.uniform(0.80, 0.88)
    order = list(RUNNING_TARGET)
    misses = {q: 0 for q in order}
    while order and placer.allocated() < target_total:
        queue = order[rng.randrange(len(order))]
        target = qmap[queue].gpu.quota * RUNNING_TARGET[queue]
        elapsed = rng.uniform(300, 8 * 3600)
        job, pools = factory.for_queue(queue, time - elapsed - rng.uniform(10, 600))
        gpus = sum(t.gpus_on(_min_mem(node_list, pools)) for t in job.tasks)
        np_job = not job.is_preemptible
        over_target = running_gpus[queue] + gpus > target + 1e-9 and gpus > 0
        over_np_quota = np_job and nonpreemptible[queue] + gpus > qmap[queue].gpu.quota
        if over_target or over_np_quota or not placer.place_job(job, pools):
            misses[queue] += 1
            if misses[queue] >= 25:
                order.remove(queue)
            continue
        misses[queue] = 0
        accounted = sum(t.gpus_on(node_by_name[t.node].gpu_memory_mib) for t in job.tasks)
        running_gpus[queue] += accounted
        if np_job:
            nonpreemptible[queue] += accounted
        job.last_start_time = time - elapsed
        job.duration_s = max(job.duration_s or 0, round(elapsed + rng.uniform(600, 6 * 3600)))
        jobs.append(job)

    # 2. pending jobs with varied reasons
    pending_created = lambda: time - rng.uniform(60, 1800)  # noqa: E731 - tiny local helper
    pending: list[Job] = []
    n_extra = max(1, nodes // 16)
    for _ in range(1 + n_extra):  # starved Vision wants training: it may reclaim from borrowing LLM
        pending.append(factory.training("vision", pending_created())[0])
    pending.append(factory.training("llm", pending_created(), big=True)[0])  # a big gang waiting for capacity
    analytics = qmap["analytics"]
    over = max(1, int(analytics.gpu.limit - running_gpus["analytics"]) + 1)  # beyond the queue's limit
    pending.append(factory.sized(factory.batch("analytics", pending_created())[0], over, per_pod=8))
    inf_room = qmap["inference"].gpu.quota - nonpreemptible["inference"]
    np_job, _ = factory.inference("inference", pending_created(), whole=True)  # non-preemptible over quota:
    pending.append(factory.sized(np_job, max(1, math.floor(inf_room) + 1), per_pod=1))  # a multi-replica gang
    for _ in range(1 + n_extra):
        pending.append(factory.inference("inference", pending_created())[0])
        pending.append(factory.notebook(rng.choice(["vision", "analytics"]), pending_created())[0])
    pending.append(factory.cpu_job("infrastructure", pending_created())[0])
    jobs.extend(pending)
    if extensions:  # after the plain scenario's draws, so its jobs stay as they are
        jobs.extend(extension_jobs(time, random.Random(seed * 104729 + 3), PRIORITY["train"], PRIORITY["inference"]))

    # 3. what each running pod really uses
    for job in jobs:
        kind = _kind(job)
        for task in job.tasks:
            if task.node is not None:
                drawn = _usage(job, task, node_by_name[task.node], kind, rng)   # drawn even when unused: the
                task.usage = task.usage or drawn   # stream stays as it was; extension pods come with their own

    # 4. future arrivals: a Poisson stream over the horizon
    arrivals: list[Arrival] = []
    if arrivals_per_node_hour is not None:
        weights = {"llm": 3, "vision": 3, "analytics": 3, "inference": 3, "infrastructure": 1}
        rate_per_s = arrivals_per_node_hour * nodes / 3600.0
    else:
        weights = balanced_rates(base_gpus, pool_gpus, seed, offered_load)
        rate_per_s = sum(weights.values())
    names, w = list(weights), list(weights.values())
    t = rng.expovariate(rate_per_s) if rate_per_s > 0 else horizon_s + 1
    while t <= horizon_s:
        queue = rng.choices(names, weights=w)[0]
        offset = round(t, 1)
        job, _ = factory.for_queue(queue, time + offset)
        arrivals.append(Arrival(offset_s=offset, job=job, duration_s=float(job.duration_s or 0)))
        t += rng.expovariate(rate_per_s)

    snap = Snapshot(nodes=node_list, queues=queues, jobs=jobs, time=time,
                    # KAI's production defaults, like a freshly installed cluster (16 consolidation preemptees)
                    config=SchedulerConfig(placement=PlacementConfig("binpack", "binpack"),
                                           max_consolidation_preemptees=16),
                    topologies=[copy.deepcopy(TOPOLOGY)] if extensions else [])
    return Scenario(snapshot=snap, arrivals=arrivals, seed=seed)


OFFERED_LOAD = {"llm": 0.30, "vision": 0.15, "analytics": 0.09, "inference": 0.14, "infrastructure": 0.04}
"""Long-run GPU demand of each leaf queue's arrivals, as a share of the cluster's GPUs (arrival rate × GPUs ×
run time). 0.72 in all: the cluster stays busy (gangs of up to 64 GPUs and fractions leave some GPUs unusable,
evicted jobs restart from scratch and add load back) and a few jobs wait, and neither the backlog nor the demand
grows as the demo runs for days (at 0.82 the backlog still doubled over 48 simulated hours)."""

BALANCE_SAMPLES = 400
"""Jobs drawn per queue to estimate its mean GPU-seconds per job."""


def balanced_rates(total_gpus: int, pool_gpus: dict[str, int], seed: int = 0,
                   offered_load: float = 1.0) -> dict[str, float]:
    """Arrivals per second for each leaf queue so that it offers its :data:`OFFERED_LOAD` share of
    ``total_gpus`` (Little's law: busy GPUs = rate × mean GPUs × mean run time). The mean is taken over
    :data:`BALANCE_SAMPLES` jobs of the queue's mix from a separate generator (the scenario's own stream is
    untouched)."""
    factory = _JobFactory(random.Random(seed * 7919 + 17), pool_gpus)
    mins = {name: p.gpu_memory_mib for name, p in POOL_BY_NAME.items() if p.gpus}
    rates = {}
    for queue, share in OFFERED_LOAD.items():
        gpu_s = 0.0
        for _ in range(BALANCE_SAMPLES):
            job, pools = factory.for_queue(queue, 0.0)
            mem = min((mins[p] for p in pools if p in mins), default=1.0)
            gpu_s += sum(t.gpus_on(mem) for t in job.tasks) * float(job.duration_s or 0)
        mean = gpu_s / BALANCE_SAMPLES
        rates[queue] = share * offered_load * total_gpus / mean if mean > 0 else 0.0
    return rates


def usage_for(job: Job, task: Task, node: Node) -> Optional[TaskUsage]:
    """What a pod of a synthetic job uses once it runs on ``node``: the same model as the pods running at t=0,
    drawn from a generator seeded by the task's name (the same pod always gets the same usage)."""
    return _usage(job, task, node, _kind(job), random.Random(zlib.crc32(task.name.encode())))


def _min_mem(nodes: list[Node], pools: tuple[str, ...]) -> float:
    mems = [n.gpu_memory_mib for n in nodes if n.gpus and n.labels.get("kai.scheduler/node-pool") in pools]
    return min(mems) if mems else 1.0


__all__ = ["Arrival", "Scenario", "generate_scenario", "pool_sizes", "make_nodes", "make_queues", "balanced_rates",
           "usage_for", "OFFERED_LOAD"]
