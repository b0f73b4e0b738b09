"""The live kube source against a local HTTP server that speaks the Kubernetes API (no real cluster in CI).

Covers: kubeconfig context selection, list then watch, ADDED/MODIFIED/DELETED, 410 Gone mid-watch → relist,
a 403 on one resource type reported by name while the rest works, 500s and timeouts with backoff, dropped
streams, CRDs not installed, malformed objects as warnings, thread-safe snapshots, and read-only by construction.
"""

import threading
import time

import pytest

from kai_objects import node, pod, queue, small_cluster
from kube_fake_server import RESOURCES, FakeKubeServer
from scheduler.errors import SourceError
from scheduler.snapshot_io import validate
from scheduler.sources.kube import KubeSource

FAST = dict(watch_timeout_s=2, backoff_initial_s=0.05, backoff_max_s=0.2, connect_timeout_s=2,
            request_timeout_s=5, read_slack_s=2, page_size=3)


def wait_for(condition, timeout=10.0, message="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {message}")


@pytest.fixture
def server():
    with FakeKubeServer(bookmark_interval_s=0.3) as srv:
        srv.load(small_cluster())
        yield srv


@pytest.fixture
def kubeconfig(server, tmp_path):
    return str(server.write_kubeconfig(tmp_path / "kubeconfig", context="fake"))


@pytest.fixture
def source(kubeconfig):
    src = KubeSource.from_kubeconfig(kubeconfig, context="fake", **FAST)
    yield src
    src.stop()


def _task_names(src):
    return sorted(t.name for _, t in src.snapshot().iter_tasks())


def test_context_selects_the_cluster_and_snapshot_matches_objects(source):
    # the kubeconfig's current-context points at a dead port: only the named context reaches the server
    source.start()
    assert source.wait_until_synced(10)
    assert source.status().healthy
    snap = source.snapshot()
    validate(snap)
    assert sorted(n.name for n in snap.nodes) == ["cpu-0", "h100-0", "h100-1", "l4-0"]
    assert {j.key for j in snap.jobs} == {"llm/pg-pretrain-1a2b", "vision/pg-sweep-3c4d", "serving/pg-chat-5e6f",
                                          "research-nb/notebook-0"}
    assert snap.node_map()["h100-1"].external.gpus == 2
    assert source.status().resources["pods"].items == 9  # listed in pages of 3


def test_unknown_context_is_a_clear_error(kubeconfig):
    with pytest.raises(SourceError, match="context 'nope'"):
        KubeSource.from_kubeconfig(kubeconfig, context="nope")


def test_watch_events_update_the_snapshot(server, source):
    source.start()
    assert source.wait_until_synced(10)
    server.add("pods", pod("late-0", "vision", gpu=1, queue="vision"))
    wait_for(lambda: "vision/late-0" in _task_names(source), message="ADDED pod")
    server.modify("pods", pod("late-0", "vision", gpu=1, queue="vision", node="h100-0"))
    wait_for(lambda: source.snapshot().job_map()["vision/late-0"].tasks[0].status == "running", message="MODIFIED")
    server.delete("pods", "vision", "late-0")
    wait_for(lambda: "vision/late-0" not in _task_names(source), message="DELETED pod")
    server.add("nodes", node("h100-2"))
    wait_for(lambda: "h100-2" in source.snapshot().node_map(), message="ADDED node")
    assert source.status().resources["pods"].relists == 0


def test_410_mid_watch_relists_and_keeps_watching(server, source):
    source.start()
    assert source.wait_until_synced(10)
    lists_before = server.count("pods", watch=False)
    server.expire("pods")
    wait_for(lambda: source.status().resources["pods"].relists >= 1, message="relist after 410")
    assert server.count("pods", watch=False) > lists_before
    server.add("pods", pod("after-0", "vision", gpu=1, queue="vision"))
    wait_for(lambda: "vision/after-0" in _task_names(source), message="event after relist")
    assert source.status().resources["pods"].state == "ok"


def test_forbidden_resource_is_reported_by_name_and_the_rest_keeps_working(server, source):
    server.fail("podgroups", 403)
    source.start()
    assert source.wait_until_synced(10)
    st = source.status().resources
    assert st["podgroups"].state == "forbidden"
    assert st["podgroups"].error.startswith("forbidden: cannot list podgroups.scheduling.run.ai: ")
    assert all(st[r].state == "ok" for r in ("nodes", "pods", "queues", "priorityclasses", "bindrequests"))
    snap = source.snapshot()
    assert len(snap.nodes) == 4 and "vision/pg-sweep-3c4d" in snap.job_map()  # grouped by annotation
    assert any(w.kind == "podgroups.scheduling.run.ai" and "forbidden" in w.message for w in source.warnings)
    # permissions granted later: the retry (with backoff) picks the resource up
    server.clear_faults("podgroups")
    wait_for(lambda: source.status().resources["podgroups"].state == "ok", message="podgroups after RBAC fix")
    assert source.snapshot().job_map()["llm/pg-pretrain-1a2b"].last_start_time is not None


