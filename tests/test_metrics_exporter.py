"""The simulated dcgm-exporter: exposition names, labels, label order, units and values; state; HTTP server.

Expected values come from the scenario in tests/metrics_scenario.py and the exporter rules: reserved 512 MiB,
free = total - used - reserved, power = idle + util * (max - idle), temperature = 30 + 40 * util.
"""

import hashlib
import re
import threading

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from metrics_scenario import metrics_snapshot
from scheduler.metrics import variants as V
from scheduler.metrics.exporter import ExporterServer, ExporterState, render_exposition, simulate_gpus
from scheduler.model import Node, Snapshot

MIB = 1024 * 1024
RESERVATION_L4_1 = "gpu-reservation-l4-0-" + hashlib.sha256(b"l4-0/grp-l4-1").hexdigest()[:5]


def samples(text):
    """{(metric, frozenset(labels)) : value} plus the families in order."""
    families = list(text_string_to_metric_families(text))
    return families, [(s.name, s.labels, s.value) for f in families for s in f.samples]


def find(rows, name, **labels):
    hits = [(lab, v) for n, lab, v in rows if n == name and all(lab.get(k) == val for k, val in labels.items())]
    return hits


def raw_line(text, name, host_label, host, gpu, pod=None):
    for line in text.splitlines():
        if line.startswith(name + "{") and f'{host_label}="{host}"' in line and f'gpu="{gpu}"' in line:
            if pod is None or f'="{pod}"' in line:
                return line
    raise AssertionError(f"no {name} line for {host}/{gpu}")


@pytest.fixture(scope="module")
def snap():
    return metrics_snapshot()


def test_classic_families_help_type_and_field_id_order(snap):
    text = render_exposition(simulate_gpus(snap), "classic")
    families, _ = samples(text)
    assert [f.name for f in families] == [
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE"]
    assert all(f.type == "gauge" for f in families)
    assert "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n" in text
    # 20 GPUs in the scenario (8 + 8 + 4), one series each per family in exclusive mode
    assert all(len(f.samples) == 20 for f in families)


def test_label_order_matches_dcgm_exporter_template(snap):
    text = render_exposition(simulate_gpus(snap), "classic")
    line = raw_line(text, "DCGM_FI_DEV_FB_USED", "Hostname", "l4-0", 1)
    assert re.findall(r'(\w+)="', line) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                            "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    idle = raw_line(text, "DCGM_FI_DEV_FB_USED", "Hostname", "h100-1", 5)
    assert re.findall(r'(\w+)="', idle) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                            "DCGM_FI_DRIVER_VERSION"]
    assert line.endswith("} 20000")  # integer fields print as %d


def test_shared_gpu_is_credited_to_the_reservation_pod(snap):
    _, rows = samples(render_exposition(simulate_gpus(snap), "classic"))
    (labels, used), = find(rows, "DCGM_FI_DEV_FB_USED", Hostname="l4-0", gpu="1")
    assert labels["pod"] == RESERVATION_L4_1
    assert labels["namespace"] == "kai-resource-reservation"
    assert used == 20000  # 13000 + 7000
    assert find(rows, "DCGM_FI_DEV_FB_FREE", Hostname="l4-0", gpu="1")[0][1] == 23000 - 20000 - 512
    assert find(rows, "DCGM_FI_DEV_FB_RESERVED", Hostname="l4-0", gpu="1")[0][1] == 512
    assert find(rows, "DCGM_FI_DEV_GPU_UTIL", Hostname="l4-0", gpu="1")[0][1] == 50  # percent
    assert find(rows, "DCGM_FI_DEV_POWER_USAGE", Hostname="l4-0", gpu="1")[0][1] == pytest.approx(16 + 0.5 * 56)
    assert find(rows, "DCGM_FI_DEV_GPU_TEMP", Hostname="l4-0", gpu="1")[0][1] == 50
    assert find(rows, "DCGM_FI_PROF_DRAM_ACTIVE", Hostname="l4-0", gpu="1")[0][1] == pytest.approx(0.25)
    # multi-device fraction: each device has its own reservation pod (its own group)
    pods = {find(rows, "DCGM_FI_DEV_FB_USED", Hostname="l4-0", gpu=g)[0][0]["pod"] for g in ("2", "3")}
    assert pods == {"gpu-reservation-l4-0-" + hashlib.sha256(f"l4-0/{g}".encode()).hexdigest()[:5]
                    for g in ("grp-l4-2", "grp-l4-3")}


def test_whole_gpu_pod_credited_to_itself_and_idle_gpu_unlabelled(snap):
    _, rows = samples(render_exposition(simulate_gpus(snap), "classic"))
    (labels, used), = find(rows, "DCGM_FI_DEV_FB_USED", Hostname="h100-0", gpu="3")
    assert (labels["pod"], labels["namespace"], labels["container"], used) == (
        "llm-pretrain-0", "default", "main", 60000)
    assert find(rows, "DCGM_FI_DEV_GPU_UTIL", Hostname="h100-0", gpu="3")[0][1] == 90
    assert find(rows, "DCGM_FI_DEV_POWER_USAGE", Hostname="h100-0", gpu="3")[0][1] == pytest.approx(70 + 0.9 * 630)
    (idle_labels, idle_used), = find(rows, "DCGM_FI_DEV_FB_USED", Hostname="h100-1", gpu="5")
    assert "pod" not in idle_labels and idle_used == 0


