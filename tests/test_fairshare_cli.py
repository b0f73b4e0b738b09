"""``kaidash fairshare``: the calculator's input, JSON/table output and input errors."""

import json

import pytest
import yaml

from scheduler.cli import main

EXAMPLE = "examples/fairshare-worked-example.yaml"


def run_cli(capsys, *argv):
    code = main(["fairshare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, doc, name="in.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return str(path)


def test_worked_example_json(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    gpu = {q: v["gpu"] for q, v in doc["fair_share"].items()}
    # Top level is §b.4 (A=4, B=4, C=2). A's 4 GPUs: A-train quota 1, A-dev quota 1, 2 left; weights 3:1 give
    # shares 1.5 / 0.5 -> 1 and 0 with remainders .5/.5; the older A-train gets the last unit: 3 / 1.
    assert gpu == {"A": 4, "A-train": 3, "A-dev": 1, "B": 4, "C": 2}
    # CPU: deserved 16000 each, 16000 left split by weight between A (needs 16000 more) and C (32000 more):
    # 8000 each -> A 24000, B 16000, C 24000. A's children: 8000 each, A-dev satisfied, A-train +8000.
    cpu = {q: v["cpu"] for q, v in doc["fair_share"].items()}
    assert cpu == {"A": 24000, "A-train": 16000, "A-dev": 8000, "B": 16000, "C": 24000}
    # Nobody requests memory: all of it remains.
    assert doc["remaining"] == {"gpu": 0, "cpu": 0, "memory": 549755813888}


def test_json_input_and_parent_request_default(tmp_path, capsys):
    # P has no request of its own: it defaults to its children's sum 3 + 5 = 8.
    doc = {"total": {"gpu": 10},
           "queues": [{"name": "P", "gpu": {"quota": 0}}, {"name": "Q", "gpu": {"quota": 0, "request": 6}},
                      {"name": "p1", "parent": "P", "gpu": {"request": 3}},
                      {"name": "p2", "parent": "P", "gpu": {"request": 5}}]}
    # Top (W=2): shares 5/5; P 8 > 5 -> 5, Q 6 > 5 -> 5; nothing left. P's 5: shares 2.5/2.5; p1 3 > 2.5 -> 2,
    # p2 5 > 2.5 -> 2, remainders .5/.5, 1 left; same creation time -> name order: p1 gets it. p1=3, p2=2.
    code, out, _ = run_cli(capsys, write(tmp_path, doc, "in.json"), "--format", "json")
    assert code == 0
    gpu = {q: v["gpu"] for q, v in json.loads(out)["fair_share"].items()}
    assert gpu == {"P": 5, "Q": 5, "p1": 3, "p2": 2}
    doc["queues"][0]["gpu"]["request"] = 4
    # P requests 4 now: round 1 shares 5/5, P 4 <= 5 -> 4 (satisfied); Q -> 5; round 2: Q alone gets 1 -> 6.
    code, out, _ = run_cli(capsys, write(tmp_path, doc, "in2.json"), "--format", "json")
    gpu = {q: v["gpu"] for q, v in json.loads(out)["fair_share"].items()}
    assert gpu["P"] == 4 and gpu["Q"] == 6


def test_table_shows_deserved_fair_share_requested(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE, "--format", "table", "--resource", "gpu")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("GPU (GPUs): total 10")
    header = lines[1].split()
    assert header[:5] == ["queue", "priority", "weight", "limit", "deserved"]
    assert "fair" in header and "requested" in header
    row_a = next(line for line in lines if line.startswith("A "))
    # priority 100, weight 1, unlimited, deserved 2, fair share 4, requested 8, usage 0
    assert row_a.split() == ["A", "100", "1", "unlimited", "2", "4", "8", "0"]
    child = next(line for line in lines if "A-train" in line)
    assert child.startswith("  A-train")  # indented under its parent
    assert "CPU" not in out  # --resource gpu


def test_explain_prints_each_phase(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE, "--explain", "--resource", "gpu")
    assert code == 0
    assert "phase 1 - deserved" in out
    assert "B: min(deserved 3, requestable 4) = 3" in out
    assert "left after phase 1: 4 GPUs" in out
    assert "A (priority 100, remainder 0.5): given 1" in out
    assert "children of A" in out


def test_explain_with_json_keeps_stdout_json(capsys):
    code, out, err = run_cli(capsys, EXAMPLE, "--format", "json", "--explain")
    assert code == 0
    json.loads(out)
    assert "phase 2" in err


@pytest.mark.parametrize("mutate, path, words", [
    (lambda d: d["queues"][1]["gpu"].update(quotaa=1), "queues[B].gpu.quotaa", "unknown key"),
    (lambda d: d["queues"][1]["gpu"].update(request=-2), "queues[B].gpu.request", "negative quantity"),
    (lambda d: d["queues"][0].update(colour="red"), "queues[A].colour", "unknown key"),
    (lambda d: d["queues"][1]["gpu"].update(limit=-3), "queues[B].gpu.limit", "use -1 for unlimited"),
    (lambda d: d["queues"][0].update(parent="B") or d["queues"][1].update(parent="A"), "queues[A].parent",
     "cycle in the queue tree: A -> B -> A"),
    (lambda d: d["queues"][1].update(parent="nope"), "queues[B].parent", "does not exist"),
    (lambda d: d["total"].update(gpu="ten"), "total.gpu", "expected a number"),
    (lambda d: d.update(nodes=[]), "nodes", "unknown key"),
])
def test_input_errors_name_queue_and_field(tmp_path, capsys, mutate, path, words):
    doc = {"total": {"gpu": 10}, "queues": [{"name": "A", "gpu": {"quota": 2, "request": 8}},
                                            {"name": "B", "gpu": {"quota": 3, "request": 4}}]}
    mutate(doc)
    code, out, err = run_cli(capsys, write(tmp_path, doc), "--format", "json")
    assert code == 1
    assert out == ""
    assert "invalid fair-share input" in err
    assert f"{path}: " in err and words in err


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, str(tmp_path / "nope.yaml"))
    assert code == 1 and "nope.yaml" in err and "cannot read" in err
