"""Dashboard view models without a browser: frames against hand-derived numbers and the engine's output,
what-if edits against the engine's diff, URL state, the bounded history, stale-state handling, options."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dashboard import frames as F
from dashboard.feeds import Feed
from dashboard.loop import LiveLoop, MetricsReader, publish_snapshot
from dashboard.models import (GpusModel, OverviewModel, PendingModel, QueuesModel, Selection, TimelineModel,
                              WhatIfModel, pending_table, queue_table)
from dashboard.options import SourceOptions
from dashboard.state import HistoryRecord, LiveState, TickHistory
from scheduler.engine import run_session
from scheduler.errors import SourceError
from scheduler.snapshot_io import loads_snapshot
from scheduler.whatif import run_whatif

# Two 4-GPU nodes; org (quota 8) over a (quota 2) and b (quota 2, limit 3). a runs a 4-GPU job on n0; b has
# two 2-GPU jobs waiting, b-serve (older) and b-big.
#
# Fair share by hand (KAI proportion, kai-semantics §b): org deserves 8 of 8. Inside org, a requests 4, b
# requests 4 but its limit makes 3 requestable. Deserved a=2, b=2; the remaining 4 split by weight 1:1:
# a +2 (reaches its request), b +1 (reaches its limit) -> fair share a=4, b=3.
# Allocation: b-serve (older) fits on n1 -> b allocated 2; b-big would take b to 4 > limit 3 -> OverLimit.
SCENARIO = """
version: 1
time: 1000
nodes:
  - {name: n0, gpus: 4, gpu_memory_mib: 80000, gpu_model: H100, cpu_millis: 64000, memory_bytes: 512Gi,
     labels: {kai.scheduler/node-pool: train}}
  - {name: n1, gpus: 4, gpu_memory_mib: 80000, gpu_model: H100, cpu_millis: 64000, memory_bytes: 512Gi,
     labels: {kai.scheduler/node-pool: train}}
