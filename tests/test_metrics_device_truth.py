"""Device truth on a realistic cluster: Kubernetes objects never say which GPU a whole-GPU pod holds.

The *truth* (tests/metrics_scenario.py plus one busy single-GPU pod) feeds a simulated dcgm-exporter; the
*observed* snapshot is what the kube source sees: whole-GPU pods with no device indices, fractional pods
with their GPU group (and one without its index). A real Prometheus scrapes the exporter three ways:

* ``honor``:    honor_labels true, pod labels kept as ``pod``/``namespace``;
* ``exported``: honor_labels false with the target's own ``pod`` label, so the exporter's become
  ``exported_pod``/``exported_namespace`` (the Helm ServiceMonitor default);
* ``nolabels``: the pod labels dropped (dcgm-exporter without the kubelet pod-resources mapping).

Through the first two every device shows its true holder (whole GPUs from dcgm-exporter's labels, the shared
one through KAI's reservation pod) and no false flag is raised; through the third whole-GPU pods are "held,
device unknown", never placed on a guessed device, and busy devices on their nodes are not called
unallocated.
"""

import pytest

from metrics_scenario import metrics_snapshot
from prometheus_fixture import PrometheusServer, scrape_config, wait_for
from scheduler.metrics.dcgm import gpu_summary
from scheduler.metrics.exporter import ExporterServer, ExporterState
from scheduler.metrics.own import KaidashMetrics
from scheduler.metrics.prometheus_reader import DcgmReader
from scheduler.model import Job, Task, TaskUsage

pytestmark = pytest.mark.prometheus

