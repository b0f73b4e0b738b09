"""Conformance-style allocate scenarios: ``tests/scenarios/allocate/*.yaml``.

Each file holds ``rule`` (what it checks, with the kai-semantics section), a ``snapshot`` (format v1) and
``expect``: per task ``{status, node, gpu_group, gpu_index}`` and per job ``{status, reason, gpus_accepted,
message_contains}`` — only the fields given are compared. Expectations were derived by hand from the rule.
"""

from pathlib import Path

import pytest
import yaml

from scheduler.engine import run_session
from scheduler.snapshot_io import snapshot_from_dict

SCENARIOS = sorted((Path(__file__).parent / "scenarios" / "allocate").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path):
    doc = yaml.safe_load(path.read_text())
    assert doc.get("rule"), f"{path.name}: say which rule the scenario checks"
    snap = snapshot_from_dict(doc["snapshot"])
    result = run_session(snap, doc.get("actions", ["allocate"]))
    out = result.to_contract()
    expect = doc["expect"]
    for task, fields in (expect.get("tasks") or {}).items():
        got = out["tasks"][task]
        for key, want in fields.items():
            assert got[key] == want, f"{path.name}: task {task}.{key}: got {got[key]!r}, want {want!r}"
    for job, fields in (expect.get("jobs") or {}).items():
        got = out["jobs"][job]
        for key, want in fields.items():
            if key == "message_contains":
                for piece in ([want] if isinstance(want, str) else want):
                    assert piece in got["message"], f"{path.name}: job {job} message {got['message']!r} lacks {piece!r}"
            elif key == "gpus_accepted":
                assert got[key] == pytest.approx(want), f"{path.name}: job {job}.{key}: got {got[key]!r}, want {want!r}"
            else:
                assert got[key] == want, f"{path.name}: job {job}.{key}: got {got[key]!r}, want {want!r}"
    for queue, fields in (expect.get("fair_share") or {}).items():
        for res, want in fields.items():
            assert out["fair_share"][queue][res] == pytest.approx(want)


def test_there_are_scenarios():
    assert len(SCENARIOS) >= 15
