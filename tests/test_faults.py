"""Fault matrix on the running app's live loop: it keeps serving, says what is stale and why, and recovers
by itself when the fault clears (docs/faults.md has the matrix with results).

The loop's tick function (``LiveLoop.step``) is driven directly against real servers on loopback: the fake
Kubernetes API (``kube_fake_server``: 403, 500, delays, dropped streams, 410), a real Prometheus scraping the
simulated dcgm-exporter (stopped and restarted, or slowed by a delaying proxy), and the snapshot import of
the Snapshot view. ``test_served_app_*`` runs the real ``kaidash serve`` against the fake API server and
checks ``/healthz``, ``/readyz`` and the page while a fault comes and goes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.error import HTTPError

import pytest

from dashboard import health
from dashboard.feeds import Feed, KubeFeed
from dashboard.loop import LiveLoop, MetricsReader
from dashboard.options import SourceOptions
from kai_objects import node, pod, pod_group, queue, small_cluster
from kube_fake_server import FakeKubeServer
from scheduler.snapshot_io import dumps_snapshot
from scheduler.sources.kube import KubeSource

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(watch_timeout_s=2, backoff_initial_s=0.05, backoff_max_s=0.2, connect_timeout_s=2,
            request_timeout_s=5, read_slack_s=2, page_size=50)


def until(condition, timeout=20.0, step=None, message="condition"):
    """Poll ``condition`` (after ``step()`` when given) until it is truthy."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if step is not None:
            step()
        last = condition()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message} (last: {last!r})")


# ------------------------------------------------------------------------------------------- kube faults

class FakeClusterFeed(KubeFeed):
    """``KubeFeed`` on the fake API server with short timeouts and backoff (the real one uses a context)."""

    def __init__(self, kubeconfig: str, **kw):
        self.source = KubeSource(kubeconfig=kubeconfig, context="fake", **{**FAST, **kw}).start()
        self.label = "kube fake"


@pytest.fixture
def kube():
    with FakeKubeServer(bookmark_interval_s=0.3) as srv:
        srv.load(small_cluster())
        yield srv


@pytest.fixture
def kubeconfig(kube, tmp_path):
    return str(kube.write_kubeconfig(tmp_path / "kubeconfig", context="fake"))


def kube_loop(kubeconfig, **kw) -> LiveLoop:
    feed = FakeClusterFeed(kubeconfig, **kw)
    loop = LiveLoop(SourceOptions(source="kube", period_s=0.5), feed=feed)
    loop.metrics = MetricsReader(simulated=False)
    loop.explain_jobs = 1
    assert feed.source.wait_until_synced(10)
    return loop


@pytest.fixture
def loop(kubeconfig):
    lp = kube_loop(kubeconfig)
    yield lp
    lp.stop()


def clean(loop) -> bool:
    return loop.state.source_status == "ok" and health.problems(loop.state) == [] and not loop.state.error


def test_clean_cluster_publishes_ok_and_is_ready(loop):
    assert loop.step() is not None
    st = loop.state
    assert clean(loop)
    assert {j.key for j in st.tick.snapshot.jobs} >= {"llm/pg-pretrain-1a2b", "vision/pg-sweep-3c4d"}
    r = health.readiness(st)
    assert r["ready"] and r["problems"] == []


def test_an_absent_optional_crd_is_said_but_is_no_fault(kube, kubeconfig):
    """No KAI Topology CRD on the cluster: the status line says "topologies absent", the loop is ok, not
    degraded, and ready with no problem listed."""
    kube.unserve("topologies")
    lp = kube_loop(kubeconfig)
    try:
        assert lp.step() is not None
        assert clean(lp), (lp.state.source_status, health.problems(lp.state))
        assert "topologies absent" in lp.state.source_detail
        assert health.readiness(lp.state)["problems"] == []
    finally:
        lp.stop()