def test_server_errors_back_off_then_recover(server, source):
    server.fail("queues", 500, on="list", times=3)
    source.start()
    wait_for(lambda: source.status().resources["queues"].state == "ok", message="queues after 500s")
    st = source.status().resources["queues"]
    # 3 failed lists, then one good list of 4 queues in pages of 3 (2 requests)
    assert st.reconnects == 3 and server.count("queues", watch=False) == 3 + 2


def test_error_state_before_first_list_and_stale_after(server, source):
    server.fail("queues", 500, on="list")
    source.start()
    wait_for(lambda: source.status().resources["queues"].state == "error", message="error state")
    assert "cannot list queues.scheduling.run.ai: HTTP 500" in source.status().resources["queues"].error
    server.clear_faults("queues")
    wait_for(lambda: source.status().resources["queues"].state == "ok", message="recovered")
    # now break watches only: the cached queues stay (stale) until the watch comes back
    server.fail("queues", 500, on="watch")
    server.drop_watches("queues")
    wait_for(lambda: source.status().resources["queues"].state == "stale", message="stale state")
    assert len(source.snapshot().queues) == 4
    server.clear_faults("queues")
    wait_for(lambda: source.status().resources["queues"].state == "ok", message="watch back")


def test_dropped_watch_stream_reconnects_from_last_version(server, source):
    source.start()
    assert source.wait_until_synced(10)
    watches_before = server.count("nodes", watch=True)
    server.drop_watches("nodes")
    wait_for(lambda: server.count("nodes", watch=True) > watches_before, message="re-watch")
    server.add("nodes", node("h100-9"))
    wait_for(lambda: "h100-9" in source.snapshot().node_map(), message="event after reconnect")
    assert source.status().resources["nodes"].relists == 0  # resumed from its resourceVersion, no relist


def test_slow_server_times_out_then_recovers(server, kubeconfig):
    server.delay("priorityclasses", 1.5)
    src = KubeSource.from_kubeconfig(kubeconfig, context="fake", **{**FAST, "request_timeout_s": 0.3})
    try:
        src.start()
        wait_for(lambda: src.status().resources["priorityclasses"].state == "error", message="timeout error")
        server.clear_faults("priorityclasses")
        wait_for(lambda: src.status().resources["priorityclasses"].state == "ok", message="recovered", timeout=15)
    finally:
        src.stop()


def test_crd_not_installed_is_absent(server, source):
    server.unserve("bindrequests")
    source.start()
    assert source.wait_until_synced(10)
    st = source.status().resources["bindrequests"]
    assert st.state == "absent" and "bindrequests.scheduling.run.ai" in st.error
    assert len(source.snapshot().jobs) == 4


def test_an_absent_optional_crd_keeps_the_source_healthy_and_is_named(server, source):
    """A cluster without KAI's Topology CRD (or DRA before Kubernetes 1.34) is a complete cluster."""
    for optional in ("topologies", "resourceclaims"):
        server.unserve(optional)
    source.start()
    assert source.wait_until_synced(10)
    st = source.status()
    assert st.healthy
    assert st.absent == ["topologies", "resourceclaims"]
    assert "topologies absent" in str(st) and st.resources["topologies"].error.startswith("not found")


def test_a_required_resource_absent_or_an_optional_one_failing_is_unhealthy():
    from scheduler.sources.kube import ResourceStatus, SourceStatus

    ok = ResourceStatus("pods", "ok", required=True)
    assert not SourceStatus({"pods": ok, "nodes": ResourceStatus("nodes", "absent", required=True)}).healthy
    assert not SourceStatus({"pods": ok, "topologies": ResourceStatus("topologies", "forbidden")}).healthy
    assert not SourceStatus({"pods": ok, "topologies": ResourceStatus("topologies", "syncing")}).healthy
    assert SourceStatus({"pods": ok, "topologies": ResourceStatus("topologies", "absent")}).healthy


def test_malformed_object_arriving_by_watch_is_a_warning(server, source):
    source.start()
    assert source.wait_until_synced(10)
    server.add("queues", queue("broken", gpu={"quota": "ten"}))
    server.add("pods", pod("banana-0", "vision", queue="vision", annotations={"gpu-fraction": "banana"}))
    wait_for(lambda: any(w.name == "banana-0" for w in source.warnings), message="pod warning")
    warnings = {(w.kind, w.name): w for w in source.warnings}
    assert warnings[("Queue", "broken")].field == "spec.resources.gpu.quota"
    assert warnings[("Pod", "banana-0")].namespace == "vision"
    validate(source.snapshot())