queues:
  - {name: org, creation_time: 1, gpu: {quota: 8, limit: -1, over_quota_weight: 1},
     cpu: {quota: -1}, memory: {quota: -1}}
  - {name: a, parent: org, creation_time: 2, gpu: {quota: 2, limit: -1, over_quota_weight: 1},
     cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, parent: org, creation_time: 3, gpu: {quota: 2, limit: 3, over_quota_weight: 1},
     cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - name: a-train
    queue: a
    creation_time: 100
    last_start_time: 200
    tasks:
      - {name: a-train-0, gpu: 4, cpu_millis: 1000, memory_bytes: 1Gi, status: running, node: n0,
         gpu_index: [0, 1, 2, 3]}
  - name: b-serve
    queue: b
    creation_time: 400
    tasks:
      - {name: b-serve-0, gpu: 2, cpu_millis: 1000, memory_bytes: 1Gi}
  - name: b-big
    queue: b
    creation_time: 500
    tasks:
      - {name: b-big-0, gpu: 2, cpu_millis: 1000, memory_bytes: 1Gi}
"""


@pytest.fixture
def snapshot():
    return loads_snapshot(SCENARIO)


@pytest.fixture
def state(snapshot):
    st = LiveState()
    publish_snapshot(st, snapshot, "test scenario")
    return st


def _row(df, key, value):
    rows = df[df[key] == value]
    assert len(rows) == 1, f"expected one row with {key}={value}"
    return rows.iloc[0]


# ------------------------------------------------------------------------------------------------ queues

def test_queue_frame_has_the_hand_derived_fair_shares_and_allocations(state):
    df = QueuesModel(state).frame()
    assert list(df["queue"]) == ["org", "a", "b"]          # depth-first tree, parents first
    assert list(df["depth"]) == [0, 1, 1]
    a, b, org = _row(df, "queue", "a"), _row(df, "queue", "b"), _row(df, "queue", "org")
    assert (a["deserved"], a["fair_share"], a["allocated"], a["requested"]) == (2, 4, 4, 4)
    # allocated is the cluster as observed: the engine binds b-serve this cycle, but the cluster has not yet
    assert (b["deserved"], b["fair_share"], b["allocated"], b["requested"], b["limit"]) == (2, 3, 0, 4, 3)
    assert (org["fair_share"], org["allocated"], org["requested"]) == (8, 4, 8)
    assert (b["allocated_next"], org["allocated_next"], a["allocated_next"]) == (2, 6, 4)   # the prediction
    assert a["borrowed"] == 2 and a["state"] == "borrowing"            # 4 allocated, 2 deserved
    assert b["starved_by"] == 3 and b["state"] == "starved"            # min(3, 4) - 0, jobs wait
    assert b["ratio"] == 0                                             # KAI's queue order key at session open
    assert (b["running_jobs"], b["pending_jobs"]) == (0, 2)
    assert (org["running_jobs"], org["pending_jobs"]) == (1, 2)        # rolled up


def test_queue_frame_is_the_engines_queue_stats(state, snapshot):
    result = run_session(snapshot)
    df = QueuesModel(state).frame()
    for r in df.itertuples():
        stats = result.queue_stats[r.queue]["gpu"]
        for col in ("deserved", "fair_share", "requested"):
            assert getattr(r, col) == pytest.approx(stats[col]), (r.queue, col)
        assert r.allocated_next == pytest.approx(stats["allocated"]), r.queue   # after the session's decisions


def test_queue_allocated_is_observed_as_kai_accounts_it_for_every_resource(state, snapshot):
    from scheduler.queue_allocation import observed_allocation

    held = observed_allocation(snapshot)
    m = QueuesModel(state)
    for resource in ("gpu", "cpu", "memory"):
        m.resource = resource
        for r in m.frame().itertuples():
            assert r.allocated == pytest.approx(held[r.queue][resource]), (resource, r.queue)


def test_a_ticks_observed_allocation_is_computed_once_for_every_reader(state, snapshot, monkeypatch):
    """The history record, Queues (every resource), Pending and /metrics read one computation per tick."""
    import dashboard.state as S
    from scheduler.queue_allocation import observed_allocations

    calls = []
    monkeypatch.setattr(S, "observed_allocations", lambda snap: calls.append(snap) or observed_allocations(snap))
    for name in ("observed_allocation", "observed_allocations"):            # the frames compute none of their own
        monkeypatch.setattr(F, name, lambda *a, **k: pytest.fail("the frame computed the allocation again"))
    tick = dataclasses.replace(state.tick, tables={})          # a tick whose per-tick tables are still empty
    record = S.record_from_tick(tick)
    queues = {r: queue_table(tick, r) for r in ("gpu", "cpu", "memory")}
    pending = pending_table(tick)
    assert calls == [tick.snapshot]
    held, _ = observed_allocations(snapshot)
    assert {q: v["allocated"] for q, v in record.queues.items()} == {q: held[q]["gpu"] for q in held}
    for resource, df in queues.items():
        assert dict(zip(df["queue"], df["allocated"])) == pytest.approx({q: held[q][resource] for q in held})
    assert dict(zip(pending["job"], pending["queue_allocated"])) == pytest.approx(
        {j: held[q]["gpu"] for j, q in zip(pending["job"], pending["queue"])})


def test_queue_jobs_and_descendants(state):
    m = QueuesModel(state)
    assert set(m.descendants("org")) == {"org", "a", "b"}
    jobs = m.jobs("b")
    assert set(jobs["job"]) == {"b-serve", "b-big"}
    serve = _row(jobs, "job", "b-serve")
    assert (serve["status"], serve["nodes"]) == ("pending", "")       # as observed: not bound yet
    assert serve["next_cycle"] == F.WOULD_BIND                         # the engine's decision, a prediction
    assert _row(jobs, "job", "b-big")["reason"] == "OverLimit"
    assert _row(jobs, "job", "b-big")["next_cycle"] == ""
    assert len(m.jobs("org")) == 3


# ------------------------------------------------------------------------------------------------ pending

def test_pending_frame_gives_reason_numbers_and_wait(state):
    df = PendingModel(state).frame()
    assert list(df["job"]) == ["b-serve", "b-big"]  # both wait in the cluster; longest wait first
    r = df.iloc[1]
    assert r["reason"] == "OverLimit"
    assert r["wait_s"] == 500                      # time 1000 - creation 500
    assert r["gpus_requested"] == 2
    assert r["queue_limit"] == 3 and r["queue_allocated"] == 0 and r["queue_allocated_next"] == 2
    assert r["message"]                             # the engine's text
    assert r["counterfactual"]                      # the explainer's
    assert r["next_cycle"] == ""


def test_a_job_the_engine_binds_stays_pending_until_the_cluster_runs_it(state):
    serve = PendingModel(state).frame().iloc[0]
    assert serve["job"] == "b-serve" and serve["wait_s"] == 600
    assert serve["next_cycle"] == F.WOULD_BIND and serve["eta"] == F.WOULD_BIND
    assert serve["counterfactual"] == f"nothing: {F.WOULD_BIND}"


def test_the_next_tick_shows_the_bind_once_the_cluster_made_it(snapshot):
    import dataclasses

    st = LiveState()
    tick = publish_snapshot(st, snapshot, "t")
    bound = tick.result.snapshot                  # what a cluster that followed KAI looks like next
    ran = dataclasses.replace(bound, jobs=[dataclasses.replace(j, tasks=[
        dataclasses.replace(t, status="running" if t.status == "binding" else t.status) for t in j.tasks])
        for j in bound.jobs])
    publish_snapshot(st, ran, "t")
    assert list(PendingModel(st).frame()["job"]) == ["b-big"]
    assert _row(QueuesModel(st).frame(), "queue", "b")["allocated"] == 2


def test_pending_filters(state):
    m = PendingModel(state, queue="a")
    assert m.frame().empty
    m.queue, m.reason = "b", "OverLimit"
    assert list(m.frame()["job"]) == ["b-big"]
    assert m.reasons() == {"OverLimit": 1, "KAI would start this cycle": 1}


# --------------------------------------------------------------------------------------------------- GPUs

def test_gpu_slices_place_whole_gpu_jobs_on_their_devices(state):
    m = GpusModel(state)
    sl = m.slices()
    a = sl[sl["job"] == "a-train"]
    assert sorted(zip(a["node"], a["gpu_index"])) == [("n0", 0), ("n0", 1), ("n0", 2), ("n0", 3)]
    assert set(a["share"]) == {1.0}
    # the GPU view shows the cluster as observed: b-serve waits, so it holds no device; the session's choice
    # for it is the overlay, marked as what KAI would do
    assert "b-serve" not in set(sl["job"])
    ov = m.overlay()
    b = ov[ov["job"] == "b-serve"]
    assert list(b["node"]) == ["n1", "n1"] and set(b["action"]) == {"bind"}
    assert b["text"].iloc[0] == "KAI would bind b-serve-0 to n1 (2 GPUs; the device plugin picks which)"
    g = m.gpus()
    assert len(g) == 8
    assert g["allocated"].sum() == 4
    assert m.pools() == ["train"] and m.models() == ["H100"]


def test_gpu_filters_and_pages(state):
    m = GpusModel(state, page_size=8)
    assert m.selected_nodes() == ["n0", "n1"]
    m.queue = "a"
    assert m.selected_nodes() == ["n0"]
    m.queue, m.pool = "", "no-such-pool"
    assert m.selected_nodes() == []
    m.pool = ""
    m.param.update(page_size=8)
    assert m.pages() == 1


def test_fractional_slices_stack_on_one_device():
    snap = loads_snapshot("""
version: 1
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: s1, queue: q, tasks: [{name: s1-0, gpu: 0.5, status: running, node: n0, gpu_group: g1, gpu_index: 1,
      usage: {gpu_memory_mib: 30000, gpu_util: 0.4}}]}
  - {name: s2, queue: q, tasks: [{name: s2-0, gpu: 0.25, status: running, node: n0, gpu_group: g1,
      usage: {gpu_memory_mib: 1000, gpu_util: 0.1}}]}
