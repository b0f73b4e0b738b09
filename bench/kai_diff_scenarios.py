"""Which victim scenarios KAI and kaidash try, in order, on one cluster of :mod:`bench.kai_diff`.

    python -m bench.kai_diff_scenarios --seed 17 --snapshot-tool /tmp/kai/snapshot-tool
    python -m bench.kai_diff_scenarios --zip cluster.zip --snapshot-tool BIN --actions "reclaim, preempt"

KAI logs every scenario its solver tries (``Trying to solve scenario: Pending tasks: … Recorded victim jobs: …
Potential victim tasks: …``, ``actions/common/solvers/job_solver.go``, verbosity 5); kaidash's solver keeps the
same trace (:func:`scheduler.actions.solver.scenario_trace`). Both sequences are printed side by side per
action up to the first difference, so a victim choice that differs can be traced to the scenario where the
searches part (a different generator order, accumulation, sub-scenario or simulation outcome).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

SCENARIO = re.compile(r"\[(\w+)\] Trying to solve scenario: Pending tasks:(.*?)\t Recorded victim jobs:(.*?)\t "
                      r"Potential victim tasks:(.*)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def kai_scenarios(log: str) -> list[tuple]:
    """``(action, pending tasks, recorded victim jobs, potential victim tasks)`` per scenario KAI tried."""
    out = []
    for raw in log.splitlines():
        if "Trying to solve scenario" not in raw:
            continue
        m = SCENARIO.search(ANSI.sub("", raw))
        if m:
            action, pend, rec, pot = m.groups()
            out.append((action, tuple(sorted(pend.split())), tuple(sorted(rec.split())), tuple(sorted(pot.split()))))
    return out


def kaidash_scenarios(zip_path: str) -> list[tuple]:
    """The same tuples from kaidash's solver on the zip (its snapshot's own action list)."""
    from scheduler.actions.solver import scenario_trace
    from scheduler.engine import run_session
    from scheduler.sources.kai_snapshot import import_kai_snapshot

    snap = import_kai_snapshot(zip_path).snapshot
    job_of = {t.name: job.key for job in snap.jobs for t in job.tasks}
    with scenario_trace() as trace:
        run_session(snap)
    return [(action, tuple(pend), tuple(sorted({job_of[t] for t in rec})), tuple(pot))
            for action, _job, _gen, _k, pend, rec, pot, _ok in trace]


def _fmt(sc: Optional[tuple]) -> str:
    if sc is None:
        return "-"
    action, pend, rec, pot = sc
    return (f"[{action}] {' '.join(pend)}" + (f" | recorded {' '.join(rec)}" if rec else "")
            + f" | victims {' '.join(pot) or '(none)'}")


def compare(kai: list[tuple], kd: list[tuple], context: int = 3) -> int:
    """Print both sequences around the first difference; the index of that difference (-1: equal)."""
    for idx in range(max(len(kai), len(kd))):
        a = kai[idx] if idx < len(kai) else None
        b = kd[idx] if idx < len(kd) else None
        if a != b:
            print(f"first difference at scenario {idx} (KAI tried {len(kai)}, kaidash {len(kd)}):")
            for k in range(max(0, idx - context), min(max(len(kai), len(kd)), idx + context + 1)):
                mark = "*" if k == idx else " "
                print(f"{mark}{k:4d} KAI     {_fmt(kai[k] if k < len(kai) else None)}")
                print(f"{mark}{k:4d} kaidash {_fmt(kd[k] if k < len(kd) else None)}")
            return idx
    print(f"same {len(kai)} scenarios in the same order")
    return -1


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m bench.kai_diff_scenarios")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--seed", type=int, help="a cluster of bench.kai_diff_gen")
    src.add_argument("--zip", help="a KAI /get-snapshot zip")
    ap.add_argument("--snapshot-tool", required=True, help="path of KAI's snapshot-tool binary")
    ap.add_argument("--actions", default="default", help="for --seed: 'default' (KAI's list) or a list")
    ap.add_argument("--only", default=None, metavar="ACTION",
                    help="compare only this action's scenarios (e.g. preempt: where an earlier action already parts)")
    ap.add_argument("--no-empty", action="store_true",
                    help="leave out scenarios without victims (KAI tries one even for a job without candidates)")
    ap.add_argument("--kai-log", default=None, metavar="FILE",
                    help="with --zip: KAI's log of that zip (verbosity ≥ 5) instead of running the tool")
    args = ap.parse_args(argv)
    from .kai_diff import DEFAULT_ACTIONS, write_zip
    from .kai_diff_gen import generate_document
    from .kai_diff_kai import run_snapshot_tool

    with tempfile.TemporaryDirectory() as tmp:
        zpath = args.zip
        if zpath is None:
            actions = DEFAULT_ACTIONS if args.actions == "default" else args.actions
            zpath = str(Path(tmp) / f"seed-{args.seed}.zip")
            write_zip(generate_document(args.seed, time.time(), actions), Path(zpath))
        if args.kai_log and args.zip:
            log = Path(args.kai_log).read_text(errors="replace")
        else:
            run = run_snapshot_tool(args.snapshot_tool, zpath)
            if run.decisions is None:
                print(f"KAI failed: {run.error}", file=sys.stderr)
                return 1
            log = run.log
        kai, kd = kai_scenarios(log), kaidash_scenarios(zpath)
        if args.only:
            kai, kd = [sc for sc in kai if sc[0] == args.only], [sc for sc in kd if sc[0] == args.only]
        if args.no_empty:
            kai, kd = [sc for sc in kai if sc[2] or sc[3]], [sc for sc in kd if sc[2] or sc[3]]
        compare(kai, kd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
