"""``kaidash exporter``: the standalone simulated dcgm-exporter, run as a real process on loopback."""

import socket
import subprocess
import sys
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from prometheus_fixture import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "small-cluster.yaml"


def test_serves_the_snapshot_in_the_chosen_variant():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "exporter", "--host", "127.0.0.1",
                             "--port", str(port), "--snapshot", str(EXAMPLE), "--variant", "4.9.0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = wait_for(lambda: requests.get(url, timeout=1).text, timeout_s=30, message="exporter serving")
        names = {f.name for f in text_string_to_metric_families(text)}
        assert "DCGM_FI_DEV_FB_USED_BYTES" in names and "DCGM_FI_DEV_FB_USED" not in names
        # small-cluster.yaml: h100-0 and h100-1 have 8 GPUs, l4-0 has 4 -> 20 series per family
        fb = [s for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "DCGM_FI_DEV_FB_USED_BYTES"]
        assert len(fb) == 20 and {s.labels["hostname"] for s in fb} == {"h100-0", "h100-1", "l4-0"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert b"20 GPUs on 4 nodes" in proc.stderr.read()


def test_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "scheduler.cli", "exporter", "--host", "127.0.0.1",
                              "--port", str(port), "--snapshot", str(EXAMPLE)],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr


def test_serves_the_synthetic_scenario_without_a_snapshot():
    from scheduler.sources.synthetic import generate_scenario
    gpus = sum(n.gpus for n in generate_scenario(3, 16).snapshot.nodes)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "exporter", "--host", "127.0.0.1",
                             "--port", str(port), "--seed", "3", "--nodes", "16"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = wait_for(lambda: requests.get(url, timeout=1).text, timeout_s=30, message="exporter serving")
        temps = [s for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "DCGM_FI_DEV_GPU_TEMP"]
        assert len(temps) == gpus
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_demo_extensions_serve_per_mig_instance_series():
    """The demo's MIG pool (scheduler/sources/synthetic_extensions.py): a100-mig-000..003 with 7 x 1g.10gb,
    2 x 3g.40gb, 3 x 2g.20gb + 1g.10gb and 1 x 7g.80gb = 14 instances, one inference server on each but the last
    of the first three nodes' (both 3g.40gb are held)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "exporter", "--host", "127.0.0.1",
                             "--port", str(port), "--seed", "3", "--nodes", "16", "--demo-extensions"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = wait_for(lambda: requests.get(url, timeout=1).text, timeout_s=30, message="exporter serving")
        fb = [s for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in s.labels]
        assert len(fb) == 14 and {s.labels["Hostname"] for s in fb} == {f"a100-mig-00{i}" for i in range(4)}
        held = [s for s in fb if s.labels.get("pod")]
        assert len(held) == 6 + 2 + 3 and all(s.labels["pod"].startswith("inference-serve-mig-") for s in held)
        assert {s.labels["GPU_I_PROFILE"] for s in held} == {"1g.10gb", "3g.40gb", "2g.20gb"}
        assert all(0 < s.value <= int(s.labels["GPU_I_PROFILE"].split(".")[1][:-2]) * 1024 for s in held)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert b"(14 MIG instances)" in proc.stderr.read()
