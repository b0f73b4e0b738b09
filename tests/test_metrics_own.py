"""kaidash's own Prometheus metrics: names, labels and values after an update, parsed back from exposition.

The ScheduleResult is built by hand (the engine is not needed): expected numbers follow from it and from
tests/metrics_scenario.py (snapshot time 1767225600).
"""

import math
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
    # allocated is what the cluster holds now (KAI's accounting, descendants included): vision's jobs all wait
    assert value(p, "kaidash_queue_allocated", queue="vision", parent="research", resource="gpu") == 0
    assert value(p, "kaidash_queue_allocated", queue="research", parent="", resource="gpu") == 12
    assert value(p, "kaidash_queue_allocated_after_session", queue="llm", parent="research", resource="gpu") == 12
    assert ("kaidash_queue_allocated_after_session",
            (("parent", "research"), ("queue", "vision"), ("resource", "gpu"))) not in p


def test_allocated_is_observed_and_the_sessions_placements_a_separate_series(result):
    """The shadow session placed more than the cluster holds: the documented gauge must not include it."""
    import dataclasses

    observed = result.snapshot
    shadow = dataclasses.replace(result, queue_stats={"llm": {"cpu": {"allocated": 24000.0, "requested": 24000.0}}})
    m = KaidashMetrics()
    m.update(shadow, observed=observed)
    p = parse(m)
    held = sum(t.cpu_millis for j in observed.jobs if j.queue == "llm" for t in j.tasks
               if t.status in ("running", "binding"))
    assert held != 24000
    assert value(p, "kaidash_queue_allocated", queue="llm", parent="research", resource="cpu") == held
    assert value(p, "kaidash_queue_allocated_after_session", queue="llm", parent="research", resource="cpu") == 24000


def test_source_down_reports_zero_until_the_next_good_tick(result):
    m = KaidashMetrics()
    m.update(result, sources={"kube": {"snapshot": True}, "dcgm": {"gpu_metrics": True}})
    m.source_down("kube")
    p = parse(m)
    assert value(p, "kaidash_source_up", source="kube", resource="snapshot") == 0
    assert value(p, "kaidash_source_up", source="dcgm", resource="gpu_metrics") == 1
    m.update(result, sources={"kube": {"snapshot": True}})
    assert value(parse(m), "kaidash_source_up", source="kube", resource="snapshot") == 1


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
    assert families and all(name.startswith(("kaidash_", "process_")) for name in families)
    assert "process_resident_memory_bytes" in families          # docs/deploy.md promises process memory
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
    assert "16 rules found" in out.stdout


# ------------------------------------------------------------------------------ waits, ETA and cost series

def _history():
    import math

    import pandas as pd
    jobs = pd.DataFrame({"job": ["s1", "s2", "s3"], "queue": ["serving", "serving", "llm"],
                         "arrival": [SNAP_TIME - 900, SNAP_TIME - 700, SNAP_TIME - 5000],
                         "first_start": [SNAP_TIME - 800, SNAP_TIME - 400, SNAP_TIME - 4000],
                         "last_start": [SNAP_TIME - 800, SNAP_TIME - 400, SNAP_TIME - 4000],
                         "completion": math.nan, "status": "running"})
    jobs.attrs["start_time"] = SNAP_TIME - 7200
    evictions = pd.DataFrame({"time": [SNAP_TIME - 60], "task": ["x-0"], "job": ["x"], "queue": ["llm"],
                              "action": ["reclaim"], "preemptor": ["vision-sweep"], "cause": [""]})
    return {"jobs": jobs, "evictions": evictions}


def _eta():
    from scheduler.eta import EtaReport
    from scheduler.eta.report import EtaEstimate
    sweep = EtaEstimate("vision-sweep", "vision", 50, 4.0, "2x2 GPU", 600.0, 900.0, 1800.0, 3600.0, 5, 5, 28800.0)
    return EtaReport(float(SNAP_TIME), {"vision-sweep": sweep}, {}, 5, 100, 2500.0, 28800.0, made_at=1767225590.0)


