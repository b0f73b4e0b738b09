"""The KAI differential tool (bench/kai_diff*): log parsing, comparison, generator, kaidash-only self checks.

KAI's binary is not needed: the log lines below are written in the snapshot-tool's format (zap console encoder,
colour codes included) from the code that prints them (cache/cache.go, framework/statement.go,
resource_division.go at KAI d5bc503).
"""

import json

from bench.kai_diff import compare, main, object_features, parse_seeds, run_seed
from bench.kai_diff_gen import generate_document
from bench.kai_diff_kai import parse_log, with_queue_names
from bench.kai_diff_kaidash import kaidash_decisions


TWO_JOBS_ONE_NODE = """
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: j1, namespace: ns, queue: q, creation_time: 1, tasks: [{name: ns/j1-0, gpu: 1, cpu_millis: 1000}]}
  - {name: j2, namespace: ns, queue: q, creation_time: 2, tasks: [{name: ns/j2-0, gpu: 2, cpu_millis: 1000}]}
"""
"""Room for both jobs' GPUs on one node: every job order decides the same."""

LOG = """\
2026-11-24T01:30:52.772Z\t\x1b[34mINFO\x1b[0m\tresource_division/resource_division.go:68\t[\x1b[32msnapshot-runner\x1b[0m] \
Resource division result for queue <llm>: Queue Priority: <100>, GPU: deserved: <8>, requested: <16>, maxAllowed: <16>, \
allocated: <16>, historicalUsage: <0>, fairShare: <13.5> CPU (cores): deserved: <Unlimited>, requested: <128>, \
maxAllowed: <Unlimited>, allocated: <128>, historicalUsage: <0>, fairShare: <128> memory (GB): deserved: <Unlimited>, \
requested: <1099.511>, maxAllowed: <Unlimited>, allocated: <1099.511>, historicalUsage: <0>, fairShare: <1099.511> 
2026-11-24T01:30:52.780Z\tINFO\tcache/cache.go:331\t[snapshot-runner] [allocate] Creating bind request for task \
<team-a/p-0> to node <n1> gpuGroup: <[]>, requires: <[8000 6.8e+10 2 1 0 0 0]> GPUs
2026-11-24T01:30:52.781Z\tINFO\tframework/statement.go:375\t[snapshot-runner] [allocate] Statement pipelined task: \
<team-a/p-1> to node: <n2>, gpuGroup: <[]>
2026-11-24T01:30:52.782Z\tINFO\tframework/statement.go:558\t[snapshot-runner] [allocate] Discarding operations ...
2026-11-24T01:30:52.783Z\tINFO\tframework/statement.go:375\t[snapshot-runner] [reclaim] Statement pipelined task: \
<team-a/p-1> to node: <n3>, gpuGroup: <[]>
2026-11-24T01:30:52.784Z\tINFO\tframework/statement.go:574\t[snapshot-runner] [reclaim] Committing operations ...
2026-11-24T01:30:52.785Z\tINFO\tframework/statement.go:583\t[snapshot-runner] [reclaim] Evicting task: team-b/v-0
2026-11-24T01:30:52.786Z\tINFO\tframework/statement.go:590\t[snapshot-runner] [reclaim] Pipelining task: team-a/p-1
2026-11-24T01:30:52.790Z\tINFO\tstalegangeviction/stalegangeviction.go:85\t[snapshot-runner] [stalegangeviction] \
Evicted task: <team-c/g-0> due its job being a stale job, its status: <Releasing>
"""


def test_parse_log_reads_committed_decisions_and_fair_share():
    d = parse_log(LOG)
    assert d.allocated == {"team-a/p-0": "n1"}
    assert d.pipelined == {"team-a/p-1": "n3"}  # the discarded n2 attempt is not a decision
    assert d.evicted == {"team-b/v-0": "reclaim", "team-c/g-0": "stalegangeviction"}
    assert d.fair_share["llm"] == {"gpu": 13.5, "cpu": 128.0, "memory": 1099.511}
    assert d.queue_numbers["llm"]["cpu"]["deserved"] == float("inf")


