"""``kaidash schedule``: the JSON output contract of design.md, the table, cycles and errors."""

import json

import pytest

from scheduler.cli import main
from scheduler.engine import advance, run_cycles, run_session
from scheduler.snapshot_io import loads_snapshot, save_snapshot

SNAP = """
version: 1
nodes: [{name: n1, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 32Gi}]
queues: [{name: team, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: a, queue: team, creation_time: 1, tasks: [{name: a-0, gpu: 0.5}]}
  - {name: b, queue: team, creation_time: 2, tasks: [{name: b-0, gpu: 2}]}
"""


@pytest.fixture
def snap_file(tmp_path):
    path = tmp_path / "snap.yaml"
    path.write_text(SNAP)
    return path


def test_json_contract(snap_file, capsys):
    assert main(["schedule", str(snap_file), "--actions", "allocate", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"fair_share", "tasks", "jobs", "evicted", "timings_ms"}
    # quota 2 of 2.5 requested GPUs; nothing requests CPU or memory, so their fair share is 0 (§b.3)
    assert doc["fair_share"]["team"] == {"gpu": 2.0, "cpu": 0.0, "memory": 0.0}
    assert doc["tasks"]["a-0"] == {"status": "binding", "node": "n1", "gpu_group": "n1-gpu0-0", "gpu_index": 0,
                                   "gpu_index_source": "session", "observed_gpu_index": None}
    assert doc["tasks"]["b-0"] == {"status": "pending", "node": None, "gpu_group": None, "gpu_index": None,
                                   "gpu_index_source": None, "observed_gpu_index": None}
    assert doc["jobs"]["a"] == {"status": "binding", "reason": None, "message": "", "gpus_accepted": 0.5}
    assert doc["jobs"]["b"]["reason"] == "PodSchedulingErrors"
    assert "need 2, max free 1" in doc["jobs"]["b"]["message"]
    assert doc["evicted"] == []
    assert {"fair_share", "allocate", "total"} <= set(doc["timings_ms"])


def test_table_is_aligned_and_names_sections(snap_file, capsys):
    assert main(["schedule", str(snap_file), "--actions", "allocate", "--format", "table"]) == 0
    out = capsys.readouterr().out
    for section in ("Fair share per queue", "Jobs (2)", "Tasks changed this session (1)", "Evictions (0)", "Timings (ms)"):
        assert section in out
    lines = out.splitlines()
    header = next(l for l in lines if l.startswith("JOB "))
    row = next(l for l in lines if l.startswith("b "))
    assert header.index("STATUS") == row.index("pending")  # columns line up
    assert "a-0" in out and "pending → binding" in out


def test_cycles_apply_binding_to_running(snap_file, capsys):
    assert main(["schedule", str(snap_file), "--actions", "allocate", "--cycles", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tasks"]["a-0"]["status"] == "running"
    assert doc["tasks"]["a-0"]["gpu_group"] == "n1-gpu0-0"  # stable id across cycles


def test_unknown_action_and_missing_file_are_clear_errors(snap_file, tmp_path, capsys):
    assert main(["schedule", str(snap_file), "--actions", "alocate"]) == 1
    assert "unknown action 'alocate'" in capsys.readouterr().err
    assert main(["schedule", str(tmp_path / "nope.yaml")]) == 1
    assert "cannot read file" in capsys.readouterr().err


def test_input_snapshot_is_not_mutated_and_after_snapshot_reflects_decisions():
    snap = loads_snapshot(SNAP)
    before = [(t.name, t.status, t.node) for _, t in snap.iter_tasks()]
    result = run_session(snap, ["allocate"])
    assert [(t.name, t.status, t.node) for _, t in snap.iter_tasks()] == before
    after = {t.name: t for _, t in result.snapshot.iter_tasks()}
    assert after["a-0"].status == "binding" and after["a-0"].gpu_groups == ["n1-gpu0-0"]
    assert result.snapshot.job_map()["a"].last_start_time == snap.time


def test_advance_transitions():
    text = SNAP.replace("tasks: [{name: b-0, gpu: 2}]",
                        "tasks: [{name: b-0, gpu: 1, status: releasing, node: n1, gpu_index: 1}]")
    snap = loads_snapshot(text.replace("tasks: [{name: a-0, gpu: 0.5}]",
                                       "tasks: [{name: a-0, gpu: 1, status: pipelined, node: n1}]"))
    nxt = {t.name: t for _, t in advance(snap).iter_tasks()}
    assert (nxt["a-0"].status, nxt["a-0"].node) == ("pending", None)
    assert (nxt["b-0"].status, nxt["b-0"].node, nxt["b-0"].gpu_indices) == ("pending", None, [])


def test_run_cycles_gathers_evictions_and_sums_timings():
    snap = loads_snapshot(SNAP)
    result = run_cycles(snap, 3, ["allocate"])
    assert result.tasks["a-0"].status == "running"
    assert result.timings_ms["total"] > 0
    with pytest.raises(ValueError):
        run_cycles(snap, 0)


OBSERVED = """
version: 1
nodes: [{name: n1, gpus: 4, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 32Gi}]
queues: [{name: team, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: seen, queue: team, creation_time: 1,
     tasks: [{name: seen-0, gpu: 1, status: running, node: n1, gpu_index: 2}]}
  - {name: whole, queue: team, creation_time: 2, tasks: [{name: whole-0, gpu: 1, status: running, node: n1}]}
  - {name: new, queue: team, creation_time: 3, tasks: [{name: new-0, gpu: 1}]}
"""


def test_json_says_which_gpu_indices_are_observed_and_which_the_session_chose(tmp_path, capsys):
    """A running whole-GPU pod whose device the source did not know (the kube source never does) gets a
    device from the session; the JSON marks it chosen, keeps the observed one apart, and marks a recorded
    index observed."""
    path = tmp_path / "obs.yaml"
    path.write_text(OBSERVED)
    assert main(["schedule", str(path), "--actions", "allocate", "--format", "json"]) == 0
    tasks = json.loads(capsys.readouterr().out)["tasks"]
    assert (tasks["seen-0"]["gpu_index"], tasks["seen-0"]["gpu_index_source"]) == (2, "observed")
    assert tasks["seen-0"]["observed_gpu_index"] == 2
    assert tasks["new-0"]["gpu_index_source"] == "session" and tasks["new-0"]["observed_gpu_index"] is None
    whole = tasks["whole-0"]
    assert whole["observed_gpu_index"] is None
    assert whole["gpu_index_source"] == ("session" if whole["gpu_index"] is not None else None)
    assert main(["schedule", str(path), "--actions", "allocate"]) == 0
    table = capsys.readouterr().out
    assert "(chosen)" in table and "not one the cluster reported" in table
