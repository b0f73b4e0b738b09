"""KAI's scheduling signatures in the eviction actions (``actions/common/minimal_job_comparison.go``):
a pending job no easier than one whose search already failed in the same action run is skipped."""

import copy

import pytest
from kai_objects import DEFAULT_KAI_CONFIG, DEFAULT_SCHEDULER_PARAMS, kai_snapshot_doc, kai_zip_bytes, small_cluster

from scheduler.actions.preempt import preempt
from scheduler.actions.reclaim import reclaim
from scheduler.actions.signatures import easier_than, footprint_smaller, job_signature
from scheduler.errors import SnapshotError
from scheduler.snapshot_io import loads_snapshot
from scheduler.sources.kai_snapshot import load_kai_snapshot
from tests._engine_helpers import session_from_yaml

# One 8-GPU, 8-core node filled by queue a's eight 1-GPU jobs (no CPU), and a CPU-only node (64 cores,
# so that b's CPU fair share covers 10 cores and CanReclaimResources passes). Quotas 4/4, so fair share is
# a = 4, b = 4 and a is 4 GPUs over: its jobs are reclaim victims. Evicting a-jobs frees GPUs but never
# CPU, so r1 and r2 (1 GPU + 10 cores each) fit on neither node whatever is evicted: r1's search fails.
# r2 has r1's signature (priority 50, preemptible, one pending pod) and the same request: skipped.
# r3 has the same signature but a smaller request (1 core): easier, tried, and it fits after one eviction.
# r4 requests what r1 does but has priority 40: a different signature, so it is tried (and fails).
RECLAIM = """
config: {use_scheduling_signatures: %s}
nodes:
  - {name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 8000, memory_bytes: 512Gi}
  - {name: cpus, gpus: 0, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}, creation_time: 1}
  - {name: b, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}, creation_time: 2}
jobs:
%s
  - {name: r1, queue: b, creation_time: 10, tasks: [{name: r1-0, gpu: 1, cpu_millis: 10000}]}
  - {name: r2, queue: b, creation_time: 11, tasks: [{name: r2-0, gpu: 1, cpu_millis: 10000}]}
  - {name: r3, queue: b, creation_time: 12, tasks: [{name: r3-0, gpu: 1, cpu_millis: 1000}]}
  - {name: r4, queue: b, creation_time: 13, priority: 40, tasks: [{name: r4-0, gpu: 1, cpu_millis: 10000}]}
"""
VICTIMS = "\n".join(
    f"  - {{name: v{k}, queue: a, creation_time: {k}, tasks: [{{name: v{k}-0, gpu: 1, status: running, node: n1}}]}}"
    for k in range(8))


def _reclaim(on: bool):
    s = session_from_yaml(RECLAIM % ("true" if on else "false", VICTIMS))
    reclaim(s)
    return s


def test_an_identical_job_after_a_failed_one_is_skipped_and_other_signatures_are_tried():
    s = _reclaim(True)
    assert s.action_stats["reclaim"] == {"attempted": 3, "skipped_by_signature": 1}   # r1, r3, r4 / r2
    assert len(s.evictions) == 1                       # one a-job evicted, for r3
    r3 = s.task_index["r3-0"]
    assert s.status[r3] == "pipelined"
    for name in ("r1-0", "r2-0", "r4-0"):
        assert s.status[s.task_index[name]] == "pending"


def test_with_signatures_off_every_job_is_tried_and_the_decisions_are_the_same():
    s = _reclaim(False)
    assert s.action_stats["reclaim"] == {"attempted": 4, "skipped_by_signature": 0}
    assert len(s.evictions) == 1
    assert s.status[s.task_index["r3-0"]] == "pipelined"


def test_signature_is_the_pods_priority_and_constraints_not_requests():
    s = _reclaim(True)
    j = s.job_index
    assert job_signature(s, j["r1"]) == job_signature(s, j["r2"]) == job_signature(s, j["r3"]) == ((((50, None),),),)
    assert job_signature(s, j["r4"]) == ((((40, None),),),)


def test_signature_tells_a_pod_of_class_train_from_one_without_a_class():
    """KAI hashes the pod's ``spec.priorityClassName`` (``pod_info/scheduling_constraints_signature.go``): at the
    same priority 50, a pod of class ``train`` and one without a class have different signatures (seed 2055 of
    the differential tool: KAI tries team-c/job-007 after team-c/job-001 failed)."""
    s = _reclaim(True)
    j = s.job_index
    s.task_objs[s.task_index["r2-0"]].priority_class = ""
    s.signature_cache.clear()
    assert job_signature(s, j["r1"]) != job_signature(s, j["r2"])
    assert job_signature(s, j["r1"]) == job_signature(s, j["r3"])