""")
    sl = F.gpu_slices_frame(snap)
    assert len(sl) == 2 and set(sl["gpu_index"]) == {1}           # same GPU group -> same device
    assert list(sl["device_source"]) == ["snapshot", "reservation"]
    s1, s2 = _row(sl, "task", "s1-0"), _row(sl, "task", "s2-0")
    assert (s1["offset"], s2["offset"]) == (0.0, 0.5)              # stacked bottom-up
    assert s1["memory_share_mib"] == 20000 and s1["over_share"]    # 30000 used of a 20000 share
    assert not s2["over_share"]
    g = F.gpu_frame_from_slices(snap, sl)
    dev = g[g["allocated"] > 0].iloc[0]
    assert dev["allocated"] == 0.75 and dev["gpu_util"] == pytest.approx(50.0)
    assert dev["over_share"] and not dev["idle_allocated"]


def test_usage_of_a_pod_on_several_devices_is_per_device():
    """TaskUsage is per device (as KAI's gpu-memory and gpu-fraction with gpu-fraction-num-devices are): a
    0.25 x 2 pod using 6,000 MiB on each device shows 6,000 MiB on each, and a whole 2-GPU pod 35,000 on each."""
    snap = loads_snapshot("""
version: 1
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 64Gi},
        {name: n1, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: m, queue: q, tasks: [{name: m-0, gpu: 0.25, gpu_devices: 2, status: running, node: n0,
      gpu_group: [g0, g1], gpu_index: [0, 1], usage: {gpu_memory_mib: 6000, gpu_util: 0.2}}]}
  - {name: w, queue: q, tasks: [{name: w-0, gpu: 2, status: running, node: n1, gpu_index: [0, 1],
      usage: {gpu_memory_mib: 35000, gpu_util: 0.9}}]}
