"""``kaidash snapshot export --format kai-zip``: a snapshot written as the objects KAI's informers hold, and read
back as the same snapshot (export → import round trip)."""

import copy
import json
import subprocess
import sys
import zipfile

import pytest

from scheduler.model import ExternalUsage, Job, Node, Queue, QueueResource, SchedulerConfig, Snapshot, SubGroup, Task
from scheduler.snapshot_io import load_snapshot, snapshot_to_dict
from scheduler.sources.kai_export import (
    export_kai_document,
    export_kai_zip_bytes,
    gpu_index_of_uuid,
    gpu_uuid,
    kai_names,
    write_kai_zip,
)
from scheduler.sources.kai_snapshot import import_kai_snapshot

T = 1767225600.0


def _canonical_cluster() -> Snapshot:
    """A snapshot in the form every kube / zip import produces (namespaced jobs, ``ns/pod`` task names, UIDs,
    GPU memory in whole 100 MiB), using every field the export writes."""
    nodes = [
        Node("h100-0", gpus=8, gpu_memory_mib=81500, gpu_model="NVIDIA-H100", cpu_millis=191500,
             memory_bytes=2 * 2**40, pods=110, labels={"kai.scheduler/zone": "a"}),
        Node("l4-0", gpus=4, gpu_memory_mib=23000, gpu_model="NVIDIA-L4", cpu_millis=47500, memory_bytes=196 * 2**30,
             external=ExternalUsage(gpus=1, cpu_millis=4000, memory_bytes=2**30, pods=2)),
        Node("cpu-0", cpu_millis=63000, memory_bytes=256 * 2**30, pods=20, ready=False),
    ]
    queues = [
        Queue("research", creation_time=T - 900, gpu=QueueResource(12, -1, 2), cpu=QueueResource(-1, -1, 1),
              memory=QueueResource(-1, -1, 1)),
        Queue("llm", parent="research", creation_time=T - 800, gpu=QueueResource(8, 16, 1),
              cpu=QueueResource(0, -1, 0), memory=QueueResource(100e9, 200e9, 1), reclaim_min_runtime_s=600,
              preempt_min_runtime_s=90),
        Queue("serving", priority=200, display_name="Serving", creation_time=T - 700, gpu=QueueResource(6, 8, -1),
              cpu=QueueResource(0, -1, 0), memory=QueueResource(0, -1, 0)),
    ]

    def task(name, **kw):
        return Task(name=name, uid=f"uid-{name.split('/')[1]}", creation_time=kw.pop("creation_time", T - 100), **kw)

    jobs = [
        Job("pretrain", "llm", namespace="llm", priority=50, min_available=2, creation_time=T - 600, uid="uid-pg-1",
            last_start_time=T - 500, stale_since=T - 30, stale_grace_period_s=120, preemption_delay_s=300,
            subgroups=[SubGroup("workers", 2)],
            tasks=[task("llm/pretrain-0", gpu=4, cpu_millis=32000, memory_bytes=2**36, status="running",
                        node="h100-0", subgroup="workers"),
                   task("llm/pretrain-1", gpu=4, cpu_millis=32000, memory_bytes=2**36, status="releasing",
                        node="h100-0", subgroup="workers")]),
        Job("chat", "serving", namespace="serving", priority=125, preemptible=True, creation_time=T - 400,
            uid="uid-pg-2", last_eviction_time=T - 60,
            tasks=[task("serving/chat-0", gpu=0.5, cpu_millis=4000, memory_bytes=2**33, status="running", node="l4-0",
                        gpu_groups=["g-chat"], gpu_indices=[2]),
                   task("serving/chat-1", gpu_memory_mib=8000, gpu_devices=2, cpu_millis=2000, memory_bytes=2**33,
                        status="running", node="l4-0", gpu_groups=["g-a", "g-b"], gpu_indices=[0, 1]),
                   task("serving/chat-2", gpu=0.25, cpu_millis=1000, status="binding", node="l4-0",
                        gpu_groups=["g-chat"], gpu_indices=[2]),
                   task("serving/chat-3", gpu=0.25, cpu_millis=1000, status="pending")]),
        Job("sweep", "llm", namespace="llm", priority=75, preemptible=False, creation_time=T - 300, uid="uid-pg-3",
            tasks=[task("llm/sweep-0", gpu=2, cpu_millis=8000, memory_bytes=2**36, status="pipelined", node="h100-0"),
                   task("llm/sweep-1", gpu=1, status="binding", node="h100-0", creation_time=T - 99.5),
                   task("llm/sweep-2", gpu=1, status="failed", node="h100-0"),
                   task("llm/sweep-3", gpu=1, status="succeeded"),
                   task("llm/sweep-4", cpu_millis=500, memory_bytes=2**20, status="pending")]),
        Job("notebook", "llm", namespace="research-nb", priority=-5, creation_time=T - 200, uid="uid-pg-4",
            tasks=[task("research-nb/notebook-0", cpu_millis=2000, memory_bytes=2**33, status="pending")]),
    ]
    cfg = SchedulerConfig(actions=["allocate", "reclaim"], k_value=0.5, stale_grace_period_s=120,
                          max_consolidation_preemptees=16, allow_consolidating_reclaim=False,
                          default_preempt_min_runtime_s=300, default_reclaim_min_runtime_s=5400,
                          min_runtime_resolve="queue", schedule_period_s=2.0, gpu_device_order="spread")
    cfg.placement.gpu = "spread"
    return Snapshot(nodes=nodes, queues=queues, jobs=jobs, config=cfg, time=T, config_maps=["llm/train-config"])


