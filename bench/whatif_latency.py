"""What-if latency: slider move -> re-placed diff on a 64-node cluster (budget 300 ms, design.md).

Builds a deterministic 64 x 8-GPU cluster (two pools, two departments with two teams each, a mix of whole-GPU
gangs and fractional jobs, some running and some pending), then times, with the base side cached as the dashboard
does (:class:`scheduler.whatif.WhatIfRunner`):

- each kind of override (queue quota, limit, weight, priority, add/remove nodes, placement, k-value, demand
  scale) -> ``WhatIfRunner.run`` (modified side to steady state, diff), and the time to the first cycle's
  interim diff (what the dashboard shows first, ``on_cycle``; the final diff when one cycle settles it);
- ``explain_pending`` on the base session (per-job counterfactual search, budget 200 ms per job).

Run: ``python bench/whatif_latency.py [--repeat 7] [--cycles 10]``. Prints medians in ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task  # noqa: E402
from scheduler.whatif import WhatIf, WhatIfRunner, run_to_steady_state  # noqa: E402


def cluster_64(seed: int = 7, pending_jobs: int = 120) -> Snapshot:
    rng = random.Random(seed)
    nodes = []
    for i in range(64):
        pool = "h100" if i < 48 else "l40s"
        nodes.append(Node(name=f"{pool}-{i:02d}", gpus=8, gpu_memory_mib=81920 if pool == "h100" else 46068,
                          gpu_model=pool.upper(), cpu_millis=192000, memory_bytes=2 * 2**40,
                          labels={"kai.scheduler/node-pool": pool}))
    queues = [Queue("research", creation_time=1, gpu=QueueResource(256, -1, 2)),
              Queue("prod", creation_time=2, gpu=QueueResource(192, -1, 1)),
              Queue("llm", parent="research", creation_time=3, gpu=QueueResource(160, 320, 1)),
              Queue("vision", parent="research", creation_time=4, gpu=QueueResource(96, -1, 1)),
              Queue("serving", parent="prod", creation_time=5, gpu=QueueResource(128, -1, 1)),
              Queue("batch", parent="prod", creation_time=6, gpu=QueueResource(64, -1, 3))]
    leaves = ["llm", "vision", "serving", "batch"]
    jobs: list[Job] = []
    # Running: fill ~75% of the cluster node by node, device by device.
    gpu_free = {n.name: list(range(8)) for n in nodes}
    names = [n.name for n in nodes]
    jid = 0
    for name in names:
        while len(gpu_free[name]) > 2:
            k = rng.choice([1, 2, 4]) if len(gpu_free[name]) >= 4 else 1
            devs = [gpu_free[name].pop(0) for _ in range(k)]
            q = rng.choice(leaves)
            jobs.append(Job(name=f"run-{jid}", queue=q, priority=rng.choice([50, 50, 75, 125]),
                            creation_time=1000 + jid, last_start_time=2000 + jid,
                            tasks=[Task(f"run-{jid}-0", gpu=k, cpu_millis=8000 * k, memory_bytes=64 * 2**30 * k,
                                        status="running", node=name, gpu_indices=devs)]))
            jid += 1
    # Pending: gangs of whole GPUs and fractional inference pods.
    for p in range(pending_jobs):
        q = leaves[p % 4]
        if p % 3 == 0:
            tasks = [Task(f"pend-{p}-0", gpu=rng.choice([0.25, 0.5]), cpu_millis=2000, memory_bytes=16 * 2**30)]
            jobs.append(Job(name=f"pend-{p}", queue=q, creation_time=5000 + p, tasks=tasks))
        else:
            size = rng.choice([1, 2, 4, 8])
            width = rng.choice([1, 1, 2])
            tasks = [Task(f"pend-{p}-{t}", gpu=size, cpu_millis=8000 * size, memory_bytes=64 * 2**30 * size)
                     for t in range(width)]
            jobs.append(Job(name=f"pend-{p}", queue=q, creation_time=5000 + p, min_available=width, tasks=tasks))
    return Snapshot(nodes=nodes, queues=queues, jobs=jobs, time=10_000)


SLIDERS = {
    "queue quota": WhatIf(queues={"vision": {"gpu": {"quota": 160}}}),
    "queue limit": WhatIf(queues={"llm": {"gpu": {"limit": 200}}}),
    "over-quota weight": WhatIf(queues={"batch": {"gpu": {"over_quota_weight": 1}}}),
    "queue priority": WhatIf(queues={"prod": {"priority": 200}}),
    "add 8 nodes": WhatIf(nodes={"h100": 8}),
    "remove 8 nodes": WhatIf(nodes={"l40s": -8}),
    "placement spread": WhatIf(placement_gpu="spread"),
    "k-value 3": WhatIf(k_value=3.0),
    "demand x1.5": WhatIf(demand_scale=1.5),
}


def median_ms(fn, repeat: int, cpu: bool = False) -> float:
    """Median wall time of ``fn`` in ms (process CPU time with ``cpu``: steadier on a shared machine)."""
    clock = time.process_time if cpu else time.perf_counter
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append((clock() - t0) * 1000)
    return statistics.median(times)


def first_diff_ms(runner: WhatIfRunner, overrides: WhatIf, repeat: int, cpu: bool = False) -> float:
    """Median ms from ``runner.run`` called to its first interim diff (or its result, when one cycle settles)."""
    clock = time.process_time if cpu else time.perf_counter

    class First(Exception):
        pass

    def stop(progress) -> None:
        if progress.diff is not None:
            raise First

    times = []
    for _ in range(repeat):
        t0 = clock()
        try:
            runner.run(overrides, on_cycle=stop)
        except First:
            pass
        times.append((clock() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--sliders", default=None,
                    help="comma-separated slider labels to time (default all), e.g. 'queue priority,queue quota'")
    ap.add_argument("--cpu", action="store_true", help="report process CPU time instead of wall time")
    args = ap.parse_args()
    snap = cluster_64()
    n_tasks = sum(len(j.tasks) for j in snap.jobs)
    print(f"cluster: {len(snap.nodes)} nodes x 8 GPUs, {len(snap.jobs)} jobs, {n_tasks} tasks")

    base_ms = median_ms(lambda: run_to_steady_state(snap, args.cycles), args.repeat, args.cpu)
    base = run_to_steady_state(snap, args.cycles)
    print(f"base to steady state: {base_ms:.1f} ms median ({base.cycles_run} cycles)")

    runner = WhatIfRunner(snap, args.cycles)
    runner.base  # cached once, as the dashboard does
    results = {}
    chosen = None if args.sliders is None else {x.strip() for x in args.sliders.split(",")}
    for label, w in SLIDERS.items():
        if chosen is not None and label not in chosen:
            continue
        results[label] = median_ms(lambda: runner.run(w), args.repeat, args.cpu)
        first = first_diff_ms(runner, w, args.repeat, args.cpu)
        diff = runner.run(w)
        print(f"{label:>18}: {results[label]:7.1f} ms median, first diff {first:7.1f} ms  "
              f"(cycles {diff.after.cycles_run}, "
              f"GPU util {diff.before.gpu_utilisation:.3f} -> {diff.after.gpu_utilisation:.3f}, "
              f"pending {sum(diff.before.pending.values())} -> {sum(diff.after.pending.values())})")
    print(f"slider -> diff, median over sliders: {statistics.median(results.values()):.1f} ms; "
          f"worst slider {max(results.values()):.1f} ms (budget 300 ms)")

    if chosen is not None:
        return 0
    from scheduler.engine import run_session
    from scheduler.explain import explain_pending

    result = run_session(snap)
    t0 = time.perf_counter()
    exps = explain_pending(snap, result)
    total = (time.perf_counter() - t0) * 1000
    per_job = [e.search_ms for e in exps]
    if per_job:
        kinds = {}
        for e in exps:
            k = e.counterfactual.kind if e.counterfactual else "none"
            kinds[k] = kinds.get(k, 0) + 1
        print(f"explain_pending: {len(exps)} waiting jobs in {total:.0f} ms; per job median "
              f"{statistics.median(per_job):.1f} ms, max {max(per_job):.1f} ms (budget 200 ms); kinds {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
