"""``kaidash simulate``: run a snapshot or a synthetic scenario forward in time and summarise it.

``kaidash simulate SNAPSHOT --hours H`` (jobs created after the snapshot time arrive later) or
``kaidash simulate --scenario SEED [--nodes 64] --hours H``. A scheduling cycle runs every ``--period``
seconds (default: the snapshot's ``config.schedule_period_s``); cycles where nothing can change are skipped.
Time-based fair share is on by default (KAI's usage window, ``--usage off`` to keep the snapshot's usage).
``--out DIR`` writes the records (queues, cluster, evictions, jobs) as CSV or Parquet. The summary lists, per
queue, the time-weighted mean allocated GPUs against the mean fair share, the mean wait and the evictions.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from ..errors import SnapshotError, SourceError
from ..preflight import check_output_dir

NAME = "simulate"
HELP = "run a snapshot or synthetic scenario forward in time (arrivals, completions, cycles) and summarise"
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(p) -> None:
    p.add_argument("snapshot", nargs="?", help="snapshot file (YAML/JSON); omit with --scenario")
    p.add_argument("--scenario", type=int, metavar="SEED", help="generate a synthetic scenario with this seed")
    p.add_argument("--nodes", type=int, default=64, help="nodes in the synthetic scenario (default 64)")
    p.add_argument("--hours", type=float, required=True, help="simulated hours to run")
    p.add_argument("--period", type=float, metavar="S", help="seconds between scheduling cycles")
    p.add_argument("--usage", choices=("sliding", "tumbling", "off"), default="sliding",
                   help="time-based fair share window type, or off (default sliding)")
    p.add_argument("--window", type=float, metavar="S", default=7 * 24 * 3600, help="usage window seconds (1 week)")
    p.add_argument("--half-life", type=float, metavar="S", help="usage decay half-life seconds (default: no decay)")
    p.add_argument("--no-fast-forward", action="store_true", help="run every cycle, even when nothing can change")
    p.add_argument("--max-ticks", type=int, default=86_400, help="cap on recorded cycles kept in memory")
    p.add_argument("--out", metavar="DIR", help="write queues/cluster/evictions/jobs frames here")
    p.add_argument("--out-format", choices=("csv", "parquet"), default="csv", help="frame file format (csv)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary output format")


def load_input(args):
    """``(snapshot, arrivals)`` from a snapshot file or the synthetic generator."""
    if (args.snapshot is None) == (args.scenario is None):
        raise SnapshotError("simulate", "give either a SNAPSHOT file or --scenario SEED")
    if args.snapshot is not None:
        from ..snapshot_io import load_snapshot
        return load_snapshot(args.snapshot), []
    try:
        from ..sources.synthetic import generate_scenario
    except ImportError as exc:
        raise SourceError(f"synthetic scenarios are not available: {exc}") from exc
    scenario = generate_scenario(args.scenario, nodes=args.nodes, horizon_s=args.hours * 3600.0)
    return scenario.snapshot, list(scenario.arrivals)


def run(args) -> int:
    from ..simulate import Simulator, UsageConfig
    from ..simulate.summary import queue_summary

    if not (args.hours > 0 and math.isfinite(args.hours)):
        raise SnapshotError("--hours", f"must be a positive number of hours, got {args.hours}")
    if args.out:
        check_output_dir(args.out, "--out")   # before the run, not after hours of it
    snapshot, arrivals = load_input(args)
    usage = None if args.usage == "off" else UsageConfig(window_s=args.window, window_type=args.usage,
                                                          half_life_s=args.half_life)
    started = time.perf_counter()
    sim = Simulator(snapshot, arrivals, period_s=args.period, usage=usage,
                    fast_forward=not args.no_fast_forward, max_ticks=args.max_ticks)
    sim.run(args.hours * 3600.0)
    wall_s = time.perf_counter() - started
    frames = sim.frames()
    summary = queue_summary(frames, sim.time)

    written = []
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, frame in frames.items():
                path = out / f"{name}.{args.out_format}"
                if args.out_format == "csv":
                    frame.to_csv(path, index=False)
                else:
                    frame.to_parquet(path, index=False)
                written.append(str(path))
        except OSError as exc:
            raise SourceError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None

    totals = {"simulated_hours": args.hours, "period_s": sim.period_s, "cycles_run": sim.cycles_run,
              "cycles_skipped": sim.cycles_skipped, "arrived": sim.arrived_total,
              "completed": sim.completed_total, "evicted_tasks": sim.evicted_total, "wall_s": round(wall_s, 3)}
    if args.format == "json":
        doc = {"totals": totals, "queues": json.loads(summary.to_json(orient="records")), "written": written}
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"simulated {args.hours:g} h at a {sim.period_s:g} s period in {wall_s:.2f} s: "
          f"{sim.cycles_run} cycles run, {sim.cycles_skipped} skipped (nothing could change); "
          f"{sim.arrived_total} arrived, {sim.completed_total} completed, {sim.evicted_total} tasks evicted")
    print(format_table(summary))
    for path in written:
        print(f"wrote {path}")
    return 0


def format_table(summary) -> str:
    """Plain-text table: queue, mean allocated vs fair share vs deserved GPUs, jobs, mean wait, evictions."""
    header = ("queue", "alloc GPU", "fair GPU", "deserved", "pending", "arrived", "started", "done",
              "mean wait", "evictions")
    rows = []
    for r in summary.itertuples(index=False):
        rows.append((str(r.queue), _num(r.mean_allocated_gpu), _num(r.mean_fair_share_gpu),
                     _num(r.mean_deserved_gpu), _num(r.mean_pending_jobs), str(r.jobs_arrived),
                     str(r.jobs_started), str(r.jobs_completed), _duration(r.mean_wait_s), str(r.evictions)))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def _num(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _duration(seconds) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