def test_forbidden_resource_degrades_with_the_reason_and_recovers(kube, loop):
    loop.step()
    kube.fail("podgroups", 403)
    kube.drop_watches("podgroups")              # the re-watch meets the 403, as after an RBAC change
    # first "podgroups stale" (the stream dropped), then the 403 on the retries: the pod groups listed before
    # stay in use, stale, with the reason (as an informer's cache does; never listed would be "forbidden")
    until(lambda: "podgroups stale: forbidden" in loop.state.source_detail, step=loop.step, message="forbidden")
    st = loop.state
    assert st.tick is not None and not st.error          # the tick still published: it keeps serving
    assert st.source_detail.startswith("degraded: podgroups stale: forbidden: cannot ")
    assert "podgroups.scheduling.run.ai: HTTP 403" in st.source_detail
    assert any(p.startswith("podgroups stale: forbidden") for p in health.problems(st))
    assert len(st.tick.snapshot.nodes) == 4              # the rest of the cluster is current
    assert health.readiness(st)["ready"]                 # degraded data is still worth showing
    kube.clear_faults("podgroups")
    until(lambda: clean(loop), step=loop.step, message="recovered")


def test_server_errors_on_watch_leave_cached_data_stale_then_recover(kube, loop):
    loop.step()
    kube.fail("queues", 500, on="watch")
    kube.drop_watches("queues")
    # the dropped stream, then the failing re-watches: stale with the server's answer
    until(lambda: any("queues stale" in p and "HTTP 500" in p for p in health.problems(loop.state)),
          step=loop.step, message="queues stale with HTTP 500")
    st = loop.state
    assert st.source_status == "degraded" and "queues stale: cannot watch queues.scheduling.run.ai: HTTP 500" \
        in st.source_detail
    assert len(st.tick.snapshot.queues) == 4             # cached queues still scheduled
    kube.clear_faults("queues")
    until(lambda: clean(loop), step=loop.step, message="recovered")


def test_required_resource_failing_from_the_start_is_an_error_then_recovers(kube, kubeconfig):
    kube.fail("nodes", 500, on="list")
    feed = FakeClusterFeed(kubeconfig)
    lp = LiveLoop(SourceOptions(source="kube", period_s=0.5), feed=feed)
    lp.metrics = MetricsReader(simulated=False)
    try:
        assert feed.source.wait_until_synced(10)
        tick = lp.step()
        st = lp.state
        # nodes never read: the source refuses to build a snapshot (an empty cluster would be a wrong picture),
        # so the tick fails and there is nothing to show;
        # readiness says so and names the resource that cannot be read
        assert tick is None and st.source_status == "error" and st.tick is None and st.error
        r = health.readiness(st, lp)
        assert not r["ready"] and r["reason"].startswith("no tick published yet")
        assert any(p.startswith("nodes error: cannot list nodes: HTTP 500") for p in r["problems"])
        kube.clear_faults("nodes")
        until(lambda: clean(lp) and len(lp.state.tick.snapshot.nodes) == 4, step=lp.step, message="recovered")
        assert health.readiness(lp.state)["ready"]
    finally:
        lp.stop()


def test_timeouts_mark_the_resource_and_recover(kube, kubeconfig):
    kube.delay("priorityclasses", 1.5)
    lp = kube_loop(kubeconfig, request_timeout_s=0.3)
    try:
        until(lambda: any(p.startswith("priorityclasses error: cannot list") for p in health.problems(lp.state)),
              step=lp.step, message="timeout reported")
        assert lp.state.tick is not None and lp.state.source_status == "degraded"
        kube.clear_faults("priorityclasses")
        until(lambda: clean(lp), step=lp.step, timeout=30, message="recovered")
    finally:
        lp.stop()


def test_410_during_watch_relists_and_new_objects_reach_the_next_tick(kube, loop):
    loop.step()
    kube.expire("pods")
    until(lambda: loop.feed.source.status().resources["pods"].relists >= 1, message="relist")
    kube.add("pods", pod("after-410", "vision", gpu=1, queue="vision"))
    until(lambda: "vision/after-410" in loop.state.tick.snapshot.job_map(), step=loop.step, message="new pod")
    assert clean(loop)


