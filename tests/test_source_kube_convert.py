"""Kubernetes objects → snapshot: KAI's reading of nodes, pods, queues, pod groups (kai-semantics §a, §b, §d-§f).

Expected numbers are worked out by hand from the objects in ``kai_objects.small_cluster`` and the rules.
"""

import pytest

from kai_objects import T0_EPOCH, bind_request, kai_priority_classes, node, pod, pod_group, priority_class, \
    queue, reservation_pod, small_cluster
from scheduler.snapshot_io import validate
from scheduler.sources.k8s_convert import RawObjects, convert

GIB = 2**30


def _convert(objs, **kw):
    return convert(RawObjects(**objs), time=T0_EPOCH, **kw)


def _base(**extra):
    """One H100 node, the KAI priority classes and one leaf queue ``team-a`` (no limits)."""
    objs = {"nodes": [node("n1")], "priorityclasses": kai_priority_classes(),
            "queues": [queue("team-a", gpu={"quota": 8, "limit": -1, "overQuotaWeight": 1},
                             cpu={"quota": -1, "limit": -1, "overQuotaWeight": 1},
                             memory={"quota": -1, "limit": -1, "overQuotaWeight": 1})],
            "podgroups": [], "pods": [], "bindrequests": []}
    for k, v in extra.items():
        objs[k] = objs[k] + v
    return objs


def _warning(conv, kind, name):
    found = [w for w in conv.warnings if w.kind == kind and w.name == name]
    assert found, f"no warning for {kind} {name}: {[str(w) for w in conv.warnings]}"
    return found[0]


def test_small_cluster_nodes_follow_kai_reading():
    snap = _convert(small_cluster()).snapshot
    nodes = snap.node_map()
    h100 = nodes["h100-0"]
    assert h100.gpus == 8 and h100.gpu_memory_mib == 81500  # label 81559 floored to 100 MiB
    assert h100.cpu_millis == 191500 and h100.memory_bytes == 2113158772 * 1024
    assert h100.gpu_model == "NVIDIA-H100-80GB-HBM3" and h100.ready
    assert nodes["l4-0"].gpu_memory_mib == 23000
    assert nodes["cpu-0"].gpus == 0 and nodes["cpu-0"].cpu_millis == 63000
    # feature-discovery noise is dropped from labels, scheduling labels are kept
    assert "feature.node.kubernetes.io/cpu-model.vendor_id" not in h100.labels
    assert h100.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_other_schedulers_pods_count_against_node_and_reservation_pods_do_not():
    nodes = _convert(small_cluster()).snapshot.node_map()
    ext = nodes["h100-1"].external
    # other-trainer-0 (2 GPUs, 16 CPU, 64Gi) + dcgm-exporter (100m, 128Mi), both default-scheduler
    assert ext.gpus == 2 and ext.cpu_millis == 16100 and ext.memory_bytes == 64 * GIB + 128 * 2**20
    assert ext.pods == 2
    # the reservation pod on l4-0 requests a whole GPU but is a KAI utility pod
    assert nodes["l4-0"].external.gpus == 0 and nodes["l4-0"].external.pods == 0


def test_small_cluster_queues_crd_units():
    queues = _convert(small_cluster()).snapshot.queue_map()
    assert queues["llm"].parent == "research" and queues["llm"].gpu.limit == 16
    assert queues["llm"].reclaim_min_runtime_s == 600  # "10m"
    assert queues["research"].gpu.over_quota_weight == 2 and queues["research"].gpu.quota == 12
    assert queues["inference"].memory.quota == 100000 * 1e6  # MB → bytes
    assert queues["inference"].memory.limit == -1 and queues["inference"].priority == 200
    assert queues["vision"].priority == 100  # default queue priority


