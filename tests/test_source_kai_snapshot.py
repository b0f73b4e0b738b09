"""KAI /get-snapshot zip import: raw objects through the shared converter, scheduler config kept, clear errors."""

import copy
import json

import pytest

from kai_objects import DEFAULT_KAI_CONFIG, DEFAULT_SCHEDULER_PARAMS, bind_request, kai_snapshot_doc, kai_zip_bytes, \
    pod, queue, small_cluster
from scheduler.errors import SnapshotError
from scheduler.snapshot_io import load_snapshot, save_snapshot, snapshot_to_dict
from scheduler.sources.kai_snapshot import import_kai_snapshot, load_kai_snapshot


def _zip(tmp_path, doc, name="kai.zip", **kw):
    path = tmp_path / name
    path.write_bytes(kai_zip_bytes(doc, **kw))
    return path


def _config(**plugin_args):
    """KAI's default config with some plugins' arguments replaced (``None`` removes the plugin)."""
    cfg = copy.deepcopy(DEFAULT_KAI_CONFIG)
    plugins = cfg["tiers"][0]["plugins"]
    for name, args in plugin_args.items():
        plugins[:] = [p for p in plugins if p["name"] != name]
        if args is not None:
            plugins.append({"name": name, "arguments": args})
    return cfg


def test_import_small_cluster_objects_and_default_config(tmp_path):
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(small_cluster())))
    snap = conv.snapshot
    assert len(snap.nodes) == 4 and len(snap.queues) == 4
    assert {j.key for j in snap.jobs} == {"llm/pg-pretrain-1a2b", "vision/pg-sweep-3c4d", "serving/pg-chat-5e6f",
                                          "research-nb/notebook-0"}
    cfg = snap.config
    assert cfg.actions == ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]
    assert (cfg.placement.gpu, cfg.placement.cpu, cfg.gpu_device_order) == ("binpack", "binpack", "pack")
    assert cfg.k_value == 1.0 and cfg.stale_grace_period_s == 60 and cfg.schedule_period_s == 1
    assert cfg.max_consolidation_preemptees == 16 and cfg.allow_consolidating_reclaim is True
    # no capture time in the archive: the newest timestamp in the objects (pretrain's last start is an
    # annotation, not counted; creation and heartbeat times are all 2026-01-01T00:00:00Z)
    assert snap.time == 1767225600
    assert conv.scheduling_conditions["vision/pg-sweep-3c4d"][0]["reasons"][0]["reason"] == "OverCapacity"


def test_import_keeps_kai_scheduler_config(tmp_path):
    config = _config(nodeplacement={"gpu": "spread", "cpu": "spread"}, gpupack=None, gpuspread={},
                     proportion={"kValue": "0.5"},
                     minruntime={"defaultPreemptMinRuntime": "5m", "defaultReclaimMinRuntime": "1h30m",
                                 "reclaimResolveMethod": "queue"})
    config["actions"] = "allocate, reclaim"
    params = {**DEFAULT_SCHEDULER_PARAMS, "globalDefaultStalenessGracePeriod": 120_000_000_000,
              "maxNumberConsolidationPreemptees": 4, "allowConsolidatingReclaim": False}
    cfg = load_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(small_cluster(), config, params))).config
    assert cfg.actions == ["allocate", "reclaim"]
    assert (cfg.placement.gpu, cfg.placement.cpu, cfg.gpu_device_order) == ("spread", "spread", "spread")
    assert cfg.k_value == 0.5
    assert cfg.default_preempt_min_runtime_s == 300 and cfg.default_reclaim_min_runtime_s == 5400
    assert cfg.min_runtime_resolve == "queue"
    assert cfg.stale_grace_period_s == 120 and cfg.max_consolidation_preemptees == 4
    assert cfg.allow_consolidating_reclaim is False


def test_bind_requests_make_pending_pods_binding(tmp_path):
    objs = small_cluster()
    objs["bindrequests"] = [bind_request("sweep-0", "vision", "h100-0")]
    snap = load_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    tasks = {t.name: t for _, t in snap.iter_tasks()}
    assert (tasks["vision/sweep-0"].status, tasks["vision/sweep-0"].node) == ("binding", "h100-0")
    assert tasks["vision/sweep-1"].status == "pending"


