"""KAI's scenario generators (scheduler/actions/generators.py): the victim sets they emit, in order."""

from scheduler.actions.solver import scenario_trace
from scheduler.engine import run_session
from scheduler.snapshot_io import loads_snapshot

# An elastic victim job e (3 pods, min 1) and a gang b of 2 pods. KAI probes k = 1 (b-0 alone: evicting e-2 is
# enough, e-2 is recorded) then k = 2: the recorded set alone is filtered out (1 GPU for 2), e's next pop gives
# e-2 again (recorded: pushed back without it), then e-1.
ELASTIC = """
nodes:
  - {name: n1, gpus: 3, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 3}, cpu: {quota: -1}, memory: {quota: -1}}
config: {actions: [reclaim]}
jobs:
  - {name: e, queue: a, creation_time: 1, min_available: 1, tasks: [{name: e-0, gpu: 1, status: running, node: n1},
     {name: e-1, gpu: 1, status: running, node: n1}, {name: e-2, gpu: 1, status: running, node: n1}]}
  - {name: b, queue: b, creation_time: 5, min_available: 2, tasks: [{name: b-0, gpu: 1}, {name: b-1, gpu: 1}]}
"""


def test_node_local_greedy_lists_a_jobs_recorded_victims_with_its_new_ones():
    """KAI's NodeLocalGreedy takes, per node of the latest victim job, every task group of the jobs with a new
    victim there (``ByNodeScenario.VictimsTasksFromNodes``), and a recorded job's group is one of them: the
    recorded e-2 is listed again next to e-1 (and evicted once)."""
    with scenario_trace() as trace:
        result = run_session(loads_snapshot(ELASTIC))
    steps = [(gen, k, pend, rec, new, ok) for _a, _j, gen, k, pend, rec, new, ok in trace]
    assert steps[0] == ("NodeLocalGreedy", 1, ["b-0"], [], ["e-2"], True)
    assert steps[1] == ("NodeLocalGreedy", 2, ["b-0", "b-1"], ["e-2"], ["e-1", "e-2"], True)
    assert sorted(e.task for e in result.evicted) == ["e-1", "e-2"]     # KAI: the same two (snapshot-tool d5bc503)
    assert len(result.evicted) == 2                                        # e-2 once, not twice
    assert {t: d.status for t, d in result.tasks.items() if t.startswith("b-")} == {"b-0": "pipelined",
                                                                                   "b-1": "pipelined"}
