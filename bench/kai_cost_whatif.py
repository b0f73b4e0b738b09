"""What the what-if's cycles cost KAI and kaidash: per cycle, CPU time and victim scenarios, on the same states.

    python -m bench.kai_cost_whatif --snapshot-tool /tmp/kai/snapshot-tool
    python -m bench.kai_cost_whatif --snapshot-tool BIN --sliders "queue priority,queue quota" --kai-runs 5

A what-if slider on the bench stress cluster (:func:`bench.whatif_latency.cluster_64`) is run to steady state as the
What-if view runs it (:func:`bench.kai_diff_whatif.trajectory`). Every cycle's input state is written as a KAI
``/get-snapshot`` zip, and both schedulers are timed on that same state:

- **KAI**: its offline ``snapshot-tool`` (a binary you built; its path is an argument, never a dependency), process
  CPU time (user + system, from the child's resource usage) of the whole run, median of ``--kai-runs`` runs at
  verbosity 2; the sum of the tool's own per-action timers (``Action <x> completed in …``, wall time: what its
  actions take, without loading the zip); and the victim scenarios its solver tried (``Trying to solve
  scenario`` lines of one more run at verbosity 5; logging slows that run, so it is not timed).
- **kaidash**: ``run_session`` on the in-memory state, process CPU time, median of ``--runs``; the sum of its
  actions' timers (``ScheduleResult.timings_ms``); the scenarios its solvers tried
  (:func:`scheduler.actions.solver.scenario_trace`, counted as KAI logs them).

The totals say how the search's cost compares, scenario for scenario: the what-if latency budget (300 ms to steady
state, ``docs/design.md``) on this cluster asks for the same search KAI runs, in a fraction of KAI's own time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ACTION_DONE = re.compile(r"Action <(\w+)> completed in (\S+)")
GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|µs|us|ms|s|m|h)")
_UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
SCENARIO_LINE = "Trying to solve scenario"


def go_duration_ms(text: str) -> float:
    """A Go ``time.Duration`` as printed (``88.4ms``, ``132.5µs``, ``1m2.5s``) in milliseconds."""
    parts = GO_DURATION.findall(text)
    if not parts or "".join(v + u for v, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(v) * _UNIT_MS[u] for v, u in parts)


def run_tool(binary: str, zip_path: Path, verbosity: int, timeout_s: float = 600) -> str:
    """One run of the snapshot tool, waited for (its CPU time is then in this process's children's usage): its
    log; a failed run raises."""
    proc = subprocess.Popen([binary, "--filename", str(zip_path), "--verbosity", str(verbosity)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{zip_path.name}: the snapshot tool ran over {timeout_s:g} s")
    log = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{zip_path.name}: the snapshot tool exited with status {proc.returncode}: {log[-800:]}")
    return log


def _child_cpu_ms() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_utime + ru.ru_stime) * 1e3


def kai_cost(binary: str, zip_path: Path, runs: int) -> dict:
    """KAI on one zip: median CPU ms of a whole run, median of its actions' own timers (ms), scenarios tried."""
    cpu, actions = [], []
    for _ in range(runs):
        before = _child_cpu_ms()
        log = run_tool(binary, zip_path, 2)
        cpu.append(_child_cpu_ms() - before)
        actions.append(sum(go_duration_ms(d) for _, d in ACTION_DONE.findall(log)))
    log = run_tool(binary, zip_path, 5)
    return {"cpu_ms": statistics.median(cpu), "actions_ms": statistics.median(actions),
            "scenarios": sum(1 for line in log.splitlines() if SCENARIO_LINE in line)}


def kaidash_cost(state, runs: int) -> dict:
    """kaidash on one in-memory state: median CPU ms of ``run_session``, median of its actions' timers, scenarios."""
    from scheduler.actions.solver import scenario_trace
    from scheduler.engine import run_session

    with scenario_trace() as trace:
        result = run_session(state)
    actions = [name for name in result.timings_ms if name not in ("fair_share", "session_open", "session",
                                                                   "result", "total")]
    cpu, acts = [], []
    for _ in range(runs):
        t0 = time.process_time()
        result = run_session(state)
        cpu.append((time.process_time() - t0) * 1e3)
        acts.append(sum(result.timings_ms[a] for a in actions))
    return {"cpu_ms": statistics.median(cpu), "actions_ms": statistics.median(acts), "scenarios": len(trace)}