def test_fair_share_read_under_the_queue_name_where_kai_logs_the_display_name(tmp_path):
    """KAI names a queue by its spec.displayName when it has one (``queue_info.go NewQueueInfo``), so its
    resource-division log line reads "Inference" for queue ``inference``: the comparison must key by name."""
    from bench.kai_diff import write_zip

    queues = [{"metadata": {"name": "inference"}, "spec": {"displayName": "Inference"}},
              {"metadata": {"name": "llm"}, "spec": {}},
              {"metadata": {"name": "shadow"}, "spec": {"displayName": "llm"}}]   # another queue's name: kept
    zpath = tmp_path / "s.zip"
    write_zip({"rawObjects": {"queues": queues}}, zpath)
    d = parse_log(LOG.replace("<llm>", "<Inference>"))
    assert set(d.fair_share) == {"Inference"}
    d = with_queue_names(d, zpath)
    assert d.fair_share == {"inference": {"gpu": 13.5, "cpu": 128.0, "memory": 1099.511}}
    assert set(d.queue_numbers) == {"inference"}
    assert set(with_queue_names(parse_log(LOG), zpath).fair_share) == {"llm"}


def test_compare_per_type_with_kai_precision():
    kai = {"allocated": {"a/x": "n1"}, "pipelined": {}, "evicted": {"a/v": "reclaim"},
           "fair_share": {"q": {"gpu": 1.333, "cpu": 2.0, "memory": 3.0}}}
    same = {"allocated": {"a/x": "n1"}, "pipelined": {}, "evicted": {"a/v": "reclaim"},
            "fair_share": {"q": {"gpu": 4 / 3, "cpu": 2.0, "memory": 3.0004}}}
    assert compare(same, kai, {})["identical"]
    other = {"allocated": {"a/x": "n2", "a/y": "n1"}, "pipelined": {}, "evicted": {"a/v": "preempt"},
             "fair_share": {"q": {"gpu": 1.5, "cpu": 2.0, "memory": 3.0}}}
    out = compare(other, kai, {"a/x": {"fraction"}})
    assert out["equal"] == {"allocate": False, "pipeline": True, "evict": False, "fair_share": False}
    kinds = {d["kind"] for d in out["diffs"]}
    assert kinds == {"allocate: different node", "allocate: kaidash only", "evict: different action",
                     "fair_share: gpu differs"}
    assert next(d for d in out["diffs"] if d.get("task") == "a/x")["tags"] == ["fraction"]


def test_parse_seeds():
    assert parse_seeds("3..5,9") == [3, 4, 5, 9]


def test_generator_is_seeded_and_imports_cleanly(tmp_path):
    a = generate_document(7, 1767225600, "allocate")
    b = generate_document(7, 1767225600, "allocate")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(generate_document(8, 1767225600), sort_keys=True) != json.dumps(a, sort_keys=True)
    sizes = set()
    tags = set()
    for seed in range(40):
        doc = generate_document(seed, 1767225600)
        sizes.add(len(doc["rawObjects"]["nodes"]))
        for t in object_features(doc).values():
            tags |= t
    assert min(sizes) >= 2 and max(sizes) <= 60 and len(sizes) > 15
    # every feature the issue lists shows up within a few dozen clusters
    assert {"gang", "subgroups", "fraction", "gpu-memory", "multi-device", "cpu-only", "whole-gpu", "no-podgroup",
            "node-selector", "node-affinity", "pod-affinity", "pod-anti-affinity", "tolerations", "host-port",
            "configmap", "negative-weight", "zero-limit", "child-queue", "unlabelled-gpu-memory-nodes",
            "preferred-pod-affinity"} <= tags
    path = tmp_path / "c.zip"
    from bench.kai_diff import write_zip

    write_zip(generate_document(3, 1767225600), path)
    d = kaidash_decisions(str(path))
    assert set(d) >= {"allocated", "pipelined", "evicted", "fair_share"}


def test_without_kai_the_tool_checks_kaidash_invariants(capsys):
    from bench.kai_diff import _in_process

    rec = run_seed(11, {"actions": "default", "binary": None, "kai_runs": 1, "keep": None, "kaidash": _in_process})
    assert rec["status"] == "ok" and rec["invariant_failures"] == []
    assert main(["--seeds", "2..3"]) == 0
    out = capsys.readouterr().out
    assert "kaidash only (no --snapshot-tool): 2 clusters ran" in out and "invariants hold" in out


