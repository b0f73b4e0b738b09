"""Reclaim at scale: KAI's ``BenchmarkReclaimManySingleGPUJobsFullCycle_500Node`` topology, one session.

    python -m bench.reclaim_scale                  # 500 nodes × 8 GPUs, medians of 5 runs
    python -m bench.reclaim_scale --nodes 100 --repeat 9
    python -m bench.reclaim_scale --profile

Topology (``pkg/scheduler/actions/integration_tests/reclaim/reclaim_many_single_gpu_topology_test.go``): N
nodes with 8 GPUs; queue ``running`` (deserved 0, over-quota weight 0) runs 8·N single-GPU jobs (node i % N);
queue ``pending`` (deserved 8·N) has 8·N pending single-GPU jobs. Each task asks for 1 CPU core and 1 GB as
KAI's test harness does. One session runs KAI's five actions; the expected outcome (checked) is KAI's: every
running job evicted, every pending job pipelined — 4,000 reclaims at 500 nodes. KAI's Go benchmark takes
about 9 s per cycle for this; our budget is ≤ 1 s for the session.

Reported: medians of ``session`` (fair share + open + all actions) and of each action, wall and process CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

from scheduler.engine import run_session
from scheduler.model import Job, Node, Queue, QueueResource, Snapshot, Task


def make_snapshot(nodes: int = 500, gpus: int = 8) -> Snapshot:
    """KAI's many-single-GPU-jobs reclaim topology."""
    n = nodes * gpus
    node_list = [Node(name=f"node{i}", gpus=gpus, gpu_memory_mib=81920, cpu_millis=20_000_000,
                      memory_bytes=20e9, pods=110) for i in range(nodes)]
    queues = [Queue(name="running", creation_time=0, gpu=QueueResource(quota=0, over_quota_weight=0),
                    cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1)),
              Queue(name="pending", creation_time=60, gpu=QueueResource(quota=n, over_quota_weight=0),
                    cpu=QueueResource(quota=-1), memory=QueueResource(quota=-1))]
    now = 10 * n
    jobs = [Job(name=f"running-{i}", queue="running", creation_time=i, last_start_time=now - 60,
                tasks=[Task(name=f"running-{i}-0", gpu=1, cpu_millis=1000, memory_bytes=1e9, status="running",
                            node=f"node{i % nodes}")]) for i in range(n)]
    jobs += [Job(name=f"pending-{i}", queue="pending", creation_time=n + i,
                 tasks=[Task(name=f"pending-{i}-0", gpu=1, cpu_millis=1000, memory_bytes=1e9)]) for i in range(n)]
    return Snapshot(nodes=node_list, queues=queues, jobs=jobs, time=now)


def check(result, n: int) -> None:
    out = result.to_contract()["tasks"]
    evicted = sum(1 for k in range(n) if out[f"running-{k}-0"]["status"] == "releasing")
    pipelined = sum(1 for k in range(n) if out[f"pending-{k}-0"]["status"] == "pipelined")
    assert evicted == n and pipelined == n, (evicted, pipelined)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    snap = make_snapshot(args.nodes)
    n = args.nodes * 8
    if args.profile:
        import cProfile
        import pstats
        cProfile.runctx("run_session(snap)", globals(), {"snap": snap, "run_session": run_session}, "/tmp/reclaim.prof")
        pstats.Stats("/tmp/reclaim.prof").sort_stats("cumtime").print_stats(30)
        return
    walls, cpus, parts = [], [], {}
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        result = run_session(snap)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        for k, v in result.timings_ms.items():
            parts.setdefault(k, []).append(v)
        check(result, n)
    base_cpus = []
    for _ in range(args.repeat):  # the same session without reclaim (nothing else changes): reclaim's CPU share
        c0 = time.process_time()
        run_session(snap, ["allocate", "consolidation", "preempt", "stalegangeviction"])
        base_cpus.append(time.process_time() - c0)
    print(f"reclaim_scale: {args.nodes} nodes x 8 GPUs, {n} running + {n} pending single-GPU jobs, "
          f"{len(result.evicted)} evictions per session, {args.repeat} runs")
    print(f"  session wall median {statistics.median(walls) * 1e3:.0f} ms, process CPU median "
          f"{statistics.median(cpus) * 1e3:.0f} ms (without reclaim: {statistics.median(base_cpus) * 1e3:.0f} ms)")
    print("  per-action wall medians (inflated when other processes share the CPUs):")
    for k in ("fair_share", "session_open", "allocate", "consolidation", "reclaim", "preempt", "stalegangeviction",
              "session", "result"):
        if k in parts:
            print(f"  {k:18s} median {statistics.median(parts[k]):8.1f} ms")


if __name__ == "__main__":
    main()
