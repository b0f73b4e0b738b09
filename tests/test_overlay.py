"""The session's decisions as an overlay on the observed cluster: only decisions, each marked "KAI would"."""

from pathlib import Path

import yaml

from scheduler.engine import run_session
from scheduler.overlay import OVERLAY_COLUMNS, session_overlay
from scheduler.snapshot_io import snapshot_from_dict

SCENARIO = Path(__file__).parent / "scenarios" / "reclaim" / "department-levels-respected.yaml"


def test_reclaim_overlay_lists_evictions_and_pipelined_binds_but_no_invented_devices():
    snap = snapshot_from_dict(yaml.safe_load(SCENARIO.read_text())["snapshot"])
    result = run_session(snap)
    ov = session_overlay(snap, result)
    assert list(ov.columns) == OVERLAY_COLUMNS
    evict = ov[ov["action"] == "evict"].set_index("task")
    assert set(evict.index) == {"t1-c-0", "t1-d-0"}
    assert evict.loc["t1-d-0", "from_node"] == "n1" and evict.loc["t1-d-0", "cause"] == "reclaim for t2-a"
    binds = ov[ov["action"] == "pipeline"]
    assert set(binds["task"]) == {"t2-a-0", "t2-b-0"} and set(binds["node"]) == {"n1"}
    assert all(t.startswith("KAI would ") for t in ov["text"])
    # running pods the session kept (even where it wrote a device index on them) are not decisions
    kept = {t.name for _, t in result.snapshot.iter_tasks() if t.status == "running"}
    assert not kept & set(ov["task"])
    # the observed snapshot is untouched: the overlay is a separate layer
    assert all(t.status in ("running", "pending") and not t.gpu_indices for _, t in snap.iter_tasks())


def test_a_whole_gpu_bind_names_the_node_not_a_device():
    """KAI binds whole-GPU pods to a node; the device plugin picks the GPUs: the session's index is not shown."""
    snap = snapshot_from_dict({"nodes": [{"name": "n1", "gpus": 4, "gpu_memory_mib": 40000}],
                               "queues": [{"name": "q", "gpu": {"quota": 4}}],
                               "jobs": [{"name": "w", "queue": "q", "creation_time": 0,
                                         "tasks": [{"name": "w-0", "gpu": 1, "status": "running", "node": "n1"}]},
                                        {"name": "a", "queue": "q", "creation_time": 1,
                                         "tasks": [{"name": "a-0", "gpu": 2}]}]})
    result = run_session(snap, ["allocate"])
    assert result.tasks["a-0"].gpu_indices                       # the session did pick indices for itself
    ov = session_overlay(snap, result)
    assert list(ov["action"]) == ["bind", "bind"] and list(ov["gpu_index"]) == [-1, -1]
    assert ov["text"].iloc[0] == "KAI would bind a-0 to n1 (2 GPUs; the device plugin picks which)"
    assert session_overlay(snap, None).empty


def test_a_fractional_pod_joining_an_observed_group_gets_that_device():
    snap = snapshot_from_dict({"nodes": [{"name": "n1", "gpus": 2, "gpu_memory_mib": 40000}],
                               "queues": [{"name": "q", "gpu": {"quota": 2}}],
                               "jobs": [{"name": "s", "queue": "q", "creation_time": 0,
                                         "tasks": [{"name": "s-0", "gpu": 0.5, "status": "running", "node": "n1",
                                                    "gpu_group": "g1", "gpu_index": 1}]},
                                        {"name": "f", "queue": "q", "creation_time": 1,
                                         "tasks": [{"name": "f-0", "gpu": 0.5}]}]})
    result = run_session(snap, ["allocate"])
    ov = session_overlay(snap, result).set_index("task")
    if result.tasks["f-0"].gpu_groups == ["g1"]:                 # packed onto the shared GPU (binpack)
        assert ov.loc["f-0", "gpu_index"] == 1 and ov.loc["f-0", "text"] == "KAI would bind f-0 to n1 GPU 1"
    else:                                                         # a new group: its device is the plugin's choice
        assert ov.loc["f-0", "gpu_index"] == -1
