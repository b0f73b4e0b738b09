"""kaidash's decisions on a KAI ``/get-snapshot`` zip, in the shape :mod:`bench.kai_diff_kai` reads KAI's.

Only the public engine API is used (``import_kai_snapshot``, ``run_session``, ``ScheduleResult``), so the same code
measures any kaidash checkout: ``python bench/kai_diff_kaidash.py ZIP...`` run with ``PYTHONPATH=<checkout>``
prints one JSON line of decisions per zip (what ``python -m bench.kai_diff --kaidash-checkout DIR`` does to
measure the agreement of another commit, e.g. the baseline before a fix).
"""

from __future__ import annotations

import json
import sys
import time

CPU_CORE_MILLIS = 1000.0
MEMORY_GB_BYTES = 1e9


def kaidash_decisions(zip_path: str) -> dict:
    """``{allocated, pipelined, evicted, fair_share, warnings, seconds}`` for one zip (its own actions).

    ``allocated``: task → node for tasks bound this session; ``pipelined``: task → node; ``evicted``: task →
    action; ``fair_share``: queue → ``{gpu, cpu (cores), memory (GB)}`` as KAI logs it.
    """
    from scheduler.engine import run_session
    from scheduler.sources.kai_snapshot import import_kai_snapshot

    start = time.perf_counter()
    conv = import_kai_snapshot(zip_path)
    snap = conv.snapshot
    out = result_decisions(snap, run_session(snap))
    out.update(warnings=[str(w) for w in conv.warnings], seconds=time.perf_counter() - start)
    return out


def result_decisions(snap, result) -> dict:
    """``{allocated, pipelined, evicted, fair_share}`` of one session ``result`` on its input ``snap``, in the
    shape :func:`bench.kai_diff_kai.parse_log` reads KAI's (task and queue names as in ``snap``)."""
    before = {t.name: t.status for _, t in snap.iter_tasks()}
    allocated, pipelined = {}, {}
    for name, t in result.tasks.items():
        if t.status == "binding" and before.get(name) != "binding":
            allocated[name] = t.node
        elif t.status == "pipelined":
            pipelined[name] = t.node
    # A placement committed and later evicted again in the session is a decision KAI logged too (its bind
    # request / pipelining went out at commit); older checkouts do not record them.
    for name, (status, node) in getattr(result, "committed_placements", {}).items():
        if name in allocated or name in pipelined:
            continue
        if status == "pipelined":
            pipelined[name] = node
        elif before.get(name) != "binding":
            allocated[name] = node
    for name in list(allocated):  # as bench.kai_diff_kai.parse_log: bound, then pipelined → pipelined
        if name in pipelined:
            del allocated[name]
    evicted = {e.task: e.action for e in result.evicted}
    fair = {q: {"gpu": float(v.get("gpu", 0.0)), "cpu": float(v.get("cpu", 0.0)) / CPU_CORE_MILLIS,
                "memory": float(v.get("memory", 0.0)) / MEMORY_GB_BYTES}
            for q, v in result.fair_share.items()}
    return {"allocated": allocated, "pipelined": pipelined, "evicted": evicted, "fair_share": fair}


def main(argv: list[str]) -> int:
    for path in argv:
        try:
            out = kaidash_decisions(path)
        except Exception as exc:  # noqa: BLE001 - reported per zip, the batch goes on
            out = {"error": f"{type(exc).__name__}: {exc}"}
        out["zip"] = path
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
