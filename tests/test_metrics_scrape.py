"""kaidash's own /metrics scraped by a real Prometheus: every series docs/metrics.md documents is emitted, and
the live loop reports its source, the DCGM data age and KAI's (observed) queue allocation.

The route is dashboard/server.py's ``MetricsHandler`` on a Tornado server on loopback (what ``kaidash serve``
mounts); Prometheus (Debian package) scrapes it every second.
"""

import asyncio
import re
import threading
from pathlib import Path

import pytest
from tornado.httpserver import HTTPServer
from tornado.web import Application

from dashboard.feeds import Feed
from dashboard.loop import LiveLoop, MetricsReader
from dashboard.options import SourceOptions
from dashboard.server import MetricsHandler
from metrics_scenario import metrics_snapshot
from prometheus_fixture import PrometheusServer, free_port, scrape_config, wait_for
from scheduler.metrics.own import KaidashMetrics
from test_metrics_own import SNAP_TIME, _eta, _history, costs_and_ledger, gpu_frame

pytestmark = pytest.mark.prometheus

DOC = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
DOCUMENTED = set(re.findall(r"^\| `(kaidash_[a-z_]+)` \|", DOC, re.M))
PROCESS = {"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
           "process_open_fds", "process_max_fds", "process_start_time_seconds"}


class Holder:
    def __init__(self, metrics):
        self.own_metrics = metrics


class MetricsServer:
    """``/metrics`` of ``holder.own_metrics`` on 127.0.0.1 in a thread with its own event loop."""

    def __init__(self, holder):
        self.port = free_port()
        self.holder = holder
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()

    def _run(self):
        asyncio.set_event_loop(self._loop)
        self._server = HTTPServer(Application([(r"/metrics", MetricsHandler, {"loop": self.holder})]))
        self._server.listen(self.port, address="127.0.0.1")
        self._started.set()
        self._loop.run_forever()

    def start(self):
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self):
        self._loop.call_soon_threadsafe(self._server.stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def names_in(prom, job):
    rows = prom.query(f'count by (__name__) ({{job="{job}"}})')
    return {r["metric"]["__name__"] for r in rows}


def base_name(name):
    for suffix in ("_bucket", "_sum", "_count", "_created", "_total"):
        if name.endswith(suffix) and name != "process_cpu_seconds_total":
            return name[: -len(suffix)]
    return name


def test_docs_table_is_read():
    assert len(DOCUMENTED) >= 30 and "kaidash_source_up" in DOCUMENTED


def test_every_documented_series_reaches_prometheus(tmp_path):
    from scheduler.decisions import JobDecision, ScheduleResult

    snap = metrics_snapshot()
    result = ScheduleResult(fair_share={"llm": {"gpu": 10.0, "cpu": 0.0, "memory": 0.0}}, tasks={},
                            jobs={"vision-sweep": JobDecision("pending", "OverLimit")},
                            timings_ms={"allocate": 4.0}, snapshot=snap,
                            queue_stats={"llm": {"gpu": {"allocated": 12.0, "requested": 12.0}}})
    frame = gpu_frame(snap)
    costs, ledger = costs_and_ledger(snap, frame)
    metrics = KaidashMetrics()
    metrics.update(result, frame, observed=snap, sources={"kube": {"snapshot": True}, "dcgm": {"gpu_metrics": True}},
                   gpu_metrics_age_s=3.0, history=_history(), eta=_eta(), costs=costs, ledger=ledger,
                   now=float(SNAP_TIME))
    server = MetricsServer(Holder(metrics)).start()
    try:
        config = scrape_config([{"job_name": "kaidash", "targets": [f"127.0.0.1:{server.port}"]}])
        with PrometheusServer(config, tmp_path / "prom") as prom:
            scraped = wait_for(lambda: names_in(prom, "kaidash") or None, timeout_s=30, message="a scrape")
            got = set(scraped) | {base_name(n) for n in scraped}
            assert DOCUMENTED - got == set(), f"documented but not emitted: {sorted(DOCUMENTED - got)}"
            assert PROCESS <= set(scraped), f"process metrics missing: {sorted(PROCESS - set(scraped))}"
            undocumented = {n for n in scraped if n.startswith("kaidash_") and n not in DOCUMENTED
                            and base_name(n) not in DOCUMENTED}
            assert not undocumented, f"emitted but not documented: {sorted(undocumented)}"
            (age,) = prom.query('kaidash_gpu_metrics_age_seconds{job="kaidash"}')
            assert float(age["value"][1]) == 3.0
    finally:
        server.stop()


class FlakyFeed(Feed):
    """A fixed snapshot that fails when told to (an API server going away)."""

    static = False
    kind = "kube"

    def __init__(self, snapshot):
        super().__init__(snapshot, label="flaky")
        self.fail = False

    def tick(self, schedule):
        if self.fail:
            raise ConnectionError("API server unreachable")
        return super().tick(schedule)


def test_the_live_loop_reports_source_up_data_age_and_observed_allocation(tmp_path):
    snap = metrics_snapshot()
    feed = FlakyFeed(snap)
    loop = LiveLoop(SourceOptions(source="kube"), feed=feed)
    loop.metrics = MetricsReader(simulated=True)
    assert loop.step() is not None
    server = MetricsServer(loop).start()
    try:
        config = scrape_config([{"job_name": "loop", "targets": [f"127.0.0.1:{server.port}"]}])
        with PrometheusServer(config, tmp_path / "prom") as prom:
            def up(value):
                rows = prom.query('kaidash_source_up{job="loop"}')
                got = {(r["metric"]["source"], r["metric"]["resource"]): float(r["value"][1]) for r in rows}
                return got if got.get(("kube", "snapshot")) == value else None
            got = wait_for(lambda: up(1.0), timeout_s=30, message="source up")
            assert got[("dcgm", "gpu_metrics")] == 1.0
            (age,) = prom.query('kaidash_gpu_metrics_age_seconds{job="loop"}')
            assert float(age["value"][1]) == 0.0
            (llm,) = prom.query('kaidash_queue_allocated{job="loop",queue="llm",resource="gpu"}')
            assert float(llm["value"][1]) == 12.0         # llm-pretrain holds 8 + 4 GPUs, as KAI counts them
            assert prom.query('process_resident_memory_bytes{job="loop"}')
            feed.fail = True
            assert loop.step() is None
            wait_for(lambda: up(0.0), timeout_s=30, message="source down scraped")
    finally:
        server.stop()
