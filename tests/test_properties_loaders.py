"""Property-based tests of the snapshot loader (scheduler.snapshot_io) on random documents.

- Every valid document loads, keeps its content (names, counts, quantities after unit conversion, placements)
  and round-trips through save -> load in YAML and JSON to an equal document.
- Every document with one mutation (unknown key, negative quantity, wrong unit, dangling parent, cycle, task
  on an unknown node, job in a non-leaf queue, wrong type) raises SnapshotError naming the mutated object and
  field, and nothing else.
- Truncated text and arbitrary values in any field give a SnapshotError or a snapshot, never another exception.

Strategies live in tests/strategies.py. Hypothesis runs derandomized (tests/conftest.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.errors import SnapshotError
from scheduler.snapshot_io import (
    dumps_snapshot,
    load_snapshot,
    loads_snapshot,
    save_snapshot,
    snapshot_from_dict,
    snapshot_to_dict,
)
from strategies import dump, invalid_docs, snapshot_docs

FORMATS = ["yaml", "json"]


def _quantity(value, unit: str) -> float:
    """The number a quantity written by the strategies stands for (independent of the loader's parser)."""
    if not isinstance(value, str):
        return float(value)
    if unit == "bytes" and value.endswith("Gi"):
        return float(value[:-2]) * 2**30
    if unit == "millicores" and value.endswith("m"):
        return float(value[:-1])
    if unit == "MiB" and value.endswith("Gi"):
        return float(value[:-2]) * 1024
    raise AssertionError(f"strategy wrote an unexpected quantity {value!r} for {unit}")


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------------------------- valid

@settings(max_examples=150)
@given(snapshot_docs())
def test_valid_documents_load_with_their_content(doc):
    snap = snapshot_from_dict(doc)
    assert [n.name for n in snap.nodes] == [n["name"] for n in doc["nodes"]]
    assert [q.name for q in snap.queues] == [q["name"] for q in doc["queues"]]
    assert [j.name for j in snap.jobs] == [j["name"] for j in doc["jobs"]]
    for node, nd in zip(snap.nodes, doc["nodes"]):
        assert node.gpus == nd["gpus"]
        assert node.cpu_millis == _quantity(nd["cpu_millis"], "millicores")
        assert node.memory_bytes == _quantity(nd["memory_bytes"], "bytes")
        if nd["gpus"]:
            assert node.gpu_memory_mib == _quantity(nd["gpu_memory_mib"], "MiB")
    for queue, qd in zip(snap.queues, doc["queues"]):
        assert queue.parent == qd.get("parent")
        for resource in ("gpu", "cpu", "memory"):
            rd = qd.get(resource, {})
            got = queue.resource(resource)
            assert (got.quota, got.limit, got.over_quota_weight) == (
                rd.get("quota", 0), rd.get("limit", -1), rd.get("over_quota_weight", 1))
    for job, jd in zip(snap.jobs, doc["jobs"]):
        assert job.queue == jd["queue"] and job.min_available == jd["min_available"]
        for task, td in zip(job.tasks, jd["tasks"], strict=True):
            assert task.name == td["name"]
            assert task.status == td.get("status", "pending")
            assert task.node == td.get("node")
            assert task.gpu_indices == _as_list(td.get("gpu_index", []))
            assert task.gpu_groups == _as_list(td.get("gpu_group", []))
            assert task.cpu_millis == _quantity(td["cpu_millis"], "millicores")
            assert task.memory_bytes == _quantity(td["memory_bytes"], "bytes")
            assert task.gpu_devices == td.get("gpu_devices", 1)


@settings(max_examples=100)
@given(snapshot_docs(), st.sampled_from(FORMATS))
def test_valid_documents_round_trip_through_text(doc, fmt):
    first = snapshot_from_dict(doc)
    expected = snapshot_to_dict(first)
    # As a user would write the document, and as kaidash writes it back.
    assert snapshot_to_dict(loads_snapshot(dump(doc, fmt), fmt=fmt)) == expected
    again = loads_snapshot(dumps_snapshot(first, fmt), fmt=fmt)
    assert snapshot_to_dict(again) == expected
    # Saving is idempotent: a second save gives the same text.
    assert dumps_snapshot(again, fmt) == dumps_snapshot(first, fmt)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=snapshot_docs())
