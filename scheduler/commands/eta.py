"""``kaidash eta SNAPSHOT``: when will each waiting job start, and what is it waiting for?

Runs the engine forward from the snapshot (``scheduler.eta``): ``--runs`` simulations with run times from the
jobs' recorded ``duration_s`` (a simulated snapshot; ``--ignore-durations`` to leave them out), else from
``--history`` (a jobs table, e.g. ``kaidash simulate --out DIR``'s ``jobs.csv``), else assumed; arrivals at the
history's rates. ``--whatif`` re-estimates with the cluster changed (the what-if overrides, YAML/JSON file or
inline JSON) and prints before and after. ``--format table|json|csv``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..errors import SnapshotError

NAME = "eta"
HELP = "estimate when each waiting job starts (forward simulation) and what it waits for"
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(p) -> None:
    p.add_argument("snapshot", help="snapshot file (.yaml, .json, or a KAI /get-snapshot .zip)")
    p.add_argument("--runs", type=int, default=5, help="forward runs (ranges are p10-p90 over them; default 5)")
    p.add_argument("--horizon", type=float, default=8.0, metavar="HOURS", help="how far ahead (default 8 h)")
    p.add_argument("--seed", type=int, default=0, help="seed of the runs' draws")
    p.add_argument("--history", metavar="CSV", help="job history: a jobs table (job, queue, arrival, first_start, "
                   "last_start, completion, status[, shape]) for run times and arrival rates")
    p.add_argument("--ignore-durations", action="store_true",
                   help="do not trust the jobs' recorded duration_s (as on a real cluster)")
    p.add_argument("--no-arrivals", action="store_true", help="do not model arrivals")
    p.add_argument("--actions", help="comma-separated engine actions for the forward sessions (default: the "
                   "snapshot's; without consolidation is much cheaper on large clusters)")
    p.add_argument("--whatif", metavar="FILE|JSON", help="what-if overrides: re-estimate with the changed cluster")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")


def _workload(args, snapshot):
    from ..eta import WorkloadModel

    if not args.history:
        return WorkloadModel()
    import pandas as pd

    try:
        jobs = pd.read_csv(args.history)
    except (OSError, ValueError) as exc:
        raise SnapshotError(args.history, f"cannot read the history table: {exc}") from exc
    missing = {"job", "queue", "arrival", "first_start", "last_start", "completion", "status"} - set(jobs.columns)
    if missing:
        raise SnapshotError(args.history, f"missing columns {sorted(missing)}")
    return WorkloadModel.from_frames(jobs, float(snapshot.time))


def _overrides(text: str):
    import yaml

    from ..whatif import WhatIf

    path = Path(text)
    try:
        doc = yaml.safe_load(path.read_text()) if path.exists() else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SnapshotError("--whatif", f"neither a readable file nor JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SnapshotError("--whatif", "expected a mapping of what-if overrides")
    return WhatIf.from_dict(doc)


def run(args) -> int:
    from ..eta import EtaConfig, estimate_eta, estimate_eta_whatif
    from ..snapshot_io import load_snapshot

    if args.runs < 1 or not args.horizon > 0:
        print("kaidash eta: error: --runs must be at least 1 and --horizon positive", file=sys.stderr)
        return 2
    snapshot = load_snapshot(args.snapshot)
    config = EtaConfig(runs=args.runs, horizon_s=args.horizon * 3600, seed=args.seed,
                       arrivals=not args.no_arrivals, use_recorded_durations=not args.ignore_durations,
                       actions=tuple(a.strip() for a in args.actions.split(",") if a.strip()) if args.actions else None)
    workload = _workload(args, snapshot)
    if args.whatif:
        diff = estimate_eta_whatif(snapshot, _overrides(args.whatif), workload, config)
        frame = diff.frame()
        if args.format == "json":
            json.dump({"before": diff.before.to_dict(), "after": diff.after.to_dict(), "notes": diff.notes},
                      sys.stdout, indent=1, default=_json_default)
            sys.stdout.write("\n")
        elif args.format == "csv":
            frame.to_csv(sys.stdout, index=False)
        else:
            sys.stdout.write(render_whatif(frame, diff))
        return 0
    report = estimate_eta(snapshot, workload, config)
    if args.format == "json":
        json.dump(report.to_dict(), sys.stdout, indent=1, default=_json_default)
        sys.stdout.write("\n")
    elif args.format == "csv":
        report.frame().to_csv(sys.stdout, index=False)
    else:
        sys.stdout.write(render_table(report))
    return 0


def _json_default(x):
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    return str(x)


def _fmt_range(p10: float, p50: float, p90: float) -> str:
    from ..eta import format_duration

    if math.isinf(p50):
        return "beyond horizon"
    return f"{format_duration(p50)} ({format_duration(p10)}–{format_duration(p90)})"


def render_table(report) -> str:
    """The estimates for a person: waiting jobs, per-queue waits, the running jobs' expected ends."""
    from ..eta import format_duration
    from .schedule import _table

    out = [f"Pending ETA at {report.time:.0f}: {len(report.estimates)} waiting jobs, {report.runs} forward runs, "
           f"{report.sessions} engine sessions, {report.wall_ms / 1000:.1f} s\n\n"]
    rows = [[r.job, r.queue, f"{r.gpus:g}", format_duration(r.waiting_s),
             "never" if r.never else _fmt_range(r.eta_p10_s, r.eta_p50_s, r.eta_p90_s),
             r.text if r.never or math.isinf(r.eta_p50_s) else (r.blocker or "-")]
            for r in report.frame().itertuples(index=False)]
    out.append(_table(["JOB", "QUEUE", "GPUS", "WAITING", "STARTS IN (p10–p90)", "AFTER / WHY"], rows, max_last=90)
               if rows else "  no waiting jobs\n")
    q = report.queue_frame()
    if len(q):
        out.append("\nPer queue (expected wait of its waiting jobs, p50 each)\n")
        out.append(_table(["QUEUE", "WAITING", "NEXT START", "MEDIAN WAIT", "LONGEST", "BEYOND HORIZON"],
                          [[r.queue, str(r.pending_jobs), format_duration(r.next_start_s), format_duration(r.eta_p50_s),
                            format_duration(r.eta_max_s), str(r.beyond_horizon)] for r in q.itertuples(index=False)]))
    run = report.running_frame()
    if len(run):
        out.append(f"\nRunning jobs' expected ends (first 15 of {len(run)}; run time from)\n")
        out.append(_table(["JOB", "QUEUE", "RUNNING FOR", "ENDS IN (p50)", "RUN TIME FROM"],
                          [[r.job, r.queue, format_duration(r.elapsed_s), format_duration(r.end_p50_s),
                            r.duration_source] for r in run.head(15).itertuples(index=False)]))
    if report.arrivals_per_h:
        out.append("\nArrivals modelled (jobs per hour): " +
                   ", ".join(f"{q} {r:.1f}" for q, r in sorted(report.arrivals_per_h.items())) + "\n")
    for note in report.notes:
        out.append(f"note: {note}\n")
    return "".join(out)


def render_whatif(frame, diff) -> str:
    from ..eta import format_duration
    from .schedule import _table

    rows = [[r.job, r.queue, format_duration(r.eta_p50_before_s), format_duration(r.eta_p50_after_s),
             ("-" if r.change_s == 0 or math.isnan(r.change_s) else
              ("sooner " if r.change_s < 0 else "later ") + format_duration(abs(r.change_s)))]
            for r in frame.itertuples(index=False)]
    changes = {k: v for k, v in diff.notes.items() if v}
    head = "What-if ETA (p50 start, before → after)" + (f"; {changes}" if changes else "") + "\n"
    return head + (_table(["JOB", "QUEUE", "BEFORE", "AFTER", "CHANGE"], rows) if rows else "  no waiting jobs\n")