def test_scheduler_name_from_params(tmp_path):
    objs = small_cluster()
    objs["pods"] = [pod("x-0", "vision", gpu=1, queue="vision", scheduler="kai-scheduler-b")]
    params = {**DEFAULT_SCHEDULER_PARAMS, "schedulerName": "kai-scheduler-b"}
    snap = load_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs, params=params)))
    assert [j.key for j in snap.jobs] == ["vision/x-0"]


def test_round_trip_import_save_load(tmp_path):
    snap = load_snapshot(_zip(tmp_path, kai_snapshot_doc(small_cluster())))  # .zip goes through load_snapshot
    for ext in ("yaml", "json"):
        out = tmp_path / f"cluster.{ext}"
        save_snapshot(snap, out)
        again = load_snapshot(out)
        assert snapshot_to_dict(again) == snapshot_to_dict(snap)


def test_malformed_objects_are_warnings_not_errors(tmp_path):
    objs = small_cluster()
    objs["queues"].append(queue("broken", gpu={"quota": "lots"}))
    objs["pods"].append(pod("bad-0", "vision", queue="vision", annotations={"gpu-fraction": "banana"}))
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    assert {(w.kind, w.name, w.field) for w in conv.warnings} >= {
        ("Queue", "broken", "spec.resources.gpu.quota"), ("Pod", "bad-0", "metadata.annotations.gpu-fraction")}
    assert len(conv.snapshot.queues) == 4


@pytest.mark.parametrize("key,value,field", [("containers", 1.5, "spec.containers"),
                                               ("initContainers", [7], "spec.initContainers[0]")])
def test_a_pod_whose_containers_are_not_a_list_of_mappings_is_a_warning_naming_the_field(tmp_path, key, value,
                                                                                          field):
    """Found by the hypothesis fuzz test: a float ``spec.containers`` raised a bare TypeError from the importer."""
    objs = small_cluster()
    bad = pod("odd-0", "vision", queue="vision")
    bad["spec"][key] = value
    objs["pods"].append(bad)
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    assert ("Pod", "odd-0", field) in {(w.kind, w.name, w.field) for w in conv.warnings}


# ---------------------------------------------------------------------------------------------- bad input

def _error(path):
    with pytest.raises(SnapshotError) as info:
        load_kai_snapshot(path)
    return str(info.value)


def test_truncated_zip(tmp_path):
    data = kai_zip_bytes(kai_snapshot_doc(small_cluster()))
    path = tmp_path / "cut.zip"
    path.write_bytes(data[: len(data) // 2])
    assert "not a valid zip archive (truncated or corrupt download?)" in _error(path)


def test_not_a_zip_and_missing_file(tmp_path):
    path = tmp_path / "plain.zip"
    path.write_text("{}")
    assert "not a valid zip archive" in _error(path)
    assert "cannot read file" in _error(tmp_path / "nope.zip")


def test_zip_without_snapshot_json(tmp_path):
    msg = _error(_zip(tmp_path, "hello", member="readme.txt"))
    assert "no snapshot.json in the zip (members: readme.txt)" in msg


def test_invalid_json_names_member_and_position(tmp_path):
    msg = _error(_zip(tmp_path, '{"config": {}, "rawObjects": {"pods": ['))
    assert "kai.zip:snapshot.json" in msg and "not valid JSON at line 1" in msg


def test_wrong_section_types_name_the_field(tmp_path):
    doc = kai_snapshot_doc(small_cluster())
    doc["rawObjects"]["pods"] = {"not": "a list"}
    assert "snapshot.json: rawObjects.pods: expected a list" in _error(_zip(tmp_path, doc))
    doc = kai_snapshot_doc(small_cluster())
    del doc["rawObjects"]
    assert "rawObjects: required section is missing" in _error(_zip(tmp_path, doc, name="b.zip"))


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["config"].__setitem__("actions", "allocate, teleport"), "config.actions"),
    (lambda d: d["config"]["tiers"][0]["plugins"].append({"name": "proportion", "arguments": {"kValue": "high"}}),
     "config.tiers.proportion.arguments.kValue"),
    (lambda d: d["config"]["tiers"][0]["plugins"].append({"name": "nodeplacement", "arguments": {"gpu": "random"}}),
     "config.tiers.nodeplacement.arguments.gpu"),
    (lambda d: d["schedulerParams"].__setitem__("globalDefaultStalenessGracePeriod", "60s"),
     "schedulerParams.globalDefaultStalenessGracePeriod"),
])
def test_bad_config_values_name_the_field(tmp_path, mutate, field):
    doc = json.loads(json.dumps(kai_snapshot_doc(small_cluster())))
    mutate(doc)
    assert f"snapshot.json: {field}:" in _error(_zip(tmp_path, doc))


