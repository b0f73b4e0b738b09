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


def _claim(name, gpus=1, shared=False):
    c = {"name": name, "gpus": gpus, "device_class": "gpu.nvidia.com"}
    return c | {"shared": True} if shared else c


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
