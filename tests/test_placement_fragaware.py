"""Fragmentation-aware placement (``placement.gpu: fragaware``, issue 8) in the engine.

The cluster, worked by hand (FGD fragment, ``scheduler/quality/fragmentation.py``):

* ``na``: 2 idle GPUs, ``nb``: 3 idle GPUs (plenty of CPU on both).
* Pending, one queue: ``frac`` (0.5 GPU, oldest) and three 2-GPU jobs ``big0..2``.
* Target workload = pending + running GPU shapes: 2 GPUs ×3, 0.5 GPU ×1 → p = 0.75 / 0.25 (95% cut keeps
  both: cumulative 3 < 3.8 ≤ 4).

Bin-pack scores ``frac`` by whole free GPUs: na (2 free) 9, nb (3 free) 0 → na. That strands na: its
GPUs are then (0.5, 1) and no 2-GPU job fits there any more.

fragaware: placing 0.5 on na turns the 2-GPU shape's fragment from 0 to the whole 1.5 idle (it no longer
fits) → ΔF = 0.75·1500 = 1125 milli; on nb the GPUs become (0.5, 1, 1), the 2-GPU shape still fits and
only the 0.5 left on the shared GPU is lost → ΔF = 0.75·500 = 375. The 0.5 shape fits everywhere both
before and after (ΔF 0). FGD levels ``int(100 / (1 + e^(ΔF/1000)))``: na 24, nb 40. Only nb is within the
policy's slack (6 levels) of the best, so it is the one residual-waste candidate and scores 9; na keeps its
level scaled below 4.5: 4.5·24/100 = 1.08 → nb. Then two of the 2-GPU jobs start (na's 2, nb's 2
remaining); under bin-pack only one.
"""

import json

import numpy as np
import pytest

from scheduler import model, placement
from scheduler.cli import main
from scheduler.engine import run_session
from scheduler.model import Job, Node, Queue, Snapshot, Task
from scheduler.placement import binpack, fragaware
from scheduler.session import Session
from scheduler.snapshot_io import load_snapshot, snapshot_from_dict, snapshot_to_dict


def node(name, gpus):
    return Node(name=name, gpus=gpus, gpu_memory_mib=40000, cpu_millis=64000, memory_bytes=2**38)


def cluster(strategy):
    snap = Snapshot(nodes=[node("na", 2), node("nb", 3)], queues=[Queue("q")],
                    jobs=[Job(name="frac", queue="q", tasks=[Task("frac-0", gpu=0.5)], creation_time=0),
                          *[Job(name=f"big{k}", queue="q", tasks=[Task(f"big{k}-0", gpu=2)], creation_time=1 + k)
                            for k in range(3)]])
    doc = snapshot_to_dict(snap)
    doc.setdefault("config", {})["placement"] = {"gpu": strategy}
    return snapshot_from_dict(doc)


def test_registered_without_local_score_and_falls_back_to_binpack():
    assert "fragaware" in model.PLACEMENT_STRATEGIES
    assert placement.get_strategy("fragaware") is fragaware
    # no local_score: the session's incremental per-shape node order must not be used for it
    assert not hasattr(fragaware, "local_score")
    free, total, ok = np.array([2.0, 8.0, 5.0, 0.0]), np.array([8.0, 8.0, 8.0, 0.0]), np.ones(4, bool)
    assert fragaware.score(free, total, ok).tolist() == binpack.score(free, total, ok).tolist()


def test_task_score_hand_derived():
    snap = cluster("fragaware")
    s = Session(snap, shares={})
    i = s.task_index["frac-0"]
    assert fragaware.device_free(s)[:, :3].tolist() == [[1, 1, 0], [1, 1, 1]]
    got = fragaware.task_score(s, i, s.fit(i))
    assert got == pytest.approx([4.5 * 24 / 100, 9.0])
    assert s.best_node(i) == 1  # nb


def test_binpack_and_fragaware_place_the_fraction_differently():
    bp = run_session(cluster("binpack"), ["allocate"]).to_contract()
    fa = run_session(cluster("fragaware"), ["allocate"]).to_contract()
    assert bp["tasks"]["frac-0"]["node"] == "na"
    assert fa["tasks"]["frac-0"]["node"] == "nb"
    started = lambda out: sorted(k for k in ("big0", "big1", "big2") if out["jobs"][k]["status"] != "pending")  # noqa: E731
    assert started(bp) == ["big0"]           # na stranded: only nb's 3 GPUs take a 2-GPU job
    assert started(fa) == ["big0", "big1"]   # na's 2 + nb's 2 whole GPUs


def test_snapshot_file_with_fragaware_loads_and_schedules(tmp_path, capsys):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snapshot_to_dict(cluster("fragaware"))))
    assert load_snapshot(path).config.placement.gpu == "fragaware"
    assert main(["schedule", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"]["frac-0"]["node"] == "nb"


def test_unknown_strategy_still_rejected():
    doc = snapshot_to_dict(cluster("binpack"))
    doc.setdefault("config", {})["placement"] = {"gpu": "fragawares"}
    with pytest.raises(Exception, match="fragawares"):
        snapshot_from_dict(doc)


def test_fractions_pair_up_on_devices_by_residual_waste():
    """One 4-GPU node; pending in order 0.47, 0.32, then 0.47, 0.65, 0.47, 0.65, 0.47, 0.32 (sum 3.82 GPUs).

    Bin-pack's GPU order puts the 0.32 on the 0.47's GPU (210 m left that no pending shape fits), and the
    eight pods then need 5 GPUs: one 0.47 stays pending. The fragaware device order opens a fresh GPU for
    the 0.32 (a 0.65 later closes it to 30 m): 0.47+0.47, 0.32+0.65 twice → all eight fit on 4 GPUs.
    """
    def snap(strategy):
        sizes = [0.47, 0.32, 0.47, 0.65, 0.47, 0.65, 0.47, 0.32]
        s = Snapshot(nodes=[node("n1", 4)], queues=[Queue("q")],
                     jobs=[Job(name=f"j{k}", queue="q", tasks=[Task(f"j{k}-0", gpu=g)], creation_time=k)
                           for k, g in enumerate(sizes)])
        doc = snapshot_to_dict(s)
        doc.setdefault("config", {})["placement"] = {"gpu": strategy}
        return snapshot_from_dict(doc)

    bp = run_session(snap("binpack"), ["allocate"]).to_contract()["tasks"]
    fa = run_session(snap("fragaware"), ["allocate"]).to_contract()["tasks"]
    assert bp["j1-0"]["gpu_index"] == bp["j0-0"]["gpu_index"]
    assert sum(t["status"] == "pending" for t in bp.values()) == 1
    assert fa["j1-0"]["gpu_index"] != fa["j0-0"]["gpu_index"]
    assert all(t["status"] != "pending" for t in fa.values())
    per_gpu = {}
    for name, t in fa.items():
        per_gpu.setdefault(t["gpu_index"], []).append(name)
    assert sorted(len(v) for v in per_gpu.values()) == [2, 2, 2, 2]
