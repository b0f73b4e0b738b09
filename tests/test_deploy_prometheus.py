"""deploy/prometheus-scrape.yaml and deploy/servicemonitor.yaml scrape kaidash's own /metrics.

The plain config is checked by Prometheus' own ``promtool`` (Debian's prometheus package, installed by
scripts/setup.sh); both files must point at the Service and port that deploy/kubernetes defines.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRAPE = ROOT / "deploy" / "prometheus-scrape.yaml"
SERVICE_MONITOR = ROOT / "deploy" / "servicemonitor.yaml"
SERVICE = ROOT / "deploy" / "kubernetes" / "service.yaml"


def _service() -> dict:
    return yaml.safe_load(SERVICE.read_text())


def _promtool(path: Path) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/setup.sh --tests (Debian package prometheus)"
    return subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)


def test_plain_scrape_config_is_valid_for_prometheus():
    result = _promtool(SCRAPE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_copy(tmp_path):
    """promtool really checks: a misspelt field fails."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(SCRAPE.read_text().replace("scrape_interval:", "scrape_intervall:"))
    assert _promtool(broken).returncode != 0


def test_plain_scrape_job_targets_the_kaidash_service_metrics():
    jobs = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["kaidash"]
    job = jobs[0]
    assert job["metrics_path"] == "/metrics" and job["scheme"] == "http"
    service = _service()
    port = service["spec"]["ports"][0]["port"]
    expected = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port}"
    assert [t for sc in job["static_configs"] for t in sc["targets"]] == [expected]


def test_service_monitor_selects_the_kaidash_service_http_port():
    monitor = yaml.safe_load(SERVICE_MONITOR.read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    service = _service()
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in spec["endpoints"]] == [service["spec"]["ports"][0]["name"]]
    endpoint = spec["endpoints"][0]
    assert endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
    assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings"}
    assert "release" in monitor["metadata"]["labels"], "kube-prometheus-stack selects ServiceMonitors by `release`"


@pytest.mark.parametrize("interval_key", ["interval", "scrapeTimeout"])
def test_service_monitor_durations_are_prometheus_durations(interval_key):
    endpoint = yaml.safe_load(SERVICE_MONITOR.read_text())["spec"]["endpoints"][0]
    value = endpoint[interval_key]
    assert isinstance(value, str) and value[:-1].isdigit() and value[-1] in "smh"