def test_small_cluster_jobs():
    conv = _convert(small_cluster())
    jobs = conv.snapshot.job_map()
    assert set(jobs) == {"llm/pg-pretrain-1a2b", "vision/pg-sweep-3c4d", "serving/pg-chat-5e6f",
                         "research-nb/notebook-0"}
    pre = jobs["llm/pg-pretrain-1a2b"]
    assert pre.queue == "llm" and pre.priority == 50 and pre.is_preemptible and pre.min_available == 2
    assert pre.last_start_time == T0_EPOCH + 100
    assert [(t.name, t.gpu, t.status, t.node) for t in pre.tasks] == [
        ("llm/pretrain-0", 8, "running", "h100-0"), ("llm/pretrain-1", 8, "running", "h100-1")]
    assert pre.tasks[0].cpu_millis == 64000 and pre.tasks[0].memory_bytes == 512 * GIB
    chat = jobs["serving/pg-chat-5e6f"]
    assert chat.priority == 125 and not chat.is_preemptible
    task = chat.tasks[0]
    assert task.gpu == 0.5 and task.is_fractional
    assert task.gpu_groups == ["6b4c0f6e-1f1e-4c1a-9d55-0d7f3a1c2b10"] and task.gpu_indices == [2]
    nb = jobs["research-nb/notebook-0"]  # no PodGroup: a job of its own, as the pod-grouper makes it
    assert nb.queue == "vision" and nb.priority == 100 and not nb.is_preemptible and nb.min_available == 1
    assert nb.tasks[0].gpu == 0.25 and nb.tasks[0].status == "pending"
    reasons = conv.scheduling_conditions["vision/pg-sweep-3c4d"][0]["reasons"]
    assert reasons[0]["reason"] == "OverCapacity"
    assert conv.external_pods == 2
    validate(conv.snapshot)


def test_gpu_memory_label_in_bytes_and_missing_label():
    objs = _base()
    objs["nodes"] = [node("bytes", gpu_memory=str(80 * GIB)), node("nolabel", gpu_memory=None)]
    conv = _convert(objs)
    nodes = conv.snapshot.node_map()
    assert nodes["bytes"].gpu_memory_mib == 81900  # 81920 MiB floored to a multiple of 100
    assert nodes["nolabel"].gpu_memory_mib == 100  # KAI's DefaultGpuMemory
    w = _warning(conv, "Node", "nolabel")
    assert w.field == "metadata.labels.nvidia.com/gpu.memory" and not w.skipped


def test_mig_instances_count_as_their_compute_slices():
    objs = _base()
    objs["nodes"] = [node("mig-0", gpus=0, labels={"nvidia.com/mig.strategy": "mixed"},
                          allocatable={"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"})]
    objs["pods"] = [pod("m-0", node="mig-0", extra_requests={"nvidia.com/mig-3g.40gb": "1"})]
    snap = _convert(objs).snapshot
    assert snap.nodes[0].gpus == 7 * 1 + 2 * 3
    assert snap.jobs[0].tasks[0].gpu == 3


@pytest.mark.parametrize("phase,deleting,node_name,bind,expected", [
    ("Running", False, "n1", False, "running"),
    ("Running", True, "n1", False, "releasing"),
    ("Pending", False, "n1", False, "running"),   # KAI's Bound: counted as allocated
    ("Pending", False, None, True, "binding"),
    ("Pending", False, None, False, "pending"),
    ("Succeeded", False, "n1", False, "succeeded"),
    ("Failed", False, "n1", False, "failed"),
])
def test_pod_status_mapping(phase, deleting, node_name, bind, expected):
    objs = _base(pods=[pod("p-0", gpu=1, node=node_name, phase=phase, deleting=deleting)])
    if bind:
        objs["bindrequests"] = [bind_request("p-0", "team-a", "n1")]
    task = _convert(objs).snapshot.jobs[0].tasks[0]
    assert task.status == expected
    if expected == "binding":
        assert task.node == "n1"


