"""DRA (resource.k8s.io/v1 ResourceClaims of a GPU DeviceClass), as KAI reads it: node GPU devices from
ResourceSlices, per-pod GPU claims counted in queue usage and fair share like device-plugin GPUs, placement only
on nodes whose slices publish the devices, snapshot 1.2.

Cluster: ``dra-a`` and ``dra-b`` publish 8 and 4 GPU devices through DRA ResourceSlices (no device-plugin GPUs),
``h100`` has 8 device-plugin GPUs.
"""

import pytest

from scheduler.engine import run_session
from scheduler.errors import SnapshotError
from scheduler.fairshare import cluster_total
from scheduler.model import is_gpu_device_class
from scheduler.snapshot_io import snapshot_from_dict, snapshot_to_dict, validate

NODES = [
    {"name": "dra-a", "gpus": 8, "dra_gpus": 8, "cpu_millis": 64000, "memory_bytes": "512Gi"},
    {"name": "dra-b", "gpus": 4, "dra_gpus": 4, "cpu_millis": 64000, "memory_bytes": "512Gi"},
    {"name": "h100", "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000, "memory_bytes": "512Gi"},
]


def _snap(*jobs, quota=-1, nodes=NODES):
    return snapshot_from_dict({"version": 1.2, "nodes": nodes,
                               "queues": [{"name": "serve", "gpu": {"quota": quota}}], "jobs": list(jobs)})


def _job(name, *tasks, min_available=1):
    return {"name": name, "queue": "serve", "min_available": min_available, "tasks": list(tasks)}


def _claim(name, gpus=1, shared=False, queue="serve"):
    c = {"name": name, "gpus": gpus, "device_class": "gpu.nvidia.com"}
    return c | {"shared": True, "queue": queue} if shared else c


def _where(result, job):
    return [t.node for j in result.snapshot.jobs if j.name == job for t in j.tasks]


def test_gpu_device_class_is_a_name_with_gpu_in_it():
    assert is_gpu_device_class("gpu.nvidia.com") and is_gpu_device_class("Example-GPU")
    assert not is_gpu_device_class("rdma.mellanox.com") and not is_gpu_device_class("")


def test_snapshot_fields_and_their_checks():
    snap = _snap(_job("inf", {"name": "inf-0", "dra_claims": [_claim("default/inf-0-gpu", 2)]}))
    task = snap.jobs[0].tasks[0]
    assert task.gpu == 2 and task.is_dra and task.dra_claims[0].device_class == "gpu.nvidia.com"
    assert snap.node_map()["dra-a"].dra_gpus == 8
    doc = snapshot_to_dict(snap)
    assert doc["version"] == 1.2 and doc["nodes"][0]["dra_gpus"] == 8 and "gpu_memory_mib" not in NODES[0]
    assert doc["jobs"][0]["tasks"][0]["dra_claims"] == [{"name": "default/inf-0-gpu", "gpus": 2,
                                                        "device_class": "gpu.nvidia.com"}]
    assert snapshot_from_dict(doc) == snap
    validate(snap)
    # a snapshot without DRA stays at the version it needs
    plain = snapshot_to_dict(_snap(_job("w", {"name": "w-0", "gpu": 1}), nodes=NODES[2:]))
    assert plain["version"] == 1 and "dra_gpus" not in plain["nodes"][0]


def test_bad_dra_fields_name_the_object_and_field():
    bad = {"version": 1.2, "nodes": [dict(NODES[1], dra_gpus=5)], "queues": [{"name": "serve"}],
           "jobs": [_job("j", {"name": "j-0", "gpu": 1, "dra_claims": [_claim("c", 2), {"name": "n",
                                                                                       "device_class": "rdma.x"}]}),
                    _job("k", {"name": "k-0", "dra_claims": [_claim("c", 2)]}),
                    _job("m", {"name": "m-0", "dra_claims": [{"name": "z", "gpus": 0}], "gpu_memory_mib": 10})]}
    with pytest.raises(SnapshotError) as err:
        snapshot_from_dict(bad)
    text = str(err.value)
    assert "nodes[dra-b].dra_gpus: 5 DRA GPU devices are more than the node's gpus (4" in text
    assert "a DRA pod's gpu is the devices its claims request (3), got 1" in text
    assert "'rdma.x' is not a GPU DeviceClass" in text
    assert "jobs[k].tasks[k-0].dra_claims[c].shared: claim 'c' is also used by task 'j-0'" in text
    assert "a GPU claim requests at least 1 device" in text
    assert "give either dra_claims or gpu_memory_mib, not both" in text


def test_shared_claims_must_agree_on_their_request():
    with pytest.raises(SnapshotError, match="claim 'c' requests 1 x gpu.nvidia.com here but 2 x gpu.nvidia.com"):
        _snap(_job("a", {"name": "a-0", "dra_claims": [_claim("c", 2, shared=True)]}),
              _job("b", {"name": "b-0", "dra_claims": [_claim("c", 1, shared=True)]}))


def _running(name, node, *claims):
    return {"name": name, "status": "running", "node": node, "dra_claims": list(claims)}


def test_queue_and_fair_share_count_claimed_devices_like_gpus():
    snap = _snap(_job("train", _running("t-0", "dra-a", _claim("t-0-gpu", 2))),
                 _job("inf", {"name": "inf-0", "dra_claims": [_claim("inf-0-gpu", 3)]}))
    assert cluster_total(snap)["gpu"] == 20  # 8 + 4 DRA devices + 8 device-plugin GPUs
    r = run_session(snap)
    assert r.tasks["inf-0"].status == "binding"
    assert r.queue_stats["serve"]["gpu"]["allocated"] == 5  # 2 running + 3 placed


def test_claims_go_only_to_nodes_whose_slices_have_free_devices():
    # dra-a has 4 of 8 devices held: a 5-device claim fits neither DRA node, and h100's 8 free GPUs are not DRA devices
    snap = _snap(_job("held", _running("h-0", "dra-a", _claim("h-0-gpu", 4))),
                 _job("big", {"name": "big-0", "dra_claims": [_claim("big-0-gpu", 5)]}),
                 _job("four", {"name": "four-0", "dra_claims": [_claim("four-0-gpu", 4)]}))
    r = run_session(snap)
    assert _where(r, "big") == [None] and _where(r, "four") in (["dra-a"], ["dra-b"])
    msg = r.jobs["big"].message
    assert "had no DRA GPU devices for the pod's ResourceClaims" in msg and "insufficient GPU" in msg, msg
    # a device-plugin request of 5 GPUs fits h100; KAI counts a DRA node's devices among its GPUs, so with h100
    # full it takes them too (only fractional / shared requests are kept off DRA nodes)
    snap = _snap(_job("held", _running("h-0", "dra-a", _claim("h-0-gpu", 4))), _job("big", {"name": "big-0", "gpu": 5}))
    assert _where(run_session(snap), "big") == ["h100"]
    full = _job("full", {"name": "f-0", "gpu": 8, "status": "running", "node": "h100"}) | {"priority": 100}
    assert _where(run_session(_snap(full, _job("big", {"name": "big-0", "gpu": 5}))), "big") == ["dra-a"]


def test_fractional_pods_do_not_go_to_dra_nodes():
    full = _job("full", {"name": "f-0", "gpu": 8, "status": "running", "node": "h100"}) | {"priority": 100}
    labelled = [n | {"gpu_memory_mib": 81920} for n in NODES]  # DRA nodes that also carry the GPU-memory label
    r = run_session(_snap(full, _job("half", {"name": "half-0", "gpu": 0.5}), nodes=labelled))
    assert _where(r, "half") == [None]
    assert "fractional/shared GPU pods are not yet supported on DRA-only nodes" in r.jobs["half"].message
    r = run_session(_snap(_job("half", {"name": "half-0", "gpu": 0.5})))
    assert _where(r, "half") == ["h100"]


def _fill_dra_a():
    return _job("fill", _running("fill-0", "dra-a", _claim("fill-0-gpu", 8)))


def test_a_shared_claim_takes_its_devices_once_on_the_node_but_counts_per_pod_in_the_queue():
    # two pods on dra-b hold one shared 2-device claim: dra-b has 2 of 4 devices left, so a 2-device pod fits there
    shared = _claim("team/shared", 2, shared=True)
    snap = _snap(_fill_dra_a(), _job("pair", _running("p-0", "dra-b", shared), _running("p-1", "dra-b", shared)),
                 _job("new", {"name": "new-0", "dra_claims": [_claim("new-0-gpu", 2)]}))
    r = run_session(snap)
    assert _where(r, "new") == ["dra-b"]
    assert r.queue_stats["serve"]["gpu"]["allocated"] == 8 + 2 + 2 + 2  # KAI's queues count each pod's claim
    # the same pods with a claim each hold all 4 devices: nothing is left for the new pod
    snap = _snap(_fill_dra_a(), _job("pair", _running("p-0", "dra-b", _claim("a", 2)), _running("p-1", "dra-b", _claim("b", 2))),
                 _job("new", {"name": "new-0", "dra_claims": [_claim("new-0-gpu", 2)]}))
    assert _where(run_session(snap), "new") == [None]


def test_a_pending_pod_of_an_allocated_shared_claim_joins_it_on_its_node():
    # dra-b is full (the shared claim's 2 devices and another pod's 2); dra-a is empty. The pending pod of the shared
    # claim needs no new device and may only go where the claim is allocated.
    shared = _claim("team/shared", 2, shared=True)
    snap = _snap(_job("pair", _running("p-0", "dra-b", shared), {"name": "p-1", "dra_claims": [shared]}),
                 _job("other", _running("o-0", "dra-b", _claim("o-0-gpu", 2))))
    r = run_session(snap)
    assert r.tasks["p-1"].node == "dra-b" and r.tasks["p-1"].status == "binding"
    assert r.queue_stats["serve"]["gpu"]["allocated"] == 6
    # KAI schedules a pod of a shared GPU claim only when the claim's kai.scheduler/queue label names its queue
    for queue in ("other", None):
        bad = _claim("team/shared", 2, shared=True, queue=queue)
        r = run_session(_snap(_job("pair", _running("p-0", "dra-b", bad), {"name": "p-1", "dra_claims": [bad]})))
        assert r.tasks["p-1"].node is None
        assert "a shared GPU claim it names lacks the job's queue label" in r.jobs["pair"].message
    # a pod of a shared claim nobody holds yet needs its devices like any claim
    snap = _snap(_job("other", _running("o-0", "dra-b", _claim("o-0-gpu", 4))),
                 _job("pair", {"name": "p-1", "dra_claims": [shared]}))
    assert run_session(snap).tasks["p-1"].node == "dra-a"


def test_a_pod_whose_claim_does_not_exist_yet_waits():
    missing = {"name": "serve/inf-0-gpu (from ResourceClaimTemplate one-gpu)", "gpus": 0, "missing": True}
    snap = _snap(_job("inf", {"name": "inf-0", "dra_claims": [missing]}))
    assert snap.jobs[0].tasks[0].gpu == 0 and snapshot_from_dict(snapshot_to_dict(snap)) == snap
    r = run_session(snap)
    assert r.tasks["inf-0"].node is None  # a CPU-only pod would fit anywhere
    assert "a ResourceClaim it names does not exist (yet)" in r.jobs["inf"].message
    with pytest.raises(SnapshotError, match="a missing claim requests nothing"):
        _snap(_job("inf", {"name": "inf-0", "dra_claims": [missing | {"gpus": 1}]}))


# ------------------------------------------------------------------ KAI zip import (resource.k8s.io/v1 objects)

def _slice(node, driver, devices):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}", "uid": f"slice-{node}-{driver}"},
            "spec": {"nodeName": node, "driver": driver, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{k}"} for k in range(devices)]}}


def _rclaim(name, device_class, count=None, owner_uid=None, reserved_for=(), labels=None):
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount"}
    if count is not None:
        exactly["count"] = count
    meta = {"name": name, "namespace": "team-a", "uid": f"claim-{name}", "labels": labels or {}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": owner_uid}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": p, "uid": u} for p, u in reserved_for]}}


