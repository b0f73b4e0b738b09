"""Engine scale benchmark: one session (fair share + allocate) on generated clusters.

    python -m bench.engine_scale                 # both sizes, medians over repeated runs
    python -m bench.engine_scale --size small --repeat 30
    python -m bench.engine_scale --size large --repeat 5 --profile
    python -m bench.engine_scale --actions all     # KAI's five actions per session
    python -m bench.engine_scale --size dashboard --actions all   # the dashboard's default 64-node scenario
    python -m bench.engine_scale --size 1k --actions all --kai-tool /path/to/snapshot-tool   # vs KAI's CPU
    python -m bench.engine_scale --size small --topology          # racks + every pending job constrained
    python -m bench.engine_scale --size small --topology gangs    # racks + the gangs need one rack

Sizes (design.md budgets):

- ``small``: 100 nodes × 8 GPUs, 500 pending jobs (mostly 1-GPU, some fractions, 2×2-GPU gangs and CPU
  jobs), 4 leaf queues under 2 departments. Budget ≤ 50 ms; KAI's Go micro-benchmark for 100 nodes / 500
  jobs takes 150–190 ms.
- ``1k``: 1,000 nodes, the ``large`` cluster scaled down (32,500 running pods, 2,270 pending jobs). With
  ``--actions all`` it is the eviction actions' scale check: ``--kai-zip FILE`` writes the same cluster as a KAI
  ``/get-snapshot`` zip so KAI's ``snapshot-tool`` can decide it too (docs/actions.md, *Performance*).
- ``large``: 4,000 nodes × 8 GPUs, 140,000 pods of which 10,000 pending, 50 leaf queues under 10
  departments. Budget ≤ 1 s; KAI reports 1–2.4 s per cycle on a 4,000-node / 140,000-pod snapshot.

The generator is seeded, so every run sees the same cluster. ``session`` = fair share + session open +
allocate (the budgeted work); ``result`` = building the ScheduleResult (decisions for every task and the
after-snapshot), reported separately. ``wall`` and ``cpu`` time the whole call; on a shared machine the
process CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from contextlib import contextmanager

import numpy as np

from scheduler import actions as action_registry
from scheduler.engine import run_session
from scheduler.model import (ACTIONS, Job, Node, Queue, QueueResource, Snapshot, Task, Topology, TopologyConstraint,
                             TopologyLevel)

GiB = 2**30


def _queues(departments: int, teams: int) -> list[Queue]:
    out = []
    for d in range(departments):
        dept = f"dept-{d}"
        out.append(Queue(name=dept, creation_time=d, gpu=QueueResource(quota=0, limit=-1),
                         cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1)))
        for t in range(teams):
            out.append(Queue(name=f"{dept}-team-{t}", parent=dept, creation_time=100 + d * teams + t,
                             gpu=QueueResource(quota=0, limit=-1, over_quota_weight=1 + t % 3),
                             cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1)))
    return out


def _nodes(count: int) -> list[Node]:
    return [Node(name=f"node-{i:05d}", gpus=8, gpu_memory_mib=81920, cpu_millis=128000, memory_bytes=1024 * GiB,
                 pods=110, gpu_model="H100") for i in range(count)]


def _pending_job(rng, k: int, leaves: list[str], now: float) -> Job:
    queue = leaves[k % len(leaves)]
    r = rng.random()
    name = f"pend-{k:06d}"
    ct = now - 3600 + k * 0.1
    if r < 0.70:
        tasks = [Task(name=f"{name}-0", gpu=1, cpu_millis=4000, memory_bytes=32 * GiB)]
        return Job(name=name, queue=queue, creation_time=ct, tasks=tasks)
    if r < 0.80:
        tasks = [Task(name=f"{name}-0", gpu=0.5, cpu_millis=2000, memory_bytes=16 * GiB)]
        return Job(name=name, queue=queue, creation_time=ct, tasks=tasks)
    if r < 0.90:
        tasks = [Task(name=f"{name}-{i}", gpu=2, cpu_millis=8000, memory_bytes=64 * GiB) for i in range(2)]
        return Job(name=name, queue=queue, creation_time=ct, min_available=2, tasks=tasks)
    tasks = [Task(name=f"{name}-0", cpu_millis=2000, memory_bytes=8 * GiB)]
    return Job(name=name, queue=queue, creation_time=ct, tasks=tasks)


def make_cluster(nodes: int, running_pods: int, pending_jobs: int, departments: int, teams: int,
                 seed: int = 7) -> Snapshot:
    """A seeded synthetic cluster: ``running_pods`` spread over the nodes (whole GPUs, fractions on shared
    GPUs, CPU pods; some multi-pod gangs), and ``pending_jobs`` new jobs."""
    rng = np.random.default_rng(seed)
    now = 1_767_225_600.0
    queues = _queues(departments, teams)
    leaves = [q.name for q in queues if q.parent]
    node_list = _nodes(nodes)
    jobs: list[Job] = []
    k = 0
    for idx, n in enumerate(node_list if running_pods else []):
        target = running_pods * (idx + 1) // nodes - running_pods * idx // nodes
        # GPU use on this node: a few whole-GPU pods, maybe one shared GPU with fractions, the rest CPU pods.
        whole = int(rng.integers(3, 8))
        shared = 1 if rng.random() < 0.5 and whole < 8 else 0
        n_frac = 2 if shared else 0
        n_cpu = max(0, target - whole - n_frac + int(rng.integers(-2, 3)))
        idx = 0
        for _ in range(whole):
            q = leaves[k % len(leaves)]
            jobs.append(Job(name=f"run-{k:07d}", queue=q, creation_time=now - 86400, last_start_time=now - 80000,
                            tasks=[Task(name=f"run-{k:07d}-0", gpu=1, cpu_millis=4000, memory_bytes=32 * GiB,
                                        status="running", node=n.name)]))
            k += 1
            idx += 1
        for f in range(n_frac):
            q = leaves[k % len(leaves)]
            jobs.append(Job(name=f"run-{k:07d}", queue=q, creation_time=now - 86400,
                            tasks=[Task(name=f"run-{k:07d}-0", gpu=0.25, cpu_millis=1000, memory_bytes=8 * GiB,
                                        status="running", node=n.name, gpu_groups=[f"{n.name}-g7"],
                                        gpu_indices=[7])]))
            k += 1
        for _ in range(n_cpu):
            q = leaves[k % len(leaves)]
            jobs.append(Job(name=f"run-{k:07d}", queue=q, creation_time=now - 86400,
                            tasks=[Task(name=f"run-{k:07d}-0", cpu_millis=500, memory_bytes=2 * GiB,
                                        status="running", node=n.name)]))
            k += 1
    for p in range(pending_jobs):
        jobs.append(_pending_job(rng, p, leaves, now))
    return Snapshot(nodes=node_list, queues=queues, jobs=jobs, time=now)


SIZES = {
    "small": dict(nodes=100, running_pods=0, pending_jobs=500, departments=2, teams=2),
    "1k": dict(nodes=1000, running_pods=32_500, pending_jobs=2_270, departments=10, teams=5),
    "large": dict(nodes=4000, running_pods=130_000, pending_jobs=9_090, departments=10, teams=5),
}


def dashboard_cluster():
    """The dashboard's default scenario: ``generate_scenario(seed=7, nodes=64)`` at t = 0 (dashboard/options.py)."""
    from scheduler.sources.synthetic import generate_scenario

    return generate_scenario(seed=7, nodes=64).snapshot