def test_eviction_pairs_read_against_the_kai_run_closest_to_kaidash():
    from bench.kai_diff_evictions import eviction_pairs, figures

    record = {"status": "ok", "seed": 1, "identical": False, "matches_other_kai_run": True,
              "equal": {"evict": False},
              "kaidash": {"evicted": {"a": "reclaim", "b": "reclaim"}},
              "kai": {"evicted": {"c": "reclaim"}},
              "kai_other_evicted": [{"a": "reclaim"}, {"a": "reclaim", "b": "reclaim"}]}
    assert eviction_pairs(record) == (2, 2)              # the third KAI run decided as kaidash
    deterministic = dict(record, kai_other_evicted=None)
    assert eviction_pairs(deterministic) == (0, 3)       # one KAI outcome: a, b kaidash only, c KAI only
    f = figures([record, dict(deterministic, seed=2, matches_other_kai_run=False)])
    assert (f["pairs_equal"], f["pairs"], f["evictions_equal"]) == (2, 5, 1)
    assert f["failing_seeds"] == [2]


def _fake_snapshot_tool(tmp_path, outcomes):
    """An executable standing in for KAI's tool: each call logs the next outcome's evictions (KAI's log format)
    and counts its calls in a file, so the test sees how many times the cache let it run."""
    calls = tmp_path / "calls"
    lines = [LOG.replace("team-b/v-0", victim) for victim in outcomes]
    script = tmp_path / "snapshot-tool"
    script.write_text("#!/usr/bin/env python3\nimport pathlib, sys\n"
                      f"calls = pathlib.Path({str(calls)!r})\n"
                      "n = int(calls.read_text()) if calls.exists() else 0\n"
                      "calls.write_text(str(n + 1))\n"
                      f"logs = {lines!r}\n"
                      "sys.stderr.write(logs[n % len(logs)])\n")
    script.chmod(0o755)
    return script, calls


def test_kai_runs_are_cached_per_cluster_and_only_missing_runs_run(tmp_path):
    from bench.kai_diff import _in_process

    tool, calls = _fake_snapshot_tool(tmp_path, ["team-b/v-0", "team-b/v-1"])
    opts = {"actions": "default", "binary": str(tool), "kai_runs": 2, "keep": None, "kaidash": _in_process,
            "kai_cache": str(tmp_path / "cache")}
    first = run_seed(11, opts)
    assert calls.read_text() == "2"
    assert first["kai_nondeterministic"] and first["kai_outcomes"] == [1, 1]
    again = run_seed(11, opts)                   # both runs come from the cache
    assert calls.read_text() == "2" and again["kai_outcomes"] == [1, 1]
    more = run_seed(11, dict(opts, kai_runs=4))  # two more runs, the cycle of outcomes goes on
    assert calls.read_text() == "4"
    assert more["kai_runs"] == 4 and more["kai_outcomes"] == [2, 2]
    cached = json.loads((tmp_path / "cache" / "default" / "seed-11.json").read_text())
    assert [r["evicted"] for r in cached["runs"]] == [{"team-b/v-0": "reclaim", "team-c/g-0": "stalegangeviction"},
                                                   {"team-b/v-1": "reclaim", "team-c/g-0": "stalegangeviction"}] * 2


def test_whatif_states_follow_the_sliders_trajectory_and_compare_each_cycle_with_kai(tmp_path, capsys):
    """--whatif-states: one record per cycle input of kaidash's own trajectory, each exported zip sent to the
    (fake) snapshot-tool, KAI's runs cached per zip hash, the table printed and the JSON written."""
    from bench.kai_diff_whatif import case_snapshot, cases, trajectory
    from scheduler.whatif import run_to_steady_state

    label, whatif = cases({"add 8 nodes"})[0]
    start = case_snapshot(whatif)
    steps = trajectory(start)
    assert len(steps) == run_to_steady_state(start).cycles_run > 1
    running = [sum(t.status == "running" for _, t in state.iter_tasks()) for state, _ in steps]
    assert running[1] > running[0]                      # cycle 1 starts from cycle 0's binds, advanced

    tool, calls = _fake_snapshot_tool(tmp_path, ["team-b/v-0", "team-b/v-1"])
    out = tmp_path / "whatif.json"
    args = ["--whatif-states", "--sliders", label, "--snapshot-tool", str(tool), "--kai-runs", "2",
            "--kai-cache", str(tmp_path / "cache"), "--json", str(out)]
    assert main(args) == 0
    assert calls.read_text() == str(2 * len(steps))
    doc = json.loads(out.read_text())
    recs = doc["records"]
    assert [r["cycle"] for r in recs] == list(range(len(steps))) and {r["case"] for r in recs} == {label}
    assert all(r["invariant_failures"] == [] for r in recs)        # kaidash's zip decisions = its in-memory ones
    # the fake KAI evicts a pod that does not exist and alternates its victim: nondeterministic, never identical
    assert all(r["kai_nondeterministic"] and not r["identical"] for r in recs)
    assert any(d["kind"] == "evict: KAI only" and d["task"] == "team-b/v-0" for d in recs[0]["diffs"])
    assert doc["summary"][label]["states"] == len(steps) and doc["summary"][label]["identical_to_a_kai_run"] == 0
    assert len({r["zip_sha256"] for r in recs}) == len(steps)     # every cycle's input is a different state
    assert label in capsys.readouterr().out
    assert main(args) == 0                                          # the second time every run is cached
    assert calls.read_text() == str(2 * len(steps))
    assert len(list((tmp_path / "cache" / "whatif" / "add-8-nodes").glob("cycle-*.json"))) == len(steps)


