"""Fair-share benchmark: ``queue_demand`` and ``compute_fair_share`` on the engine-scale clusters.

    python -m bench.fairshare_scale                  # large (4,000 nodes, 140,000 pods), 7 runs
    python -m bench.fairshare_scale --size small --repeat 30

Same seeded clusters as :mod:`bench.engine_scale`. Reports process CPU time (the steadier figure on a
shared machine) and wall time, medians over ``--repeat`` runs, for the per-queue demand sums alone and for the
whole fair-share computation (demand + hierarchical division). ``with task table`` times the path the engine
takes when the session's columnar task table is built first and handed to fair share (the table's build is
timed separately: the session needs it anyway); ``engine`` times fair share + session open as
:func:`scheduler.engine.run_session` does them (GC paused there, so here too).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from bench.engine_scale import SIZES, make_cluster
from scheduler import fairshare


def _time(fn, repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            fn()
        finally:
            gc.enable()
        walls.append((time.perf_counter() - t0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
    return statistics.median(cpus), statistics.median(walls)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="large")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    snap = make_cluster(**SIZES[args.size])
    pods = sum(len(j.tasks) for j in snap.jobs)
    print(f"{args.size}: {len(snap.nodes)} nodes, {pods} pods, {len(snap.queues)} queues; "
          f"median of {args.repeat} runs (cpu / wall ms)")
    stages = [("queue_demand", lambda: fairshare.queue_demand(snap)),
              ("compute_fair_share", lambda: fairshare.compute_fair_share(snap))]
    table_cls = getattr(fairshare, "TaskTable", None)
    if table_cls is not None:
        table = table_cls.from_snapshot(snap)
        stages += [("task table build", lambda: table_cls.from_snapshot(snap)),
                   ("queue_demand with task table", lambda: fairshare.queue_demand(snap, tasks=table)),
                   ("compute_fair_share with task table", lambda: fairshare.compute_fair_share(snap, tasks=table))]
    from scheduler.session import Session

    def engine_open():  # what scheduler.engine does before the actions run
        if table_cls is not None:
            tasks = table_cls.from_snapshot(snap)
            return Session(snap, fairshare.compute_fair_share(snap, tasks=tasks), tasks=tasks)
        return Session(snap, fairshare.compute_fair_share(snap))

    stages.append(("engine: fair share + session open", engine_open))
    for name, fn in stages:
        cpu, wall = _time(fn, args.repeat)
        print(f"  {name:<36} {cpu:8.1f} cpu  {wall:8.1f} wall")


if __name__ == "__main__":
    main()
