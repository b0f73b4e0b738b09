"""DcgmReader's resilience against a fake Prometheus HTTP API on loopback: ok, down, erroring, slow, garbage.

The fake answers the four endpoints the reader uses from the simulated exporter's exposition. Real-Prometheus
behaviour (variants, relabelling, restart) is in test_metrics_prometheus.py.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_scenario import metrics_snapshot
from prometheus_fixture import free_port
from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import FRAME_COLUMNS, build_gpu_frame, samples_from_exposition
from scheduler.metrics.exporter import render_exposition, simulate_gpus
from scheduler.metrics.prometheus_reader import DcgmReader


class FakePrometheus:
    """Serves /api/v1/{label/__name__/values,labels,query,query_range} from exposition text."""

    def __init__(self, text):
        self.text, self.mode, self.requests = text, "ok", 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                fake.requests += 1
                if fake.mode == "slow":
                    time.sleep(1.5)
                if fake.mode == "fail":
                    return self._send(503, b'{"status":"error","error":"overloaded"}')
                if fake.mode == "garbage":
                    return self._send(200, b"<html>proxy login</html>")
                path = self.path.split("?")[0]
                series = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(fake.text)
                          for s in f.samples]
                if path == "/api/v1/label/__name__/values":
                    data = sorted({n for n, _, _ in series})
                elif path == "/api/v1/labels":
                    data = sorted({k for _, lab, _ in series for k in lab} | {"__name__"})
                elif path == "/api/v1/query":
                    data = {"resultType": "vector", "result": [
                        {"metric": {"__name__": n, **lab}, "value": [time.time(), repr(v)]} for n, lab, v in series]}
                elif path == "/api/v1/query_range":
                    data = {"resultType": "matrix", "result": []}
                else:
                    return self._send(404, b"{}")
                self._send(200, json.dumps({"status": "success", "data": data}).encode())

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Clock:
    def __init__(self, t=1000.0):
        self.t, self.sleeps = t, []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)


@pytest.fixture
def snap():
    return metrics_snapshot()


@pytest.fixture
def fake(snap):
    server = FakePrometheus(render_exposition(simulate_gpus(snap), "classic"))
    yield server
    server.close()


def expected_frame(snap, variant="classic"):
    ev = V.EXPORTER_VARIANTS[variant]
    text = render_exposition(simulate_gpus(snap), ev)
    return build_gpu_frame(snap, samples_from_exposition(text, V.variant_for_exporter(ev)))


def test_ok_frame_matches_the_exporter(snap, fake):
    frame, status = DcgmReader(fake.url, timeout_s=2).frame(snap)
    assert status.state == "ok" and status.ok and status.variant == "legacy" and status.attempts == 1
    assert status.age_s == 0.0 and status.info["series"] == 9 * 20
    pd.testing.assert_frame_equal(frame, expected_frame(snap))


def test_prometheus_down_is_an_error_status_with_an_empty_frame_and_backoff(snap):
    clock = Clock()
    reader = DcgmReader(f"http://127.0.0.1:{free_port()}", timeout_s=1, retries=2, backoff_s=0.5,
                        clock=clock, sleep=clock.sleep)
    frame, status = reader.frame(snap)
    assert status.state == "error" and not status.ok
    assert status.attempts == 3 and clock.sleeps == [0.5, 1.0]  # exponential backoff between retries
    assert "variant probe failed" in status.message
    assert list(frame.columns) == FRAME_COLUMNS and frame.empty
    frame2, status2 = reader.frame(snap)  # same instant: backing off, no request
    assert status2.state == "error" and status2.attempts == 0 and "backing off" in status2.message


def test_failure_after_success_is_stale_with_age_then_recovers(snap, fake):
    clock = Clock(1000.0)
    reader = DcgmReader(fake.url, timeout_s=2, retries=1, backoff_s=0.25, max_backoff_s=30,
                        clock=clock, sleep=clock.sleep)
    good, status = reader.frame(snap)
    assert status.state == "ok"
    fake.mode = "fail"
    clock.t = 1012.0
    frame, status = reader.frame(snap)
    assert status.state == "stale" and status.age_s == pytest.approx(12.0) and status.last_success == 1000.0
    assert "503" in status.message and status.attempts == 2
    pd.testing.assert_frame_equal(frame, good)
    fake.mode = "ok"
    before = fake.requests
    clock.t = 1012.5  # next try at 1012 + 0.25 * 2**(1 failure + 1 retry) = 1013
    _, status = reader.frame(snap)
    assert status.state == "stale" and status.age_s == pytest.approx(12.5) and fake.requests == before
    clock.t = 1013.5
    _, status = reader.frame(snap)
    assert status.state == "ok" and status.last_success == 1013.5


def test_slow_prometheus_times_out(snap, fake):
    fake.mode = "slow"
    clock = Clock()
    _, status = DcgmReader(fake.url, timeout_s=0.3, retries=0, clock=clock, sleep=clock.sleep).frame(snap)
    assert status.state == "error" and "timed out" in status.message.lower()


def test_non_json_answer_is_an_error_not_an_exception(snap, fake):
    fake.mode = "garbage"
    clock = Clock()
    frame, status = DcgmReader(fake.url, timeout_s=2, retries=0, clock=clock, sleep=clock.sleep).frame(snap)
    assert status.state == "error" and frame.empty


def test_no_dcgm_series_is_no_data_with_allocation_only_frame(snap, fake):
    fake.text = "# HELP up x\n# TYPE up gauge\nup 1\n"
    frame, status = DcgmReader(fake.url, timeout_s=2).frame(snap)
    assert status.state == "no_data" and status.ok
    assert len(frame) == 21 and not frame["has_metrics"].any()


def test_4_9_0_variant_is_detected(snap):
    server = FakePrometheus(render_exposition(simulate_gpus(snap), "4.9.0"))
    try:
        frame, status = DcgmReader(server.url, timeout_s=2).frame(snap)
    finally:
        server.close()
    assert status.variant == "dcgm-4.7"
    pd.testing.assert_frame_equal(frame, expected_frame(snap, "4.9.0"))