""")
    sl = F.gpu_slices_frame(snap)
    used = {(r.node, r.gpu_index): r.memory_used_mib for r in sl.itertuples()}
    assert used == {("n0", 0): 6000, ("n0", 1): 6000, ("n1", 0): 35000, ("n1", 1): 35000}
    assert not sl["over_share"].any()                             # 6,000 of a 10,000 MiB share on each device
    g = F.gpu_frame_from_slices(snap, sl)
    assert list(g["memory_used_mib"]) == [6000, 6000, 35000, 35000]


def test_slices_from_the_snapshot_and_from_dcgm_agree_on_memory_per_device():
    """The simulated dcgm-exporter (an independent reading of TaskUsage) and the snapshot path give each slice
    the same memory on each device: llm-pretrain-0 60,000 MiB on each of 8 GPUs, multi-0 2,000 on each of 2."""
    from metrics_scenario import metrics_snapshot
    from scheduler.metrics import variants as V
    from scheduler.metrics.dcgm import build_gpu_frame, samples_from_exposition
    from scheduler.metrics.exporter import render_exposition, simulate_gpus

    snap = metrics_snapshot()
    ev = V.EXPORTER_VARIANTS["classic"]
    dcgm = build_gpu_frame(snap, samples_from_exposition(render_exposition(simulate_gpus(snap), ev, per_pod=True),
                                                         V.variant_for_exporter(ev)))
    plain, measured = F.gpu_slices_frame(snap), F.gpu_slices_frame(snap, dcgm)
    for task in ("llm-pretrain-0", "multi-0"):
        a = plain[plain["task"] == task].set_index("gpu_index")["memory_used_mib"].sort_index()
        b = measured[measured["task"] == task].set_index("gpu_index")["memory_used_mib"].sort_index()
        assert list(a.index) == list(b.index) and list(a) == pytest.approx(list(b)), task
    assert set(plain.loc[plain["task"] == "multi-0", "memory_used_mib"]) == {2000}


def test_a_whole_gpu_pod_with_no_device_evidence_is_held_device_unknown_not_drawn_on_a_guess():
    snap = loads_snapshot("""
version: 1
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: w, queue: q, tasks: [{name: w-0, gpu: 1, status: running, node: n0}]}
  - {name: g, queue: q, tasks: [{name: g-0, gpu: 0.5, status: running, node: n0, gpu_group: lonely}]}