# ---------------------------------------------------------------------------------- issue 20: zip details

def _compacted_succeeded_pod(name, namespace, pod_group):
    """A Succeeded pod as KAI >= v0.17's informer transform keeps it: name, namespace, uid, phase, PodGroup."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "annotations": {"pod-group-name": pod_group}},
            "status": {"phase": "Succeeded"}}


def test_compacted_succeeded_pods_keep_their_job(tmp_path):
    from kai_objects import pod, pod_group
    objs = small_cluster()
    objs["podgroups"] += [pod_group("pg-done-9", "llm", "llm", min_member=2),
                          pod_group("pg-half-7", "llm", "llm", min_member=1)]
    objs["pods"] += [_compacted_succeeded_pod("done-0", "llm", "pg-done-9"),
                     _compacted_succeeded_pod("done-1", "llm", "pg-done-9"),
                     _compacted_succeeded_pod("half-0", "llm", "pg-half-7"),
                     pod("half-1", "llm", gpu=1, queue="llm", pod_group="pg-half-7")]
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    jobs = conv.snapshot.job_map()
    done = jobs["llm/pg-done-9"]
    assert [(t.name, t.status, t.node, t.gpu) for t in done.tasks] == [
        ("llm/done-0", "succeeded", None, 0), ("llm/done-1", "succeeded", None, 0)]
    assert done.queue == "llm"
    assert sorted(t.status for t in jobs["llm/pg-half-7"].tasks) == ["pending", "succeeded"]
    assert not [w for w in conv.warnings if w.name and w.name.startswith(("done-", "half-"))]


def test_not_ready_node_is_kept_marked_and_warned(tmp_path):
    from kai_objects import node
    objs = small_cluster()
    objs["nodes"].append(node("h100-9", ready=False))
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    assert not conv.snapshot.node_map()["h100-9"].ready
    (w,) = [w for w in conv.warnings if w.name == "h100-9"]
    assert (w.kind, w.field, w.skipped) == ("Node", "status.conditions", False)
    assert "NotReady" in w.message


def test_pod_group_naming_an_unknown_priority_class_gets_a_diagnostic(tmp_path):
    from kai_objects import pod, pod_group
    objs = small_cluster()
    objs["podgroups"].append(pod_group("pg-x", "vision", "vision", priority_class="no-such-class"))
    objs["pods"].append(pod("x-0", "vision", gpu=1, queue="vision", pod_group="pg-x"))
    conv = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs)))
    assert conv.snapshot.job_map()["vision/pg-x"].priority == 50          # KAI's default when the class is missing
    (w,) = [w for w in conv.warnings if w.name == "pg-x"]
    assert (w.kind, w.namespace, w.field, w.skipped) == ("PodGroup", "vision", "spec.priorityClassName", False)
    assert "'no-such-class' does not exist" in w.message and "default priority 50" in w.message


def test_why_pending_names_a_pod_with_its_namespace_once(tmp_path):
    from kai_objects import pod, pod_group
    from scheduler.engine import run_session
    from scheduler.explain import explain_pending
    objs = small_cluster()
    objs["podgroups"].append(pod_group("pg-huge", "team-llm", "vision"))
    objs["pods"].append(pod("huge-0", "team-llm", gpu=9, queue="vision", pod_group="pg-huge"))
    snap = import_kai_snapshot(_zip(tmp_path, kai_snapshot_doc(objs))).snapshot
    result = run_session(snap)
    decision = result.jobs["team-llm/pg-huge"]
    assert decision.status == "pending" and "pod team-llm/huge-0 " in decision.message
    texts = [decision.message] + [str(e) for e in explain_pending(snap, result, jobs=["team-llm/pg-huge"])]
    assert not any("team-llm/team-llm/" in t for t in texts)
