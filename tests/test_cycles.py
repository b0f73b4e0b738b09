"""Several cycles with KAI's transitions (kai-semantics §k integration-test convention): run until the
expected state is reached, then 5 more cycles must change nothing and evict nothing (no ping-pong)."""

import json

from scheduler.cli import main
from scheduler.engine import advance, run_session
from scheduler.snapshot_io import loads_snapshot

MAX_ROUNDS = 6


def _state(snapshot):
    return {t.name: (t.status, t.node) for j in snapshot.jobs for t in j.tasks}


def converge(snapshot, matches):
    """Cycles until ``matches(state)``, then 5 stable cycles; returns the steady state."""
    current = snapshot
    for _ in range(MAX_ROUNDS):
        result = run_session(current)
        current = advance(result.snapshot)
        if matches(_state(current)):
            break
    else:
        raise AssertionError(f"no match after {MAX_ROUNDS} cycles: {_state(current)}")
    steady = _state(current)
    for k in range(5):
        result = run_session(current)
        assert result.evicted == [], f"stability cycle {k}: evicted {[e.task for e in result.evicted]}"
        current = advance(result.snapshot)
        assert _state(current) == steady, f"stability cycle {k} changed the state"
    return steady


TWO_QUEUES = """
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a1, queue: a, creation_time: 1, tasks: [{name: a1-0, gpu: 1, status: running, node: n1}]}
  - {name: a2, queue: a, creation_time: 2, tasks: [{name: a2-0, gpu: 1, status: running, node: n1}]}
  - {name: a3, queue: a, creation_time: 3, tasks: [{name: a3-0, gpu: 1, status: running, node: n1}]}
  - {name: a4, queue: a, creation_time: 4, tasks: [{name: a4-0, gpu: 1, status: running, node: n1}]}
  - {name: b1, queue: b, creation_time: 5, tasks: [{name: b1-0, gpu: 1}]}
  - {name: b2, queue: b, creation_time: 6, tasks: [{name: b2-0, gpu: 1}]}
"""


def test_reclaim_converges_to_fair_share_and_stays():
    # Fair share 2 / 2: the two youngest a jobs give way to b's, then a may not reclaim back (2 + 1 > 2).
    want = {"a1-0": ("running", "n1"), "a2-0": ("running", "n1"), "a3-0": ("pending", None),
            "a4-0": ("pending", None), "b1-0": ("running", "n1"), "b2-0": ("running", "n1")}
    assert converge(loads_snapshot(TWO_QUEUES), lambda s: s == want) == want


def _many(running_queue: str, pending_queue: str, n: int) -> str:
    lines = ["nodes:"]
    lines += [f"  - {{name: n{k}, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}}"
              for k in range(2)]
    lines += ["queues:",
              "  - {name: x, gpu: {quota: 2, over_quota_weight: 1}, cpu: {quota: -1}, memory: {quota: -1}}",
              "  - {name: y, gpu: {quota: 2, over_quota_weight: 1}, cpu: {quota: -1}, memory: {quota: -1}}",
              "jobs:"]
    for k in range(n):
        lines.append(f"  - {{name: {running_queue}{k}, queue: {running_queue}, creation_time: {k}, tasks: "
                     f"[{{name: {running_queue}{k}-0, gpu: 1, status: running, node: n{k // 4}}}]}}")
    for k in range(n):
        lines.append(f"  - {{name: {pending_queue}{k}, queue: {pending_queue}, creation_time: {100 + k}, tasks: "
                     f"[{{name: {pending_queue}{k}-0, gpu: 1}}]}}")
    return "\n".join(lines) + "\n"


def _running(state, prefix):
    return sum(1 for name, (status, _) in state.items() if name.startswith(prefix) and status == "running")


def test_over_quota_split_by_weight_converges_and_is_stable():
    # 8 GPUs; x and y deserve 2 each and request 8 each; the 4 left split 1:1 -> fair share 4 / 4.
    # x starts with all 8: y reclaims 4 (x's 4 youngest) and nobody moves afterwards.
    steady = converge(loads_snapshot(_many("x", "y", 8)), lambda s: _running(s, "y") == 4)
    assert _running(steady, "x") == 4 and _running(steady, "y") == 4
    assert all(steady[f"x{k}-0"][0] == "running" for k in range(4))      # the oldest x jobs stay


DEPARTMENTS = """
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
  - {name: n2, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: d1, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: d2, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: t1, parent: d1, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: t2, parent: d1, gpu: {quota: 2}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: t3, parent: d2, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: t1-a, queue: t1, creation_time: 1, tasks: [{name: t1-a-0, gpu: 1, status: running, node: n1}]}
  - {name: t1-b, queue: t1, creation_time: 2, tasks: [{name: t1-b-0, gpu: 1, status: running, node: n1}]}
  - {name: t1-c, queue: t1, creation_time: 3, tasks: [{name: t1-c-0, gpu: 1, status: running, node: n1}]}
  - {name: t1-d, queue: t1, creation_time: 4, tasks: [{name: t1-d-0, gpu: 1, status: running, node: n1}]}
  - {name: t1-e, queue: t1, creation_time: 5, tasks: [{name: t1-e-0, gpu: 1, status: running, node: n2}]}
  - {name: t1-f, queue: t1, creation_time: 6, tasks: [{name: t1-f-0, gpu: 1, status: running, node: n2}]}
  - {name: t3-a, queue: t3, creation_time: 11, tasks: [{name: t3-a-0, gpu: 1}]}
  - {name: t3-b, queue: t3, creation_time: 12, tasks: [{name: t3-b-0, gpu: 1}]}
  - {name: t3-c, queue: t3, creation_time: 13, tasks: [{name: t3-c-0, gpu: 1}]}
  - {name: t3-d, queue: t3, creation_time: 14, tasks: [{name: t3-d-0, gpu: 1}]}
  - {name: t2-a, queue: t2, creation_time: 21, tasks: [{name: t2-a-0, gpu: 1}]}
  - {name: t2-b, queue: t2, creation_time: 22, tasks: [{name: t2-b-0, gpu: 1}]}
"""


def test_departments_converge_to_their_fair_shares():
    # d1 and d2 deserve 4 each (requests 8 and 4); inside d1, t1 and t2 deserve 2 each. t1 starts with 6
    # GPUs; 2 are idle. Steady state: t3 4, t2 2, t1 2 (its two oldest jobs).
    def done(s):
        return _running(s, "t3") == 4 and _running(s, "t2") == 2 and _running(s, "t1") == 2

    steady = converge(loads_snapshot(DEPARTMENTS), done)
    assert steady["t1-a-0"][0] == "running" and steady["t1-b-0"][0] == "running"


def test_schedule_cli_cycles(tmp_path, capsys):
    path = tmp_path / "snap.yaml"
    path.write_text(TWO_QUEUES)
    assert main(["schedule", str(path), "--cycles", "3", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # cycle 1 reclaims a4, a3 (b pipelined); cycle 2 binds b's jobs on their nominated node; cycle 3 nothing.
    assert sorted(doc["evicted"]) == ["a3-0", "a4-0"]
    assert doc["tasks"]["b1-0"]["status"] == "running" and doc["tasks"]["b2-0"]["status"] == "running"
    assert doc["tasks"]["a4-0"]["status"] == "pending"