""")
    sl = F.gpu_slices_frame(snap)
    assert set(sl["gpu_index"]) == {-1} and set(sl["device_source"]) == {"unknown"}
    g = F.gpu_frame_from_slices(snap, sl)
    assert g["allocated"].sum() == 0 and not g["busy_unallocated"].any()
    assert F.held_unknown(sl) == {"n0": "2 GPU(s) held, device unknown: w-0, g-0"}


# ----------------------------------------------------------------------------------------------- overview

def test_overview_numbers_and_alerts(state):
    m = OverviewModel(state)
    n = m.numbers()
    assert (n["gpus_total"], n["gpus_allocated"], n["pending_jobs"], n["running_jobs"]) == (8, 4, 2, 1)   # observed
    assert n["allocation_pct"] == 50.0 and n["tasks_started"] == 1      # the engine's decisions: this cycle
    assert math.isnan(n["gpus_used"])                      # no usage in the snapshot: no DCGM numbers
    kinds = [(a["kind"], a["subject"]) for a in m.alerts()]
    assert ("starved", "b") in kinds


# ------------------------------------------------------------------------------------------------ what-if

def test_whatif_limit_raise_gives_the_engines_diff(state, snapshot):
    m = WhatIfModel(state)
    m.queue = "b"
    assert (m.quota, m.limit) == (2, 3)                   # sliders start at the queue's values
    m.limit = 4
    assert m.overrides() == {"queues": {"b": {"gpu": {"limit": 4.0}}}}
    diff = m.run()
    expected = run_whatif(snapshot, {"queues": {"b": {"gpu": {"limit": 4}}}})
    q = m.queue_diff()
    b = _row(q, "queue", "b")
    # By hand: with limit 4, b's requestable is 4: deserved 2 + 2 of the remaining 4 -> fair share 4.
    assert (b["fair_share_before"], b["fair_share_after"], b["fair_share_delta"]) == (3, 4, 1)
    assert b["fair_share_after"] == expected.after.fair_share["b"]["gpu"]
    changes = m.job_changes()
    assert list(zip(changes["job"], changes["before"], changes["after"])) == [("b-big", "pending", "started")]
    assert diff.job_changes() == expected.job_changes()
    summary = dict(zip(m.summary()["metric"], m.summary()["after"]))
    assert summary["gpu_allocated"] == 8


def test_whatif_edits_accumulate_and_reset(state):
    m = WhatIfModel(state)
    m.queue = "a"
    m.over_quota_weight = 3
    m.queue = "b"
    m.priority = 200
    m.pool, m.node_delta = "train", 2
    m.demand_scale = 2.0
    o = m.overrides()
    assert o["queues"] == {"a": {"gpu": {"over_quota_weight": 3.0}}, "b": {"priority": 200}}
    assert o["nodes"] == {"train": 2} and o["demand_scale"] == 2.0
    m.queue = "a"
    assert m.over_quota_weight == 3                      # edited value shown again
    m.reset()
    assert m.overrides() == {}
    assert m.over_quota_weight == 1


def test_whatif_bad_override_sets_an_error_not_an_exception(state):
    m = WhatIfModel(state)
    m.queue_edits["no-such-queue"] = {"quota": 1}
    assert m.run() is None and "no-such-queue" in m.error


def test_whatif_saves_the_modified_snapshot(state):
    m = WhatIfModel(state)
    m.queue, m.limit = "b", 4
    m.run()
    saved = loads_snapshot(m.modified_snapshot_text("yaml"))
    assert saved.queue_map()["b"].gpu.limit == 4


# -------------------------------------------------------------------------------------------- URL state

def test_selection_url_round_trip():
    s = Selection(view="queues", queue="b", node="n1")
    query = s.to_query()
    assert query == {"view": "queues", "queue": "b", "node": "n1"}
    t = Selection()
    t.update_from_query(query)
    assert (t.view, t.queue, t.node, t.job) == ("queues", "b", "n1", "")
    t.update_from_query({"view": "no-such-view", "job": "x", "other": "ignored"})
    assert (t.view, t.job) == ("queues", "x")


# ------------------------------------------------------------------------------------- history and state

def _rec(t):
    return HistoryRecord(time=float(t), wall_time=float(t), totals={"gpus_allocated": float(t)},
                         queues={"q": {"allocated": float(t)}})


def test_history_is_bounded_and_downsampled():
    h = TickHistory(fine_ticks=10, coarse_every=5, coarse_points=4)
    for t in range(1000):
        h.append(_rec(t))
    assert len(h.fine) == 10 and len(h.coarse) == 4
    recs = h.records()
    assert [r.time for r in recs[-10:]] == list(range(990, 1000))
    # coarse points older than the fine window: means of 5 ticks, e.g. ticks 985..989 -> 987
    coarse = [r for r in recs[:-10]]
    assert all(r.time < 990 for r in coarse)
    assert coarse[-1].totals["gpus_allocated"] == pytest.approx(sum(range(985, 990)) / 5)


def test_timeline_frames_follow_the_loop(snapshot):
    loop = LiveLoop(SourceOptions(source="snapshot"), feed=Feed(snapshot, "t"))
    loop.step()
    m = TimelineModel(loop.state)
    totals = m.totals()
    assert len(totals) == 1 and totals["gpus_allocated"].iloc[0] == 4       # as observed
    assert totals["pending_jobs"].iloc[0] == 2
    per_q = m.per_queue()
    assert set(per_q["queue"]) == {"a", "b"}              # leaf queues by default
    assert _row(per_q, "queue", "b")["fair_share"] == 3 and _row(per_q, "queue", "b")["allocated"] == 0


class _FlakyFeed(Feed):
    """A source that works once, then fails."""

    static = False
    kind = "test"

    def __init__(self, snapshot):
        super().__init__(snapshot, "flaky")
        self.calls = 0

    def snapshot(self):
        self.calls += 1
        if self.calls > 1:
            raise SourceError("apiserver unreachable")
        return super().snapshot()


def test_failing_source_keeps_the_last_good_tick_and_says_stale(snapshot):
    loop = LiveLoop(SourceOptions(source="snapshot"), feed=_FlakyFeed(snapshot))
    first = loop.step()
    assert first is not None and loop.state.source_status == "ok"
    assert loop.step() is None
    st = loop.state
    assert st.tick is first                                 # last good state stays on screen
    assert st.source_status == "stale" and st.stale_since is not None
    assert "apiserver unreachable" in st.error
    health = st.health()
    assert health["tick_index"] == 0 and health["errors_total"] == 1
    stale_since = st.stale_since
    loop.step()
    assert st.stale_since == stale_since                    # "stale since" the first failure


def test_a_late_eta_estimate_does_not_clear_the_stale_state(snapshot):
    """A background ETA estimate that finishes after the source failed republishes the last good tick with the
    estimate, and the page still says the data is stale since the first failure."""
    loop = LiveLoop(SourceOptions(source="snapshot"), feed=_FlakyFeed(snapshot))
    assert loop.step() is not None and loop.insight is not None
    loop.step()
    st = loop.state
    stale_since, revision = st.stale_since, st.revision
    assert st.source_status == "stale" and stale_since is not None
    loop._eta_ready()                                       # what the estimator thread calls when it is done
    assert st.revision == revision + 1                      # the tick was republished …
    assert st.source_status == "stale" and st.stale_since == stale_since   # … and is still marked stale
    assert "apiserver unreachable" in st.error


def test_missing_snapshot_file_is_an_error_state_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("KAIDASH_DATA_DIRS", str(tmp_path))   # the server reads only inside its data directories
    loop = LiveLoop(SourceOptions(source="snapshot", snapshot=str(tmp_path / "missing.yaml")))
    assert loop.step() is None
    assert loop.state.source_status == "error" and "missing.yaml" in loop.state.error


# --------------------------------------------------------------------------------------------- options

def test_options_from_env_and_args():
    o = SourceOptions.from_env({"KAIDASH_SOURCE": "kube", "KAIDASH_CONTEXT": "prod", "KAIDASH_PERIOD_S": "5"})
    assert (o.source, o.context, o.period_s) == ("kube", "prod", 5.0)
    o2 = SourceOptions.from_args(["--snapshot", "x.yaml", "--period", "3"])
    assert (o2.source, o2.snapshot, o2.period_s) == ("snapshot", "x.yaml", 3.0)
    round_trip = SourceOptions.from_env(o.to_env())
    assert (round_trip.source, round_trip.context, round_trip.period_s) == ("kube", "prod", 5.0)


def test_dcgm_use_in_overview_and_history_counts_each_gpu_once():
    # Two pods share one GPU (40% + 10% busy): the simulated exporter reports the device at min(1, 0.5) = 50%,
    # so the cluster uses 0.5 GPU, whatever the number of slices on that device.
    snap = loads_snapshot("""
