"""Min runtime (kai-semantics §c.7): per-queue resolution (preempt walk, reclaim `queue` and `lca`),
the protection boundary, and protected elastic victims."""

import pytest

from scheduler.actions.minruntime import is_protected, preempt_min_runtime, reclaim_min_runtime
from scheduler.engine import run_session
from scheduler.snapshot_io import loads_snapshot
from tests._engine_helpers import session_from_yaml

TREE = """
time: 1000
config: {default_preempt_min_runtime_s: 5, default_reclaim_min_runtime_s: 7}
nodes:
  - {name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: root1, reclaim_min_runtime_s: 100, preempt_min_runtime_s: 300}
  - {name: d1, parent: root1}
  - {name: d2, parent: root1, reclaim_min_runtime_s: 50}
  - {name: t1, parent: d1}
  - {name: t2, parent: d1, reclaim_min_runtime_s: 10, preempt_min_runtime_s: 20}
  - {name: t3, parent: d2}
  - {name: root2}
  - {name: t4, parent: root2}
jobs:
  - {name: j, queue: t1, last_start_time: 940, tasks: [{name: j-0, gpu: 1, status: running, node: n1}]}
"""


@pytest.fixture()
def tree():
    s = session_from_yaml(TREE)
    return s, s.queues.index


def test_preempt_walks_up_from_the_victim_queue(tree):
    s, q = tree
    assert preempt_min_runtime(s, q["t2"]) == 20      # set on the leaf itself
    assert preempt_min_runtime(s, q["t1"]) == 300     # t1, d1 unset -> root1
    assert preempt_min_runtime(s, q["t4"]) == 5       # nothing on the way -> default


def test_reclaim_lca_steps_one_level_below_the_common_ancestor_toward_the_victim(tree):
    s, q = tree
    assert reclaim_min_runtime(s, q["t1"], q["t2"]) == 10    # lca d1 -> t2 (set)
    assert reclaim_min_runtime(s, q["t1"], q["t3"]) == 50    # lca root1 -> d2 (set), not t3
    assert reclaim_min_runtime(s, q["t3"], q["t1"]) == 100   # lca root1 -> d1 unset -> up to root1
    assert reclaim_min_runtime(s, q["t4"], q["t1"]) == 100   # other top level: the victim's top queue root1
    assert reclaim_min_runtime(s, q["t1"], q["t4"]) == 7     # victim's top queue root2 unset -> default


def test_reclaim_queue_method_walks_up_from_the_victim(tree):
    s, q = tree
    s.config.min_runtime_resolve = "queue"
    assert reclaim_min_runtime(s, q["t1"], q["t3"]) == 50    # t3 unset -> d2
    assert reclaim_min_runtime(s, q["t3"], q["t1"]) == 100   # t1, d1 unset -> root1
    assert reclaim_min_runtime(s, q["t1"], q["t4"]) == 7


def test_protected_strictly_before_last_start_plus_min_runtime(tree):
    s, _ = tree
    j = s.job_index["j"]                                        # started at 940, now 1000
    assert is_protected(s, j, 61)
    assert not is_protected(s, j, 60)                           # 1000 < 1000 is false
    s.snapshot.jobs[j].last_start_time = None
    assert not is_protected(s, j, 1e9)                          # never started: never protected


ELASTIC = """
time: 1000
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}, reclaim_min_runtime_s: RUNTIME}
  - {name: b, gpu: {quota: 3}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a1, queue: a, creation_time: 1, last_start_time: 995, tasks: [{name: a1-0, gpu: 1, status: running, node: n1}]}
  - name: e
    queue: a
    creation_time: 2
    last_start_time: 990
    min_available: 1
    tasks:
      - {name: e-0, gpu: 1, status: running, node: n1, creation_time: 1}
      - {name: e-1, gpu: 1, status: running, node: n1, creation_time: 2}
      - {name: e-2, gpu: 1, status: running, node: n1, creation_time: 3}
  - {name: big, queue: b, creation_time: 5, tasks: [{name: big-0, gpu: 3}]}
"""


def test_protected_elastic_victim_may_lose_surplus_but_not_go_below_minimum():
    # b (fair share 3) needs 3 GPUs. With a 60 s reclaim min runtime a1 (non-elastic, started 5 s ago) is no
    # candidate and e (elastic, started 10 s ago) is: e-2 and e-1 are surplus, but 3 GPUs need e-0 too, which
    # would take e below min_available 1 -> every scenario is rejected.
    protected = run_session(loads_snapshot(ELASTIC.replace("RUNTIME", "60")), ["allocate", "reclaim"])
    assert protected.to_contract()["evicted"] == []
    # Without protection the same search takes e whole (surplus pods one by one, then its core).
    free = run_session(loads_snapshot(ELASTIC.replace("RUNTIME", "0")), ["allocate", "reclaim"])
    assert sorted(free.to_contract()["evicted"]) == ["e-0", "e-1", "e-2"]


def test_protected_elastic_victim_gives_surplus():
    # Needing 2 GPUs, the surplus pods e-2 and e-1 suffice: allowed although e is protected.
    snap = loads_snapshot(ELASTIC.replace("RUNTIME", "60").replace("big-0, gpu: 3", "big-0, gpu: 2")
                          .replace("gpu: {quota: 3}", "gpu: {quota: 2}").replace("gpu: {quota: 1}", "gpu: {quota: 2}"))
    out = run_session(snap, ["allocate", "reclaim"]).to_contract()
    assert sorted(out["evicted"]) == ["e-1", "e-2"]
    assert out["tasks"]["e-0"]["status"] == "running"
