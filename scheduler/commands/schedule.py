"""``kaidash schedule SNAPSHOT``: run KAI's scheduling actions on a snapshot and print the decisions.

``--format json`` prints the output contract of design.md (``fair_share``, ``tasks``, ``jobs``, ``evicted``,
``timings_ms``); ``--format table`` is for a person: fair share per queue, jobs with status and reason,
tasks placed this session, evictions and timings.
"""

from __future__ import annotations

import json
import sys

from ..actions import get_action
from ..engine import run_cycles, run_session
from ..model import ACTIONS
from ..queue_tree import levels
from ..snapshot_io import load_snapshot

NAME = "schedule"
HELP = "run scheduling actions on a snapshot and print the decisions"
DESCRIPTION = ("Run KAI's scheduling actions (allocate, ...) in one session, or N cycles, on a snapshot file "
               "and print fair share, placements and why jobs wait.")


def add_arguments(parser) -> None:
    parser.add_argument("snapshot", help="snapshot file (.yaml, .json, or a KAI /get-snapshot .zip)")
    parser.add_argument("--actions", default=None,
                        help=f"comma-separated actions to run in order (default: the snapshot's config; "
                             f"KAI's are {','.join(ACTIONS)})")
    parser.add_argument("--cycles", type=int, default=1, help="number of cycles (default 1)")
    parser.add_argument("--format", choices=("json", "table"), default="table", help="output format")


def run(args) -> int:
    if args.cycles < 1:
        print("kaidash schedule: error: --cycles must be at least 1", file=sys.stderr)
        return 2
    snap = load_snapshot(args.snapshot)
    actions = None
    if args.actions:
        actions = [a.strip() for a in args.actions.split(",") if a.strip()]
    for name in actions if actions is not None else snap.config.actions:
        if get_action(name) is None:
            print(f"kaidash schedule: note: action {name!r} is not implemented in this build; skipped",
                  file=sys.stderr)
    result = run_session(snap, actions) if args.cycles == 1 else run_cycles(snap, args.cycles, actions)
    if args.format == "json":
        json.dump(result.to_contract(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_table(result, snap))
    return 0


# ---------------------------------------------------------------------------------------------- table

def _fmt(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x == -1:
        return "unl."
    if unit == "cores":
        return f"{x / 1000:g}"
    if unit == "GiB":
        return f"{x / 2**30:.1f}"
    if isinstance(x, float):
        return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x)}"
    return str(x)


def _table(headers: list[str], rows: list[list[str]], max_last: int = 0) -> str:
    if max_last:
        rows = [r[:-1] + [r[-1] if len(r[-1]) <= max_last else r[-1][: max_last - 1] + "…"] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines) + "\n"


def render_table(result, snapshot) -> str:
    """A readable report of a :class:`~scheduler.decisions.ScheduleResult`."""
    out = []
    depth, _ = levels({q.name: q.parent for q in snapshot.queues})   # 1 = top level

    rows = []
    for q in snapshot.queues:
        st = result.queue_stats.get(q.name, {})
        g, c, m = st.get("gpu", {}), st.get("cpu", {}), st.get("memory", {})
        rows.append(["  " * (depth.get(q.name, 1) - 1) + q.name, _fmt(g.get("deserved")), _fmt(g.get("limit")),
                     _fmt(g.get("fair_share")), _fmt(g.get("allocated")), _fmt(g.get("requested")),
                     _fmt(c.get("fair_share"), "cores"), _fmt(c.get("allocated"), "cores"),
                     _fmt(m.get("fair_share"), "GiB"), _fmt(m.get("allocated"), "GiB")])
    out.append("Fair share per queue (GPUs; CPU in cores; memory in GiB; allocated = after this session)\n")
    out.append(_table(["QUEUE", "DESERVED", "LIMIT", "FAIR SHARE", "ALLOCATED", "REQUESTED",
                       "CPU FAIR", "CPU ALLOC", "MEM FAIR", "MEM ALLOC"], rows))
    job_queue = {j.key: j.queue for j in snapshot.jobs}
    rows = []
    for key, d in result.jobs.items():
        rows.append([key, job_queue.get(key, ""), d.status, _fmt(float(d.gpus_accepted)), d.reason or "-",
                     d.message or ""])
    out.append(f"\nJobs ({len(rows)})\n")
    out.append(_table(["JOB", "QUEUE", "STATUS", "GPUS", "REASON", "MESSAGE"], rows, max_last=160))
    before = {t.name: t for _, t in snapshot.iter_tasks()}
    rows = []
    for name, d in result.tasks.items():
        t = before.get(name)
        if t is not None and t.status == d.status and t.node == d.node:
            continue
        idx = ",".join(map(str, d.gpu_indices)) if d.gpu_indices else "-"
        if d.gpu_index_source == "session":
            idx += " (chosen)"
        grp = ",".join(d.gpu_groups) if d.gpu_groups and any(d.gpu_groups) else "-"
        rows.append([name, (t.status if t else "?") + " → " + d.status, d.node or "-", idx, grp])
    out.append(f"\nTasks changed this session ({len(rows)})\n")
    out.append(_table(["TASK", "STATUS", "NODE", "GPU INDEX", "GPU GROUP"], rows) if rows else "  none\n")
    if any(d.endswith("(chosen)") for r in rows for d in r[3:4]):
        out.append("  (chosen) = a device index the session picked, not one the cluster reported\n")
    out.append(f"\nEvictions ({len(result.evicted)})\n")
    if result.evicted:
        out.append(_table(["TASK", "JOB", "ACTION", "PREEMPTOR", "MOVED TO", "MESSAGE"],
                          [[e.task, e.job, e.action, e.preemptor or "-", e.moved_to or "-", e.message]
                           for e in result.evicted], max_last=120))
    else:
        out.append("  none\n")
    out.append("\nTimings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings_ms.items()) + "\n")
    return "".join(out)
