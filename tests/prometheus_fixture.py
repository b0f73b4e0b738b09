"""A real Prometheus server on loopback for integration tests (Debian package ``prometheus``).

``PrometheusServer(config_yaml, tmp_path).start()`` runs ``/usr/bin/prometheus`` on a free 127.0.0.1 port
with its own TSDB directory, waits for ``/-/ready``, and :meth:`stop` terminates it and waits. ``restart()``
keeps the port and the storage, so a test can take Prometheus away and bring it back. Use it through the
``prometheus_server`` fixture factory (``tests/conftest.py`` or a test module imports it) or directly.

Helpers: :func:`free_port`, :func:`scrape_config` (a config with one job per target),
:func:`wait_for` (poll a condition with a deadline).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
import requests
import yaml

PROMETHEUS_BINARY = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout_s: float = 20.0, interval_s: float = 0.2,
             message: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_exc: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling; reported on timeout
            last_exc = exc
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s}s waiting for {message}" + (f" (last error: {last_exc})" if last_exc
                                                                          else ""))


def scrape_config(jobs: list[dict], scrape_interval: str = "1s") -> str:
    """Prometheus YAML with ``jobs`` (dicts of ``job_name``, ``targets``, optional ``labels``,
    ``honor_labels``, ``metric_relabel_configs``)."""
    scrape_configs = []
    for job in jobs:
        cfg = {"job_name": job["job_name"], "scrape_interval": scrape_interval,
               "scrape_timeout": scrape_interval, "honor_labels": job.get("honor_labels", False),
               "static_configs": [{"targets": job["targets"], **({"labels": job["labels"]} if job.get("labels")
                                                                  else {})}]}
        if job.get("metric_relabel_configs"):
            cfg["metric_relabel_configs"] = job["metric_relabel_configs"]
        scrape_configs.append(cfg)
    return yaml.safe_dump({"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
                           "scrape_configs": scrape_configs}, sort_keys=False)


class PrometheusServer:
    """One Prometheus process on 127.0.0.1 (see the module docstring)."""

    def __init__(self, config_yaml: str, workdir: Path, port: Optional[int] = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(config_yaml)
        self.storage = self.workdir / "tsdb"
        self.port = port or free_port()
        self.log_path = self.workdir / "prometheus.log"
        self._proc: Optional[subprocess.Popen] = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, ready_timeout_s: float = 30.0) -> "PrometheusServer":
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            [PROMETHEUS_BINARY, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.storage}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
             "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)

        def ready():
            if self._proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self._proc.returncode}: {self.log_path.read_text()[-2000:]}")
            return requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        wait_for(ready, ready_timeout_s, message=f"prometheus ready on port {self.port}")
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = None
        if self._log:
            self._log.close()
            self._log = None

    def restart(self) -> "PrometheusServer":
        self.stop()
        return self.start()

    def query(self, promql: str) -> list:
        """Instant query straight over HTTP (independent of the code under test)."""
        r = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture
def prometheus_server(tmp_path):
    """Factory fixture: ``prometheus_server(config_yaml)`` starts one; all are stopped at teardown."""
    servers: list[PrometheusServer] = []

    def start(config_yaml: str) -> PrometheusServer:
        server = PrometheusServer(config_yaml, tmp_path / f"prom{len(servers)}").start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
