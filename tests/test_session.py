"""Session state and Statement semantics: accounting, checkpoint/rollback, evict, un-evict, moves (§c.2b)."""

import numpy as np
import pytest

from scheduler.errors import EngineError
from scheduler.session import Statement
from scheduler.session.nodes import CPU, GPU, SLOT_PIPELINED, SLOT_RELEASING
from tests._engine_helpers import session_from_yaml, tid

SNAP = """
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 40000, cpu_millis: 16000, memory_bytes: 64Gi}
  - {name: n2, gpus: 4, gpu_memory_mib: 40000, cpu_millis: 16000, memory_bytes: 64Gi}
queues:
  - {name: dept, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: team, parent: dept, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - name: run
    queue: team
    priority: 125
    tasks: [{name: run-0, gpu: 2, cpu_millis: 4000, status: running, node: n1, gpu_index: [0, 1]}]
  - name: frac
    queue: team
    tasks: [{name: frac-0, gpu: 0.5, status: running, node: n2, gpu_group: g-a, gpu_index: 0}]
  - name: new
    queue: team
    tasks: [{name: new-0, gpu: 1, cpu_millis: 1000}]
"""


def test_session_open_accounting():
    s = session_from_yaml(SNAP)
    n1, n2 = s.nodes.index["n1"], s.nodes.index["n2"]
    assert s.nodes.idle[n1, GPU] == 2 and s.nodes.idle[n1, CPU] == 12000
    assert s.nodes.idle[n2, GPU] == 3  # one GPU became shared
    assert s.nodes.sh_used[n2, 0] == 20000
    team, dept = s.queues.index["team"], s.queues.index["dept"]
    assert s.queues.allocated[team, 0] == pytest.approx(2.5)
    assert s.queues.allocated[dept, 0] == pytest.approx(2.5)
    assert s.queues.allocated_np[team, 0] == pytest.approx(2.0)  # only the priority-125 job


def test_allocate_then_rollback_restores_everything():
    s = session_from_yaml(SNAP)
    n1 = s.nodes.index["n1"]
    idle_before = s.nodes.idle.copy()
    alloc_before = s.queues.allocated.copy()
    st = Statement(s)
    cp = st.checkpoint()
    st.allocate(tid(s, "new-0"), n1, indices=[2])
    assert s.status[tid(s, "new-0")] == "binding"
    assert s.nodes.idle[n1, GPU] == 1
    assert s.queues.allocated[s.queues.index["dept"], 0] == pytest.approx(3.5)  # grows up the hierarchy
    st.rollback(cp)
    assert s.status[tid(s, "new-0")] == "pending" and s.node[tid(s, "new-0")] == -1
    np.testing.assert_array_equal(s.nodes.idle, idle_before)
    np.testing.assert_array_equal(s.queues.allocated, alloc_before)
    assert st.operations == 0


def test_evict_shrinks_allocated_at_once_and_frees_releasing():
    s = session_from_yaml(SNAP)
    n1, team = s.nodes.index["n1"], s.queues.index["team"]
    st = Statement(s)
    epoch = s.free_epoch
    st.evict(tid(s, "run-0"), "reclaim", preemptor="other", message="reclaimed")
    assert s.status[tid(s, "run-0")] == "releasing"
    assert s.queues.allocated[team, 0] == pytest.approx(0.5)
    assert s.queues.allocated_np[team, 0] == pytest.approx(0.0)
    assert s.nodes.rel[n1, GPU] == 2 and s.nodes.idle[n1, GPU] == 2
    assert [e.task for e in s.evictions] == ["run-0"] and s.free_epoch > epoch
    st.discard()
    assert s.status[tid(s, "run-0")] == "running" and s.evictions == []
    assert s.nodes.rel[n1, GPU] == 0


def test_pipeline_back_onto_same_node_unevicts():
    s = session_from_yaml(SNAP)
    n1, team = s.nodes.index["n1"], s.queues.index["team"]
    st = Statement(s)
    st.evict(tid(s, "run-0"), "consolidation")
    st.pipeline(tid(s, "run-0"), n1, indices=[0, 1], update_if_on_node=False)
    assert s.status[tid(s, "run-0")] == "running"
    assert s.evictions == []
    assert s.queues.allocated[team, 0] == pytest.approx(2.5)
    assert s.nodes.rel[n1, GPU] == 0 and s.nodes.idle[n1, GPU] == 2


