"""``kaidash simulate``: a snapshot file carrying its own future jobs, frames written, summary printed."""

import json

import pandas as pd
import pytest

from scheduler.cli import main

SNAPSHOT = """
version: 1
time: 1000
config: {schedule_period_s: 10, actions: [allocate]}
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 32000, memory_bytes: 128Gi}
queues:
  - {name: a, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - name: a-1
    queue: a
    creation_time: 1000
    duration_s: 600
    tasks: [{name: a-1-0, gpu: 2, cpu_millis: 1000}]
  - name: b-1
    queue: b
    creation_time: 1095
    duration_s: 300
    tasks: [{name: b-1-0, gpu: 2, cpu_millis: 1000}]
"""


@pytest.fixture
def snapshot_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(SNAPSHOT)
    return path


def test_simulate_prints_a_json_summary_and_writes_csv_frames(snapshot_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", str(snapshot_file), "--hours", "0.5", "--out", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # a-1 starts at 1000 and ends at 1600; b-1 arrives at 1095, starts at the 1100 cycle, ends at 1400
    assert doc["totals"]["arrived"] == 1 and doc["totals"]["completed"] == 2      # arrived counts arrivals only
    by_queue = {q["queue"]: q for q in doc["queues"]}
    assert by_queue["a"]["jobs_completed"] == 1 and by_queue["a"]["mean_wait_s"] == 0
    assert by_queue["b"]["jobs_completed"] == 1 and by_queue["b"]["mean_wait_s"] == 5
    # a holds 2 GPUs for 600 of the 1800 simulated seconds: time-weighted mean 2/3
    assert by_queue["a"]["mean_allocated_gpu"] == pytest.approx(600 * 2 / 1800)
    jobs = pd.read_csv(out / "jobs.csv").set_index("job")
    assert jobs.loc["b-1", "completion"] == 1400 and jobs.loc["a-1", "completion"] == 1600
    for name in ("queues", "cluster", "evictions"):
        assert (out / f"{name}.csv").exists()


def test_simulate_table_and_parquet(snapshot_file, tmp_path, capsys):
    out = tmp_path / "pq"
    assert main(["simulate", str(snapshot_file), "--hours", "0.5", "--out", str(out), "--out-format", "parquet",
                 "--usage", "off"]) == 0
    text = capsys.readouterr().out
    assert "alloc GPU" in text and "fair GPU" in text
    rows = {line.split()[0] for line in text.splitlines()[2:] if line and not line.startswith("wrote")}
    assert {"a", "b"} <= rows
    queues = pd.read_parquet(out / "queues.parquet")
    assert set(queues["queue"]) == {"a", "b"}


def test_simulate_needs_exactly_one_input(capsys):
    assert main(["simulate", "--hours", "1"]) == 1
    assert "SNAPSHOT" in capsys.readouterr().err