def _claim_pod(ko, name, ref, node=None, made=None):
    p = ko.pod(name, pod_group=name.rsplit("-", 1)[0], node=node)
    p["spec"]["resourceClaims"] = [ref]
    if made:
        p["status"]["resourceClaimStatuses"] = [{"name": ref["name"], "resourceClaimName": made}]
    return p


def test_kai_zip_import_reads_slices_and_claims(tmp_path):
    from tests import kai_objects as ko
    from scheduler.sources.kai_snapshot import load_kai_snapshot

    inf = _claim_pod(ko, "inf-0", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, made="inf-0-gpu-x7k2p")
    sh = [_claim_pod(ko, f"sh-{k}", {"name": "gpu", "resourceClaimName": "shared-gpu"}, node="dra-0") for k in (0, 1)]
    net = _claim_pod(ko, "net-0", {"name": "nic", "resourceClaimName": "nic"})
    unmade = _claim_pod(ko, "unmade-0", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"})
    claims = [_rclaim("inf-0-gpu-x7k2p", "gpu.nvidia.com", 2, owner_uid=inf["metadata"]["uid"]),
              _rclaim("shared-gpu", "gpu.nvidia.com", reserved_for=[(p["metadata"]["name"], p["metadata"]["uid"]) for p in sh],
                      labels={"kai.scheduler/queue": "team-a"}),
              _rclaim("nic", "rdma.example.com", 1)]
    objects = {"nodes": [ko.node("dra-0", gpus=0), ko.node("plain", gpus=8)],
               "pods": [inf, *sh, net, unmade], "queues": [ko.queue("team-a", **{r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                                                                  for r in ("gpu", "cpu", "memory")})],
               "podgroups": [ko.pod_group(n) for n in ("inf", "sh", "net", "unmade")],
               "priorityclasses": ko.kai_priority_classes(),
               "resourceSlices": [_slice("dra-0", "gpu.nvidia.com", 4), _slice("dra-0", "rdma.example.com", 2)],
               "resourceClaims": claims}
    path = tmp_path / "dra.zip"
    path.write_bytes(ko.kai_zip_bytes(ko.kai_snapshot_doc(objects)))
    snap = load_kai_snapshot(path)
    node = snap.node_map()["dra-0"]
    assert (node.gpus, node.dra_gpus) == (4, 4) and snap.node_map()["plain"].dra_gpus == 0  # the NIC slice is not GPUs
    tasks = {t.name: t for j in snap.jobs for t in j.tasks}
    assert [(c.name, c.gpus, c.shared) for c in tasks["team-a/inf-0"].dra_claims] == [("team-a/inf-0-gpu-x7k2p", 2, False)]
    assert tasks["team-a/inf-0"].gpu == 2
    assert [(c.name, c.gpus, c.shared, c.queue) for c in tasks["team-a/sh-1"].dra_claims] == [
        ("team-a/shared-gpu", 1, True, "team-a")]
    assert tasks["team-a/net-0"].dra_claims == [] and tasks["team-a/net-0"].gpu == 0
    assert [(c.name, c.missing) for c in tasks["team-a/unmade-0"].dra_claims] == [
        ("team-a/gpu (from ResourceClaimTemplate one-gpu)", True)]
    validate(snap)
    # the shared claim takes 1 of dra-0's 4 devices, so the 2-device claim fits there (and not on plain)
    r = run_session(snap)
    assert r.tasks["team-a/inf-0"].node == "dra-0" and r.tasks["team-a/unmade-0"].node is None
    assert r.queue_stats["team-a"]["gpu"]["allocated"] == 4  # 1 + 1 (per pod) + 2


def test_kai_zip_export_writes_slices_and_claims_that_read_back(tmp_path):
    from scheduler.sources.kai_export import export_kai_zip_bytes, write_kai_zip
    from scheduler.sources.kai_snapshot import load_kai_snapshot

    shared = _claim("serve/shared", 1, shared=True)
    jobs = [_job("pair", _running("serve/p-0", "dra-b", shared), _running("serve/p-1", "dra-b", shared),
                 {"name": "serve/p-2", "dra_claims": [shared]}),
            _job("inf", _running("serve/i-0", "dra-a", _claim("serve/i-0-gpu", 3)),
                 {"name": "serve/i-1", "dra_claims": [_claim("serve/i-1-gpu", 2)]},
                 {"name": "serve/i-2", "dra_claims": [{"name": "serve/unmade", "gpus": 0, "missing": True}]}),
            _job("w", {"name": "serve/w-0", "gpu": 2, "status": "running", "node": "h100"})]
    snap = _snap(*[j | {"namespace": "serve"} for j in jobs])
    write_kai_zip(snap, tmp_path / "d.zip")
    back = load_kai_snapshot(tmp_path / "d.zip")
    nodes = back.node_map()
    assert [(nodes[n].gpus, nodes[n].dra_gpus) for n in ("dra-a", "dra-b", "h100")] == [(8, 8), (4, 4), (8, 0)]
    tasks = {t.name: t for j in back.jobs for t in j.tasks}
    assert [(c.name, c.gpus, c.shared, c.queue) for c in tasks["serve/p-2"].dra_claims] == [("serve/shared", 1, True, "serve")]
    assert [(c.gpus, c.shared) for c in tasks["serve/i-0"].dra_claims] == [(3, False)] and tasks["serve/i-0"].gpu == 3
    assert tasks["serve/i-2"].dra_claims[0].missing and tasks["serve/w-0"].dra_claims == []
    # the same decisions from the zip as from the file, and the zip of what was read back is the same zip
    a, b = run_session(snap), run_session(back)
    assert {t: a.tasks[t].node for t in tasks} == {t: b.tasks[t].node for t in tasks}
    assert a.tasks["serve/p-2"].node == "dra-b" and a.tasks["serve/i-2"].node is None
    (tmp_path / "d2.zip").write_bytes(export_kai_zip_bytes(back))
    assert export_kai_zip_bytes(load_kai_snapshot(tmp_path / "d2.zip")) == export_kai_zip_bytes(back)
