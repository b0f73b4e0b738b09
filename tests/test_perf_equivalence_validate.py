"""The direct ``validate`` reports exactly what the dict round trip (``validate_roundtrip``) reports.

Bad in-memory snapshots are made by setting one field of one object (node, queue, job, task, subgroup,
usage, config) to a bad value: wrong types, negative, NaN/inf, huge integers, floats for integer fields,
empty strings, unit strings, dangling references, duplicates. Both paths must agree on the outcome: no
error, the same :class:`SnapshotError` problems in the same order, or the same exception type.
"""

import copy
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.errors import SnapshotError
from scheduler.model import SubGroup, TaskUsage
from scheduler.snapshot_io import (cross_check_problems, load_snapshot, object_problems, snapshot_problems,
                                   validate, validate_roundtrip)
from strategies import snapshots

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "small-cluster.yaml"

BAD_VALUES = [None, -1, -2.5, 0, 1.5, 2.0, 3, "", "x", "4000m", "64Gi", True, False, float("nan"), float("inf"),
              -float("inf"), 2**1100, 1e308, [], ["a", ""], [0, -1], [7], {}, {"a": 1}, 10**6]

FIELDS = {
    "node": ["name", "gpus", "gpu_memory_mib", "gpu_model", "cpu_millis", "memory_bytes", "pods", "labels",
             "ready"],
    "external": ["gpus", "cpu_millis", "memory_bytes", "pods"],
    "queue": ["name", "parent", "priority", "creation_time", "display_name", "preempt_min_runtime_s",
              "reclaim_min_runtime_s"],
    "queue_resource": ["quota", "limit", "over_quota_weight"],
    "job": ["name", "namespace", "queue", "priority", "preemptible", "min_available", "creation_time",
            "last_start_time", "stale_since", "last_eviction_time", "preemption_delay_s", "stale_grace_period_s",
            "duration_s", "tasks", "subgroups"],
    "task": ["name", "gpu", "gpu_memory_mib", "gpu_devices", "cpu_millis", "memory_bytes", "status", "node",
             "gpu_groups", "gpu_indices", "subgroup", "creation_time", "usage"],
    "usage": ["gpu_memory_mib", "gpu_util"],
    "subgroup": ["name", "min_available"],
    "snapshot": ["time", "usage"],
    "config": ["k_value", "actions", "max_consolidation_preemptees", "stale_grace_period_s",
               "reclaimer_saturation_multiplier", "min_runtime_resolve"],
}


def outcome(check, snap):
    try:
        check(snap)
    except SnapshotError as exc:
        return ("SnapshotError", exc.problems)
    except Exception as exc:  # noqa: BLE001 - both paths must fail the same way
        return (type(exc).__name__,)
    return ("ok",)


def assert_same(snap):
    expected = outcome(validate_roundtrip, snap)
    assert outcome(validate, snap) == expected
    return expected


def targets(snap):
    """``(kind, object)`` for every object a mutation can hit."""
    out = [("node", n) for n in snap.nodes] + [("external", n.external) for n in snap.nodes]
    out += [("queue", q) for q in snap.queues]
    out += [("queue_resource", q.resource(r)) for q in snap.queues for r in ("gpu", "cpu", "memory")]
    out += [("job", j) for j in snap.jobs] + [("task", t) for j in snap.jobs for t in j.tasks]
    out += [("usage", t.usage) for j in snap.jobs for t in j.tasks if t.usage is not None]
    out += [("subgroup", sg) for j in snap.jobs for sg in j.subgroups]
    out += [("snapshot", snap), ("config", snap.config)]
    return out


def test_valid_example_passes_both():
    assert assert_same(load_snapshot(EXAMPLE)) == ("ok",)


def test_every_field_of_every_object_with_every_bad_value():
    base = load_snapshot(EXAMPLE)
    base.jobs[0].subgroups = [SubGroup("lead", 1)]
    base.jobs[0].tasks[0].subgroup = "lead"
    base.jobs[0].tasks[0].usage = TaskUsage(100, 0.5)
    base.nodes[0].external.pods = 1
    base.usage = {base.queues[-1].name: {"gpu": 0.5}}
    before = copy.deepcopy(base)
    seen_errors = 0
    for kind, obj in targets(base):
        for fld in FIELDS[kind]:
            original = getattr(obj, fld)
            for value in BAD_VALUES:
                setattr(obj, fld, copy.deepcopy(value))
                seen_errors += assert_same(base)[0] != "ok"
            setattr(obj, fld, original)
    assert base == before  # every mutation was undone, and validation changed nothing
    assert seen_errors > 1000  # the mutations really produce problems


def test_cross_object_problems_match():
    snap = load_snapshot(EXAMPLE)
    snap.nodes.append(copy.deepcopy(snap.nodes[0]))                  # duplicate node
    snap.queues[0].parent = snap.queues[-1].name                     # a cycle or a non-leaf job queue
    snap.jobs.append(copy.deepcopy(snap.jobs[0]))                    # duplicate job and task names
    snap.jobs[1].tasks[0].node = "nowhere"                           # unknown node (if it was placed)
    snap.jobs[1].tasks[0].status = "running"
    snap.jobs[2].queue = "no-such-queue"
    snap.usage = {"ghost": {"gpu": 1.0}}
    kind, *problems = assert_same(snap)
    assert kind == "SnapshotError" and len(problems[0]) >= 5


def test_gpu_placement_problems_match():
    snap = load_snapshot(EXAMPLE)
    gpu_node = next(n for n in snap.nodes if n.gpus)
    task = next(t for j in snap.jobs for t in j.tasks if t.is_gpu)
    task.status, task.node, task.gpu_indices = "running", gpu_node.name, [gpu_node.gpus, -1, 0]
    kind, problems = assert_same(snap)
    assert any("out of range" in m for _, m in problems) and any("negative" in m for _, m in problems)


@given(snapshots(), st.data())
def test_random_valid_snapshots_with_one_bad_field(snap, data):
    assert assert_same(snap) == ("ok",)
    kind, obj = data.draw(st.sampled_from(targets(snap)))
    fld = data.draw(st.sampled_from(FIELDS[kind]))
    setattr(obj, fld, copy.deepcopy(data.draw(st.sampled_from(BAD_VALUES))))
    assert_same(snap)


def test_helpers_agree_with_the_whole_check():
    snap = load_snapshot(EXAMPLE)
    assert snapshot_problems(snap) == [] and cross_check_problems(snap) == []
    snap.jobs[0].tasks[0].cpu_millis = -5
    assert object_problems(snap.jobs[0], 0) == snapshot_problems(snap)
    assert object_problems(snap.nodes[0]) == []
    snap.jobs[0].tasks[0].cpu_millis = math.nan
    assert object_problems(snap.jobs[0])[0][1].startswith("expected a finite number of millicores")