def test_snapshots_are_thread_safe_while_events_stream(server, source):
    source.start()
    assert source.wait_until_synced(10)
    errors = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                validate(source.snapshot())
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(30):
        server.add("pods", pod(f"burst-{i}", "vision", gpu=1, queue="vision"))
    wait_for(lambda: len([n for n in _task_names(source) if "burst-" in n]) == 30, message="all burst pods")
    stop.set()
    for t in readers:
        t.join()
    assert errors == []


def test_only_get_requests_reach_the_server(server, source):
    """Record every HTTP request of a full run (list, watch, relist, errors, stop): all GETs on known paths."""
    server.fail("podgroups", 403, times=1)
    source.start()
    assert source.wait_until_synced(10)
    server.add("pods", pod("rw-0", "vision", gpu=1, queue="vision"))
    server.expire("nodes")
    wait_for(lambda: source.status().resources["nodes"].relists >= 1 and "vision/rw-0" in _task_names(source))
    source.snapshot()
    source.stop()
    source.capture()
    assert server.requests and server.methods() == {"GET"}
    assert {p for _, p, _ in server.requests} <= {path for path, *_ in RESOURCES.values()}


def test_client_refuses_writes_before_they_leave(server, source):
    before = len(server.requests)
    with pytest.raises(SourceError, match="read-only"):
        source.api_client.call_api("DELETE", server.url + "/api/v1/namespaces/x/pods/y")
    assert len(server.requests) == before


def test_capture_lists_once_without_threads(server, source):
    conv = source.capture()
    assert len(conv.snapshot.nodes) == 4 and len(conv.snapshot.jobs) == 4
    assert server.count("pods", watch=True) == 0
    assert threading.active_count() >= 1 and all(r.state == "ok" for r in source.status().resources.values())


def test_capture_fails_clearly_when_nodes_are_forbidden(server, source):
    server.fail("nodes", 403)
    with pytest.raises(SourceError, match="forbidden: cannot list nodes"):
        source.capture()


def test_stop_ends_every_watcher(server, source):
    source.start()
    assert source.wait_until_synced(10)
    source.stop()
    assert {r.state for r in source.status().resources.values()} == {"stopped"}


def test_context_keyword_and_one_line_status(server, kubeconfig):
    server.fail("podgroups", 403)
    src = KubeSource(kubeconfig=kubeconfig, context="fake", **FAST)
    try:
        src.start()
        assert src.wait_until_synced(10)
        line = str(src.status())
        assert "nodes ok" in line and "podgroups forbidden" in line
    finally:
        src.stop()


def test_forbidden_watch_after_a_list_keeps_the_data_and_relists_with_backoff(server, kubeconfig):
    """RBAC that grants list but not watch (or an API server whose authorizer is still warming up after a
    restart): the listed objects stay in use, marked stale, and are refreshed by relists at the backoff's pace."""
    server.fail("queues", 403, on="watch")
    src = KubeSource.from_kubeconfig(kubeconfig, context="fake", **{**FAST, "backoff_max_s": 0.4})
    try:
        src.start()
        wait_for(lambda: src.status().resources["queues"].state == "stale", message="stale after a 403 watch")
        # the other resources are listed by their own threads: the snapshot needs nodes and pods read once
        wait_for(lambda: src.status().synced, message="every resource listed once")
        st = src.status().resources["queues"]
        assert st.error.startswith("forbidden: cannot watch queues.scheduling.run.ai: HTTP 403")
        assert len(src.snapshot().queues) == 4 and not any("synthesised" in w.message for w in src.warnings)
        lists = server.count("queues", watch=False)
        time.sleep(2.0)
        # backoff 0.05 s doubling to 0.4 s: a handful of relists (2 requests each: 4 queues in pages of 3),
        # not one every 0.05 s
        assert 2 <= server.count("queues", watch=False) - lists <= 2 * 8
        server.clear_faults("queues")
        wait_for(lambda: src.status().resources["queues"].state == "ok", message="watch allowed again")
    finally:
        src.stop()