TARGET = {"pod": "dcgm-exporter-7x9k2", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
JOBS = {
    "honor": {"honor_labels": True},
    "exported": {"honor_labels": False, "labels": TARGET},
    "nolabels": {"honor_labels": True, "metric_relabel_configs": [
        {"action": "labeldrop", "regex": "pod|namespace|container"}]},
}


def truth():
    snap = metrics_snapshot()
    snap.jobs.append(Job(name="notebook", queue="llm", creation_time=1767224300, tasks=[
        Task(name="notebook-0", gpu=1, status="running", node="h100-1", gpu_indices=[6],
             usage=TaskUsage(gpu_memory_mib=30000, gpu_util=0.6))]))
    return snap


def observed(snap):
    """What Kubernetes says: no device index on whole-GPU pods (fractional pods keep KAI's group)."""
    out = snap.copy()
    for _, t in out.iter_tasks():
        if not t.is_fractional:
            t.gpu_indices = []
    return out


@pytest.fixture(scope="module")
def cluster():
    snap = truth()
    exporter = ExporterServer(ExporterState(snap, variant="classic")).start()
    yield snap, observed(snap), exporter
    exporter.stop()


@pytest.fixture(scope="module")
def prometheus(cluster, tmp_path_factory):
    port = cluster[2].port
    config = scrape_config([{"job_name": job, "targets": [f"127.0.0.1:{port}"], **cfg} for job, cfg in JOBS.items()])
    server = PrometheusServer(config, tmp_path_factory.mktemp("prometheus")).start()

    def scraped():
        counts = server.query('count by (job) (DCGM_FI_DEV_GPU_TEMP)')
        return {r["metric"]["job"] for r in counts if int(r["value"][1]) >= 20} == set(JOBS)
    wait_for(scraped, timeout_s=30, message="three jobs scraped")
    yield server
    server.stop()


def read(prometheus, job, snap, **kw):
    reader = DcgmReader(prometheus.url, selector=f'job="{job}"', timeout_s=5, idle_window_s=3600, **kw)
    frame, status = reader.frame(snap)
    assert status.state == "ok", status.message
    return frame


def holders(frame):
    held = frame[frame["task"].notna()]
    return {(r.node, int(r.gpu_index), r.task) for r in held.itertuples()}


def true_holders(snap):
    out = set()
    for _, t in snap.iter_tasks():
        if t.node and t.status == "running" and t.is_gpu:
            indices = t.gpu_indices or [1]  # embedder-0 sits on its group's device, l4-0 GPU 1
            out |= {(t.node, i, t.name) for i in indices}
    return out


@pytest.mark.parametrize("job", ["honor", "exported"])
def test_every_device_shows_its_true_holder(cluster, prometheus, job):
    snap, seen, _ = cluster
    frame = read(prometheus, job, seen)
    assert holders(frame) == true_holders(snap)
    assert (frame["gpu_index"] >= 0).all()
    whole = frame[frame["task"].notna() & ~frame["fractional"].eq(True)]
    assert set(whole["device_source"]) == {"dcgm"}
    assert set(whole["attribution"]) == {"exporter"}
    shared = frame[frame["fractional"].eq(True)].set_index("task")
    assert shared.loc["embedder-0", "device_source"] == "reservation"
    # the busy whole GPUs are held, not "unallocated but in use"; nothing is flagged falsely
    assert not frame["unallocated_in_use"].any() and not frame["holder_unknown"].any()
    nb = frame[frame["task"] == "notebook-0"].iloc[0]
    assert (nb.gpu_index, nb.used_memory_mib, nb.pod_util) == (6, pytest.approx(30000), pytest.approx(0.6))
    # over share is computed for whole GPUs too: 30000 MiB of an 81920 MiB device is within it
    assert not whole["over_share"].any()
    assert set(frame.loc[frame["over_share"], "task"]) == {"chat-api-0", "embedder-0"}
    assert all("over share" in e for e in frame.loc[frame["over_share"], "evidence"])


def test_idle_allocated_whole_gpus_flagged_with_evidence(cluster, prometheus):
    snap, seen, _ = cluster
    reader = DcgmReader(prometheus.url, selector='job="exported"', timeout_s=5, idle_window_s=3, idle_step_s=1)

    def idle():
        frame, _ = reader.frame(seen)
        s = gpu_summary(frame)
        got = set(map(tuple, s.loc[s.idle_allocated, ["node", "gpu_index"]].to_numpy().tolist()))
        return (got, frame) if got else None
    got, frame = wait_for(idle, timeout_s=20, message="a full idle window")
    # llm-pretrain-1 holds h100-1 GPUs 0-3 without using them; notebook-0 on GPU 6 is busy
    assert got == {("h100-1", 0), ("h100-1", 1), ("h100-1", 2), ("h100-1", 3)}
    ev = frame.loc[frame["idle_allocated"], "evidence"]
    assert all("llm-pretrain-1" in e and "idle window" in e for e in ev)


def test_without_pod_labels_whole_gpus_are_held_device_unknown(cluster, prometheus):
    snap, seen, _ = cluster
    frame = read(prometheus, "nolabels", seen)
    unknown = frame[frame["task"].notna() & (frame["gpu_index"] < 0)]
    # 8 + 4 + 1 whole GPUs held, none placed on a guessed device
    assert unknown.groupby("task").size().to_dict() == {"llm-pretrain-0": 8, "llm-pretrain-1": 4, "notebook-0": 1}
    assert set(unknown["device_source"]) == {"unknown"}
    assert all("held, device unknown" in e for e in unknown["evidence"])
    # busy devices there are "holder unknown", not "unallocated in use"; the shared GPU is still resolved
    assert not frame["unallocated_in_use"].any()
    busy = set(map(tuple, frame.loc[frame["holder_unknown"], ["node", "gpu_index"]].to_numpy().tolist()))
    assert busy == {("h100-0", i) for i in range(8)} | {("h100-1", 6)}
    assert "notebook-0" in frame.loc[frame["holder_unknown"] & (frame["node"] == "h100-1"), "evidence"].iloc[0]
    assert holders(frame[frame["fractional"].eq(True)]) == {
        ("l4-0", 1, "chat-api-0"), ("l4-0", 1, "embedder-0"), ("l4-0", 2, "multi-0"), ("l4-0", 3, "multi-0")}
    metrics = KaidashMetrics()
    from scheduler.engine import run_session
    metrics.update(run_session(seen), frame, snapshot=seen)
    body = metrics.exposition()[0].decode()
    assert "kaidash_unallocated_in_use_gpus 0.0" in body


def test_a_pod_without_allocation_using_a_gpu_is_flagged(cluster, prometheus):
    """The other way round: dcgm-exporter labels a device with a pod the snapshot does not place there."""
    snap, seen, _ = cluster
    stripped = seen.copy()
    stripped.jobs = [j for j in stripped.jobs if j.name != "notebook"]
    frame = read(prometheus, "exported", stripped)
    flagged = frame[frame["unallocated_in_use"]]
    assert set(map(tuple, flagged[["node", "gpu_index"]].to_numpy().tolist())) == {("h100-1", 6)}
    assert "notebook-0" in flagged["evidence"].iloc[0] and "no pod holds" in flagged["evidence"].iloc[0]
