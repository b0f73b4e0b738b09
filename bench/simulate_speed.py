"""Simulator speed: hours of simulated time on a 64-node x 8-GPU cluster (issue 3: "in seconds").

Builds a deterministic workload (or, with ``--scenario SEED``, the synthetic generator's): four leaf queues in
two departments, Poisson arrivals of whole-GPU gangs and fractional jobs whose demand exceeds the cluster at
times (so queues borrow and, with reclaim enabled, take GPUs back), durations from minutes to hours. Runs the
simulator with fast-forward (the default) and, with ``--compare``, with every cycle executed, and prints wall
time, cycles run/skipped, session time and the per-queue summary.

Run: ``python bench/simulate_speed.py [--hours 4] [--period 10] [--nodes 64] [--seed 1] [--compare]``;
``--live --period 1 --hours 24`` drives ``step()`` as the dashboard's live loop does and prints memory (RSS and
record sizes) every 4 simulated hours, to show it stays bounded.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.model import Job, Node, Queue, QueueResource, SchedulerConfig, Snapshot, Task  # noqa: E402
from scheduler.simulate import Simulator, UsageConfig  # noqa: E402
from scheduler.simulate.summary import queue_summary, time_weights  # noqa: E402


def make_queue(name, parent, created, gpu_quota, weight):
    """A queue with a GPU quota and over-quota weight; CPU and memory unlimited (quota -1)."""
    return Queue(name, parent=parent, creation_time=created, gpu=QueueResource(gpu_quota, -1, weight),
                 cpu=QueueResource(-1, -1, 1), memory=QueueResource(-1, -1, 1))


def workload(nodes: int = 64, hours: float = 4.0, seed: int = 1, start: float = 1_767_225_600.0):
    """``(snapshot, arrivals)``: an empty cluster and a Poisson stream of jobs over ``hours``."""
    rng = random.Random(seed)
    gpus = nodes * 8
    snap = Snapshot(
        nodes=[Node(f"node-{i:03d}", gpus=8, gpu_memory_mib=81920, cpu_millis=192_000, memory_bytes=2 * 2**40)
               for i in range(nodes)],
        queues=[make_queue("research", None, 1, gpus * 0.5, 2), make_queue("prod", None, 2, gpus * 0.5, 1),
                make_queue("llm", "research", 3, gpus * 0.3, 1), make_queue("vision", "research", 4, gpus * 0.2, 1),
                make_queue("serving", "prod", 5, gpus * 0.3, 1), make_queue("batch", "prod", 6, gpus * 0.2, 1)],
        config=SchedulerConfig(schedule_period_s=10.0), time=start)
    leaves = ["llm", "vision", "serving", "batch"]
    # mean arrival rate: offered load about 1.5x the cluster in steady state
    shapes = [(1, 1, 0.35), (2, 1, 0.2), (8, 1, 0.15), (8, 2, 0.1), (8, 4, 0.05), (0.5, 1, 0.15)]
    mean_gpus = sum(g * n * p for g, n, p in shapes)
    mean_duration = 3600.0
    rate = 1.5 * gpus / (mean_gpus * mean_duration)
    arrivals, t, k = [], 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t > hours * 3600:
            break
        g, n, _ = rng.choices(shapes, weights=[s[2] for s in shapes])[0]
        queue = rng.choice(leaves)
        duration = min(8 * 3600.0, rng.lognormvariate(7.6, 1.0))      # median ~33 min, mean ~55 min
        tasks = [Task(f"job-{k:05d}-{i}", gpu=g, cpu_millis=4000 * max(g, 1), memory_bytes=16 * 2**30)
                 for i in range(n)]
        priority = 50 if queue != "serving" else 100
        arrivals.append((t, Job(f"job-{k:05d}", queue=queue, priority=priority, min_available=n,
                                duration_s=duration, tasks=tasks)))
        k += 1
    return snap, arrivals


def scenario(seed: int, nodes: int, hours: float):
    from scheduler.sources.synthetic import generate_scenario
    sc = generate_scenario(seed, nodes=nodes, horizon_s=hours * 3600.0)
    return sc.snapshot, list(sc.arrivals)


def run_once(snap, arrivals, hours, period, fast_forward, trace_memory=False):
    if trace_memory:
        tracemalloc.start()
    started = time.perf_counter()
    sim = Simulator(snap, arrivals, period_s=period, usage=UsageConfig(), fast_forward=fast_forward)
    sim.run(hours * 3600)
    wall = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] if trace_memory else 0
    if trace_memory:
        tracemalloc.stop()
    frames = sim.frames()
    session_ms = frames["cluster"]["session_ms"]
    return sim, frames, wall, peak, session_ms


def rss_mib() -> float:
    """Resident memory of this process (Linux /proc), MiB."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def live(snap, arrivals, hours, period, checkpoint_h=4.0, max_ticks=86_400):
    """The dashboard's live loop: ``step()`` every period for ``hours``; RSS and record sizes at checkpoints."""
    sim = Simulator(snap, arrivals, period_s=period, max_ticks=max_ticks)
    end = sim.start_time + hours * 3600
    next_check = sim.start_time
    started = time.perf_counter()
    print(f"\n[live step() every {period:g} s for {hours:g} h, max_ticks {max_ticks}]")
    while sim.next_cycle_time() <= end:
        t = sim.step().time
        if t >= next_check:
            rec = sim.recorder
            print(f"  {(t - sim.start_time) / 3600:5.1f} h: wall {time.perf_counter() - started:6.1f} s, "
                  f"RSS {rss_mib():6.1f} MiB, sessions {sim.cycles_run}, records "
                  f"{(rec.times.nbytes + rec.queues.nbytes + rec.cluster.nbytes) / 2**20:.1f} MiB in "
                  f"{len(rec.times)} ticks, live jobs {len(sim.snapshot.jobs)}, events queued {len(sim.events)}")
            next_check += checkpoint_h * 3600
    print(f"  done: {sim.cycles_run} sessions, {sim.cycles_skipped} steps without a session, "
          f"wall {time.perf_counter() - started:.1f} s")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", type=float, default=4.0)
    p.add_argument("--period", type=float, default=10.0)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scenario", type=int, metavar="SEED", help="use the synthetic generator instead")
    p.add_argument("--compare", action="store_true", help="also run with every cycle executed")
    p.add_argument("--memory", action="store_true", help="trace peak Python memory (slows the run)")
    p.add_argument("--live", action="store_true",
                   help="instead: the live loop, step() every --period for --hours (try --period 1 --hours 24)")
    args = p.parse_args(argv)

    snap, arrivals = (scenario(args.scenario, args.nodes, args.hours) if args.scenario is not None
                      else workload(args.nodes, args.hours, args.seed))
    if args.live:
        live(snap, arrivals, args.hours, args.period)
        return 0
    grid = int(args.hours * 3600 / args.period) + 1
    print(f"{len(snap.nodes)} nodes, {sum(n.gpus for n in snap.nodes)} GPUs, {len(arrivals)} arrivals, "
          f"{args.hours:g} h at {args.period:g} s = {grid} cycles on the grid")
    for ff in ([True, False] if args.compare else [True]):
        sim, frames, wall, peak, session_ms = run_once(snap, arrivals, args.hours, args.period, ff, args.memory)
        label = "fast-forward" if ff else "every cycle"
        print(f"\n[{label}] wall {wall:.2f} s; {sim.cycles_run} sessions run, {sim.cycles_skipped} skipped; "
              f"session median {session_ms.median():.1f} ms, p95 {session_ms.quantile(0.95):.1f} ms, "
              f"sum {session_ms.sum() / 1000:.2f} s; simulator overhead {wall - session_ms.sum() / 1000:.2f} s"
              + (f"; peak traced memory {peak / 2**20:.1f} MiB" if args.memory else ""))
        c = frames["cluster"]
        w = time_weights(c["time"].to_numpy(), sim.time)
        print(f"  arrived {sim.arrived_total}, completed {sim.completed_total}, evicted tasks "
              f"{sim.evicted_total}, time-weighted GPU allocation "
              f"{(c['gpu_utilisation'].to_numpy() * w).sum() / w.sum():.1%}")
        print(queue_summary(frames, sim.time).round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