def test_signature_counts_the_pods_waiting_at_session_open():
    """KAI caches a pod group's signature when the session opens: a gang whose pods allocate placed keeps the
    signature of its pending pods (``cluster_info.go`` logs it before any action)."""
    s = _reclaim(True)
    j = s.job_index["r1"]
    before = job_signature(s, j)
    s.signature_cache.clear()
    s.status[s.task_index["r1-0"]] = "binding"   # as if allocate had placed it
    assert job_signature(s, j) == before


# Requests are (GPUs, CPU millis, memory bytes), sorted ascending.
ONE = (1.0, 1000.0, 0.0)
TWO = (2.0, 1000.0, 0.0)
CPU_HEAVY = (1.0, 9000.0, 0.0)


@pytest.mark.parametrize("job, rep, easier", [
    ([ONE], [ONE], False),               # equal: not easier
    ([ONE], [TWO], True),                # smaller at the first rank
    ([TWO], [ONE], False),               # larger
    ([ONE], [ONE, ONE], True),           # the representative has more pending pods
    ([ONE, ONE], [ONE], False),          # more pods than the representative, equal where they overlap
    ([ONE, ONE], [ONE, TWO], True),      # equal, then smaller
    ([TWO, ONE], [CPU_HEAVY], False),    # incomparable at rank 0 and then out of ranks
    ([], [ONE], False),                  # nothing pending: never easier (KAI)
])
def test_easier_than_follows_kai_comparison(job, rep, easier):
    assert easier_than(job, rep) is easier


def test_representative_is_replaced_only_by_a_smaller_footprint():
    assert footprint_smaller([ONE], [TWO])
    assert footprint_smaller([ONE], [ONE, ONE])
    assert not footprint_smaller([ONE, ONE], [ONE])       # more pods
    assert not footprint_smaller([TWO], [CPU_HEAVY])      # incomparable


# Preempt keeps one table per queue: in queue p, hi1 and hi2 (priority 80, 2 GPUs each) want a node whose
# only lower-priority job holds 1 GPU; the other GPU is held by a job of the same priority. hi1 fails,
# hi2 is skipped. Queue o's identical job is in another table and is tried.
PREEMPT = """
nodes:
  - {name: n1, gpus: 2, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: p, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}, creation_time: 1}
  - {name: o, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}, creation_time: 2}
jobs:
  - {name: low, queue: p, priority: 10, creation_time: 1, tasks: [{name: low-0, gpu: 1, status: running, node: n1}]}
  - {name: peer, queue: o, priority: 80, creation_time: 2, tasks: [{name: peer-0, gpu: 1, status: running, node: n1}]}
  - {name: hi1, queue: p, priority: 80, creation_time: 10, tasks: [{name: hi1-0, gpu: 2}]}
  - {name: hi2, queue: p, priority: 80, creation_time: 11, tasks: [{name: hi2-0, gpu: 2}]}
  - {name: ohi, queue: o, priority: 80, creation_time: 12, tasks: [{name: ohi-0, gpu: 2}]}
"""


def test_preempt_tables_are_per_queue():
    s = session_from_yaml(PREEMPT)
    preempt(s)
    # hi1 tried (fails: evicting low frees 1 of the 2 GPUs), hi2 skipped; ohi tried (its queue has no
    # lower-priority victim: a failure without a search)
    assert s.action_stats["preempt"] == {"attempted": 2, "skipped_by_signature": 1}
    assert s.evictions == []


def test_config_field_parses_and_defaults_on():
    assert loads_snapshot("nodes: []\n").config.use_scheduling_signatures is True
    assert loads_snapshot("config: {use_scheduling_signatures: false}\nnodes: []\n").config.use_scheduling_signatures is False


def test_kai_zip_maps_use_scheduling_signatures(tmp_path):
    def load(value):
        params = {**DEFAULT_SCHEDULER_PARAMS, "useSchedulingSignatures": value}
        path = tmp_path / "kai.zip"
        path.write_bytes(kai_zip_bytes(kai_snapshot_doc(small_cluster(), copy.deepcopy(DEFAULT_KAI_CONFIG), params)))
        return load_kai_snapshot(path).config

    assert load(False).use_scheduling_signatures is False
    assert load(True).use_scheduling_signatures is True
    with pytest.raises(SnapshotError, match="useSchedulingSignatures"):
        load("yes")
