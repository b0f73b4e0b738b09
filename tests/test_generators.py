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


# KAI's pend-77 search on the what-if cluster with its queue quota slider moved (the 64-node demo, one session;
# snapshot-tool d5bc503 on its exported zip, 6 of 6 runs alike): the victim-set sizes of its first 82 scenarios,
# and its 78th scenario (MultiNodeGang, after the victim pops pend-18, pend-10, pend-6, pend-2, run-191).
_PEND_77_SIZES = [3, 1, 1, 1, 2, 1, 3, 1, 1, 4, 1, 1, 5, 6, 2, 3, 1, 2, 5, 2, 3, 3, 7, 1, 3, 1, 2, 4, 2, 1, 1, 3,
                  4, 2, 3, 5, 6, 2, 2, 3, 1, 2, 3, 1, 8, 4, 1, 1, 1, 1, 1, 2, 2, 1, 2, 1, 2, 1, 5, 1, 4, 2, 1, 1,
                  2, 2, 1, 1, 2, 1, 4, 2, 5, 6, 6, 8, 11, 12, 16, 7, 9, 18]
_PEND_77_78TH = ["pend-26-0", "pend-26-1", "pend-42-0", "pend-54-0", "run-191-0", "run-23-0", "run-28-0",
                 "run-42-0", "run-51-0", "run-52-0", "run-54-0", "run-89-0"]


def test_multi_node_gang_reads_the_nodes_as_the_rolled_back_scenarios_left_them():
    """A probe's accumulated-GPU filter reads each node's idle + releasing GPUs when the probe starts
    (``pod_scenario_builder.go: NewPodAccumulatedScenarioBuilder``), not when the job's search began, and so does
    the sub-scenario emitter in kaidash (KAI's reads them when it is built: docs/actions.md, *Node counts*). On this cluster h100-32 holds pend-2 (4 GPUs) pipelined onto run-92's releasing GPUs next to two shared
    GPUs; the NodeLocalGreedy scenarios that evict and roll back those fractions leave the node at -4 idle +
    releasing GPUs (KAI's ``gpu_sharing_node_info.go`` count, kept by kaidash). Once pend-2 is popped, h100-32
    offers -4 + 6 GPUs of victims = 2 < the 4 pend-77 asks for, so KAI leaves the node out and its next scenario adds
    run-191 (l40s-62); read at the search's start (0 + 6) the node joined the last sub-scenario with its seven
    pods, a scenario KAI never tries."""
    from bench.whatif_latency import SLIDERS, cluster_64
    snap = SLIDERS["queue quota"].apply(cluster_64())
    with scenario_trace() as trace:
        run_session(snap)
    tried = [(gen, new) for action, job, gen, _k, _p, _r, new, _ok in trace if action == "reclaim" and job == "pend-77"]
    assert [len(new) for _g, new in tried[:82]] == _PEND_77_SIZES
    assert tried[77] == ("MultiNodeGang", _PEND_77_78TH)
    assert not any("pend-2-0" in new for gen, new in tried if gen == "MultiNodeGang")


# KAI's whole scenario sequence on the queue-priority slider's second cycle (the same cluster; snapshot-tool
# d5bc503, 6 of 6 runs alike): 377 scenarios, the 318th (pend-76's reclaim, MultiNodeGang) this one.
_PRIORITY_C1_318TH = ["pend-2-0", "pend-67-0", "pend-71-0", "pend-71-1", "run-100-0", "run-23-0", "run-28-0",
                      "run-45-0", "run-46-0", "run-71-0", "run-84-0", "run-92-0"]


def test_multi_node_gang_reads_the_probes_start_not_the_drift_within_it():
    """Within a probe kaidash's shared-GPU counts drift apart from KAI's where KAI regroups shared pods
    (``ConsolidateSharedPodInfoToDifferentGPU``, not copied: docs/engine.md); reading the nodes as the probe found
    them keeps the priority slider's second cycle on KAI's exact sequence, which a live read parts from at the
    318th scenario (pend-42-0, pend-54-0, run-100-0, run-191-0 instead of KAI's twelve pods)."""
    from bench.kai_diff_whatif import trajectory
    from bench.whatif_latency import SLIDERS, cluster_64
    state, _ = trajectory(SLIDERS["queue priority"].apply(cluster_64()), cycles=2)[1]
    with scenario_trace() as trace:
        run_session(state)
    assert len(trace) == 377
    action, job, gen, _k, _p, rec, new, _ok = trace[317]
    assert (action, job, gen) == ("reclaim", "pend-76", "MultiNodeGang")
    assert sorted(set(rec) | set(new)) == _PRIORITY_C1_318TH