def test_whatif_states_without_kai_run_the_self_checks(capsys):
    assert main(["--whatif-states", "--sliders", "over-quota weight"]) == 0
    out = capsys.readouterr().out
    assert "over-quota weight" in out and "hold" in out


def test_job_orders_probe_counts_random_job_orders_that_decide_as_kai(tmp_path):
    from bench.kai_diff_kaidash import kaidash_decisions
    from bench.kai_diff_whatif import job_orders_matching
    from scheduler.snapshot_io import loads_snapshot
    from scheduler.sources.kai_export import write_kai_zip

    snap = loads_snapshot(TWO_JOBS_ONE_NODE)
    path = tmp_path / "c.zip"
    write_kai_zip(snap, path)
    own = kaidash_decisions(str(path))
    assert own["allocated"] == {"ns/j1-0": "n1", "ns/j2-0": "n1"}
    # room for both jobs: every insertion order decides the same, so all 5 orders match that outcome
    assert job_orders_matching(str(path), [own], 5) == 5
    other = dict(own, allocated={"ns/j1-0": "n1"})
    assert job_orders_matching(str(path), [other], 5) == 0


def test_as_the_zip_holds_changes_a_state_as_the_kai_zip_round_trip_does(tmp_path):
    """The self-check's model of the zip's limits: jobs in the import's order, whole-GPU tasks without device
    indices; on a snapshot whose jobs are not in key order and whose whole-GPU tasks have indices."""
    from bench.kai_diff_whatif import ZIP_FORMAT_LIMITS, as_the_zip_holds
    from scheduler.snapshot_io import load_snapshot
    from scheduler.sources.kai_export import kai_names, write_kai_zip
    from scheduler.sources.kai_snapshot import import_kai_snapshot

    snap = load_snapshot("examples/small-cluster.yaml")
    assert [j.key for j in snap.jobs] != sorted(j.key for j in snap.jobs)
    assert any(t.gpu_indices and not t.is_fractional for _, t in snap.iter_tasks())
    write_kai_zip(snap, tmp_path / "s.zip")
    back = import_kai_snapshot(tmp_path / "s.zip").snapshot
    jobs, tasks = kai_names(snap)
    held = as_the_zip_holds(snap, ZIP_FORMAT_LIMITS)
    assert [jobs[j.key] for j in held.jobs] == [j.key for j in back.jobs]
    assert {tasks[t.name]: t.gpu_indices for _, t in held.iter_tasks()} == \
        {t.name: t.gpu_indices for _, t in back.iter_tasks()}
    assert [j.key for j in snap.jobs] != [j.key for j in held.jobs]   # the input is left as it was
    untouched = as_the_zip_holds(snap, ())
    assert [j.key for j in untouched.jobs] == [j.key for j in snap.jobs]
    assert [t.gpu_indices for _, t in untouched.iter_tasks()] == [t.gpu_indices for _, t in snap.iter_tasks()]


def test_a_zip_difference_the_format_limits_do_not_explain_is_a_self_check_failure():
    from bench.kai_diff_kaidash import result_decisions
    from bench.kai_diff_whatif import format_limits_explaining
    from scheduler.engine import run_session
    from scheduler.snapshot_io import loads_snapshot

    snap = loads_snapshot(TWO_JOBS_ONE_NODE)
    own = result_decisions(snap, run_session(snap))
    assert own["allocated"] == {"ns/j1-0": "n1", "ns/j2-0": "n1"}
    assert format_limits_explaining(snap, own) != []
    lossy = dict(own, allocated={"ns/j1-0": "n1"})   # as if the round trip had lost j2's request
    assert format_limits_explaining(snap, lossy) == []