def costs_and_ledger(snap, frame):
    """Cost rates of ``snap`` and a ledger holding the hour before the snapshot."""
    from scheduler.cost import CostLedger, cost_rates

    costs = cost_rates(snap, gpu_frame=frame)
    ledger = CostLedger(max_gap_s=3600)
    ledger.add(costs, at=SNAP_TIME - 3600)
    ledger.add(costs, at=SNAP_TIME)
    return costs, ledger


def test_wait_eta_and_cost_series(result):
    snap = result.snapshot
    frame = gpu_frame(snap)
    costs, ledger = costs_and_ledger(snap, frame)
    m = KaidashMetrics()
    m.update(result, frame, history=_history(), eta=_eta(), costs=costs, ledger=ledger, now=1767225601.0)
    p = parse(m)
    assert value(p, "kaidash_queue_pending_gpus", queue="vision") == 4         # vision-sweep 2x2; etl asks none
    assert value(p, "kaidash_pending_jobs_by_priority_class", priority_class="train") == 2
    assert value(p, "kaidash_queue_gangs", queue="llm", state="whole") == 1
    assert value(p, "kaidash_queue_gangs", queue="vision", state="waiting") == 1
    assert value(p, "kaidash_queue_started_jobs", queue="serving") == 2
    assert value(p, "kaidash_queue_started_jobs", queue="vision") == 0
    assert value(p, "kaidash_queue_wait_seconds", queue="serving", quantile="0.5") == 200     # waits 100 and 300
    assert value(p, "kaidash_queue_last_start_age_seconds", queue="serving") == 400
    assert value(p, "kaidash_queue_last_start_age_seconds", queue="vision") == 7200           # none since the start
    assert value(p, "kaidash_queue_evicted_pods", queue="llm", action="reclaim") == 1
    assert value(p, "kaidash_history_window_seconds") == 86400
    assert value(p, "kaidash_queue_estimated_wait_seconds", queue="vision") == 1800
    assert value(p, "kaidash_queue_estimated_wait_seconds", queue="serving") == 0
    assert value(p, "kaidash_eta_duration_seconds") == 2.5
    # h100-1's GPUs 0-3 are flagged idle (llm-pretrain-1): 4 H100s at the example 4.0 per GPU-hour
    assert value(p, "kaidash_cost_per_hour", category="idle_allocated", queue="llm", currency="USD") == 16
    # the ledger's hour ran on Dec 31 (the snapshot is at midnight): in the last 30 days, not in today's
    assert value(p, "kaidash_cost_total", category="idle_allocated", period="30d", currency="USD") == 16
    assert ("kaidash_cost_total", (("category", "idle_allocated"), ("currency", "USD"), ("period", "1d"))) not in p
    assert value(p, "kaidash_cost_total", category="capacity", period="30d", currency="USD") == pytest.approx(
        16 * 4.0 + 4 * 0.8)


def test_a_queue_whose_waiting_jobs_have_no_estimate_yet_has_no_estimated_wait_series(result):
    """The vision job arrived after the estimate (provisional, NaN): no series for vision rather than +Inf,
    which an "estimated wait > 4 h" alert (docs/metrics.md) would page on."""
    import dataclasses

    eta = _eta()
    unknown = dataclasses.replace(eta.estimates["vision-sweep"], p10_s=math.nan, p50_s=math.nan, p90_s=math.nan,
                                  provisional=True, runs=0, started_runs=0)
    eta = dataclasses.replace(eta, estimates={"vision-sweep": unknown})
    m = KaidashMetrics()
    m.update(result, gpu_frame(result.snapshot), eta=eta, now=1767225601.0)
    p = parse(m)
    assert ("kaidash_queue_estimated_wait_seconds", (("queue", "vision"),)) not in p
    assert value(p, "kaidash_queue_estimated_wait_seconds", queue="serving") == 0      # none waits: 0


def test_series_without_their_inputs_are_not_reported(result):
    m = KaidashMetrics()
    m.update(result)
    names = {name for name, _ in parse(m)}
    assert "kaidash_queue_pending_gpus" in names and "kaidash_queue_gangs" in names
    for absent in ("kaidash_queue_wait_seconds", "kaidash_queue_estimated_wait_seconds", "kaidash_cost_per_hour",
                   "kaidash_cost_total"):
        assert absent not in names