def test_dropped_stream_reconnects_and_new_objects_reach_the_next_tick(kube, loop):
    loop.step()
    kube.drop_watches("nodes")
    kube.add("nodes", node("h100-9"))
    until(lambda: "h100-9" in loop.state.tick.snapshot.node_map(), step=loop.step, message="new node")
    assert clean(loop) and loop.feed.source.status().resources["nodes"].relists == 0


def test_malformed_queue_is_named_and_the_rest_is_scheduled(kube, loop):
    loop.step()
    kube.add("queues", queue("broken", gpu={"quota": "ten"}))
    until(lambda: loop.state.source_status == "degraded", step=loop.step, message="degraded")
    st = loop.state
    assert "Queue broken field spec.resources.gpu.quota" in st.source_detail
    assert "broken" not in st.tick.snapshot.queue_map() and len(st.tick.snapshot.queues) == 4
    kube.delete("queues", None, "broken")
    until(lambda: clean(loop), step=loop.step, message="recovered")


def test_malformed_podgroup_is_named_and_the_rest_is_scheduled(kube, loop):
    loop.step()
    kube.add("podgroups", pod_group("pg-bad", "vision", queue="vision", min_member="lots"))
    until(lambda: "PodGroup vision/pg-bad" in loop.state.source_detail, step=loop.step, message="named")
    st = loop.state
    assert st.source_status == "degraded" and "spec.minMember" in st.source_detail
    assert "vision/pg-sweep-3c4d" in st.tick.snapshot.job_map()
    kube.delete("podgroups", "vision", "pg-bad")
    until(lambda: clean(loop), step=loop.step, message="recovered")


def test_garbage_gpu_fraction_annotation_is_named(kube, loop):
    loop.step()
    kube.add("pods", pod("banana-0", "vision", queue="vision", annotations={"gpu-fraction": "banana"}))
    until(lambda: "Pod vision/banana-0" in loop.state.source_detail, step=loop.step, message="named")
    st = loop.state
    assert st.source_status == "degraded" and "metadata.annotations.gpu-fraction" in st.source_detail
    assert st.tick.result is not None and "llm/pg-pretrain-1a2b" in st.tick.snapshot.job_map()
    kube.delete("pods", "vision", "banana-0")
    until(lambda: clean(loop), step=loop.step, message="recovered")


# ------------------------------------------------------------------------------------------- engine / sim


def _same_tick(tick, other) -> bool:
    """The same published state: the background ETA estimate may republish a tick with its report attached
    (a new Tick object around the same snapshot), so identity of the Tick itself is not the question."""
    return tick is not None and other is not None and tick.index == other.index and tick.snapshot is other.snapshot

def test_failing_ticks_keep_the_last_good_state_then_recover(monkeypatch):
    from dashboard import loop as loop_module

    lp = LiveLoop(SourceOptions(source="sim", nodes=4, period_s=0.5, sim_step_s=60))
    lp.metrics = MetricsReader(simulated=False)
    lp.explain_jobs = 0
    good = lp.step()
    assert good is not None

    def broken(snapshot):
        raise RuntimeError("engine exploded on purpose")

    monkeypatch.setattr(loop_module, "_engine", lambda: broken)
    assert lp.step() is None and lp.step() is None
    st = lp.state
    assert _same_tick(st.tick, good) and st.source_status == "stale" and st.stale_since is not None
    assert st.error == "sim: RuntimeError: engine exploded on purpose" and st.errors_total == 2
    assert health.readiness(st)["ready"]                 # the loop is ticking; the last good state is served
    monkeypatch.undo()
    assert lp.step() is not None
    assert st.source_status == "ok" and st.error == "" and st.stale_since is None