def test_pipeline_elsewhere_is_a_move_with_releasing_copy_left_behind():
    s = session_from_yaml(SNAP)
    n1, n2 = s.nodes.index["n1"], s.nodes.index["n2"]
    st = Statement(s)
    st.evict(tid(s, "run-0"), "consolidation")
    st.pipeline(tid(s, "run-0"), n2, indices=[1, 2])
    i = tid(s, "run-0")
    assert s.status[i] == "pipelined" and s.node[i] == n2
    assert s.nodes.rel[n1, GPU] == 2          # the old pod is still releasing its GPUs on n1
    assert s.nodes.rel[n2, GPU] == -2         # KAI: pipelined consumes releasing (may go negative)
    assert s.evictions[0].moved_to == "n2"
    st.discard()
    assert s.status[i] == "running" and s.node[i] == n1 and s.nodes.rel[n1, GPU] == 0 and s.nodes.rel[n2, GPU] == 0


def test_evicted_again_and_placed_on_the_node_it_was_moved_from_is_unevicted_where_it_was():
    # KAI Statement.Pipeline looks the pod up in the target node's pods; the node a committed move left holds
    # its releasing copy, so the pod is un-evicted (Statement.Unevict: back where it was evicted), not moved.
    s = session_from_yaml(SNAP)
    n1, n2 = s.nodes.index["n1"], s.nodes.index["n2"]
    i = tid(s, "run-0")
    first = Statement(s)
    first.evict(i, "consolidation")
    first.pipeline(i, n2, indices=[1, 2])
    first.commit()
    rel_n1, rel_n2 = s.nodes.rel[n1, GPU], s.nodes.rel[n2, GPU]
    second = Statement(s)
    second.evict(i, "reclaim")
    assert s.status[i] == "releasing" and s.node[i] == n2
    second.pipeline(i, n1, indices=[2, 3], update_if_on_node=False)
    assert s.status[i] == "pipelined" and s.node[i] == n2      # restored where the second eviction found it
    assert [e.action for e in s.evictions] == ["consolidation"]  # the reclaim eviction is undone
    assert s.nodes.rel[n1, GPU] == rel_n1 and s.nodes.rel[n2, GPU] == rel_n2


def test_fraction_group_opens_and_closes_whole_gpu():
    s = session_from_yaml(SNAP)
    n2 = s.nodes.index["n2"]
    st = Statement(s)
    st.evict(tid(s, "frac-0"), "preempt")
    # the only fraction on g-a is releasing: the GPU counts as one releasing whole GPU
    assert s.nodes.rel[n2, GPU] == 1 and s.nodes.idle[n2, GPU] == 3
    st.discard()
    assert s.nodes.rel[n2, GPU] == 0 and s.nodes.idle[n2, GPU] == 3


def test_evict_of_pending_task_is_an_error():
    s = session_from_yaml(SNAP)
    with pytest.raises(EngineError, match=r"tasks\[new-0\].status: cannot evict a pending task"):
        Statement(s).evict(tid(s, "new-0"), "preempt")


def test_convert_all_allocated_to_pipelined_only_touches_this_statement():
    s = session_from_yaml(SNAP)
    n1 = s.nodes.index["n1"]
    st = Statement(s)
    st.allocate(tid(s, "new-0"), n1, indices=[2])
    st.convert_all_allocated_to_pipelined(s.task_job[tid(s, "new-0")])
    assert s.status[tid(s, "new-0")] == "pipelined"
    assert s.nodes.idle[n1, GPU] == 2 and s.nodes.rel[n1, GPU] == -1


def test_input_pipelined_task_is_pending_with_nominated_node():
    text = SNAP.replace("tasks: [{name: new-0, gpu: 1, cpu_millis: 1000}]",
                        "tasks: [{name: new-0, gpu: 1, cpu_millis: 1000, status: pipelined, node: n2}]")
    s = session_from_yaml(text)
    i = tid(s, "new-0")
    assert s.status[i] == "pending" and s.nominated[i] == s.nodes.index["n2"]
    # the nominated node wins the node order although binpack prefers the fuller n1
    assert s.best_node(i) == s.nodes.index["n2"]


def test_ordered_nodes_and_fit_error():
    s = session_from_yaml(SNAP)
    i = tid(s, "new-0")
    assert [s.nodes.names[n] for n in s.ordered_nodes(i)] == ["n1", "n2"]  # binpack: n1 has 2 free, n2 3
    s.gpu[i] = 4.0
    msg, details = s.fit_error(i)
    assert msg == "0/2 nodes fit: 2 insufficient GPU (need 4, max free 3)"
    assert details["first_failure_counts"] == {"GPU": 2}