def test_wait_alerts_fire_on_series_with_promtool(tmp_path):
    """promtool's rule unit tests: the documented alerts fire for the queue that meets them, not the other."""
    import shutil
    import subprocess
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    (tmp_path / "rules.yml").write_text(doc.split("```yaml\n", 1)[1].split("```", 1)[0])
    (tmp_path / "test.yml").write_text("""
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'kaidash_queue_estimated_wait_seconds{queue="llm"}', values: '18000x40'}
      - {series: 'kaidash_queue_estimated_wait_seconds{queue="vision"}', values: '600x40'}
      - {series: 'kaidash_queue_pending_jobs{queue="llm"}', values: '3x40'}
      - {series: 'kaidash_queue_pending_jobs{queue="vision"}', values: '0x40'}
      - {series: 'kaidash_queue_last_start_age_seconds{queue="llm"}', values: '7000+60x40'}
      - {series: 'kaidash_queue_last_start_age_seconds{queue="vision"}', values: '9000+60x40'}
    alert_rule_test:
      - {eval_time: 10m, alertname: QueueExpectedToWaitOver4h, exp_alerts: []}
      - eval_time: 20m
        alertname: QueueExpectedToWaitOver4h
        exp_alerts: [{exp_labels: {queue: llm}}]
      - eval_time: 20m
        alertname: QueueStarved
        exp_alerts: [{exp_labels: {queue: llm}}]
""")
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    out = subprocess.run([promtool, "test", "rules", "test.yml"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_pending_series_are_the_observed_cluster_and_the_sessions_a_separate_series(result):
    """The engine binds vision-sweep this cycle: until the cluster runs it, it waits (Prometheus agrees with the
    dashboard's Pending list); the session's leftover is its own series."""
    import dataclasses

    observed = result.snapshot
    jobs = dict(result.jobs, **{"vision-sweep": JobDecision("binding")})
    bound = dataclasses.replace(observed, jobs=[
        dataclasses.replace(j, tasks=[dataclasses.replace(t, status="binding", node="h100-1")
                                      for t in j.tasks]) if j.name == "vision-sweep" else j
        for j in observed.jobs])
    m = KaidashMetrics()
    m.update(dataclasses.replace(result, jobs=jobs, snapshot=bound), observed=observed)
    p = parse(m)
    assert value(p, "kaidash_queue_pending_jobs", queue="vision") == 2         # both still wait in the cluster
    assert value(p, "kaidash_queue_pending_wait_oldest_seconds", queue="vision") == 1400
    assert value(p, "kaidash_queue_pending_wait_mean_seconds", queue="vision") == 1000
    assert value(p, "kaidash_queue_pending_gpus", queue="vision") == 4         # vision-sweep's 2x2 included
    assert value(p, "kaidash_queue_pending_jobs_after_session", queue="vision") == 1   # etl left pending


def test_holder_unknown_gpus_counts_each_busy_gpu_whose_holder_no_evidence_gives(result):
    """llm-pretrain-0 uses all 8 GPUs of h100-0; with no device index on the pod and no pod labels on the
    exporter's series, the 8 busy devices are "holder unknown" (maybe that pod's), never "unallocated"."""
    import dataclasses

    snap = result.snapshot
    ev = V.EXPORTER_VARIANTS["classic"]
    samples = samples_from_exposition(render_exposition(simulate_gpus(snap), ev), V.variant_for_exporter(ev))
    samples[["pod", "namespace", "container"]] = ""                             # an exporter without pod labels
    observed = dataclasses.replace(snap, jobs=[dataclasses.replace(j, tasks=[
        dataclasses.replace(t, gpu_indices=[]) if t.name == "llm-pretrain-0" else t for t in j.tasks])
        for j in snap.jobs])
    frame = build_gpu_frame(observed, samples, {("h100-1", i): 0.0 for i in range(4)})
    m = KaidashMetrics()
    m.update(result, frame, observed=observed)
    p = parse(m)
    assert value(p, "kaidash_holder_unknown_gpus") == 8
    assert value(p, "kaidash_unallocated_in_use_gpus") == 0
    m.update(result, gpu_frame(snap), observed=snap)                           # devices known: nothing unknown
    assert value(parse(m), "kaidash_holder_unknown_gpus") == 0