def with_gpu_placement(snap: Snapshot, strategy: str) -> Snapshot:
    """``snap`` with ``config.placement.gpu = strategy`` (e.g. ``fragaware``), through the snapshot format."""
    from scheduler.snapshot_io import snapshot_from_dict, snapshot_to_dict

    doc = snapshot_to_dict(snap)
    doc.setdefault("config", {}).setdefault("placement", {})["gpu"] = strategy
    return snapshot_from_dict(doc)


@contextmanager
def action_cpu_ms(into: dict):
    """Record each action's process CPU time (ms) in ``into`` while the block runs (the engine's own
    ``timings_ms`` are wall clock, inflated on a loaded machine)."""
    action_registry._load()
    saved = dict(action_registry._REGISTRY)

    def timed(name, fn):
        def run(session):
            c0 = time.process_time()
            try:
                fn(session)
            finally:
                into[f"cpu_{name}"] = (time.process_time() - c0) * 1e3
        return run

    for name, fn in saved.items():
        action_registry._REGISTRY[name] = timed(name, fn)
    try:
        yield into
    finally:
        action_registry._REGISTRY.clear()
        action_registry._REGISTRY.update(saved)


def kai_session_cpu_ms(snap: Snapshot, tool: str, repeat: int) -> list[float]:
    """CPU time (user + system, ms) of KAI's ``snapshot-tool`` deciding ``snap`` exported as a KAI
    ``/get-snapshot`` zip, one figure per run. The tool loads the zip, opens a session and runs the
    snapshot's action list (its own log at verbosity 0)."""
    from scheduler.sources.kai_export import write_kai_zip

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cluster.zip")
        write_kai_zip(snap, path)
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([tool, "--filename", path, "--verbosity", "0"], capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise SystemExit(f"{tool} failed on the exported zip: {proc.stderr[-2000:]}")
            out.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1e3)
    return out


def with_topology(snap: Snapshot, rack_nodes: int = 8, racks_per_zone: int = 4, jobs: str = "all") -> Snapshot:
    """``snap`` with a zone → rack → hostname ``Topology`` (``rack_nodes`` nodes per rack) and a constraint on
    the pending jobs: gangs need one rack; with ``jobs="all"`` single pods prefer one too (KAI's topology plugin
    on every job, the worst case), with ``"gangs"`` they have none."""
    snap = snap.copy()
    for i, n in enumerate(snap.nodes):
        rack = i // rack_nodes
        n.labels = {**n.labels, "topology.kubernetes.io/zone": f"z{rack // racks_per_zone}",
                    "example.com/rack": f"r{rack}", "kubernetes.io/hostname": n.name}
    snap.topologies = [Topology(name="net", levels=[TopologyLevel("topology.kubernetes.io/zone", "zone"),
                                                    TopologyLevel("example.com/rack", "rack"),
                                                    TopologyLevel("kubernetes.io/hostname")])]
    for job in snap.jobs:
        if not any(t.status == "pending" for t in job.tasks):
            continue
        if job.min_available > 1:
            job.topology = TopologyConstraint("net", required_level="rack")
        elif jobs == "all":
            job.topology = TopologyConstraint("net", preferred_level="rack")
    return snap