def _roundtrip(snap: Snapshot, tmp_path, name="kai.zip"):
    path = tmp_path / name
    write_kai_zip(snap, path)
    return import_kai_snapshot(path)


def _doc(snap: Snapshot) -> dict:
    d = snapshot_to_dict(snap)
    d["jobs"].sort(key=lambda j: (j.get("namespace", ""), j["name"]))
    return d


def test_canonical_snapshot_round_trips_exactly(tmp_path):
    snap = _canonical_cluster()
    conv = _roundtrip(snap, tmp_path)
    # the one diagnostic: the canonical cluster's not-ready node is reported, not silently excluded
    not_ready = [n.name for n in snap.nodes if not n.ready]
    assert [(w.kind, w.name, w.field) for w in conv.warnings] == [("Node", n, "status.conditions") for n in not_ready]
    back = conv.snapshot
    expected = _doc(snap)
    # KAI's objects carry the GPU feature-discovery labels the node's GPU fields come from, and its hostname
    for n in expected["nodes"]:
        n.setdefault("labels", {})["kubernetes.io/hostname"] = n["name"]
        if n["gpus"]:
            n["labels"].update({"nvidia.com/gpu.count": str(n["gpus"]), "nvidia.com/gpu.present": "true",
                                "nvidia.com/gpu.memory": str(n["gpu_memory_mib"]),
                                "nvidia.com/gpu.product": n["gpu_model"]})
    assert _doc(back) == expected


def test_export_of_an_import_is_a_fixed_point(tmp_path):
    first = _roundtrip(_canonical_cluster(), tmp_path, "a.zip").snapshot
    second = _roundtrip(first, tmp_path, "b.zip").snapshot
    assert _doc(second) == _doc(first)
    assert (tmp_path / "a.zip").read_bytes() != b"" and \
        export_kai_zip_bytes(first) == export_kai_zip_bytes(second)  # deterministic output


