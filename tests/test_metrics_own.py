"""kaidash's own Prometheus metrics: names, labels and values after an update, parsed back from exposition.

The ScheduleResult is built by hand (the engine is not needed): expected numbers follow from it and from
tests/metrics_scenario.py (snapshot time 1767225600).
"""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_scenario import metrics_snapshot
from scheduler.decisions import JobDecision, ScheduleResult
from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, samples_from_exposition
from scheduler.metrics.exporter import render_exposition, simulate_gpus
from scheduler.metrics.own import KaidashMetrics

SNAP_TIME = 1767225600


def parse(metrics):
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(parsed, name, **labels):
    return parsed[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def result():
    snap = metrics_snapshot()
    return ScheduleResult(
        fair_share={"llm": {"gpu": 10.0, "cpu": 0.0, "memory": 0.0}},
        tasks={},
        jobs={"vision-sweep": JobDecision("pending", "OverLimit"), "etl": JobDecision("pending", "NotEnoughResources"),
              "llm-pretrain": JobDecision("running")},
        timings_ms={"allocate": 4.0, "reclaim": 30.0},
        snapshot=snap,
        queue_stats={"llm": {"gpu": {"deserved": 8.0, "fair_share": 10.0, "allocated": 12.0, "requested": 12.0,
                                     "limit": 16.0}}},
    )


def gpu_frame(snap):
    ev = V.EXPORTER_VARIANTS["classic"]
    text = render_exposition(simulate_gpus(snap), ev, per_pod=True)
    idle = {("h100-1", i): 0.0 for i in range(4)}
    return build_gpu_frame(snap, samples_from_exposition(text, V.variant_for_exporter(ev)), idle)


def test_queue_gauges_with_queue_parent_resource_labels(result):
    m = KaidashMetrics()
    m.update(result, now=1767225601.0)
    p = parse(m)
    for stat, expected in {"deserved": 8, "fair_share": 10, "allocated": 12, "requested": 12, "limit": 16}.items():
        assert value(p, f"kaidash_queue_{stat}", queue="llm", parent="research", resource="gpu") == expected
    # queues without engine stats still report their configured quota and limit
    assert value(p, "kaidash_queue_deserved", queue="vision", parent="research", resource="gpu") == 4
    assert value(p, "kaidash_queue_limit", queue="research", parent="", resource="gpu") == -1
    assert ("kaidash_queue_allocated", (("parent", "research"), ("queue", "vision"), ("resource", "gpu"))) not in p


def test_pending_jobs_and_waits(result):
    m = KaidashMetrics()
    m.update(result)
    p = parse(m)
    # vision-sweep created 1767225000 (600 s ago), etl 1767224200 (1400 s ago): both in queue vision
    assert value(p, "kaidash_queue_pending_jobs", queue="vision") == 2
    assert value(p, "kaidash_queue_pending_wait_oldest_seconds", queue="vision") == 1400
    assert value(p, "kaidash_queue_pending_wait_mean_seconds", queue="vision") == 1000
    assert value(p, "kaidash_queue_pending_jobs", queue="llm") == 0
    assert value(p, "kaidash_queue_pending_wait_oldest_seconds", queue="llm") == 0


def test_cycle_latency_histogram_accumulates_and_gauge_holds_the_last(result):
    m = KaidashMetrics()
    m.update(result)
    result.timings_ms = {"allocate": 2.0, "reclaim": 30.0}
    m.update(result)
    p = parse(m)
    assert value(p, "kaidash_cycle_latency_seconds_count", action="allocate") == 2
    assert value(p, "kaidash_cycle_latency_seconds_sum", action="allocate") == pytest.approx(0.006)
    assert value(p, "kaidash_cycle_latency_seconds_bucket", action="reclaim", le="0.025") == 0
    assert value(p, "kaidash_cycle_latency_seconds_bucket", action="reclaim", le="0.05") == 2
    assert value(p, "kaidash_cycle_last_latency_seconds", action="allocate") == pytest.approx(0.002)
    assert value(p, "kaidash_ticks_total") == 2


def test_gpu_flags_sources_and_last_tick(result):
    m = KaidashMetrics()
    m.update(result, gpu_frame(result.snapshot), sources={"sim": {"snapshot": True}, "dcgm": {"gpu_metrics": False}},
             gpu_metrics_age_s=12.5, now=1767225601.0)
    p = parse(m)
    assert value(p, "kaidash_over_share_pods", queue="serving") == 1  # chat-api-0: 13000 MiB > 11500
    assert value(p, "kaidash_over_share_pods", queue="llm") == 0
    assert value(p, "kaidash_idle_allocated_gpus") == 4
    assert value(p, "kaidash_unallocated_in_use_gpus") == 0
    assert value(p, "kaidash_source_up", source="sim", resource="snapshot") == 1
    assert value(p, "kaidash_source_up", source="dcgm", resource="gpu_metrics") == 0
    assert value(p, "kaidash_gpu_metrics_age_seconds") == 12.5
    assert value(p, "kaidash_last_tick_timestamp_seconds") == 1767225601.0


def test_a_queue_that_disappears_stops_being_reported(result):
    m = KaidashMetrics()
    m.update(result)
    assert value(parse(m), "kaidash_queue_pending_jobs", queue="vision") == 2
    result.snapshot.queues = [q for q in result.snapshot.queues if q.name != "vision"]
    result.snapshot.jobs = [j for j in result.snapshot.jobs if j.queue != "vision"]
    m.update(result)
    assert not any(labels and ("queue", "vision") in labels for _, labels in parse(m))


def test_every_name_is_prefixed_and_documented(result):
    m = KaidashMetrics()
    m.update(result, gpu_frame(result.snapshot), sources={"sim": {"snapshot": True}}, gpu_metrics_age_s=0)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    families = {f.name for f in text_string_to_metric_families(m.exposition()[0].decode())}
    assert families and all(name.startswith("kaidash_") for name in families)
    for name in families:
        base = name.removesuffix("_created")
        assert f"`{base}" in doc, f"{base} is not documented in docs/metrics.md"


def test_documented_alert_rules_are_valid_promql(tmp_path):
    import shutil
    import subprocess
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    rules = tmp_path / "rules.yml"
    rules.write_text(doc.split("```yaml\n", 1)[1].split("```", 1)[0])
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 rules found" in out.stdout