def test_gated_and_deleted_unplaced_pods_are_not_tasks():
    gated = pod("g-0", gpu=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    objs = _base(pods=[gated, pod("d-0", gpu=1, deleting=True), pod("ok-0", gpu=1)])
    assert [t.name for _, t in _convert(objs).snapshot.iter_tasks()] == ["team-a/ok-0"]


def test_failed_bind_request_leaves_pod_pending():
    objs = _base(pods=[pod("p-0", gpu=1)], bindrequests=[bind_request("p-0", "team-a", "n1", phase="Failed")])
    assert _convert(objs).snapshot.jobs[0].tasks[0].status == "pending"


def test_bind_request_carries_gpu_groups():
    objs = _base(pods=[pod("f-0", annotations={"gpu-fraction": "0.5"})],
                 bindrequests=[bind_request("f-0", "team-a", "n1", groups=["grp-1"])])
    task = _convert(objs).snapshot.jobs[0].tasks[0]
    assert (task.status, task.node, task.gpu_groups) == ("binding", "n1", ["grp-1"])


def test_multi_device_fraction_groups_and_indices():
    objs = _base(pods=[
        pod("mf-0", node="n1", annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"},
            labels={"runai-gpu-group/g-b": "true", "runai-gpu-group/g-a": "true"}),
        reservation_pod("n1", "g-a", 5), reservation_pod("n1", "g-b", 6)])
    task = _convert(objs).snapshot.jobs[0].tasks[0]
    assert task.gpu == 0.5 and task.gpu_devices == 2 and task.gpus_on(81500) == 1.0
    assert task.gpu_groups == ["g-a", "g-b"] and task.gpu_indices == [5, 6]


def test_gpu_memory_annotation():
    task = _convert(_base(pods=[pod("m-0", annotations={"gpu-memory": "20000"})])).snapshot.jobs[0].tasks[0]
    assert task.gpu_memory_mib == 20000 and task.gpu == 0


def test_effective_requests_init_container_max_and_limit_defaulting():
    init = [{"name": "fetch", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}]
    p = pod("i-0", cpu="1", memory="1Gi", init_containers=init)
    p["spec"]["containers"].append({"name": "side", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
    task = _convert(_base(pods=[p])).snapshot.jobs[0].tasks[0]
    # containers: 1 + 2 (request defaults to limit) = 3 CPU < init 4 CPU; memory 1Gi + 1Gi = 2Gi > init 1Gi
    assert task.cpu_millis == 4000 and task.memory_bytes == 2 * GIB


def test_priority_defaults_global_default_and_preemptibility_override():
    objs = _base(podgroups=[pod_group("pg-x", priority_class="nonexistent"),
                            pod_group("pg-y", priority_class="inference", preemptibility="preemptible")],
                 pods=[pod("x-0", gpu=1, pod_group="pg-x"), pod("y-0", gpu=1, pod_group="pg-y")])
    jobs = _convert(objs).snapshot.job_map()
    assert jobs["team-a/pg-x"].priority == 50  # unknown class, no globalDefault → 50
    assert jobs["team-a/pg-y"].priority == 125 and jobs["team-a/pg-y"].is_preemptible
    objs["priorityclasses"] = objs["priorityclasses"] + [priority_class("cluster-default", 77, global_default=True)]
    assert _convert(objs).snapshot.job_map()["team-a/pg-x"].priority == 77


def test_pod_group_timestamps_and_durations():
    pg = pod_group("pg-s", min_member=1, annotations={
        "kai.scheduler/stale-podgroup-timestamp": "2026-01-01T00:00:30Z",
        "kai.scheduler/last-eviction-timestamp": "2026-01-01T00:01:00Z",
        "kai.scheduler/preemption-delay": "5m"}, stalenessGracePeriod="-1s")
    job = _convert(_base(podgroups=[pg], pods=[pod("s-0", gpu=1, pod_group="pg-s")])).snapshot.jobs[0]
    assert job.stale_since == T0_EPOCH + 30 and job.last_eviction_time == T0_EPOCH + 60
    assert job.preemption_delay_s == 300 and job.stale_grace_period_s == -1


def test_subgroups_from_spec_and_pod_label():
    pg = pod_group("pg-sub", min_member=2, sub_groups=[{"name": "master", "minMember": 1},
                                                       {"name": "worker", "minMember": 1}])
    pods = [pod("sub-0", gpu=1, pod_group="pg-sub", labels={"kai.scheduler/subgroup-name": "master"}),
            pod("sub-1", gpu=1, pod_group="pg-sub", labels={"kai.scheduler/subgroup-name": "worker"})]
    job = _convert(_base(podgroups=[pg], pods=pods)).snapshot.jobs[0]
    assert [s.name for s in job.subgroups] == ["master", "worker"]
    assert [t.subgroup for t in job.tasks] == ["master", "worker"]


def test_queue_label_fallbacks_for_pods_without_pod_group():
    objs = _base(pods=[pod("a-0", gpu=1, queue=None, labels={"runai/queue": "team-a"}),
                       pod("b-0", gpu=1, queue=None, labels={"project": "team-a"})])
    assert {j.queue for j in _convert(objs).snapshot.jobs} == {"team-a"}


# ---------------------------------------------------------------------------------------------- bad objects

def test_malformed_queue_quota_is_skipped_with_warning():
    bad = queue("broken", gpu={"quota": "ten", "limit": -1, "overQuotaWeight": 1})
    conv = _convert(_base(queues=[bad]))
    w = _warning(conv, "Queue", "broken")
    assert w.field == "spec.resources.gpu.quota" and "'ten'" in w.message and w.skipped
    assert [q.name for q in conv.snapshot.queues] == ["team-a"]


def test_queue_crd_missing_fields_are_zero():
    q = _convert(_base(queues=[queue("bare", gpu={"quota": 2})])).snapshot.queue_map()["bare"]
    assert (q.gpu.quota, q.gpu.limit, q.gpu.over_quota_weight) == (2, 0, 0)
    assert (q.cpu.quota, q.cpu.limit, q.memory.limit) == (0, 0, 0)


def test_malformed_fraction_skips_only_that_pod():
    objs = _base(pods=[pod("bad-0", annotations={"gpu-fraction": "banana"}), pod("good-0", gpu=1)])
    conv = _convert(objs)
    w = _warning(conv, "Pod", "bad-0")
    assert (w.namespace, w.field) == ("team-a", "metadata.annotations.gpu-fraction") and "banana" in w.message
    assert [t.name for _, t in conv.snapshot.iter_tasks()] == ["team-a/good-0"]


def test_negative_min_member_skips_pod_group_and_keeps_its_running_pods_on_the_node():
    objs = _base(podgroups=[pod_group("pg-neg", min_member=-1)],
                 pods=[pod("neg-0", gpu=2, cpu="4", node="n1", pod_group="pg-neg")])
    conv = _convert(objs)
    w = _warning(conv, "PodGroup", "pg-neg")
    assert w.field == "spec.minMember" and w.namespace == "team-a"
    assert conv.snapshot.jobs == []
    assert conv.snapshot.nodes[0].external.gpus == 2  # still occupies its GPUs


def test_orphan_queue_subtree_dropped_and_its_jobs_wait_for_their_queue():
    """KAI keeps a PodGroup whose queue is gone with a QueueDoesNotExist fit error: not scheduled, in no queue's
    numbers, its running pod still on its node and still in the resources fair share divides (a KAI pod is not
    subtracted as another scheduler's would be)."""
    objs = _base(queues=[queue("lost", "ghost", gpu={"quota": 1, "limit": -1}), queue("lost-team", "lost")],
                 podgroups=[pod_group("pg-o", queue="lost-team")],
                 pods=[pod("o-0", gpu=1, node="n1", pod_group="pg-o")])
    conv = _convert(objs)
    assert [q.name for q in conv.snapshot.queues] == ["team-a"]
    assert {w.name for w in conv.warnings if w.kind == "Queue"} == {"lost", "lost-team"}
    w = _warning(conv, "PodGroup", "pg-o")
    assert w.field == "spec.queue" and not w.skipped
    job = conv.snapshot.job_map()["team-a/pg-o"]
    assert job.waiting_for == "queue" and job.tasks[0].node == "n1"
    assert conv.snapshot.nodes[0].external.gpus == 0 and conv.external_pods == 0


def test_gang_with_fewer_pods_than_min_member():
    objs = _base(podgroups=[pod_group("pg-wait", min_member=3), pod_group("pg-run", min_member=3)],
                 pods=[pod("wait-0", gpu=1, pod_group="pg-wait"),
                       pod("run-0", gpu=1, node="n1", pod_group="pg-run"),
                       pod("run-1", gpu=1, node="n1", pod_group="pg-run")])
    conv = _convert(objs)
    jobs = conv.snapshot.job_map()
    # KAI keeps both with their minMember: not ready for scheduling, but their pods count in fair share (pending)
    # and on their nodes (running); stale-gang eviction may act on the running one
    assert (jobs["team-a/pg-wait"].min_available, len(jobs["team-a/pg-wait"].tasks)) == (3, 1)
    assert (jobs["team-a/pg-run"].min_available, len(jobs["team-a/pg-run"].tasks)) == (3, 2)


def test_pod_on_unknown_node_and_bad_reservation_index():
    objs = _base(pods=[pod("lost-0", gpu=1, node="gone"), pod("ok-0", gpu=1),
                       {**reservation_pod("n1", "g-z", 0),
                        "metadata": {**reservation_pod("n1", "g-z", 0)["metadata"],
                                     "annotations": {"run.ai/reserve_for_gpu_index": "x"}}}])
    conv = _convert(objs)
    assert _warning(conv, "Pod", "lost-0").field == "spec.nodeName"
    assert any(w.field == "metadata.annotations.run.ai/reserve_for_gpu_index" for w in conv.warnings)
    assert [t.name for _, t in conv.snapshot.iter_tasks()] == ["team-a/ok-0"]


def test_garbage_objects_never_raise():
    objs = _base(pods=["not a dict", {"metadata": {"name": "x", "labels": "oops"}}, {}],
                 nodes=[{"metadata": {}}, {"metadata": {"name": "weird"}, "status": {"allocatable": {"cpu": "lots"}}}],
                 queues=[{"metadata": {"name": "q"}, "spec": {"resources": ["gpu"]}}],
                 podgroups=[{"metadata": {"name": "pg", "namespace": "a"}, "spec": {"subGroups": "x"}}])
    conv = _convert(objs)
    validate(conv.snapshot)
    assert {"Node", "Queue", "PodGroup", "Pod"} <= {w.kind for w in conv.warnings}
    assert [n.name for n in conv.snapshot.nodes] == ["n1"]


def test_unreadable_queues_and_podgroups_are_worked_around():
    objs = small_cluster()
    objs["queues"], objs["podgroups"] = [], []
    conv = _convert(objs, available={"nodes", "pods", "priorityclasses", "bindrequests"})
    queues = conv.snapshot.queue_map()
    # synthesised from the queues the jobs name: quota 0, no limit, weight 1
    assert set(queues) == {"llm", "vision", "inference"}
    assert (queues["llm"].gpu.quota, queues["llm"].gpu.limit, queues["llm"].gpu.over_quota_weight) == (0, -1, 1)
    # without PodGroups, pods are grouped by their pod-group-name annotation, silently (one source warning only)
    assert "llm/pg-pretrain-1a2b" in conv.snapshot.job_map()
    assert [w.kind for w in conv.warnings if w.kind in ("Pod", "PodGroup")] == []
    assert any(w.kind == "queues.scheduling.run.ai" for w in conv.warnings)


def test_reservation_pod_holding_a_gpu_uuid_keeps_its_group_without_warning():
    """KAI's reservation binary writes the GPU's UUID into run.ai/reserve_for_gpu_index (issue 13, item 8):
    the group is kept without a warning; a UUID kaidash's export wrote maps back to its device index."""
    from scheduler.sources.kai_export import gpu_uuid

    def reservation(group, value):
        p = reservation_pod("n1", group, 0)
        p["metadata"]["annotations"] = {"run.ai/reserve_for_gpu_index": value}
        return p

    objs = _base(pods=[reservation("g-real", "GPU-8a3b1c2d-0e4f-4a5b-9c6d-7e8f9a0b1c2d"),
                       reservation("g-export", gpu_uuid("n1", 5)),
                       pod("a-0", node="n1", annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": "g-real"}),
                       pod("b-0", node="n1", annotations={"gpu-fraction": "0.5"},
                           labels={"runai-gpu-group": "g-export"})])
    conv = _convert(objs)
    assert conv.warnings == []
    tasks = {t.name: t for _, t in conv.snapshot.iter_tasks()}
    assert tasks["team-a/a-0"].gpu_groups == ["g-real"] and tasks["team-a/a-0"].gpu_indices == []
    assert tasks["team-a/b-0"].gpu_indices == [5]


def test_failed_pod_keeps_its_node_and_nominated_pod_is_pipelined():
    failed = pod("f-0", gpu=1, node="n1", phase="Failed")
    nominated = pod("n-0", gpu=1)
    nominated["status"]["nominatedNodeName"] = "n1"
    tasks = {t.name: t for _, t in _convert(_base(pods=[failed, nominated])).snapshot.iter_tasks()}
    assert (tasks["team-a/f-0"].status, tasks["team-a/f-0"].node) == ("failed", "n1")
    assert (tasks["team-a/n-0"].status, tasks["team-a/n-0"].node) == ("pipelined", "n1")


def test_negative_over_quota_weight_is_kept():
    """Issue 13 item 4: KAI's Queue CRD has no minimum on overQuotaWeight; the queue is not dropped."""
    objs = _base(queues=[queue("neg", gpu={"quota": 0, "limit": -1, "overQuotaWeight": -1})])
    conv = _convert(objs)
    assert conv.snapshot.queue_map()["neg"].gpu.over_quota_weight == -1
    assert not any(w.name == "neg" for w in conv.warnings)


def test_reservation_pod_of_a_group_no_running_pod_uses_holds_a_pod_slot():
    """KAI counts every pod on a node, reservation pods included. The session counts one slot per GPU group a
    running fraction uses; a reservation pod whose fraction failed still holds its slot: counted as external."""
    objs = _base(pods=[reservation_pod("n1", "g-live", 0), reservation_pod("n1", "g-orphan", 1),
                       pod("live-0", node="n1", annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": "g-live"}),
                       pod("dead-0", node="n1", phase="Failed", annotations={"gpu-fraction": "0.5"},
                           labels={"runai-gpu-group": "g-orphan"})])
    node = _convert(objs).snapshot.nodes[0]
    assert node.external.pods == 1 and node.external.gpus == 0
