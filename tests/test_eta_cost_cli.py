"""``kaidash eta`` and ``kaidash cost``: formats, what-if, history tables, prices and clear errors."""

import io
import json

import pandas as pd
import pytest

from scheduler.cli import main

T0 = 1_767_225_600

SNAP = f"""
version: 1
time: {T0}
nodes:
  - {{name: n1, gpus: 8, gpu_model: NVIDIA-H100-80GB-HBM3, gpu_memory_mib: 81920, cpu_millis: 64000,
     memory_bytes: 512Gi, labels: {{kai.scheduler/node-pool: h100}}}}
queues:
  - {{name: team, gpu: {{quota: 8}}, cpu: {{quota: -1}}, memory: {{quota: -1}}}}
jobs:
  - {{name: a, queue: team, creation_time: {T0 - 900}, last_start_time: {T0 - 600}, duration_s: 1800,
     tasks: [{{name: a-0, gpu: 6, status: running, node: n1, gpu_index: [0, 1, 2, 3, 4, 5],
              usage: {{gpu_util: 0.0}}}}]}}
  - {{name: b, queue: team, creation_time: {T0 - 300}, duration_s: 600, tasks: [{{name: b-0, gpu: 4}}]}}
"""


@pytest.fixture
def snap_file(tmp_path):
    path = tmp_path / "snap.yaml"
    path.write_text(SNAP)
    return path


def test_eta_table_json_and_csv(snap_file, capsys):
    assert main(["eta", str(snap_file), "--no-arrivals"]) == 0
    out = capsys.readouterr().out
    assert "Pending ETA" in out and "after a finishes" in out and "recorded" in out
    assert main(["eta", str(snap_file), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (b,) = doc["pending"]
    assert b["job"] == "b" and b["p50_s"] == 1260 and b["blocker_job"] == "a" and doc["runs"] == 1
    assert doc["running"][0]["duration_source"] == "recorded"
    assert main(["eta", str(snap_file), "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame["job"]) == ["b"] and frame["eta_p50_s"].item() == 1260


def test_eta_whatif_and_history(snap_file, tmp_path, capsys):
    assert main(["eta", str(snap_file), "--whatif", '{"nodes": {"h100": 1}}', "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame["eta_p50_before_s"].item() == 1260 and frame["eta_p50_after_s"].item() == 0
    history = tmp_path / "jobs.csv"
    pd.DataFrame({"job": [f"team/x-{i}" for i in range(6)], "queue": "team", "arrival": T0 - 9000.0,
                  "first_start": T0 - 8000.0, "last_start": T0 - 8000.0,
                  "completion": [T0 - 8000.0 + 1000 + 60 * i for i in range(6)], "status": "completed"}
                 ).to_csv(history, index=False)
    assert main(["eta", str(snap_file), "--history", str(history), "--ignore-durations", "--runs", "3",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["running"][0]["duration_source"] == "history: team (n=6)" and doc["runs"] == 3


def test_eta_errors_name_the_input(snap_file, tmp_path, capsys):
    bad = tmp_path / "h.csv"
    bad.write_text("job,queue\nx,team\n")
    assert main(["eta", str(snap_file), "--history", str(bad)]) == 1
    assert "missing columns" in capsys.readouterr().err
    assert main(["eta", str(snap_file), "--whatif", '{"nodes": {"gpu-pool": 1}}']) == 1
    assert "whatif.nodes[gpu-pool]" in capsys.readouterr().err
    assert main(["eta", str(snap_file), "--runs", "0"]) == 2


def test_cost_table_csv_and_prices(snap_file, tmp_path, capsys):
    assert main(["cost", str(snap_file)]) == 0
    out = capsys.readouterr().out
    assert "idle_allocated  6.00" in out and "examples prices" in out
    prices = tmp_path / "prices.yaml"
    prices.write_text("currency: EUR\ngpu_hour: {H100: 3.0}\n")
    assert main(["cost", str(snap_file), "--prices", str(prices), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["currency"] == "EUR" and doc["cluster_per_hour"]["idle_allocated"] == 18.0
    assert doc["per_queue_per_hour"]["team"]["allocated"] == 18.0
    assert main(["cost", str(snap_file), "--gpu-hour", "H100=1", "--format", "csv"]) == 0
    rows = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert rows.loc[rows["category"] == "capacity", "cost_per_h"].item() == 8.0


def test_cost_errors_and_ledger(snap_file, tmp_path, capsys):
    bad = tmp_path / "prices.yaml"
    bad.write_text("gpu_hour: {H100: cheap}\n")
    assert main(["cost", str(snap_file), "--prices", str(bad)]) == 1
    assert "gpu_hour.H100: expected a price >= 0" in capsys.readouterr().err
    assert main(["cost"]) == 2
    from scheduler.cost import CostLedger, cost_rates
    from scheduler.snapshot_io import load_snapshot
    rates = cost_rates(load_snapshot(snap_file))
    ledger = CostLedger(max_gap_s=7200)
    ledger.add(rates, at=T0 + 3600)
    ledger.add(rates, at=T0 + 7200)
    path = tmp_path / "ledger.csv"
    ledger.to_csv(path)
    assert main(["cost", "--ledger", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["30 days"]["cost"]["capacity"] == 32.0 and doc["last day"]["covered_h"] == 1.0