@pytest.mark.parametrize("gpu_strategy,cpu_strategy", [("binpack", "binpack"), ("spread", "spread")])
def test_incremental_node_choice_equals_full_kai_scoring(gpu_strategy, cpu_strategy):
    """best_node(i) (cached, updated one changed node at a time) must pick exactly the node that the full
    Σ-of-plugin-scores order picks, along a random sequence of placements and evictions."""
    rng = np.random.default_rng(3)
    nodes = "\n".join(
        f"  - {{name: n{k:02d}, gpus: {int(rng.integers(0, 9))}, gpu_memory_mib: 40000, "
        f"cpu_millis: {int(rng.integers(4, 64)) * 1000}, memory_bytes: 256Gi}}" for k in range(24))
    shapes = [("gpu: 1", 1000), ("gpu: 2", 4000), ("gpu: 0.5", 500), ("cpu_millis: 3000", 0), ("gpu: 0.25, gpu_devices: 2", 100)]
    jobs = []
    for k in range(60):
        shape, cpu = shapes[k % len(shapes)]
        extra = f", cpu_millis: {cpu}" if "cpu_millis" not in shape else ""
        jobs.append(f"  - {{name: j{k:02d}, queue: team, tasks: [{{name: t{k:02d}, {shape}{extra}}}]}}")
    text = (f"config: {{placement: {{gpu: {gpu_strategy}, cpu: {cpu_strategy}}}}}\nnodes:\n{nodes}\n"
            "queues: [{name: team, cpu: {quota: -1}, memory: {quota: -1}}]\njobs:\n" + "\n".join(jobs))
    s = session_from_yaml(text)
    placed = []
    for k in range(60):
        i = tid(s, f"t{k:02d}")
        full = s.best_node(i, s.fit(i))
        assert s.best_node(i) == full, f"step {k}"
        if full >= 0:
            st = Statement(s)
            assert s.place(st, i, full)
            st.commit()
            placed.append(i)
        if k % 7 == 6 and placed:  # free something now and then (evict, then drop the eviction)
            st = Statement(s)
            victim = placed.pop(0)
            st.evict(victim, "test")
            st.commit()


def test_evicting_a_task_pipelined_onto_a_releasing_device_then_discarding_restores_the_slot():
    """A task pipelined (committed) onto a whole GPU that a releasing pod still holds shares the slot in time; a
    later scenario that evicts it and is discarded leaves the slot as it was: pipelined, the releasing pod still
    its owner (found on the 64-node what-if cluster, cycle 2 of the queue-priority slider)."""
    s = session_from_yaml(SNAP + "  - name: old\n    queue: team\n    tasks: [{name: old-0, gpu: 1, status: "
                          "releasing, node: n2, gpu_index: 3}]\n")
    n2 = s.nodes.index["n2"]
    new, old = tid(s, "new-0"), tid(s, "old-0")
    st = Statement(s)
    st.pipeline(new, n2, indices=[3])
    st.commit()
    assert s.nodes.slot_whole[n2, 3] == SLOT_PIPELINED and s.nodes.slot_owner[n2, 3] == old
    before = {k: getattr(s.nodes, k).copy() for k in ("idle", "rel", "slot_whole", "slot_owner")}
    st = Statement(s)
    st.evict(new, "reclaim")
    assert s.nodes.slot_whole[n2, 3] == SLOT_RELEASING   # two releasing pods on the device
    st.discard()
    assert s.status[new] == "pipelined"
    for k, v in before.items():
        np.testing.assert_array_equal(getattr(s.nodes, k), v, err_msg=k)


def test_job_table_answers_for_every_job_whether_built_or_not():
    """session.jobs builds JobInfo objects lazily; its mapping methods must still see every job of the
    snapshot (a dict view of the built ones alone would silently miss the rest)."""
    s = session_from_yaml(SNAP)
    jobs = s.jobs
    assert jobs.built() <= 1
    assert 2 in jobs and np.int64(2) in jobs and 3 not in jobs and -1 not in jobs and "run" not in jobs
    assert jobs.get(2).key == "new" and jobs.get(7) is None
    assert [info.key for info in jobs.values()] == ["run", "frac", "new"]
    assert [(j, info.key) for j, info in jobs.items()] == [(0, "run"), (1, "frac"), (2, "new")]
    assert list(jobs.keys()) == [0, 1, 2] and len(jobs) == 3
    assert [info.index for info in jobs] == [0, 1, 2] and jobs.built() == 3
