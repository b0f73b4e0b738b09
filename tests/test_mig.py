"""MIG (``nvidia.com/mig-<profile>``): GPU-equivalents as KAI counts them for quota and fair share (G per instance),
placement per profile, snapshot 1.2, zip import / export.

Cluster: ``a100-mig`` is 7 × 1g.10gb (7 GPU-equivalents, no whole GPU), ``a100-mixed`` has 2 × 3g.40gb (6) and 2
whole GPUs (8 in all), ``h100`` 8 whole GPUs.
"""

import pytest

from scheduler.engine import run_session
from scheduler.errors import SnapshotError
from scheduler.fairshare import cluster_total
from scheduler.model import mig_gpu_total, mig_gpus
from scheduler.snapshot_io import snapshot_from_dict, snapshot_to_dict, validate
from scheduler.sources.kai_export import export_kai_document, write_kai_zip
from scheduler.sources.kai_snapshot import load_kai_snapshot

NODES = [
    {"name": "a100-mig", "gpus": 7, "gpu_memory_mib": 40960, "cpu_millis": 64000, "memory_bytes": "512Gi",
     "mig": {"1g.10gb": 7}},
    {"name": "a100-mixed", "gpus": 8, "gpu_memory_mib": 40960, "cpu_millis": 64000, "memory_bytes": "512Gi",
     "mig": {"3g.40gb": 2}},
    {"name": "h100", "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000, "memory_bytes": "512Gi"},
]


def _snap(*jobs, quota=-1):
    return snapshot_from_dict({"version": 1.2, "nodes": NODES,
                               "queues": [{"name": "serve", "gpu": {"quota": quota}}], "jobs": list(jobs)})


def _job(name, *tasks, min_available=1):
    return {"name": name, "queue": "serve", "min_available": min_available, "tasks": list(tasks)}


def _where(result, job):
    return [t.node for j in result.snapshot.jobs if j.name == job for t in j.tasks]


def test_gpu_equivalents_are_the_compute_slices():
    assert mig_gpus("1g.10gb") == 1 and mig_gpus("3g.40gb") == 3 and mig_gpus("7g.80gb") == 7
    assert mig_gpus("not-a-profile") == 0
    assert mig_gpu_total({"1g.10gb": 2, "3g.40gb": 1}) == 5


def test_mig_pods_go_only_where_their_profile_is_free():
    pods = [{"name": f"inf-{k}", "mig": {"1g.10gb": 1}} for k in range(8)]
    r = run_session(_snap(*[_job(f"inf-{k}", p) for k, p in enumerate(pods)]))
    placed = [n for k in range(8) for n in _where(r, f"inf-{k}")]
    assert placed.count("a100-mig") == 7 and placed.count(None) == 1  # h100's free GPUs are not MIG instances
    waiting = next(k for k in range(8) if _where(r, f"inf-{k}") == [None])
    assert r.jobs[f"inf-{waiting}"].reason == "PodSchedulingErrors"


def test_profiles_do_not_mix_and_whole_gpus_do_not_take_mig_instances():
    r = run_session(_snap(_job("big", {"name": "big-0", "mig": {"3g.40gb": 1}}),
                          _job("whole2", {"name": "w2-0", "gpu": 2}),
                          _job("whole4", {"name": "w4-0", "gpu": 4}),
                          _job("seven", {"name": "s-0", "mig": {"7g.80gb": 1}})))
    assert _where(r, "big") == ["a100-mixed"]
    # a100-mixed has 2 whole GPUs beside its MIG instances: bin-packing puts the 2-GPU pod there, not on h100
    assert _where(r, "whole2") == ["a100-mixed"]
    assert _where(r, "whole4") == ["h100"]  # a100-mixed's 6 GPU-equivalents of MIG are not whole GPUs
    assert _where(r, "seven") == [None]     # no node offers that profile


def test_queue_and_fair_share_count_gpu_equivalents():
    snap = _snap(_job("big", {"name": "big-0", "mig": {"3g.40gb": 1}, "status": "running", "node": "a100-mixed"}),
                 _job("inf", {"name": "inf-0", "mig": {"1g.10gb": 2}}))
    assert cluster_total(snap)["gpu"] == 23  # 7 + 8 + 8: MIG instances count as their slices
    r = run_session(snap)
    assert _where(r, "inf") == ["a100-mig"]
    assert r.queue_stats["serve"]["gpu"]["allocated"] == 5  # 3 running + 2 placed


def test_running_mig_pods_hold_their_instances():
    running = [{"name": f"r-{k}", "mig": {"3g.40gb": 1}, "status": "running", "node": "a100-mixed"} for k in range(2)]
    r = run_session(_snap(_job("held", *running, min_available=2), _job("more", {"name": "m-0", "mig": {"3g.40gb": 1}})))
    assert _where(r, "more") == [None]
    # a releasing one can be pipelined onto
    running[1]["status"] = "releasing"
    r = run_session(_snap(_job("held", *running, min_available=1), _job("more", {"name": "m-0", "mig": {"3g.40gb": 1}})))
    assert r.tasks["m-0"].status == "pipelined" and r.tasks["m-0"].node == "a100-mixed"


def test_snapshot_fields_and_their_checks():
    snap = _snap(_job("inf", {"name": "inf-0", "mig": {"1g.10gb": 2}}))
    assert snap.jobs[0].tasks[0].gpu == 2  # gpu defaults to the GPU-equivalents
    doc = snapshot_to_dict(snap)
    assert doc["version"] == 1.2 and doc["nodes"][0]["mig"] == {"1g.10gb": 7}
    assert snapshot_from_dict(doc) == snap
    validate(snap)
    bad = {"version": 1.2, "nodes": [dict(NODES[0], mig={"1g.10gb": 8, "big": 1})], "queues": [{"name": "serve"}],
           "jobs": [_job("j", {"name": "j-0", "gpu": 1, "mig": {"3g.40gb": 1}})]}
    with pytest.raises(SnapshotError) as err:
        snapshot_from_dict(bad)
    text = str(err.value)
    assert "'big' is not a MIG profile" in text
    assert "MIG instances make 8 GPU-equivalents, more than the node's gpus (7" in text
    assert "a MIG request's gpu is its GPU-equivalents (3), got 1" in text


def test_kai_zip_round_trip_keeps_profiles(tmp_path):
    snap = _snap(_job("inf", {"name": "default/inf-0", "mig": {"1g.10gb": 1}}) | {"namespace": "default"})
    raw = export_kai_document(snap)["rawObjects"]
    node = next(n for n in raw["nodes"] if n["metadata"]["name"] == "a100-mixed")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "2"
    pod = next(p for p in raw["pods"] if p["metadata"]["name"] == "inf-0")
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.10gb"] == "1"
    write_kai_zip(snap, tmp_path / "m.zip")
    back = load_kai_snapshot(tmp_path / "m.zip")
    assert back.node_map()["a100-mixed"].mig == {"3g.40gb": 2} and back.node_map()["a100-mixed"].gpus == 8
    task = back.job_map()["default/inf"].tasks[0]
    assert task.mig == {"1g.10gb": 1} and task.gpu == 1
    assert _where(run_session(back), "inf") == ["a100-mig"]


def test_mig_strategy_labels_restrict_which_requests_a_mig_node_takes():
    nodes = [dict(NODES[1], labels={"nvidia.com/mig.strategy": "mixed"}), NODES[2]]
    doc = {"version": 1.2, "nodes": nodes, "queues": [{"name": "serve", "gpu": {"quota": -1}}],
           "jobs": [_job("whole2", {"name": "w2-0", "gpu": 2}), _job("frac", {"name": "f-0", "gpu": 0.5}),
                    _job("big", {"name": "big-0", "mig": {"3g.40gb": 1}})]}
    r = run_session(snapshot_from_dict(doc))
    # mixed: GPU requests other than MIG stay off the node although it has 2 whole GPUs free
    assert _where(r, "whole2") == ["h100"] and _where(r, "frac") == ["h100"] and _where(r, "big") == ["a100-mixed"]
    doc["nodes"] = [dict(NODES[1], labels={"nvidia.com/mig.strategy": "single"}), NODES[2]]
    r = run_session(snapshot_from_dict(doc))
    assert _where(r, "big") == [None]  # single: whole GPUs only
    assert _where(r, "whole2") == ["a100-mixed"]
