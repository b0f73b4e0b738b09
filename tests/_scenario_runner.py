"""Runs the readable action scenarios of ``tests/scenarios/{reclaim,preempt,consolidation,stale}/*.yaml``.

Each file holds ``rule`` (what it checks, with its kai-semantics section), a ``snapshot`` (format v1),
optional ``actions`` (default: KAI's five) and ``cycles`` (default 1), and ``expect``:

- ``tasks``: per task ``{status, node, gpu_index}`` (only the given fields are compared);
- ``jobs``: per job ``{status, reason, message_contains}``;
- ``evicted``: the exact set of evicted tasks (order-free);
- ``evictions``: per evicted task ``{action, preemptor, moved_to, message_contains}``;
- ``committed_placements``: per task ``[binding | pipelined, node]``, the last placement a committed statement
  made (kept when a later action evicts the task again).

Every expectation was derived by hand from the rule, not from running the engine.
"""

from pathlib import Path

import yaml

from scheduler.engine import run_cycles, run_session
from scheduler.snapshot_io import snapshot_from_dict

ROOT = Path(__file__).parent / "scenarios"


def scenario_paths(kind: str) -> list[Path]:
    return sorted((ROOT / kind).glob("*.yaml"))


def _contains(got: str, want, where: str) -> None:
    for piece in ([want] if isinstance(want, str) else want):
        assert piece in got, f"{where}: {got!r} lacks {piece!r}"


def run_scenario(path: Path):
    doc = yaml.safe_load(path.read_text())
    assert doc.get("rule"), f"{path.name}: say which rule the scenario checks"
    snap = snapshot_from_dict(doc["snapshot"])
    actions = doc.get("actions")
    cycles = int(doc.get("cycles", 1))
    result = run_session(snap, actions) if cycles == 1 else run_cycles(snap, cycles, actions)
    out = result.to_contract()
    expect = doc["expect"]
    name = path.name
    for task, fields in (expect.get("tasks") or {}).items():
        got = out["tasks"][task]
        for key, want in fields.items():
            assert got[key] == want, f"{name}: task {task}.{key}: got {got[key]!r}, want {want!r}"
    for job, fields in (expect.get("jobs") or {}).items():
        got = out["jobs"][job]
        for key, want in fields.items():
            if key == "message_contains":
                _contains(got["message"], want, f"{name}: job {job} message")
            else:
                assert got[key] == want, f"{name}: job {job}.{key}: got {got[key]!r}, want {want!r}"
    if "evicted" in expect:
        assert sorted(out["evicted"]) == sorted(expect["evicted"] or []), \
            f"{name}: evicted {sorted(out['evicted'])}, want {sorted(expect['evicted'] or [])}"
    for task, want in (expect.get("committed_placements") or {}).items():
        got = result.committed_placements.get(task)
        assert got is not None and list(got) == want, f"{name}: committed placement of {task}: got {got!r}, want {want!r}"
    by_task = {e.task: e for e in result.evicted}
    for task, fields in (expect.get("evictions") or {}).items():
        assert task in by_task, f"{name}: {task} was not evicted"
        e = by_task[task]
        for key, want in fields.items():
            if key == "message_contains":
                _contains(e.message, want, f"{name}: eviction of {task} message")
            else:
                assert getattr(e, key) == want, f"{name}: eviction of {task}.{key}: got {getattr(e, key)!r}, want {want!r}"
    return result
