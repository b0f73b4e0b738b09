"""Snapshot format v1: round trips and one clear error per kind of bad input."""

import json

import pytest

from scheduler.errors import SnapshotError
from scheduler.snapshot_io import dumps_snapshot, load_snapshot, loads_snapshot, save_snapshot, snapshot_to_dict

BASE = """
version: 1
nodes: [{name: n1, gpus: 2, gpu_memory_mib: 81920, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: dept}, {name: team, parent: dept}]
jobs: [{name: j1, queue: team, tasks: [{name: t1, gpu: 1, cpu_millis: 1000, memory_bytes: 1Gi}]}]
"""


def _problems(text):
    with pytest.raises(SnapshotError) as info:
        loads_snapshot(text)
    return info.value.problems


def test_units_and_defaults_are_applied():
    snap = loads_snapshot(BASE)
    node = snap.nodes[0]
    assert node.memory_bytes == 64 * 2**30
    assert node.ready is True and node.pods == 110
    team = snap.queue_map()["team"]
    assert team.parent == "dept" and team.priority == 100
    assert team.gpu.limit == -1 and team.gpu.over_quota_weight == 1 and team.gpu.quota == 0
    job = snap.jobs[0]
    assert job.priority == 50 and job.is_preemptible and job.min_available == 1
    assert job.tasks[0].status == "pending"


@pytest.mark.parametrize("name", ["worked-example.yaml", "small-cluster.yaml"])
def test_examples_round_trip_yaml_and_json(tmp_path, name):
    snap = load_snapshot(f"examples/{name}")
    for ext in ("yaml", "json"):
        out = tmp_path / f"s.{ext}"
        save_snapshot(snap, out)
        again = load_snapshot(out)
        assert snapshot_to_dict(again) == snapshot_to_dict(snap)
    assert json.loads(dumps_snapshot(snap, "json"))["version"] == 1


def test_unknown_key_names_its_path():
    problems = _problems(BASE.replace("gpu: 1,", "gpu: 1, gpus: 1,"))
    assert problems == [("(text): jobs[j1].tasks[t1].gpus", problems[0][1])]
    assert "unknown key 'gpus'" in problems[0][1]


def test_top_level_unknown_key():
    problems = _problems(BASE + "nodess: []\n")
    assert problems[0][0].endswith("nodess") and "unknown key" in problems[0][1]


@pytest.mark.parametrize("bad, path, words", [
    ("cpu_millis: 8000", "nodes[n1].cpu_millis", "wrong unit 'Gi'"),
    ("memory_bytes: 64Gi}]\nqueues", "nodes[n1].memory_bytes", "wrong unit 'm'"),
])
def test_wrong_unit(bad, path, words):
    text = BASE.replace("cpu_millis: 8000", "cpu_millis: 8Gi") if "cpu" in bad else BASE.replace("memory_bytes: 64Gi}]\nqueues", "memory_bytes: 64m}]\nqueues")
    problems = _problems(text)
    assert any(p.endswith(path) and words in m for p, m in problems), problems


def test_negative_quantity():
    problems = _problems(BASE.replace("gpu: 1,", "gpu: -2,"))
    assert any(p.endswith("jobs[j1].tasks[t1].gpu") and "negative" in m for p, m in problems)


def test_minus_one_is_allowed_only_as_unlimited():
    snap = loads_snapshot(BASE.replace("{name: dept}", "{name: dept, gpu: {quota: -1, limit: -1}}"))
    assert snap.queue_map()["dept"].gpu.quota == -1
    problems = _problems(BASE.replace("{name: dept}", "{name: dept, gpu: {quota: -2}}"))
    assert any(p.endswith("queues[dept].gpu.quota") and "use -1 for unlimited" in m for p, m in problems)


def test_missing_parent():
    problems = _problems(BASE.replace("parent: dept", "parent: nosuch"))
    assert any(p.endswith("queues[team].parent") and "'nosuch' does not exist" in m for p, m in problems)


def test_cycle_in_queue_tree():
    problems = _problems(BASE.replace("{name: dept}", "{name: dept, parent: team}"))
    assert any("cycle in the queue tree" in m and ("team -> dept -> team" in m or "dept -> team -> dept" in m)
               for _, m in problems)


def test_task_on_unknown_node():
    problems = _problems(BASE.replace("memory_bytes: 1Gi}", "memory_bytes: 1Gi, status: running, node: ghost}"))
    assert any(p.endswith("jobs[j1].tasks[t1].node") and "unknown node 'ghost'" in m for p, m in problems)


def test_job_in_non_leaf_queue():
    problems = _problems(BASE.replace("queue: team", "queue: dept"))
    assert any(p.endswith("jobs[j1].queue") and "not a leaf queue" in m for p, m in problems)


def test_running_task_needs_node_and_gpu_index_in_range():
    problems = _problems(BASE.replace("memory_bytes: 1Gi}", "memory_bytes: 1Gi, status: running}"))
    assert any(p.endswith("tasks[t1].node") and "must name its node" in m for p, m in problems)
    problems = _problems(BASE.replace("memory_bytes: 1Gi}", "memory_bytes: 1Gi, status: running, node: n1, gpu_index: 5}"))
    assert any(p.endswith("tasks[t1].gpu_index") and "out of range" in m for p, m in problems)


def test_every_problem_is_reported_not_just_the_first():
    text = BASE.replace("gpu: 1,", "gpu: -1,").replace("parent: dept", "parent: nosuch")
    assert len(_problems(text)) >= 2


def test_truncated_file_gets_a_clear_error(tmp_path):
    full = (tmp_path / "full.json")
    save_snapshot(load_snapshot("examples/small-cluster.yaml"), full)
    cut = tmp_path / "cut.json"
    cut.write_text(full.read_text()[: len(full.read_text()) // 2])
    with pytest.raises(SnapshotError) as info:
        load_snapshot(cut)
    assert "cut.json" in str(info.value) and "not valid JSON" in str(info.value)


def test_whole_gpu_requests_above_one_must_be_whole():
    problems = _problems(BASE.replace("gpu: 1,", "gpu: 1.5,"))
    assert any(p.endswith("tasks[t1].gpu") and "must be whole" in m for p, m in problems)


def test_unknown_status_and_placement_strategy():
    problems = _problems(BASE.replace("memory_bytes: 1Gi}", "memory_bytes: 1Gi, status: sleeping}") +
                         "config: {placement: {gpu: tetris}}\n")
    assert any(p.endswith("tasks[t1].status") for p, _ in problems)
    assert any(p.endswith("config.placement.gpu") and "'tetris'" in m for p, m in problems)