def test_non_canonical_snapshot_comes_back_under_kai_names(tmp_path):
    """examples/small-cluster.yaml has jobs without namespace, plain task names, whole-GPU device indices and
    81920 MiB GPUs: KAI holds them as namespace ``default``, ``default/<name>``, no device index for whole GPUs
    (only shared GPUs have reservation pods), 81900 MiB (KAI floors the label to 100 MiB) and an empty list of
    ConfigMaps."""
    snap = load_snapshot("examples/small-cluster.yaml")
    back = _roundtrip(snap, tmp_path).snapshot
    jobs, tasks = kai_names(snap)
    expected = copy.deepcopy(snap)
    for job in expected.jobs:
        job.namespace = job.namespace or "default"
        for t in job.tasks:
            t.name = tasks[t.name]
            if t.creation_time is None:
                t.creation_time = job.creation_time
            if not t.is_fractional:
                t.gpu_indices = []
    for n in expected.nodes:
        n.gpu_memory_mib = float(int(n.gpu_memory_mib // 100) * 100)
    expected.config_maps = []  # a zip lists the ConfigMaps KAI holds: none here
    got = copy.deepcopy(back)
    for job in got.jobs:
        assert job.uid and all(t.uid for t in job.tasks)
        job.uid = None
        for t in job.tasks:
            t.uid = None
    for n in got.nodes:
        n.labels = {k: v for k, v in n.labels.items()
                    if not k.startswith("nvidia.com/gpu.") and k != "kubernetes.io/hostname"}
    assert _doc(got) == _doc(expected)
    assert sorted(jobs.values()) == sorted(j.key for j in back.jobs)


def test_generated_uids_sort_like_kaidash_fallback_order():
    """KAI breaks job and task ties by UID; kaidash by key / name: generated UIDs keep the two in step."""
    snap = load_snapshot("examples/small-cluster.yaml")
    doc = export_kai_document(snap)
    pgs = sorted(doc["rawObjects"]["podGroups"], key=lambda o: o["metadata"]["uid"])
    assert [o["metadata"]["name"] for o in pgs] == sorted(j.key for j in snap.jobs)
    pods = [p for p in doc["rawObjects"]["pods"] if p["metadata"]["namespace"] == "default"]
    by_uid = [p["metadata"]["name"] for p in sorted(pods, key=lambda p: p["metadata"]["uid"])]
    assert by_uid == sorted(t.name for _, t in snap.iter_tasks())


def test_kai_objects_for_each_task_status():
    doc = export_kai_document(_canonical_cluster())
    raw = doc["rawObjects"]
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in raw["pods"]}
    assert pods["llm/pretrain-0"]["status"]["phase"] == "Running"
    assert pods["llm/pretrain-0"]["spec"]["nodeName"] == "h100-0"
    assert "deletionTimestamp" in pods["llm/pretrain-1"]["metadata"]
    assert pods["llm/sweep-0"]["status"] == {"phase": "Pending", "nominatedNodeName": "h100-0"}
    assert "nodeName" not in pods["llm/sweep-1"]["spec"]
    assert pods["llm/sweep-2"]["status"]["phase"] == "Failed" and pods["llm/sweep-2"]["spec"]["nodeName"] == "h100-0"
    assert pods["serving/chat-0"]["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert pods["serving/chat-1"]["metadata"]["annotations"]["gpu-memory"] == "8000"
    assert pods["serving/chat-1"]["metadata"]["annotations"]["gpu-fraction-num-devices"] == "2"
    assert pods["serving/chat-1"]["metadata"]["labels"]["runai-gpu-group/g-a"] == "g-a"
    binds = {b["spec"]["podName"]: b["spec"] for b in raw["bindRequests"]}
    assert binds["sweep-1"]["selectedNode"] == "h100-0"
    assert binds["chat-2"]["selectedGPUGroups"] == ["g-chat"]
    reservations = [p for p in raw["pods"] if p["metadata"]["namespace"] == "kai-resource-reservation"]
    by_group = {p["metadata"]["labels"]["runai-gpu-group"]: p for p in reservations}
    assert set(by_group) == {"g-chat", "g-a", "g-b"}
    assert by_group["g-chat"]["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"] == gpu_uuid("l4-0", 2)
    pgs = {p["metadata"]["name"]: p["spec"] for p in raw["podGroups"]}
    assert pgs["chat"]["preemptibility"] == "preemptible" and pgs["sweep"]["preemptibility"] == "non-preemptible"
    assert pgs["pretrain"]["subGroups"] == [{"name": "workers", "minMember": 2}]
    assert {p["metadata"]["name"]: p["value"] for p in raw["priorityClasses"]}["kaidash-priority-minus-5"] == -5
    queues = {q["metadata"]["name"]: q["spec"] for q in raw["queues"]}
    assert queues["llm"]["resources"]["memory"] == {"quota": 100000, "limit": 200000, "overQuotaWeight": 1}
    assert queues["serving"]["resources"]["gpu"]["overQuotaWeight"] == -1
    plugins = [p["name"] for p in doc["config"]["tiers"][0]["plugins"]]
    assert plugins[:3] == ["predicates", "proportion", "priority"] and "gpuspread" in plugins
    assert "gpusharingorder" not in plugins  # the operator enables it for bin-packing only
    assert doc["config"]["actions"] == "allocate, reclaim"
    assert doc["schedulerParams"]["globalDefaultStalenessGracePeriod"] == 120_000_000_000


def test_gpu_uuid_maps_back_only_for_its_own_node():
    assert gpu_index_of_uuid("l4-0", gpu_uuid("l4-0", 3), 4) == 3
    assert gpu_index_of_uuid("l4-1", gpu_uuid("l4-0", 3), 4) is None
    assert gpu_index_of_uuid("l4-0", "GPU-2b1e6a4c-0000-4000-8000-000000000000", 4) is None


def test_cli_export_then_schedule_reads_it(tmp_path):
    out = tmp_path / "ex.zip"
    run = subprocess.run([sys.executable, "-m", "scheduler.cli", "snapshot", "export", "examples/small-cluster.yaml",
                          "--format", "kai-zip", "--actions", "allocate", "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "as a KAI /get-snapshot zip" in run.stdout
    with zipfile.ZipFile(out) as zf:
        assert zf.namelist() == ["snapshot.json"]
        doc = json.loads(zf.read("snapshot.json"))
    assert doc["config"]["actions"] == "allocate"
    assert load_snapshot(out).config.actions == ["allocate"]
    bad = subprocess.run([sys.executable, "-m", "scheduler.cli", "snapshot", "export", "examples/small-cluster.yaml",
                          "--actions", "allocate,shuffle", "-o", str(tmp_path / "x.zip")], capture_output=True, text=True)
    assert bad.returncode == 1 and "shuffle" in bad.stderr


@pytest.mark.parametrize("status", ["pending", "running", "releasing", "binding", "pipelined", "failed"])
def test_each_status_round_trips(tmp_path, status):
    node = None if status == "pending" else "n0"
    snap = Snapshot(nodes=[Node("n0", gpus=2, gpu_memory_mib=40000, cpu_millis=8000, memory_bytes=2**35)],
                    queues=[Queue("q", gpu=QueueResource(2, -1, 1))],
                    jobs=[Job("j", "q", namespace="ns", uid="u-j", creation_time=T,
                              tasks=[Task("ns/p", gpu=1, cpu_millis=100, status=status, node=node, uid="u-p",
                                          creation_time=T)])],
                    time=T)
    back = _roundtrip(snap, tmp_path).snapshot
    t = back.jobs[0].tasks[0]
    assert (t.status, t.node) == (status, node)


def test_a_pods_own_priority_class_round_trips(tmp_path):
    """A pod without a PriorityClass (``priority_class: ""``) and one of a class other than the export's name for
    its job's priority keep their class through export and import (KAI's scheduling signature hashes the name);
    a pod of the export's own class reads back as None."""
    snap = _canonical_cluster()
    tasks = [t for j in snap.jobs for t in j.tasks]
    tasks[0].priority_class = ""
    tasks[1].priority_class = "nightly"
    back = _roundtrip(snap, tmp_path).snapshot
    got = {t.name: t.priority_class for j in back.jobs for t in j.tasks}
    assert sorted(v for v in got.values() if v is not None) == ["", "nightly"]
    assert snapshot_to_dict(back)["version"] == 1.2
    assert _doc(back)["jobs"] == _doc(_roundtrip(back, tmp_path, "c.zip").snapshot)["jobs"]
