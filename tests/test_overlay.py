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


def test_bind_rows_carry_the_chosen_devices():
    snap = snapshot_from_dict({"nodes": [{"name": "n1", "gpus": 4, "gpu_memory_mib": 40000}],
                               "queues": [{"name": "q", "gpu": {"quota": 4}}],
                               "jobs": [{"name": "a", "queue": "q", "creation_time": 1,
                                         "tasks": [{"name": "a-0", "gpu": 2}]}]})
    ov = session_overlay(snap, run_session(snap, ["allocate"]))
    assert list(ov["action"]) == ["bind", "bind"] and sorted(ov["gpu_index"]) == [0, 1]
    assert ov["text"].iloc[0] == "KAI would bind a-0 to n1 GPU 0,1"
    assert session_overlay(snap, None).empty
