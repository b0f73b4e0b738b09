"""The kube source against a real kube-apiserver v1.37.2 (etcd, kube-controller-manager, kwok; see
tests/kube_cluster.py), holding a GPU cluster written the way KAI writes it (tests/kube_scenario.py).

kaidash always runs with the shipped read-only ServiceAccount (deploy/kubernetes). Covered here: capture and
the CLI, the objects' real shapes read without spurious warnings, paging with ``continue`` tokens, watch
bookmarks, a watch expired by etcd compaction (410) and relisted, an API server restart, and changes made while
the dashboard's live loop runs showing up within two ticks. Faults a real server cannot produce on demand (500s,
hangs, dropped streams) stay in test_source_kube.py against tests/kube_fake_server.py.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

import kube_rbac
import kube_scenario as scenario
from kube_cluster import CONTEXT, wait_for
from kube_rbac import USER
from scheduler.snapshot_io import load_snapshot, snapshot_to_dict, validate
from scheduler.sources.k8s_convert import ANN_RESERVED_INDEX
from scheduler.sources.kube import KubeSource

pytestmark = pytest.mark.kube_apiserver

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(backoff_initial_s=0.1, backoff_max_s=1.0, connect_timeout_s=5, request_timeout_s=30, read_slack_s=5)


def source(kubeconfig, **kw) -> KubeSource:
    return KubeSource.from_kubeconfig(str(kubeconfig), context=CONTEXT, **{**FAST, **kw})


def check_scenario(snap) -> None:
    """The snapshot holds the cluster of kube_scenario.py exactly as worked out in EXPECTED."""
    validate(snap)
    exp = scenario.EXPECTED
    assert {n.name: (n.gpus, n.gpu_memory_mib, n.ready) for n in snap.nodes} == exp["nodes"]
    assert {q.name: q.parent for q in snap.queues} == exp["queues"]
    jobs = {j.key: {t.name: (t.status, t.node, t.gpu, t.subgroup) for t in j.tasks} for j in snap.jobs}
    assert jobs == exp["jobs"]
    tasks = {t.name: t for _, t in snap.iter_tasks()}
    assert {name: tasks[name].gpu_groups for name in exp["gpu_groups"]} == exp["gpu_groups"]
    assert {n.name: n.external.gpus for n in snap.nodes if n.external.gpus} == exp["external_gpus"]
    pretrain = snap.job_map()["llm/pg-pretrain"]
    assert pretrain.min_available == 3 and [(s.name, s.min_available) for s in pretrain.subgroups] == \
        [("leader", 1), ("workers", 2)]
    assert pretrain.last_start_time == pytest.approx(1767225700.0)   # 2026-01-01T00:01:40Z
    assert snap.job_map()["serving/pg-chat"].priority == 125          # PriorityClass inference


def _not_uuid(warnings):
    return [w for w in warnings if ANN_RESERVED_INDEX not in (w.field or "")]


# ---------------------------------------------------------------------------------------------- capture

def test_capture_reads_the_cluster_as_kai_wrote_it(kai_cluster, kaidash_kubeconfig):
    conv = source(kaidash_kubeconfig).capture()
    check_scenario(conv.snapshot)
    assert conv.scheduling_conditions["vision/pg-sweep"][0]["reasons"] == [
        {"reason": "OverCapacity", "message": "not enough free GPUs"}]
    # real objects (defaulted by the server, admission-mutated, kwok's status) read without a complaint, but
    # for the scenario's not-ready node, which is reported rather than excluded silently
    not_ready = sorted(n for n, (_, _, ready) in scenario.EXPECTED["nodes"].items() if not ready)
    assert not_ready and [(w.kind, w.name, w.field) for w in _not_uuid(conv.warnings)] == [
        ("Node", n, "status.conditions") for n in not_ready]


def test_reservation_pods_holding_a_gpu_uuid_are_read_without_warnings(kai_cluster, kaidash_kubeconfig):
    """KAI's reservation binary writes the GPU's UUID (GPU-...) in run.ai/reserve_for_gpu_index."""
    conv = source(kaidash_kubeconfig).capture()
    assert [w for w in conv.warnings if ANN_RESERVED_INDEX in (w.field or "")] == []
    tasks = {t.name: t for _, t in conv.snapshot.iter_tasks()}
    assert tasks["serving/chat-0"].gpu_groups == tasks["serving/chat-1"].gpu_groups == [scenario.GROUP_CHAT]


def test_snapshot_capture_cli_writes_what_the_source_reads(kai_cluster, kaidash_kubeconfig, tmp_path):
    out = tmp_path / "cluster.yaml"
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli", "snapshot", "capture", "--kubeconfig",
                           str(kaidash_kubeconfig), "--context", CONTEXT, "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout
    saved = load_snapshot(out)
    check_scenario(saved)
    live = snapshot_to_dict(source(kaidash_kubeconfig).capture().snapshot)
    assert {**snapshot_to_dict(saved), "time": None} == {**live, "time": None}


def test_in_cluster_credentials_as_the_deployment_uses_them(kai_cluster, kaidash_kubeconfig, tmp_path, monkeypatch):
    """``KubeSource.in_cluster()``: the service host/port environment and the mounted token and CA files."""
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(kube_rbac.token(kai_cluster.admin))
    ca.write_bytes(kai_cluster.pki.ca_cert.read_bytes())
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(kai_cluster.api_port))
    since = time.time()
    check_scenario(KubeSource.in_cluster().capture().snapshot)
    assert {e["verb"] for e in kai_cluster.audit_events(USER, since)} == {"list"}   # as kaidash's ServiceAccount


# ---------------------------------------------------------------------------------------------- paging

@pytest.fixture
def many_pods(kai_cluster):
    """60 pending KAI pods of one gang in namespace ``paging`` (removed afterwards)."""
    api = kai_cluster.admin
    scenario.ensure_namespace(api, "paging")
    custom = k8s.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "paging", "podgroups", scenario.creatable(
        scenario.pod_group("pg-wide", "paging", "vision", min_member=60)))
    for i in range(60):
        obj, _ = scenario.kai_pod(f"wide-{i}", "paging", gpu=1, queue="vision", pod_group="pg-wide")
        k8s.CoreV1Api(api).create_namespaced_pod("paging", obj)
    yield 60
    k8s.CoreV1Api(api).delete_collection_namespaced_pod("paging", grace_period_seconds=0)
    custom.delete_collection_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "paging", "podgroups")
    wait_for(lambda: not k8s.CoreV1Api(api).list_namespaced_pod("paging").items, 30, "paging pods to go")


def test_a_list_larger_than_the_page_is_read_in_pages(kai_cluster, kaidash_kubeconfig, many_pods):
    total = len(k8s.CoreV1Api(kai_cluster.admin).list_pod_for_all_namespaces().items)
    since = time.time()
    conv = source(kaidash_kubeconfig, page_size=7).capture()
    assert len(conv.snapshot.job_map()["paging/pg-wide"].tasks) == many_pods
    lists = [e["requestURI"] for e in kai_cluster.audit_events(USER, since)
             if e["verb"] == "list" and e["objectRef"]["resource"] == "pods" and "limit=7" in e["requestURI"]]
    assert len(lists) == math.ceil(total / 7), lists    # one request per page of 7
    assert ["continue=" in uri for uri in lists] == [False] + [True] * (len(lists) - 1)


# ---------------------------------------------------------------------------------------------- watch

@pytest.fixture
def live(kaidash_kubeconfig):
    """A started source with short server-side watch timeouts (so watches end and resume often)."""
    src = source(kaidash_kubeconfig, watch_timeout_s=4)
    src.start()
    assert src.wait_until_synced(30)
    yield src
    src.stop()


def test_watch_bookmarks_advance_the_resource_version_without_events(kai_cluster, live):
    before = live.status().resources["bindrequests"]
    # writes elsewhere move the cluster's resourceVersion on; no BindRequest changes
    k8s.CoreV1Api(kai_cluster.admin).patch_node("cpu-0", {"metadata": {"labels": {"kaidash-test/touch": "1"}}})
    wait_for(lambda: live.status().resources["bindrequests"].bookmarks > before.bookmarks, 20, "a bookmark")
    after = live.status().resources["bindrequests"]
    assert after.items == before.items and after.relists == 0
    assert int(after.resource_version) > int(before.resource_version)
    assert after.state == "ok"


def test_etcd_compaction_expires_a_watch_and_the_source_relists(kai_cluster, live):
    """PriorityClasses are not in the watch cache (tests/kube_cluster.py): their watch reads etcd's history,
    so compacting it makes the next watch from the listed resourceVersion fail with 410 Expired."""
    api = kai_cluster.admin
    listed = live.status().resources["priorityclasses"]
    for i in range(3):   # move etcd's revision past the watch's next one, then drop the history before it
        k8s.CoreV1Api(api).patch_node("cpu-0", {"metadata": {"labels": {"kaidash-test/touch": str(i)}}})
    assert kai_cluster.compact_etcd() > int(listed.resource_version) + 1
    wait_for(lambda: live.status().resources["priorityclasses"].relists > listed.relists, 30, "a relist after 410")
    assert live.status().resources["priorityclasses"].state == "ok"
    k8s.SchedulingV1Api(api).create_priority_class({"metadata": {"name": "urgent"}, "value": 1000})
    try:
        wait_for(lambda: live.status().resources["priorityclasses"].items == listed.items + 1, 15,
                 "the watch after the relist")
    finally:
        k8s.SchedulingV1Api(api).delete_priority_class("urgent")
    check_scenario(live.snapshot())


def test_api_server_restart_goes_stale_then_recovers_every_resource(kai_cluster, live):
    api = kai_cluster.admin
    down = kai_cluster.restart_apiserver()
    # while it was down every watch broke; the cached cluster stays in use
    check_scenario(live.snapshot())
    scenario.ensure_namespace(api, "restart")
    obj, _ = scenario.kai_pod("after-restart-0", "restart", gpu=1, queue="vision", pod_group="pg-after")
    custom = k8s.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "restart", "podgroups",
                                           scenario.creatable(scenario.pod_group("pg-after", "restart", "vision")))
    k8s.CoreV1Api(api).create_namespaced_pod("restart", obj)
    try:
        wait_for(lambda: "restart/pg-after" in live.snapshot().job_map(), 60, "an event after the restart")
        # every watch reconnects on its own back-off (and the liveness probe may mark a slow answer stale on a
        # loaded machine): wait for all of them rather than expect them back with the first event
        wait_for(lambda: live.status().healthy, 60, "every resource ok again")
        status = live.status()
        assert all(r.reconnects >= 1 for r in status.resources.values()), status.to_dict()
    finally:
        k8s.CoreV1Api(api).delete_namespaced_pod("after-restart-0", "restart", grace_period_seconds=0)
        custom.delete_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "restart", "podgroups", "pg-after")
    assert down < 120