def case_rows(label: str, whatif, binary: Optional[str], kai_runs: int, runs: int, cycles: int = 10) -> list[dict]:
    """Per cycle of one case: the kaidash and (with ``binary``) KAI figures on that cycle's input state."""
    from scheduler.sources.kai_export import export_kai_zip_bytes

    from .kai_diff_whatif import case_snapshot, trajectory

    rows = []
    with tempfile.TemporaryDirectory(prefix="kai-cost-") as tmp:
        for k, (state, _) in enumerate(trajectory(case_snapshot(whatif), cycles)):
            row = {"case": label, "cycle": k, "kaidash": kaidash_cost(state, runs)}
            if binary:
                zpath = Path(tmp) / f"cycle-{k}.zip"
                zpath.write_bytes(export_kai_zip_bytes(state))
                row["kai"] = kai_cost(binary, zpath, kai_runs)
            rows.append(row)
    return rows


def totals(rows: list[dict]) -> dict:
    """Sums over a case's cycles, per side and figure."""
    out: dict = {}
    for side in ("kaidash", "kai"):
        if all(side in r for r in rows):
            out[side] = {f: sum(r[side][f] for r in rows) for f in ("cpu_ms", "actions_ms", "scenarios")}
    return out


def print_case(label: str, rows: list[dict]) -> None:
    with_kai = all("kai" in r for r in rows)
    print(f"\n{label}: {len(rows)} cycles to steady state")
    head = f"{'cycle':>5} {'kaidash CPU ms':>14} {'actions ms':>10} {'scenarios':>9}"
    if with_kai:
        head += f" | {'KAI CPU ms':>10} {'actions ms':>10} {'scenarios':>9}"
    print(head)
    t = totals(rows)
    for r in rows + [dict(cycle="total", **t)]:
        d = r["kaidash"]
        line = f"{r['cycle']:>5} {d['cpu_ms']:14.0f} {d['actions_ms']:10.0f} {d['scenarios']:9d}"
        if with_kai:
            k = r["kai"]
            line += f" | {k['cpu_ms']:10.0f} {k['actions_ms']:10.0f} {k['scenarios']:9d}"
        print(line)
    if with_kai and t["kai"]["actions_ms"] > 0:
        kd, kai = t["kaidash"], t["kai"]
        per = (f"; per scenario {kd['actions_ms'] / kd['scenarios']:.2f} ms vs KAI "
               f"{kai['actions_ms'] / kai['scenarios']:.2f} ms" if kd["scenarios"] and kai["scenarios"] else "")
        print(f"  kaidash's actions take {kd['actions_ms'] / kai['actions_ms']:.2f}x KAI's{per}")


def main(argv: Optional[list[str]] = None) -> int:
    from .whatif_latency import SLIDERS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshot-tool", default=None, help="path of KAI's snapshot-tool binary (without: kaidash only)")
    ap.add_argument("--sliders", default="queue priority,queue quota",
                    help=f"comma-separated sliders of bench.whatif_latency ({', '.join(SLIDERS)})")
    ap.add_argument("--kai-runs", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="kaidash runs per state")
    args = ap.parse_args(argv)
    if args.snapshot_tool and not os.access(args.snapshot_tool, os.X_OK):
        ap.error(f"--snapshot-tool {args.snapshot_tool}: not an executable file")
    chosen = [s.strip() for s in args.sliders.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SLIDERS]
    if unknown:
        ap.error(f"unknown slider(s) {unknown}; known: {list(SLIDERS)}")
    for label in chosen:
        print_case(label, case_rows(label, SLIDERS[label], args.snapshot_tool, args.kai_runs, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