def test_readiness_needs_a_recent_attempt_and_a_tick():
    from dashboard.state import LiveState

    st = LiveState(period_s=2.0)
    assert health.readiness(st)["reason"].startswith("no tick published yet")
    lp = LiveLoop(SourceOptions(source="snapshot"), state=st,
                  feed=Feed(dumps_and_load_small(), label="small"))
    lp.metrics = MetricsReader(simulated=False)
    lp.step()
    now = time.time()
    assert health.readiness(st, now=now)["ready"]
    # 5 periods + 5 s = 15 s without an attempt: not ready
    late = health.readiness(st, now=now + 16)
    assert not late["ready"] and "has not ticked within 15s" in late["reason"]


def dumps_and_load_small():
    from scheduler.snapshot_io import loads_snapshot

    from test_dashboard_models import SCENARIO

    return loads_snapshot(SCENARIO, "yaml")


# ------------------------------------------------------------------------------------------- snapshot import

def test_snapshot_cut_in_half_is_refused_and_the_previous_state_stays(tmp_path):
    pytest.importorskip("panel")
    from dashboard.views.snapshot import SnapshotView

    snap = dumps_and_load_small()
    lp = LiveLoop(SourceOptions(source="snapshot"), feed=Feed(snap, label="small"))
    lp.metrics = MetricsReader(simulated=False)
    before = lp.step()
    from dashboard.session import SessionSource

    source = SessionSource(lp.state, lp, may_change_shared=True)
    view = SnapshotView(lp.state, source=source)
    text = dumps_snapshot(snap, "yaml")
    half = text[: len(text) // 2].encode()
    assert view.import_file("half.yaml", half) is False
    msg = view.message.object
    assert 'data-import="error"' in msg and "half.yaml" in msg
    assert _same_tick(lp.state.tick, before) and lp.state.source_label == "small"
    jtext = dumps_snapshot(snap, "json")
    assert view.import_file("half.json", jtext[: len(jtext) // 2].encode()) is False
    assert "half.json" in view.message.object and _same_tick(lp.state.tick, before)
    # a whole file still imports afterwards: into this session only, then (source-admin) for everyone
    assert view.import_file("whole.yaml", text.encode()) is True
    assert source.private and source.state.source_label == "imported whole.yaml"
    assert _same_tick(lp.state.tick, before) and lp.state.source_label == "small"
    assert view.import_file("whole.yaml", text.encode(), shared=True) is True
    assert not source.private and lp.state.source_label == "imported whole.yaml"


# ------------------------------------------------------------------------------------------- Prometheus

class DelayProxy:
    """An HTTP proxy on loopback in front of Prometheus that can be made slow."""

    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.delay_s = 0.0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self, body=None):
                time.sleep(proxy.delay_s)
                req = urllib.request.Request(proxy.target + self.path, data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items()
                                                      if k.lower() in ("content-type", "accept")})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        code, data, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
                except HTTPError as e:
                    code, data, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
                except OSError:
                    code, data, ctype = 502, b"upstream down", "text/plain"
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass            # the client gave up (timeout)

            def do_GET(self):
                self._forward()

            def do_POST(self):
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class RepeatingFeed(Feed):
    """A fixed snapshot scheduled every tick (not static), so every tick reads GPU metrics again."""

    kind = "repeat"
    static = False


@pytest.fixture(scope="module")
def dcgm(tmp_path_factory):
    """The metrics test scenario, its simulated dcgm-exporter, and a real Prometheus scraping it."""
    from metrics_scenario import metrics_snapshot
    from prometheus_fixture import PrometheusServer, scrape_config, wait_for
    from scheduler.metrics.exporter import ExporterServer, ExporterState

    snap = metrics_snapshot()
    exporter = ExporterServer(ExporterState(snap)).start()
    prom = PrometheusServer(scrape_config([{"job_name": "dcgm", "targets": [f"127.0.0.1:{exporter.port}"],
                                            "honor_labels": True}]), tmp_path_factory.mktemp("prom")).start()
    wait_for(lambda: prom.query("count(DCGM_FI_DEV_GPU_UTIL)"), timeout_s=30, message="first scrape")
    proxy = DelayProxy(prom.url)
    yield snap, prom, proxy
    proxy.stop()
    prom.stop()
    exporter.stop()


def prometheus_loop(snap, url, timeout_s=2.0) -> LiveLoop:
    from scheduler.metrics.prometheus_reader import DcgmReader

    lp = LiveLoop(SourceOptions(source="snapshot", prometheus=url, period_s=0.5), feed=RepeatingFeed(snap, "dcgm"))
    lp.explain_jobs = 0
    # the loop's reader with test-sized timeout and backoff (the default backs off up to 30 s)
    lp.metrics._reader = DcgmReader(url, timeout_s=timeout_s, retries=0, backoff_s=0.1, max_backoff_s=0.5)
    return lp


def metrics_ok(lp) -> bool:
    return ": ok — " in lp.state.metrics_status and lp.state.tick.gpu_frame is not None and clean(lp)


@pytest.mark.prometheus
def test_prometheus_down_shows_stale_gpu_data_then_recovers(dcgm):
    snap, prom, _ = dcgm
    lp = prometheus_loop(snap, prom.url)
    until(lambda: metrics_ok(lp), step=lp.step, timeout=30, message="first DCGM frame")
    good_frame = lp.state.tick.gpu_frame
    prom.stop()
    try:
        until(lambda: lp.state.source_status == "degraded", step=lp.step, message="degraded")
        st = lp.state
        assert st.metrics_status.startswith(f"DCGM via {prom.url}: stale")
        assert "degraded: DCGM via" in st.source_detail and st.tick.result is not None
        assert st.tick.gpu_frame is not None and len(st.tick.gpu_frame) == len(good_frame)   # last good frame
    finally:
        prom.start()
    until(lambda: metrics_ok(lp), step=lp.step, timeout=30, message="recovered")


@pytest.mark.prometheus
def test_slow_prometheus_times_out_without_stopping_the_loop(dcgm):
    snap, _, proxy = dcgm
    lp = prometheus_loop(snap, proxy.url, timeout_s=0.5)
    until(lambda: metrics_ok(lp), step=lp.step, timeout=30, message="first DCGM frame")
    index = lp.state.tick.index
    proxy.delay_s = 2.0
    try:
        until(lambda: lp.state.source_status == "degraded", step=lp.step, message="degraded")
        assert lp.state.tick.index > index                    # scheduling ticks went on
        assert "timed out" in lp.state.metrics_status.lower() or "timeout" in lp.state.metrics_status.lower()
    finally:
        proxy.delay_s = 0.0
    until(lambda: metrics_ok(lp), step=lp.step, timeout=30, message="recovered")


# ------------------------------------------------------------------------------------------- served app

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


def test_served_app_keeps_serving_reports_and_recovers_from_a_forbidden_resource(kube, kubeconfig):
    port = _free_port()
    base = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KUBECONFIG": kubeconfig}
    for k in [k for k in env if k.startswith("KAIDASH_")]:
        env.pop(k)
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "serve", "--source", "kube", "--context", "fake",
                             "--period", "0.5", "--port", str(port), "--address", "127.0.0.1"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    def ready():
        code, body = _get(base + "readyz")
        return json.loads(body) if code == 200 else None

    try:
        until(ready, timeout=90, message="server ready")
        assert _get(base + "healthz")[0] == 200
        kube.fail("podgroups", 403)
        kube.drop_watches("podgroups")
        body = until(lambda: (lambda r: r if r and any(p.startswith("podgroups stale: forbidden")
                                                        for p in r["problems"])
                              else None)(ready()), timeout=30, message="forbidden on /readyz")
        assert body["status"] == "degraded" and body["error"] == ""
        code, page = _get(base)
        assert code == 200 and b"kaidash" in page                 # the page is still served
        kube.clear_faults("podgroups")
        body = until(lambda: (lambda r: r if r and r["status"] == "ok" else None)(ready()), timeout=60,
                     message="ok again on /readyz")
        assert body["problems"] == [] and body["error"] == ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
