"""ETA validation on the simulator, where the truth is known (docs/eta.md).

For each seed: the synthetic scenario (``generate_scenario(seed, nodes)``, arrivals over the whole run) is
simulated at a 30 s cycle with time-based fair share on; this run is the truth. It first runs ``--warmup-hours``
unobserved (the scenario's initial jobs are placed by the generator with run times unlike the arrivals'; after
6 h they have all finished and the cluster is in its steady state), then a :class:`~scheduler.joblog.JobLog`
observes it as a live loop started at that moment would. After ``--history-hours`` of history and then every
``--every-min`` minutes for ``--hours``, the ETA is estimated for every waiting job from the truth's current
snapshot and the log's history, in two modes:

- ``recorded``: the jobs' ``duration_s`` is trusted (what the simulator knows; a real cluster does not);
- ``history``: durations are ignored and drawn from the log's history of similar jobs (what a live cluster
  gets).

Arrivals are modelled from the rates the log observed, never from the truth's future arrivals. Each estimate's p50
is compared with the job's next actual start in the truth run. Jobs that had not started by the end of the truth
run are censored (counted, left out of the error quantiles). Errors are reported for all estimates and for
those whose actual wait was over 5 minutes (the ones a person would look at), median and p90, absolute (minutes)
and relative (|error| / actual wait), by queue, with the share of actual starts inside the p10-p90 range.

Run: ``python -m bench.eta_validation --seeds 101 102 103`` (the evaluation seeds in docs/eta.md; seeds 1-3 were
used while developing). ``--csv FILE`` writes every estimate with its outcome.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.eta import EtaConfig, WorkloadModel, estimate_eta  # noqa: E402
from scheduler.eta.calibration import EtaCalibrator  # noqa: E402
from scheduler.joblog import JobLog, is_allocated  # noqa: E402
from scheduler.simulate import Simulator  # noqa: E402
from scheduler.sources.synthetic import generate_scenario  # noqa: E402

MODES = {"recorded": True, "history": False}
NONTRIVIAL_S = 300.0


def run_seed(seed: int, args) -> pd.DataFrame:
    total_h = args.warmup_hours + args.history_hours + args.hours + args.tail_hours
    sc = generate_scenario(seed, nodes=args.nodes, horizon_s=total_h * 3600, offered_load=args.offered_load)
    truth = Simulator(sc.snapshot, sc.arrivals, period_s=args.period)
    if args.warmup_hours > 0:
        truth.run(args.warmup_hours * 3600 - args.period)
    log = JobLog()
    log.observe(truth.snapshot)
    start = truth.start_time + args.warmup_hours * 3600
    starts: dict[str, list[float]] = {}
    allocated_before: set[str] = {j.key for j in truth.snapshot.jobs if is_allocated(j)}
    rows = []
    next_estimate = start + args.history_hours * 3600
    last_estimate = next_estimate + args.hours * 3600
    end = truth.start_time + total_h * 3600
    est_s = 0.0
    while truth.next_cycle_time() <= end + 1e-9:
        step = truth.step()
        if step.ran:
            log.observe(step.snapshot, step.result.evicted)
            now_alloc = {j.key for j in step.snapshot.jobs if is_allocated(j)}
            for key in now_alloc - allocated_before:
                starts.setdefault(key, []).append(step.time)
            allocated_before = now_alloc
        if step.time + 1e-9 >= next_estimate and step.time <= last_estimate + 1e-9:
            next_estimate += args.every_min * 60
            snap = copy.copy(truth.snapshot)
            snap.time = step.time
            workload = WorkloadModel.from_log(log, step.time)
            for mode, use_recorded in MODES.items():
                if mode not in args.modes:
                    continue
                cfg = EtaConfig(runs=args.runs, horizon_s=args.horizon_hours * 3600,
                                use_recorded_durations=use_recorded,
                                seed=args.eta_seed)
                t0 = time.perf_counter()
                report = estimate_eta(snap, workload, cfg)
                est_s += time.perf_counter() - t0
                for e in report.estimates.values():
                    if e.never:
                        continue
                    rows.append({"seed": seed, "mode": mode, "t_h": (step.time - start) / 3600, "job": e.job,
                                 "queue": e.queue, "gpus": e.gpus, "waited_s": e.waiting_s,
                                 "p10_s": e.p10_s, "p50_s": e.p50_s, "p90_s": e.p90_s, "estimated_at": step.time,
                                 "blocker": e.blocker, "sessions": report.sessions, "wall_ms": report.wall_ms})
            print(f"  seed {seed} t={(step.time - start) / 3600:.1f} h: {len(report.estimates)} waiting, "
                  f"estimates so far {len(rows)}, estimate time {est_s:.0f} s", file=sys.stderr, flush=True)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    actual = []
    for key, at in zip(frame["job"], frame["estimated_at"]):
        later = [s for s in starts.get(key, []) if s > at + 1e-9]
        actual.append(later[0] - at if later else math.nan)
    frame["actual_s"] = actual
    frame["censored_after_s"] = end - frame["estimated_at"]
    return frame


def calibrated_replay(frame: pd.DataFrame, coverage: float = 0.8, min_events: int = 20) -> pd.DataFrame:
    """``frame`` with ``cal_p10_s``/``cal_p50_s``/``cal_p90_s``: what the live planner's calibrator
    (:class:`~scheduler.eta.calibration.EtaCalibrator`) would have shown for each estimate, knowing only the starts
    that had happened by then (per seed and mode, estimates replayed in time order). ``calibrated``: False while
    fewer than ``min_events`` outcomes were known (the model's range is shown)."""
    out = frame.copy()
    for col in ("cal_p10_s", "cal_p50_s", "cal_p90_s"):
        out[col] = out[col.replace("cal_", "")].astype(float)
    out["calibrated"] = False
    for _, group in out.groupby(["seed", "mode"], sort=False):
        cal = EtaCalibrator(coverage=coverage, min_events=min_events)
        opened: list[tuple[float, str]] = []            # (start time, job) of estimates made so far
        for at, rows in group.groupby("estimated_at", sort=True):
            for start, job in sorted(x for x in opened if x[0] <= at):
                cal.observe_started(job, start)
            opened = [x for x in opened if x[0] > at]
            for idx, r in rows.iterrows():
                q = cal.quantiles(float(at), r["queue"])
                if q is not None and np.isfinite(r["p50_s"]):
                    out.loc[idx, ["cal_p10_s", "cal_p50_s", "cal_p90_s"]] = q.range_s(float(r["p50_s"]))
                    out.loc[idx, "calibrated"] = True
                cal.add(r["job"], float(at), float(r["p50_s"]), r["queue"])
                if np.isfinite(r["actual_s"]):
                    opened.append((float(at) + float(r["actual_s"]), r["job"]))
    return out


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Error quantiles per mode, subset (all / actual wait > 5 min) and queue (plus ``all``)."""
    out = []
    for mode, m in frame.groupby("mode", sort=False):
        for subset, s in (("all", m), ("wait > 5 min", m[m["actual_s"] > NONTRIVIAL_S])):
            for queue, q in [("all", s)] + list(s.groupby("queue")):
                done = q[q["actual_s"].notna()]
                finite = done[np.isfinite(done["p50_s"])]
                err = (finite["p50_s"] - finite["actual_s"]).abs()
                rel = err / finite["actual_s"].clip(lower=args_floor)
                inside = ((done["actual_s"] >= done["p10_s"] - 1) & (done["actual_s"] <= done["p90_s"] + 1))
                cens = q[q["actual_s"].isna()]
                # a censored job did not start before the truth run ended: the estimate was right to say "later"
                # when its p50 lies beyond that end; otherwise it was early by at least (end - p50)
                later = cens["p50_s"] >= cens["censored_after_s"]
                early_by = (cens["censored_after_s"] - cens["p50_s"])[~later]
                cal = done[done["calibrated"]] if "calibrated" in done else done.iloc[:0]
                cal_err = (cal["cal_p50_s"] - cal["actual_s"]).abs()
                cal_fin = cal[np.isfinite(cal["cal_p50_s"])]
                out.append({"mode": mode, "subset": subset, "queue": queue, "estimates": len(q),
                            "censored": len(cens),
                            "censored_said_later": later.mean() if len(cens) else math.nan,
                            "censored_early_by_median_min": early_by.median() / 60 if len(early_by) else math.nan,
                            "beyond_horizon": int((~np.isfinite(done["p50_s"])).sum()),
                            "median_abs_min": err.median() / 60, "p90_abs_min": err.quantile(0.9) / 60,
                            "median_rel": rel.median(), "p90_rel": rel.quantile(0.9),
                            "median_actual_min": done["actual_s"].median() / 60,
                            "in_p10_p90": inside.mean() if len(done) else math.nan,
                            # the same started estimates, once the calibrator had enough outcomes: model range vs
                            # calibrated range, and the median error of the model's p50 vs the corrected p50
                            "calibrated": len(cal),
                            "model_in_range": _inside(cal, "p10_s", "p90_s"),
                            "cal_in_range": _inside(cal, "cal_p10_s", "cal_p90_s"),
                            "model_median_abs_min": (cal_fin["p50_s"] - cal_fin["actual_s"]).abs().median() / 60,
                            "cal_median_abs_min": cal_err[np.isfinite(cal_err)].median() / 60,
                            "signed_median_min": (finite["p50_s"] - finite["actual_s"]).median() / 60})
    return pd.DataFrame(out)


def _inside(rows: pd.DataFrame, lo: str, hi: str) -> float:
    if rows.empty:
        return math.nan
    return float(((rows["actual_s"] >= rows[lo] - 1) & (rows["actual_s"] <= rows[hi] + 1)).mean())


args_floor = 60.0   # relative error divides by max(actual wait, 1 min): a 10 s wait estimated as 40 s is not "300 %"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103])
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--offered-load", type=float, default=1.0,
                   help="arrivals offer this multiple of the cluster's GPUs (above 1: a growing backlog)")
    p.add_argument("--warmup-hours", type=float, default=6.0, help="truth runs this long before the log starts")
    p.add_argument("--history-hours", type=float, default=1.0, help="first estimate after this much history")
    p.add_argument("--hours", type=float, default=6.0, help="estimates are made over this many hours")
    p.add_argument("--tail-hours", type=float, default=6.0, help="the truth runs this much longer")
    p.add_argument("--every-min", type=float, default=30.0)
    p.add_argument("--period", type=float, default=30.0, help="truth cycle period (s)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--horizon-hours", type=float, default=8.0)
    p.add_argument("--eta-seed", type=int, default=0)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--csv", help="write every estimate with its outcome here")
    p.add_argument("--from-csv", help="summarise the estimates of an earlier --csv instead of simulating")
    p.add_argument("--min-events", type=int, default=20, help="outcomes before the calibrator takes over")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.from_csv:
        frame = pd.read_csv(args.from_csv)
    else:
        frame = pd.concat([run_seed(seed, args) for seed in args.seeds], ignore_index=True)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    frame = calibrated_replay(frame, min_events=args.min_events)
    summary = summarise(frame)
    pd.set_option("display.width", 200)
    first = args.warmup_hours + args.history_hours
    print(f"seeds {args.seeds}, {args.nodes} nodes, estimates every {args.every_min:g} min from "
          f"{first:g} h to {first + args.hours:g} h (history from {args.warmup_hours:g} h), truth run "
          f"{first + args.hours + args.tail_hours:g} h; "
          f"{args.runs} runs per estimate, horizon {args.horizon_hours:g} h; wall {time.perf_counter() - t0:.0f} s")
    sessions = frame.drop_duplicates(["seed", "mode", "estimated_at"])
    print(f"per estimate: median {sessions['wall_ms'].median() / 1000:.1f} s, "
          f"{sessions['sessions'].median():.0f} sessions (over {len(sessions)} estimates)")
    print(summary.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