def test_4_9_0_names_units_and_labels(snap):
    text = render_exposition(simulate_gpus(snap), "4.9.0")
    families, rows = samples(text)
    names = {f.name for f in families}
    assert "DCGM_FI_DEV_FB_USED_BYTES" in names and "DCGM_FI_DEV_FB_USED" not in names
    assert "DCGM_FI_DEV_FB_CAPACITY_BYTES" in names and "DCGM_FI_DEV_GPU_UTIL_RATIO" in names
    (labels, used), = find(rows, "DCGM_FI_DEV_FB_USED_BYTES", hostname="l4-0", gpu="1")
    assert used == 20000 * MIB
    assert labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] and "Hostname" not in labels
    assert find(rows, "DCGM_FI_DEV_FB_CAPACITY_BYTES", hostname="l4-0", gpu="1")[0][1] == 23000 * MIB
    assert find(rows, "DCGM_FI_DEV_GPU_UTIL_RATIO", hostname="l4-0", gpu="1")[0][1] == pytest.approx(0.5)
    assert raw_line(text, "DCGM_FI_DEV_GPU_UTIL_RATIO", "hostname", "l4-0", 1).endswith("} 0.500000")


def test_old_namespace_labels(snap):
    text = render_exposition(simulate_gpus(snap), "old-namespace")
    line = raw_line(text, "DCGM_FI_DEV_FB_USED", "Hostname", "h100-0", 0)
    assert re.findall(r'(\w+)="', line)[1] == "uuid"
    assert re.findall(r'(\w+)="', line)[-3:] == ["container_name", "pod_name", "pod_namespace"]


def test_per_pod_mode_gives_device_series_and_each_pods_own_value(snap):
    text = render_exposition(simulate_gpus(snap), "classic", per_pod=True)
    _, rows = samples(text)
    util = find(rows, "DCGM_FI_DEV_GPU_UTIL", Hostname="l4-0", gpu="1")
    by_pod = {lab.get("pod"): v for lab, v in util}
    assert by_pod == {None: 50, "chat-api-0": 30, "embedder-0": 20}
    fb = {lab.get("pod"): v for lab, v in find(rows, "DCGM_FI_DEV_FB_USED", Hostname="l4-0", gpu="1")}
    assert fb == {None: 20000, "chat-api-0": 13000, "embedder-0": 7000}
    line = raw_line(text, "DCGM_FI_DEV_FB_USED", "Hostname", "l4-0", 1, pod="chat-api-0")
    assert re.findall(r'(\w+)="', line)[-5:] == ["container", "namespace", "pod", "pod_uid", "vgpu"]
    # other families: one whole-GPU copy per sharing pod, no unlabelled one
    temps = find(rows, "DCGM_FI_DEV_GPU_TEMP", Hostname="l4-0", gpu="1")
    assert sorted(lab["pod"] for lab, _ in temps) == ["chat-api-0", "embedder-0"] and {v for _, v in temps} == {50}


def test_sentinel_override_is_printed_raw(snap):
    state = ExporterState(variant="classic")
    state.update(snap, overrides={("h100-1", 5): {V.TEMP: V.NOT_SUPPORTED_INT64}})
    line = raw_line(state.render(), "DCGM_FI_DEV_GPU_TEMP", "Hostname", "h100-1", 5)
    assert line.endswith("} 9223372036854775794")


def test_uuids_are_deterministic_and_distinct(snap):
    a, b = simulate_gpus(snap), simulate_gpus(metrics_snapshot())
    assert [g.uuid for g in a] == [g.uuid for g in b]
    assert len({g.uuid for g in a}) == 20
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g.uuid) for g in a)


def test_state_update_is_atomic_for_concurrent_scrapes(snap):
    other = metrics_snapshot()
    other.job_map()["llm-pretrain"].tasks[0].usage.gpu_memory_mib = 30000
    state = ExporterState(snap)
    seen, errors, stop = set(), [], threading.Event()

    def scrape():
        while not stop.is_set():
            _, rows = samples(state.render())
            values = {v for n, lab, v in rows if n == "DCGM_FI_DEV_FB_USED" and lab["Hostname"] == "h100-0"}
            if len(values) != 1:
                errors.append(values)
            seen.update(values)

    t = threading.Thread(target=scrape)
    t.start()
    for i in range(30):
        state.update(other if i % 2 == 0 else snap)
    stop.set()
    t.join()
    assert not errors
    assert seen <= {60000.0, 30000.0}
    assert state.updates == 31


def test_http_server_serves_metrics(snap):
    state = ExporterState(snap, variant="hostname")
    with ExporterServer(state) as server:
        r = requests.get(server.url, timeout=5)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert r.text == state.render()
        assert 'hostname="h100-0"' in r.text
        assert requests.get(f"http://127.0.0.1:{server.port}/nope", timeout=5).status_code == 404


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="unknown exporter variant"):
        ExporterState(variant="5.0")


def test_model_name_reads_as_nvml_reports_it():
    """dcgm-exporter's modelName is NVML's device name ("NVIDIA A100-SXM4-80GB"): a model from GPU feature
    discovery's label ("NVIDIA-A100-SXM4-80GB") must not get a second vendor prefix."""
    from scheduler.metrics.exporter import model_name

    assert model_name("NVIDIA-A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"
    assert model_name("NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"
    assert model_name("H100") == "NVIDIA H100"
    assert model_name(None) == "NVIDIA GPU"
    snap = Snapshot(nodes=[Node(name="a100-0", gpus=1, gpu_memory_mib=81920, gpu_model="NVIDIA-A100-SXM4-80GB")],
                    queues=[], jobs=[])
    text = render_exposition(simulate_gpus(snap), "classic")
    assert 'modelName="NVIDIA A100-SXM4-80GB"' in text and "NVIDIA NVIDIA" not in text
