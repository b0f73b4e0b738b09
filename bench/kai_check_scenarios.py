"""Check readable scenarios (``tests/scenarios/<kind>/*.yaml``) against KAI's ``snapshot-tool``.

    python -m bench.kai_check_scenarios --snapshot-tool /tmp/kai/snapshot-tool tests/scenarios/reclaim/*.yaml

Each scenario's snapshot (with its ``actions``) is exported as a KAI ``/get-snapshot`` zip (``snapshot export
--format kai-zip``), replayed by the tool, and KAI's decisions are compared with the scenario's ``expect``:
``evicted`` (the set of evicted tasks), ``evictions.<task>.action`` and ``tasks.<task>.{status, node}`` (binding
= KAI's bind request, pipelined = its pipeline). Times are shifted so that the snapshot's ``time`` is the moment
of the replay (KAI reads the wall clock). Scenarios of several cycles are skipped (the tool replays one).
A scenario whose expectation KAI does not share is listed with both sides, so a test never asserts a decision
KAI would not make. The binary is an argument, never a dependency.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional

import yaml


def kai_decisions(doc: dict, binary: str) -> Optional[dict]:
    """KAI's decisions on a scenario document: ``{evicted: {task: action}, bound: {task: node}, pipelined}``."""
    from scheduler.snapshot_io import snapshot_from_dict
    from scheduler.sources.kai_export import write_kai_zip

    from .kai_diff_kai import run_snapshot_tool

    snap = snapshot_from_dict(_shifted(doc["snapshot"]))
    if doc.get("actions"):
        snap.config.actions = list(doc["actions"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.zip"
        write_kai_zip(snap, path)
        run = run_snapshot_tool(binary, path)
    if run.decisions is None:
        return None
    d = run.decisions
    return {"evicted": d.evicted, "bound": d.allocated, "pipelined": d.pipelined}


TIME_KEYS = {"time", "creation_time", "last_start_time", "stale_since", "last_eviction_time"}


def _shifted(snapshot: dict) -> dict:
    """The snapshot with every time moved so that its ``time`` is now: KAI's replay compares minimum runtimes,
    preemption delays and staleness with the wall clock."""
    import copy
    import time

    doc = copy.deepcopy(snapshot)
    delta = time.time() - float(doc.get("time", 0.0))

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in TIME_KEYS and isinstance(v, (int, float)):
                    x[k] = v + delta
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    doc["time"] = float(snapshot.get("time", 0.0)) + delta
    return doc


def _task_key(name: str, doc: dict) -> str:
    """KAI names pods ``namespace/name``; the export puts a pod without a namespace in ``default``."""
    return name if "/" in name else f"default/{name}"


def check(doc: dict, kai: dict) -> list[str]:
    """Where KAI disagrees with the scenario's expectations (empty when it agrees)."""
    expect = doc.get("expect") or {}
    out = []
    if "evicted" in expect:
        want = sorted(_task_key(t, doc) for t in expect["evicted"] or [])
        got = sorted(kai["evicted"])
        if want != got:
            out.append(f"evicted: expected {want}, KAI {got}")
    for task, fields in (expect.get("evictions") or {}).items():
        action = fields.get("action")
        got = kai["evicted"].get(_task_key(task, doc))
        if action and got != action:
            out.append(f"eviction of {task}: expected {action}, KAI {got}")
    for task, fields in (expect.get("tasks") or {}).items():
        key = _task_key(task, doc)
        status = fields.get("status")
        node = fields.get("node")
        if status == "binding":
            got = kai["bound"].get(key)
        elif status == "pipelined":
            got = kai["pipelined"].get(key)
        else:
            continue
        if got is None or (node is not None and got != node):
            out.append(f"task {task}: expected {status} on {node}, KAI {'nothing' if got is None else got}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m bench.kai_check_scenarios")
    ap.add_argument("--snapshot-tool", required=True, help="path of KAI's snapshot-tool binary")
    ap.add_argument("scenarios", nargs="+", help="scenario YAML files")
    args = ap.parse_args(argv)
    bad = 0
    for path in args.scenarios:
        doc = yaml.safe_load(Path(path).read_text())
        if int(doc.get("cycles", 1)) != 1:
            print(f"skip   {path} (several cycles)")
            continue
        kai = kai_decisions(doc, args.snapshot_tool)
        if kai is None:
            print(f"ERROR  {path}: KAI failed")
            bad += 1
            continue
        problems = check(doc, kai)
        print(("agrees " if not problems else "DIFFERS ") + path)
        for p in problems:
            print(f"       {p}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
