"""Each eviction carries the scenario that justified it (issue 14): generator, victims, the sets that failed
first, the rule that allowed it; the same text reaches ``explain``, the pending frame, the what-if job changes
and ``kaidash schedule`` (text and JSON)."""

import json
import subprocess
import sys

from dashboard.frames import pending_frame
from scheduler.decisions import eviction_notes
from scheduler.engine import run_session
from scheduler.explain import explain_pending
from scheduler.snapshot_io import loads_snapshot
from scheduler.whatif import run_whatif

# b1 needs 2 GPUs and 32 cores: only n1 has the cores. Victim order (queue a, youngest first) is a4, a3, a2.
# {a4} frees 2 GPUs on n2 (too few cores), {a3} frees 1 GPU on n1, {a3, a2} works.
CLUSTER = """
nodes:
  - {name: n1, gpus: 2, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
  - {name: n2, gpus: 2, gpu_memory_mib: 81920, cpu_millis: 8000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a2, queue: a, creation_time: 2, tasks: [{name: a2-0, gpu: 1, cpu_millis: 1000, status: running, node: n1}]}
  - {name: a3, queue: a, creation_time: 3, tasks: [{name: a3-0, gpu: 1, cpu_millis: 1000, status: running, node: n1}]}
  - {name: a4, queue: a, creation_time: 4, tasks: [{name: a4-0, gpu: 2, cpu_millis: 1000, status: running, node: n2}]}
  - {name: b1, queue: b, creation_time: 5, tasks: [{name: b1-0, gpu: 2, cpu_millis: CPU}]}
"""


def cluster(a2_preemptible: bool = True):
    text = CLUSTER.replace("CPU", "32000")
    if not a2_preemptible:
        text = text.replace("{name: a2, queue: a,", "{name: a2, queue: a, preemptible: false,")
    return loads_snapshot(text)


def test_each_eviction_names_its_generator_victims_and_the_smaller_sets_that_failed_first():
    result = run_session(cluster())
    assert sorted(e.task for e in result.evicted) == ["a2-0", "a3-0"]
    sc = result.evicted[0].scenario
    assert all(e.scenario is sc for e in result.evicted)          # one scenario object per decision
    assert (sc.action, sc.preemptor, sc.generator) == ("reclaim", "b1", "NodeLocalGreedy")
    assert sorted(sc.victims) == ["a2-0", "a3-0"] and sorted(sc.victim_jobs) == ["a2", "a3"]
    assert (sc.tried_before, sc.smaller_tried) == (2, 2)          # {a4} and {a3} failed
    assert "fair share of 2 GPUs" in sc.reason
    assert sc.summary.startswith("reclaimed by b1 to reach its fair share") and "tried 2 smaller sets first" in sc.summary
    notes = eviction_notes(result)
    assert notes["a3"] == notes["a2"] == sc.summary
    assert notes["b1"].startswith("reclaim: evicts 2 pods of a3, a2") and "(NodeLocalGreedy)" in notes["b1"]
    assert "a4" not in notes


def test_a_search_that_found_nothing_says_what_it_tried():
    result = run_session(cluster(a2_preemptible=False))   # {a4} and {a3} fail, {a3, a2} is not allowed
    assert not result.evicted
    search = result.jobs["b1"].details["eviction_search"]["reclaim"]
    assert search["scenarios_tried"] == 2
    note = eviction_notes(result)["b1"]
    assert note.startswith("reclaim: no victim set worked (2 scenarios tried")
    assert "NodeLocalGreedy placed at most 0 of 1 pods" in note


def test_explain_pending_frame_and_whatif_carry_the_text():
    snap = cluster()
    result = run_session(snap)
    summary = result.evicted[0].scenario.preemptor_summary
    exp = {e.job: e for e in explain_pending(snap, result, budget_ms_per_job=0)}
    assert exp["b1"].eviction == summary and exp["b1"].to_dict()["eviction"] == summary
    frame = pending_frame(snap, result)
    assert frame.set_index("job").loc["b1", "eviction"] == summary
    # What-if: with a quota for queue a, its jobs are not reclaimed any more; the changed jobs say what the
    # base side did to them.
    diff = run_whatif(snap, {"queues": {"a": {"gpu": {"quota": 4}}}}, cycles=3)
    rows = {r["job"]: r for r in diff.job_changes()}
    assert rows["a2"]["before"] == "pending" and rows["a2"]["after"] == "started"
    assert rows["a2"]["explanation"].startswith("before: reclaimed by b1")
    assert rows["b1"]["explanation"] == f"before: {summary}"
    # and the other way round: the modified side's evictions are named as they are
    back = run_whatif(diff.modified, {"queues": {"a": {"gpu": {"quota": 0}}}}, cycles=3)
    rows = {r["job"]: r for r in back.job_changes()}
    assert rows["b1"]["explanation"] == summary


def test_schedule_cli_prints_and_writes_the_scenario(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER.replace("CPU", "32000"))
    out = subprocess.run([sys.executable, "-m", "scheduler.cli", "schedule", str(path), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    ev = json.loads(out)["evictions"]
    assert {e["task"] for e in ev} == {"a2-0", "a3-0"}
    assert ev[0]["scenario"]["generator"] == "NodeLocalGreedy" and ev[0]["scenario"]["smaller_tried"] == 2
    text = subprocess.run([sys.executable, "-m", "scheduler.cli", "schedule", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "Eviction scenarios (1)" in text and "b1: reclaim: evicts 2 pods of a3, a2" in text