def test_topologies_and_podgroup_topology_constraints_are_read(server, source):
    from kai_objects import pod_group

    topo = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
            "metadata": {"name": "net", "uid": "t-1", "resourceVersion": "1"},
            "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
                                {"nodeLabel": "example.com/rack", "alias": "rack"}]}}
    server.add("topologies", topo)
    for name, rack in (("h100-0", "r1"), ("h100-1", "r2")):
        obj = node(name)
        obj["metadata"]["labels"].update({"topology.kubernetes.io/zone": "a", "example.com/rack": rack})
        server.modify("nodes", obj)
    server.add("podgroups", pod_group("pg-racked", "llm", queue="llm",
                                      topologyConstraint={"topology": "net", "requiredTopologyLevel": "rack"}))
    server.add("pods", pod("racked-0", "llm", gpu=1, queue="llm", pod_group="pg-racked"))
    source.start()
    assert source.wait_until_synced(10)
    snap = wait_for(lambda: (s := source.snapshot()).topologies and "llm/pg-racked" in s.job_map() and s,
                    message="the topology and the constrained job")
    assert source.status().resources["topologies"].state == "ok"
    assert [lv.node_label for lv in snap.topologies[0].levels] == ["topology.kubernetes.io/zone", "example.com/rack"]
    assert snap.job_map()["llm/pg-racked"].topology.required_level == "rack"
    assert snap.node_map()["h100-1"].labels["example.com/rack"] == "r2"  # kept: a level of a topology reads it
    validate(snap)


def test_dra_resource_slices_and_claims_are_read(server, source):
    """resource.k8s.io/v1 objects: a node's GPU devices from its slices, a pod's GPU claim made from a template."""
    server.modify("nodes", node("dra-0", gpus=0))
    server.add("resourceslices", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                  "metadata": {"name": "dra-0-gpu", "uid": "s-1", "resourceVersion": "1"},
                                  "spec": {"nodeName": "dra-0", "driver": "gpu.nvidia.com",
                                           "pool": {"name": "dra-0", "generation": 1, "resourceSliceCount": 1},
                                           "devices": [{"name": f"gpu-{k}"} for k in range(4)]}})
    p = pod("infer-0", "llm", queue="llm")
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "infer-0-gpu-7xk2p"}]
    server.add("pods", p)
    server.add("resourceclaims", {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                  "metadata": {"name": "infer-0-gpu-7xk2p", "namespace": "llm", "uid": "c-1",
                                               "resourceVersion": "1"},
                                  "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                      "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                      "count": 2}}]}}})
    source.start()
    assert source.wait_until_synced(10)
    snap = wait_for(lambda: (s := source.snapshot()).node_map().get("dra-0") is not None
                    and s.node_map()["dra-0"].dra_gpus and any(t.dra_claims for j in s.jobs for t in j.tasks) and s,
                    message="the DRA node and the claiming pod")
    assert source.status().resources["resourceclaims"].state == "ok"
    assert source.status().resources["resourceslices"].state == "ok"
    assert (snap.node_map()["dra-0"].gpus, snap.node_map()["dra-0"].dra_gpus) == (4, 4)
    task = next(t for j in snap.jobs for t in j.tasks if t.name == "llm/infer-0")
    assert task.gpu == 2 and [(c.name, c.gpus, c.shared) for c in task.dra_claims] == [("llm/infer-0-gpu-7xk2p", 2, False)]


# ------------------------------------------------------------------------------ liveness (issue 20)

SLOW_READ = dict(FAST, watch_timeout_s=60, read_slack_s=30, request_timeout_s=60)   # 90 s before a read gives up


def test_a_hung_api_server_goes_stale_within_two_probe_intervals_not_the_read_timeout(server, kubeconfig):
    src = KubeSource.from_kubeconfig(kubeconfig, context="fake", probe_interval_s=1.0, **SLOW_READ)
    try:
        src.start()
        wait_for(lambda: src.status().healthy, message="all resources ok")
        server.hang()
        hung_at = time.monotonic()
        # stops sending without closing: only the probe can tell (the watch's read timeout is 90 s here)
        wait_for(lambda: all(r.state == "stale" for r in src.status().resources.values() if r.usable),
                 timeout=20, message="stale while hung")
        assert time.monotonic() - hung_at < 60
        pods = src.status().resources["pods"]
        assert "API server not answering" in pods.error and src.unresponsive
        assert _task_names(src)                                     # the cached cluster is still served
        server.hang(False)
        wait_for(lambda: src.status().healthy and src.unresponsive is None, timeout=20, message="ok again")
    finally:
        server.hang(False)
        src.stop()


def test_a_quiet_but_answering_api_server_stays_ok(tmp_path):
    with FakeKubeServer(bookmark_interval_s=3600) as quiet:      # no events, no bookmarks: silence
        quiet.load(small_cluster())
        cfg = str(quiet.write_kubeconfig(tmp_path / "quiet-kubeconfig", context="fake"))
        src = KubeSource.from_kubeconfig(cfg, context="fake", probe_interval_s=0.3, **SLOW_READ)
        try:
            src.start()
            wait_for(lambda: src.status().healthy, message="all resources ok")
            probes = quiet.count("nodes")
            time.sleep(1.5)                                         # five probe intervals of silence
            assert src.status().healthy and src.unresponsive is None
            assert quiet.count("nodes") == probes                   # and no reconnect churn either
        finally:
            src.stop()