def bench(size: str, repeat: int, profile: bool = False, actions: tuple = ("allocate",),
          placement_gpu: str | None = None, topology: str | None = None, kai_tool: str | None = None,
          kai_zip: str | None = None) -> dict:
    snap = dashboard_cluster() if size == "dashboard" else make_cluster(**SIZES[size])
    if topology:
        snap = with_topology(snap, jobs=topology)
    if placement_gpu:
        snap = with_gpu_placement(snap, placement_gpu)
    actions = list(actions)
    snap.config.actions = actions
    if kai_zip:
        from scheduler.sources.kai_export import write_kai_zip

        write_kai_zip(snap, kai_zip)
    pods = sum(len(j.tasks) for j in snap.jobs)
    pending = sum(1 for _, t in snap.iter_tasks() if t.status == "pending")
    runs = []
    result = None
    for _ in range(repeat):
        cpu_by_action: dict = {}
        with action_cpu_ms(cpu_by_action):
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_session(snap, actions)
            wall = (time.perf_counter() - t0) * 1e3
            cpu = (time.process_time() - c0) * 1e3
        runs.append(dict(result.timings_ms, wall=wall, cpu=cpu, **cpu_by_action))
    placed = sum(1 for d in result.tasks.values() if d.status in ("binding", "pipelined")) - \
        sum(1 for _, t in snap.iter_tasks() if t.status in ("binding", "pipelined"))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\n{size}: {len(snap.nodes)} nodes × 8 GPUs, {pods} pods ({pending} pending tasks in "
          f"{sum(1 for j in snap.jobs if any(t.status == 'pending' for t in j.tasks))} jobs), "
          f"{len(snap.queues)} queues; actions {','.join(actions)}; placement.gpu "
          f"{snap.config.placement.gpu}; topology {topology or 'off'}; {placed} tasks placed; "
          f"median of {repeat} runs:")
    for key in ("fair_share", "session_open", *actions, "session", "result", "total", "wall", "cpu",
                *(f"cpu_{a}" for a in actions)):
        if key in med:
            print(f"  {key:<18} {med[key]:9.1f} ms")
    if kai_tool:
        kai = kai_session_cpu_ms(snap, kai_tool, max(1, min(repeat, 5)))
        med["kai_cpu"] = statistics.median(kai)
        print(f"  KAI snapshot-tool, whole session, process CPU: median {med['kai_cpu']:.1f} ms of {len(kai)} runs")
        for a in ("consolidation",):
            if f"cpu_{a}" in med:
                print(f"  kaidash {a} CPU / KAI session CPU: {med[f'cpu_{a}'] / med['kai_cpu']:.3f}")
    if profile:
        import cProfile
        import pstats
        cProfile.runctx("run_session(snap, actions)", globals(),
                        {"snap": snap, "run_session": run_session, "actions": actions},
                        "/tmp/engine_scale.prof")
        pstats.Stats("/tmp/engine_scale.prof").sort_stats("cumulative").print_stats(25)
    return med


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("small", "1k", "large", "both", "dashboard"), default="both",
                        help="'dashboard' = the dashboard's default 64-node synthetic scenario")
    parser.add_argument("--repeat", type=int, default=0, help="runs per size (default 20 small, 5 large)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    parser.add_argument("--actions", default="allocate",
                        help="comma-separated actions per session (default allocate, the budgeted work; "
                             "'all' = KAI's five)")
    parser.add_argument("--kai-tool", default=None, metavar="BIN",
                        help="also time KAI's snapshot-tool (process CPU) on the same cluster as a KAI zip")
    parser.add_argument("--kai-zip", default=None, metavar="FILE",
                        help="write the cluster (with the --actions list) as a KAI /get-snapshot zip")
    parser.add_argument("--placement-gpu", default=None,
                        help="override config.placement.gpu (binpack, spread, fragaware)")
    parser.add_argument("--topology", nargs="?", const="all", choices=("all", "gangs"), default=None,
                        help="label racks and zones; 'all' (default): every pending job has a topology constraint "
                             "(gangs required rack, single pods preferred rack), 'gangs': only the gangs")
    args = parser.parse_args(argv)
    actions = tuple(ACTIONS) if args.actions == "all" else tuple(a for a in args.actions.split(",") if a)
    for size in (("small", "large") if args.size == "both" else (args.size,)):
        bench(size, args.repeat or (5 if size in ("large", "1k") else 20), args.profile, actions, args.placement_gpu,
              args.topology, args.kai_tool, args.kai_zip)


if __name__ == "__main__":
    main()
