"""Integration: a MIG node's per-instance series through a real Prometheus (Debian package, on loopback).

Simulated dcgm-exporter (``tests/mig_scenario.py``) -> Prometheus scraping every second -> DcgmReader -> the
per-GPU frame and the per-instance usage. Two jobs: ``classic`` (honor_labels true: ``pod``/``namespace`` kept)
and ``exported`` (dcgm-exporter 4.6+ ``hostname``; the target carries its own ``pod`` label and honor_labels is
false, so Prometheus renames the exporter's to ``exported_pod``/..., the Helm default). The test starts the
server and stops it.
"""

import pandas as pd
import pytest

from mig_scenario import mig_snapshot
from prometheus_fixture import PrometheusServer, scrape_config, wait_for
from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, gpu_summary, samples_from_exposition
from scheduler.metrics.exporter import ExporterServer, ExporterState
from scheduler.metrics.prometheus_reader import DcgmReader

pytestmark = pytest.mark.prometheus

TARGET_LABELS = {"pod": "dcgm-exporter-7x9k2", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
JOBS = {"classic": ("classic", True, None), "exported": ("hostname", False, TARGET_LABELS)}


@pytest.fixture(scope="module")
def snap():
    return mig_snapshot()


@pytest.fixture(scope="module")
def exporters(snap):
    servers = {job: ExporterServer(ExporterState(snap, variant=v)).start() for job, (v, _, _) in JOBS.items()}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def prometheus(exporters, tmp_path_factory):
    config = scrape_config([{"job_name": job, "targets": [f"127.0.0.1:{exporters[job].port}"],
                             "honor_labels": honor, "labels": labels} for job, (_, honor, labels) in JOBS.items()])
    server = PrometheusServer(config, tmp_path_factory.mktemp("prometheus-mig")).start()

    def instances_scraped():
        counts = server.query('count by (job) (DCGM_FI_DEV_FB_USED{GPU_I_ID!=""})')
        return {r["metric"]["job"] for r in counts if int(r["value"][1]) == 5} == set(JOBS)
    wait_for(instances_scraped, timeout_s=30, message="the MIG instance series of both exporters")
    yield server
    server.stop()


@pytest.mark.parametrize("job", list(JOBS))
def test_mig_pods_used_memory_comes_back_per_instance(snap, exporters, prometheus, job):
    reader = DcgmReader(prometheus.url, selector=f'job="{job}"', timeout_s=5, idle_window_s=3600)
    frame, status = reader.frame(snap)
    assert status.state == "ok", status.message
    assert "5 MIG instances" in status.message

    inst = status.info["mig_instances"].set_index("instance_id")
    assert inst.loc[1, ["pod", "namespace", "profile", "fb_used_mib"]].tolist() == ["small-0", "serve", "1g.10gb",
                                                                                   7000]
    assert inst.loc[5, ["pod", "profile", "fb_used_mib", "first_cell", "width"]].tolist() == ["big-0", "3g.40gb",
                                                                                              30000, 4, 3]
    assert inst.loc[3, "pod"] == "" and inst.loc[3, "fb_used_mib"] == 0   # a free instance
    assert set(inst["gpu_index"]) == {0} and set(inst["node"]) == {"a100-mig"}

    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc[("serve/small-0", 0), "used_memory_mib"] == 7000
    assert pods.loc[("serve/small-1", 1), "used_memory_mib"] == 9000
    assert pods.loc["serve/big-0", "used_memory_mib"].to_dict() == {4: 10000, 5: 10000, 6: 10000}
    assert set(pods.loc[["serve/small-0", "serve/small-1", "serve/big-0"], "attribution"]) == {"exporter"}
    assert pods.loc[("serve/small-0", 0), "dcgm_pod"] == "serve/small-0"    # never the dcgm-exporter pod
    assert pods.loc[("train/whole-0", 7), "used_memory_mib"] == 50000       # physical GPU 1 -> cell 7

    state = exporters[job].state
    expected = build_gpu_frame(snap, samples_from_exposition(state.render(), V.variant_for_exporter(state.variant)))
    pd.testing.assert_frame_equal(frame, expected)


def test_idle_mig_instance_from_a_range_query(snap, prometheus):
    """The per-instance range query (max of GR_ENGINE_ACTIVE by host, gpu, GPU_I_ID): small-1 holds its
    instance (cell 1) at activity 0; every other held instance or GPU is busy."""
    reader = DcgmReader(prometheus.url, selector='job="classic"', timeout_s=5, idle_window_s=3, idle_step_s=1)

    def idle_cells():
        summary = gpu_summary(reader.frame(snap)[0])
        return set(map(tuple, summary.loc[summary.idle_allocated, ["node", "gpu_index"]].to_numpy().tolist()))
    assert wait_for(idle_cells, timeout_s=20, message="a full idle window of samples") == {("a100-mig", 1)}


def test_prometheus_really_renamed_the_instance_pod_labels(prometheus):
    (series,) = prometheus.query('DCGM_FI_DEV_FB_USED{job="exported",GPU_I_ID="5"}')
    labels = series["metric"]
    assert labels["GPU_I_PROFILE"] == "3g.40gb" and labels["exported_pod"] == "big-0"
    assert labels["pod"] == TARGET_LABELS["pod"]
