"""Integration: simulated dcgm-exporter -> real Prometheus (Debian package) -> DcgmReader -> per-GPU frame.

One Prometheus scrapes five simulated exporters every second, one job per naming variant users meet:

* ``classic``:  legacy names, ``Hostname``, honor_labels: true (pod labels kept as ``pod``)
* ``exported``: 4.6+ ``hostname``; the target carries its own pod/namespace/container labels and
  honor_labels is false, so Prometheus renames the exporter's to ``exported_pod``/... (the Helm default)
* ``renamed``:  dcgm-exporter 4.9.0 names and units (bytes, ratios), also with ``exported_*`` labels
* ``perpod``:   per-pod FB_USED/GPU_UTIL (``--kubernetes-virtual-gpus``), with ``exported_*`` labels
* ``oldns``:    ``--use-old-namespace`` (``uuid``, ``pod_name``...) next to a target ``pod`` label

For each, the frame read back through prometheus-api-client must equal the frame computed from the
exporter's own exposition. Then: the idle window through a range query, and Prometheus stopped mid-run.
"""

import hashlib

import pandas as pd
import pytest

from metrics_scenario import metrics_snapshot
from prometheus_fixture import PrometheusServer, scrape_config, wait_for
from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, gpu_summary, samples_from_exposition
from scheduler.metrics.exporter import ExporterServer, ExporterState
from scheduler.metrics.prometheus_reader import DcgmReader

pytestmark = pytest.mark.prometheus

TARGET_LABELS = {"pod": "dcgm-exporter-7x9k2", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
JOBS = {  # job -> (exporter variant, per_pod, honor_labels, target labels, detected profile)
    "classic": ("classic", False, True, None, "legacy"),
    "exported": ("hostname", False, False, TARGET_LABELS, "legacy"),
    "renamed": ("4.9.0", False, False, TARGET_LABELS, "dcgm-4.7"),
    "perpod": ("classic", True, False, TARGET_LABELS, "legacy"),
    "oldns": ("old-namespace", False, False, TARGET_LABELS, "legacy"),
}
RESERVATION = ("kai-resource-reservation/gpu-reservation-l4-0-"
               + hashlib.sha256(b"l4-0/grp-l4-1").hexdigest()[:5])


@pytest.fixture(scope="module")
def snap():
    return metrics_snapshot()


@pytest.fixture(scope="module")
def exporters(snap):
    servers = {job: ExporterServer(ExporterState(snap, variant=v, per_pod=pp)).start()
               for job, (v, pp, _, _, _) in JOBS.items()}
    yield servers
    for server in servers.values():
        server.stop()


def _config(exporters, jobs):
    return scrape_config([{"job_name": job, "targets": [f"127.0.0.1:{exporters[job].port}"],
                           "honor_labels": JOBS[job][2], "labels": JOBS[job][3]} for job in jobs])


@pytest.fixture(scope="module")
def prometheus(exporters, tmp_path_factory):
    server = PrometheusServer(_config(exporters, JOBS), tmp_path_factory.mktemp("prometheus")).start()

    def all_jobs_scraped():
        counts = server.query('count by (job) ({__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS"})')
        return {r["metric"]["job"] for r in counts if int(r["value"][1]) >= 20} == set(JOBS)
    wait_for(all_jobs_scraped, timeout_s=30, message="all five exporters scraped")
    yield server
    server.stop()


def expected_frame(snap, exporters, job):
    state = exporters[job].state
    return build_gpu_frame(snap, samples_from_exposition(state.render(), V.variant_for_exporter(state.variant)))


@pytest.mark.parametrize("job", list(JOBS))
def test_frame_read_back_equals_what_the_simulator_set(snap, exporters, prometheus, job):
    reader = DcgmReader(prometheus.url, selector=f'job="{job}"', timeout_s=5, idle_window_s=3600)
    frame, status = reader.frame(snap)
    assert status.state == "ok", status.message
    assert status.variant == JOBS[job][4]
    pd.testing.assert_frame_equal(frame, expected_frame(snap, exporters, job))
    shared = frame[(frame.node == "l4-0") & (frame.gpu_index == 1)].set_index("task")
    assert shared.loc["chat-api-0", "memory_used_mib"] == pytest.approx(20000)
    if job == "perpod":
        assert shared.loc["chat-api-0", "used_memory_mib"] == pytest.approx(13000)
        assert set(shared["attribution"]) == {"exporter"}
    else:
        assert shared.loc["chat-api-0", "dcgm_pod"] == RESERVATION  # never the dcgm-exporter pod
        assert shared.loc["chat-api-0", "used_memory_mib"] == pytest.approx(20000 * 0.5 / 0.85)
        assert set(shared["attribution"]) == {"proportional"}


def test_exported_labels_really_were_renamed_by_prometheus(prometheus):
    (series,) = prometheus.query('DCGM_FI_DEV_FB_USED{job="exported",hostname="h100-0",gpu="0"}')
    labels = series["metric"]
    assert labels["exported_pod"] == "llm-pretrain-0" and labels["pod"] == TARGET_LABELS["pod"]
    (renamed,) = prometheus.query('DCGM_FI_DEV_FB_USED_BYTES{job="renamed",hostname="h100-0",gpu="0"}')
    assert float(renamed["value"][1]) == 60000 * 1024 * 1024


def test_idle_allocated_from_a_range_query(snap, prometheus):
    reader = DcgmReader(prometheus.url, selector='job="classic"', timeout_s=5, idle_window_s=3, idle_step_s=1)

    def idle_gpus():
        frame, status = reader.frame(snap)
        summary = gpu_summary(frame)
        return set(map(tuple, summary.loc[summary.idle_allocated, ["node", "gpu_index"]].to_numpy().tolist()))
    idle = wait_for(idle_gpus, timeout_s=20, message="a full idle window of samples")
    # llm-pretrain-1 holds h100-1 GPUs 0-3 with no usage; every other allocated GPU is busy
    assert idle == {("h100-1", 0), ("h100-1", 1), ("h100-1", 2), ("h100-1", 3)}


def test_prometheus_stopped_mid_run_goes_stale_then_recovers(snap, exporters, tmp_path):
    server = PrometheusServer(_config(exporters, ["classic"]), tmp_path / "prom").start()
    try:
        reader = DcgmReader(server.url, selector='job="classic"', timeout_s=2, retries=0, backoff_s=0.1,
                            max_backoff_s=0.5, idle_window_s=3600)
        good, status = wait_for(lambda: (lambda fs: fs if fs[1].state == "ok" else None)(reader.frame(snap)),
                                timeout_s=30, message="first good frame")
        server.stop()
        frame, status = reader.frame(snap)
        assert status.state == "stale" and status.age_s >= 0 and status.last_success is not None
        pd.testing.assert_frame_equal(frame, good)
        server.start()
        wait_for(lambda: reader.frame(snap)[1].state == "ok", timeout_s=30, message="recovery after restart")
        frame, status = reader.frame(snap)
        assert status.state == "ok" and status.age_s == 0.0
        pd.testing.assert_frame_equal(frame, good)
    finally:
        server.stop()