def test_valid_documents_round_trip_through_files(doc, tmp_path):
    first = snapshot_from_dict(doc)
    for suffix in (".yaml", ".yml", ".json"):
        path = tmp_path / f"snapshot{suffix}"
        save_snapshot(first, path)
        assert snapshot_to_dict(load_snapshot(path)) == snapshot_to_dict(first)


# ---------------------------------------------------------------------------------------------- invalid

def _check_problems(problems, expectation):
    assert problems, "SnapshotError with no problems"
    assert any(expectation.matches(path, msg) for path, msg in problems), (
        f"{expectation.mutation}: no problem names {' or '.join(expectation.objects)} field "
        f"{expectation.field!r} with {expectation.words!r}; got {problems}")


@settings(max_examples=200)
@given(invalid_docs())
def test_one_mutation_is_reported_on_the_mutated_object_and_field(case):
    doc, expectation = case
    with pytest.raises(SnapshotError) as info:
        snapshot_from_dict(doc)
    _check_problems(info.value.problems, expectation)


@settings(max_examples=100)
@given(invalid_docs(), st.sampled_from(FORMATS))
def test_one_mutation_in_text_is_reported_with_the_source_name(case, fmt):
    doc, expectation = case
    with pytest.raises(SnapshotError) as info:
        loads_snapshot(dump(doc, fmt), name=f"cluster.{fmt}", fmt=fmt)
    _check_problems(info.value.problems, expectation)
    assert all(path.startswith(f"cluster.{fmt}: ") for path, _ in info.value.problems)


@settings(max_examples=100)
@given(snapshot_docs(), st.floats(0, 1, exclude_max=True))
def test_truncated_json_is_always_a_snapshot_error_naming_the_file(doc, where):
    text = dump(doc, "json")
    cut = text[: int(where * len(text))]  # any strict prefix of a JSON object is invalid JSON
    with pytest.raises(SnapshotError) as info:
        loads_snapshot(cut, name="cut.json", fmt="json")
    [(path, message)] = info.value.problems
    assert path == "cut.json" and "not valid JSON" in message and "line" in message


@settings(max_examples=100)
@given(snapshot_docs(), st.floats(0, 1, exclude_max=True))
def test_truncated_yaml_loads_or_raises_a_snapshot_error_only(doc, where):
    """A YAML prefix can still be a valid (smaller) document; if it is not, the error names the file."""
    text = dump(doc, "yaml")
    cut = text[: int(where * len(text))]
    try:
        loads_snapshot(cut, name="cut.yaml")
    except SnapshotError as exc:
        assert exc.problems and all(path.startswith("cut.yaml") for path, _ in exc.problems)


def test_truncated_file_on_disk_names_the_file():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "half.json"
        path.write_text('{"version": 1, "nodes": [{"name": "n0", "gpus": 8, "gpu_memory_mib": 819')
        with pytest.raises(SnapshotError) as info:
            load_snapshot(path)
    assert info.value.path == str(path) and "line 1" in info.value.problems[0][1]


# Any JSON value, including huge integers, deep nesting, odd strings.
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from([10**400, -10**400])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=200)
@given(snapshot_docs(), st.data())
def test_any_value_in_any_field_gives_a_snapshot_or_a_snapshot_error(doc, data):
    """Garbage in one field (of the document, a node, queue, job or task) never escapes as another exception."""
    holders = [doc] + doc["nodes"] + doc["queues"] + doc["jobs"] + [t for j in doc["jobs"] for t in j["tasks"]]
    holder = data.draw(st.sampled_from(holders))
    key = data.draw(st.sampled_from(sorted(holder)) | st.text(max_size=6))
    holder[key] = data.draw(_json_values)
    try:
        snapshot_from_dict(doc)
    except SnapshotError as exc:
        assert exc.problems and all(isinstance(p, str) and isinstance(m, str) for p, m in exc.problems)