version: 1
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 40000, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: s1, queue: q, tasks: [{name: s1-0, gpu: 0.5, status: running, node: n0, gpu_group: g1, gpu_index: 0,
      usage: {gpu_memory_mib: 30000, gpu_util: 0.4}}]}
  - {name: s2, queue: q, tasks: [{name: s2-0, gpu: 0.25, status: running, node: n0, gpu_group: g1, gpu_index: 0,
      usage: {gpu_memory_mib: 1000, gpu_util: 0.1}}]}
""")
    st = LiveState()
    publish_snapshot(st, snap, "shared", metrics=MetricsReader())
    assert st.tick.gpu_frame is not None
    n = OverviewModel(st).numbers()
    assert n["gpus_used"] == pytest.approx(0.5)
    assert n["over_share_gpus"] == 1                     # s1 uses 30000 MiB of a 20000 MiB share
    totals = st.history.totals_frame().iloc[-1]
    assert totals["gpus_used"] == pytest.approx(0.5) and totals["gpus_allocated"] == pytest.approx(0.75)


def test_kube_mode_shadow_schedules_a_live_cluster_read_only(tmp_path, monkeypatch):
    """kube source against the local fake API server: the loop publishes the cluster and only ever GETs."""
    from kai_objects import small_cluster
    from kube_fake_server import FakeKubeServer

    from dashboard.feeds import KubeFeed

    with FakeKubeServer(bookmark_interval_s=0.3) as server:
        server.load(small_cluster())
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", context="fake")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        feed = KubeFeed("fake", sync_timeout_s=10, watch_timeout_s=2, backoff_initial_s=0.05, backoff_max_s=0.2)
        loop = LiveLoop(SourceOptions(source="kube", context="fake"), feed=feed)
        try:
            tick = loop.step()
            assert tick is not None and loop.state.source_status == "ok"
            # the cluster of kai_objects.small_cluster(): four nodes, research -> llm / vision, inference
            assert {n.name for n in tick.snapshot.nodes} == {"h100-0", "h100-1", "l4-0", "cpu-0"}
            assert "nodes ok" in loop.state.source_detail
            assert {"research", "llm", "vision", "inference"} <= set(QueuesModel(loop.state).frame()["queue"])
        finally:
            loop.stop()
        assert server.methods() == {"GET"}


def test_one_live_loop_per_process_even_when_sessions_open_together(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("KAIDASH_DATA_DIRS", str(tmp_path))

    from dashboard import loop as loop_module

    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    loop_module.stop_loop()
    got = []
    opts = SourceOptions(source="snapshot", snapshot=str(path), period_s=0.2)
    threads = [threading.Thread(target=lambda: got.append(loop_module.get_loop(opts))) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(got) == 4 and all(g is got[0] for g in got)
        assert got[0].running and got[0].state.tick is not None
        assert loop_module.get_loop(SourceOptions(source="sim")) is got[0]     # later options are ignored
        assert sum(t.name == "kaidash-live-loop" for t in threading.enumerate()) == 1
    finally:
        loop_module.stop_loop()
    assert not got[0].running


class _LiveFeed(Feed):
    """The same snapshot every tick, as a live (non-static) source."""

    static = False
    kind = "test"


def test_why_pending_is_explained_once_then_kept_until_it_ages(snapshot, monkeypatch):
    from dashboard import loop as loop_module
    from scheduler.explain import explain_pending

    calls = []

    def counting(snap, result, **kw):
        calls.append(list(kw.get("jobs") or []))
        return explain_pending(snap, result, **kw)

    monkeypatch.setattr(loop_module, "_explainer", lambda: counting)
    loop = LiveLoop(SourceOptions(source="snapshot"), feed=_LiveFeed(snapshot, "live"))
    loop.explain_ttl_ticks = 3
    for _ in range(4):
        tick = loop.step()
        assert "b-big" in tick.explanations                  # every tick shows the counterfactual
    assert calls == [["b-big"], ["b-big"]]                   # explained at tick 0, again once 3 ticks old
