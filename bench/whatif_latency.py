"""What-if latency: slider move -> re-placed diff on a 64-node cluster (budget 300 ms, design.md).

Builds a deterministic 64 x 8-GPU cluster (two pools, two departments with two teams each, a mix of whole-GPU
gangs and fractional jobs, some running and some pending), then times, with the base side cached as the dashboard
does (:class:`scheduler.whatif.WhatIfRunner`):

- each kind of override (queue quota, limit, weight, priority, add/remove nodes, placement, k-value, demand
  scale) -> ``WhatIfRunner.run`` (modified side to steady state, diff), and the time to the first cycle's
  interim diff (what the dashboard shows first, ``on_cycle``; the final diff when one cycle settles it);
- ``explain_pending`` on the base session (per-job counterfactual search, budget 200 ms per job).

Run: ``python bench/whatif_latency.py [--repeat 7] [--cycles 10]``. Prints medians in ms.

``--demo`` times instead what a user of ``kaidash serve`` meets: the served demo (the simulated 64-node cluster,
seed 7) is run forward by its own loop, and at several ticks every queue gets each slider move (priority +100
and -50, GPU quota x2, /2 and 0; each computed once, the base cached); it prints the median, p90 and worst per
move, and the worst case's tick and queue.
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


DEMO_MOVES = {
    "priority +100": lambda q: {"priority": q.priority + 100},
    "priority -50": lambda q: {"priority": max(0, q.priority - 50)},
    "quota x2": lambda q: {"gpu": {"quota": q.gpu.quota * 2}},
    "quota /2": lambda q: {"gpu": {"quota": q.gpu.quota / 2}},
    "quota 0": lambda q: {"gpu": {"quota": 0}},
}
"""The demo sweep's slider moves, per queue (``--demo``)."""


def demo_sweep(ticks: list[int], cycles: int, cpu: bool = False) -> int:
    """Time every :data:`DEMO_MOVES` move on every queue of the served demo's state at each of ``ticks``."""
    from dashboard.feeds import make_feed
    from dashboard.options import SourceOptions
    from scheduler.engine import run_session

    clock = time.process_time if cpu else time.perf_counter
    feed = make_feed(SourceOptions(source="sim", nodes=64, seed=7))
    done = 0
    times: dict[str, list[float]] = {m: [] for m in DEMO_MOVES}
    worst: dict[str, tuple] = {}
    slow: list[str] = []
    for tick in sorted(ticks):
        while done < tick:
            snap, _ = feed.tick(run_session)
            done += 1
        runner = WhatIfRunner(snap, cycles)
        runner.base
        for q in snap.queues:
            for move, change in DEMO_MOVES.items():
                t0 = clock()
                diff = runner.run(WhatIf(queues={q.name: change(q)}))
                ms = (clock() - t0) * 1000
                times[move].append(ms)
                if ms > 300:
                    slow.append(f"{move} on {q.name} at tick {tick}: {ms:.0f} ms, {diff.after.cycles_run} cycles")
                if ms > worst.get(move, (-1.0,))[0]:
                    worst[move] = (ms, tick, q.name, diff.after.cycles_run)
    print(f"served demo (64 nodes, seed 7) at ticks {', '.join(map(str, sorted(ticks)))}: "
          f"each move on each queue, to steady state")
    for move, ms in times.items():
        ms.sort()
        w_ms, w_tick, w_queue, w_cycles = worst[move]
        print(f"{move:>14}: n={len(ms)}  median {statistics.median(ms):7.1f} ms  "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:7.1f} ms  worst {w_ms:7.1f} ms "
              f"(tick {w_tick}, queue {w_queue}, {w_cycles} cycles)")
    every = sorted(x for ms in times.values() for x in ms)
    over = sum(1 for x in every if x > 300)
    print(f"all moves: median {statistics.median(every):.1f} ms; {over} of {len(every)} over 300 ms"
          + "".join(f"\n  over: {line}" for line in slow))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--sliders", default=None,
                    help="comma-separated slider labels to time (default all), e.g. 'queue priority,queue quota'")
    ap.add_argument("--cpu", action="store_true", help="report process CPU time instead of wall time")
    ap.add_argument("--demo", action="store_true",
                    help="time slider moves on the served demo's state instead (see the module doc)")
    ap.add_argument("--ticks", default="10,30,60,120,240", help="--demo: the demo ticks to sweep at")
    args = ap.parse_args()
    if args.demo:
        return demo_sweep([int(x) for x in args.ticks.split(",")], args.cycles, args.cpu)
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
