"""What one ETA estimate costs (docs/eta.md): wall and CPU time, engine sessions, per cluster size and setting.

For each ``--nodes`` size: the synthetic scenario (``generate_scenario(seed, nodes)``) at its start, optionally
after ``--warmup-hours`` of simulation (a steady-state backlog), and a workload model built from the scenario's
own arrival stream (rates per queue over its horizon, the arriving jobs as templates: what a warmed-up job log
provides). Each configuration in ``--configs`` is estimated once:

- ``default``: ``EtaConfig()`` (5 runs, full action list, 8 h horizon, arrivals modelled);
- ``one-run``: 1 run;
- ``no-consolidation``: 1 run, forward sessions without the consolidation action;
- ``no-arrivals``: 1 run, arrivals not modelled.

Run: ``python -m bench.eta_cost --nodes 64 1000 --configs one-run no-consolidation``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.eta import EtaConfig, WorkloadModel, estimate_eta  # noqa: E402
from scheduler.joblog import is_waiting  # noqa: E402
from scheduler.model import ACTIONS  # noqa: E402
from scheduler.simulate import Simulator  # noqa: E402
from scheduler.sources.synthetic import generate_scenario  # noqa: E402

CONFIGS = {
    "default": EtaConfig(),
    "one-run": EtaConfig(runs=1),
    "no-consolidation": EtaConfig(runs=1, actions=tuple(a for a in ACTIONS if a != "consolidation")),
    "no-arrivals": EtaConfig(runs=1, arrivals=False),
}


def workload_from_scenario(sc) -> WorkloadModel:
    """Arrival rates and templates from the scenario's own arrival stream (its jobs carry their durations)."""
    counts = Counter(a.job.queue for a in sc.arrivals)
    horizon = max(sc.horizon_s, 1.0)
    templates: dict = {}
    for a in sc.arrivals:                     # synthetic arrivals carry their duration_s
        templates.setdefault(a.job.queue, []).append(a.job)
    return WorkloadModel(rates_per_s={q: n / horizon for q, n in counts.items()},
                         templates={q: t[:50] for q, t in templates.items()})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[64, 1000])
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--warmup-hours", type=float, default=0.0)
    p.add_argument("--configs", nargs="+", default=["default", "one-run", "no-consolidation"], choices=list(CONFIGS))
    args = p.parse_args(argv)
    print("nodes  config            waiting  runs  sessions  wall_s  cpu_s  ms/session")
    for n in args.nodes:
        sc = generate_scenario(args.seed, nodes=n, horizon_s=(args.warmup_hours + 8) * 3600)
        snap = sc.snapshot
        arrivals = sc.arrivals
        if args.warmup_hours > 0:
            sim = Simulator(snap, arrivals, period_s=60).run(args.warmup_hours * 3600)
            snap = sim.snapshot.copy()
            snap.time = sim.time
        workload = workload_from_scenario(sc)
        waiting = sum(is_waiting(j) for j in snap.jobs)
        for name in args.configs:
            t0, c0 = time.perf_counter(), time.process_time()
            report = estimate_eta(snap, workload, CONFIGS[name])
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{n:>5}  {name:<16}  {waiting:>7}  {report.runs:>4}  {report.sessions:>8}  {wall:>6.1f}  "
                  f"{cpu:>5.1f}  {1000 * wall / max(report.sessions, 1):>10.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
