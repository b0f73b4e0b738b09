"""The solver's packing pre-check (scheduler/actions/packing.py): hand-computed cases, and on random clusters
the proof obligation itself — every scenario it rules out fails when simulated, and the decisions are the
same with and without it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.actions.solver as solver_mod
from scheduler.actions.packing import may_place, scenario_capacity, task_classes
from scheduler.engine import run_session
from scheduler.fairshare import compute_fair_share
from scheduler.model import Job, Node, Queue, QueueResource, SchedulerConfig, Snapshot, Task
from scheduler.session import Session
from scheduler.session.nodes import GPU
from scheduler.snapshot_io import loads_snapshot
from strategies import snapshots

CLUSTER = """
nodes:
- {name: a, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 100000, memory_bytes: 1000Gi}
- {name: b, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 100000, memory_bytes: 2000Gi}
- {name: c, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 100000, memory_bytes: 1000Gi}
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
- {name: ra, queue: q, tasks: [{name: ra-0, gpu: 4, cpu_millis: 1000, status: running, node: a, gpu_index: 0}]}
- {name: rb, queue: q, tasks: [{name: rb-0, gpu: 4, cpu_millis: 1000, memory_bytes: 1500Gi, status: running,
                               node: b, gpu_index: 0}]}
- {name: rc, queue: q, tasks: [{name: rc-0, gpu: 2, cpu_millis: 1000, status: running, node: c, gpu_index: 0}]}
- {name: big, queue: q, tasks: [{name: big-0, gpu: 8, cpu_millis: 1000}]}
- {name: two, queue: q, min_available: 2, tasks: [{name: two-0, gpu: 8, cpu_millis: 1000},
                                                {name: two-1, gpu: 8, cpu_millis: 1000}]}
"""


@pytest.fixture()
def session():
    snap = loads_snapshot(CLUSTER)
    return Session(snap, compute_fair_share(snap))


def _t(s, name):
    return s.task_index[name]


def test_capacity_adds_the_victims_resources_to_idle_plus_releasing(session):
    s = session
    cap = scenario_capacity(s, [_t(s, "ra-0")])
    a = s.nodes.index["a"]
    # node a: 8 GPUs − 4 used + 4 of the victim = 8; CPU 100 cores − 1 + 1 = 100
    assert cap[a, 0] == 8 and cap[a, 1] == 100000
    assert cap[s.nodes.index["b"], 0] == 4  # untouched node: idle only


def test_a_whole_node_task_needs_one_node_freed_whole(session):
    s = session
    big = task_classes(s, [_t(s, "big-0")])
    # Free GPUs are 4 + 4 + 2 = 10 ≥ 8, but no single node has 8: without victims nothing fits.
    assert not may_place(s, big, scenario_capacity(s, []))
    assert may_place(s, big, scenario_capacity(s, [_t(s, "ra-0")]))


def test_a_moved_victim_needs_room_too(session):
    s = session
    # Evicting ra frees node a (8 GPUs) for big, but ra (4 GPUs) must go somewhere: b has 4 free → fits.
    both = task_classes(s, [_t(s, "big-0"), _t(s, "ra-0")])
    assert may_place(s, both, scenario_capacity(s, [_t(s, "ra-0")]))
    # Evicting rb instead frees b (8 GPUs): big needs 8 GPUs, rb 1500 GiB (a and c have 1000 GiB), so both
    # can only go to b, and 8 + 4 GPUs exceed its 8: no placement.
    both_b = task_classes(s, [_t(s, "big-0"), _t(s, "rb-0")])
    assert not may_place(s, both_b, scenario_capacity(s, [_t(s, "rb-0")]))


def test_two_whole_node_tasks_need_two_whole_nodes(session):
    s = session
    two = task_classes(s, [_t(s, "two-0"), _t(s, "two-1")])
    # Victims ra and rb free a and b: 16 GPUs in two nodes of 8 → both fit (the victims are not counted).
    assert may_place(s, two, scenario_capacity(s, [_t(s, "ra-0"), _t(s, "rb-0")]))
    # With ra, rc: 8 (a) + 4 (b) + 4 (c) = 16 GPUs, but only one node of 8.
    assert not may_place(s, two, scenario_capacity(s, [_t(s, "ra-0"), _t(s, "rc-0")]))


def test_power_of_two_units_count_mixed_sizes(session):
    s = session
    # big (8) + ra (4) + rc (2) after evicting ra and rc: a has 8, b 4, c 4 free → big on a, ra and rc on b, c.
    classes = task_classes(s, [_t(s, "big-0"), _t(s, "ra-0"), _t(s, "rc-0")])
    assert may_place(s, classes, scenario_capacity(s, [_t(s, "ra-0"), _t(s, "rc-0")]))
    # One more 4-GPU task (ra counted twice): 8 + 4 + 4 + 2 = 18 GPUs > 16 free (in units of 2 GPUs: 9 > 8).
    classes = task_classes(s, [_t(s, "big-0"), _t(s, "ra-0"), _t(s, "ra-0"), _t(s, "rc-0")])
    assert not may_place(s, classes, scenario_capacity(s, [_t(s, "ra-0"), _t(s, "rc-0")]))


# ---------------------------------------------------------------------------------------------- random clusters

def _simulate_every_pruned_scenario(monkeypatch):
    """Patch the solver so that every scenario the pre-check rules out is simulated anyway, and every
    preemptor whose whole search it rules out is searched anyway; return the list that collects the ones
    that succeeded (must stay empty)."""
    wrong = []
    may_succeed, may_ever_succeed, solve = (solver_mod.Solver._may_succeed, solver_mod.Solver._may_ever_succeed,
                                            solver_mod.Solver.solve)

    def checked(self, own, sc):
        ok = may_succeed(self, own, sc)
        if not ok:
            solution = self._simulate(sc, self.probe_nodes, self.probe_request)
            if solution is not None:
                wrong.append((self.action, self.s.jobs[self._j].key, [b.job for b in solution.batches]))
                solution.statement.discard()
        return ok

    def searched_anyway(self, own, victims):
        self._ruled_out_here = not may_ever_succeed(self, own, victims)
        return True

    def checked_solve(self, j, *args, **kwargs):
        self._ruled_out_here = False
        solution = solve(self, j, *args, **kwargs)
        if self._ruled_out_here and solution is not None:
            wrong.append((self.action, self.s.jobs[j].key, "whole search"))
        return solution

    monkeypatch.setattr(solver_mod.Solver, "_may_succeed", checked)
    monkeypatch.setattr(solver_mod.Solver, "_may_ever_succeed", searched_anyway)
    monkeypatch.setattr(solver_mod.Solver, "solve", checked_solve)
    return wrong


def _contract(result):
    out = result.to_contract()
    out.pop("timings_ms")
    return out


@st.composite
def crowded_clusters(draw):
    """Fragmented clusters where eviction actions have work: nodes of 2-8 GPUs with little CPU or memory to
    spare, running preemptible jobs of 1-4 GPUs or fractions (some gangs), pending gangs of 1-8 GPUs per task,
    two queues (one over its quota) so that reclaim, preempt and consolidation all search."""
    nodes, jobs, k = [], [], 0
    for n in range(draw(st.integers(2, 5))):
        gpus = draw(st.sampled_from([2, 4, 8]))
        cpu, mem = draw(st.sampled_from([8000, 16000, 32000])), draw(st.sampled_from([64, 128, 256])) * 2**30
        nodes.append(Node(name=f"n{n}", gpus=gpus, gpu_memory_mib=40960, cpu_millis=cpu, memory_bytes=mem))
        free_gpu, free_cpu, free_mem, slot = gpus, cpu, mem, 0
        while free_gpu > 0 and draw(st.integers(0, 4)) > 0:
            frac = draw(st.booleans()) and draw(st.booleans())
            size = 0.5 if frac else draw(st.integers(1, min(4, free_gpu)))
            t_cpu = draw(st.sampled_from([1000, 4000, 8000]))
            t_mem = draw(st.sampled_from([8, 32, 64])) * 2**30
            if t_cpu > free_cpu or t_mem > free_mem:
                break
            width = draw(st.integers(1, 2)) if not frac and size * 2 <= free_gpu else 1
            tasks = []
            for w in range(width):
                if t_cpu > free_cpu or t_mem > free_mem:
                    break
                idx = list(range(slot, slot + (1 if frac else int(size))))
                tasks.append(Task(name=f"r{k}-{w}", gpu=size, cpu_millis=t_cpu, memory_bytes=t_mem, status="running",
                                  node=f"n{n}", gpu_indices=idx, gpu_groups=[f"n{n}-g{slot}"] if frac else []))
                slot += len(idx)
                free_gpu -= 1 if frac else size
                free_cpu -= t_cpu
                free_mem -= t_mem
            jobs.append(Job(name=f"r{k}", queue=draw(st.sampled_from(["qa", "qb"])), creation_time=k,
                            priority=draw(st.sampled_from([40, 50, 50, 125])), min_available=len(tasks), tasks=tasks))
            k += 1
    for p in range(draw(st.integers(1, 3))):
        width = draw(st.integers(1, 3))
        size = draw(st.sampled_from([1, 2, 4, 8]))
        t_cpu = draw(st.sampled_from([1000, 4000, 8000]))
        jobs.append(Job(name=f"p{p}", queue=draw(st.sampled_from(["qa", "qb"])), creation_time=100 + p,
                        priority=draw(st.sampled_from([50, 60, 125])), min_available=width,
                        tasks=[Task(name=f"p{p}-{w}", gpu=size, cpu_millis=t_cpu, memory_bytes=8 * 2**30)
                               for w in range(width)]))
    total = sum(nd.gpus for nd in nodes)
    queues = [Queue(name="qa", gpu=QueueResource(quota=total * 0.2), cpu=QueueResource(quota=-1),
                    memory=QueueResource(quota=-1)),
              Queue(name="qb", gpu=QueueResource(quota=total * 0.8), cpu=QueueResource(quota=-1),
                    memory=QueueResource(quota=-1))]
    config = SchedulerConfig(max_consolidation_preemptees=draw(st.sampled_from([-1, -1, 2])))
    return Snapshot(nodes=nodes, queues=queues, jobs=jobs, config=config)


@settings(max_examples=150, deadline=None)
@given(st.one_of(crowded_clusters(), snapshots()))
def test_pruned_scenarios_would_fail_and_decisions_do_not_change(snap):
    with pytest.MonkeyPatch.context() as mp:
        wrong = _simulate_every_pruned_scenario(mp)
        with_check = _contract(run_session(snap))
    assert wrong == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solver_mod, "may_place", lambda *a: True)
        without = _contract(run_session(snap))
    assert with_check == without


def test_the_synthetic_cluster_decides_the_same_without_the_check():
    from scheduler.sources.synthetic import generate_scenario

    snap = generate_scenario(seed=7, nodes=16).snapshot
    with pytest.MonkeyPatch.context() as mp:
        wrong = _simulate_every_pruned_scenario(mp)
        with_check = _contract(run_session(snap))
    assert wrong == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solver_mod, "may_place", lambda *a: True)
        assert _contract(run_session(snap)) == with_check


def test_capacity_counts_a_shared_gpu_a_fractional_victim_may_free():
    snap = loads_snapshot("""
nodes: [{name: n, gpus: 1, gpu_memory_mib: 40960, cpu_millis: 8000, memory_bytes: 64Gi}]
queues: [{name: q}]
jobs:
- {name: f, queue: q, tasks: [{name: f-0, gpu: 0.5, status: running, node: n, gpu_index: 0, gpu_group: g}]}
""")
    s = Session(snap, compute_fair_share(snap))
    assert scenario_capacity(s, [])[0, 0] == 0
    assert scenario_capacity(s, [s.task_index["f-0"]])[0, 0] == 1
    assert np.isfinite(scenario_capacity(s, []).sum())


def test_a_node_drifted_below_zero_does_not_rule_out_victims_left_on_it(session):
    """KAI's discard drift can leave a node's idle + releasing GPU count below zero (docs/actions.md: the
    shared-GPU accounting of an undone un-evict; seed 4198 reaches −8 on one node, KAI's own log −6). A
    scenario that never touches that node still works, so the every-candidate pre-check
    (``Solver._may_ever_succeed``: all candidates evicted, all placed again for consolidation) must not fail
    because a victim the scenario leaves alone cannot go back onto its drifted node."""
    s = session
    c = s.nodes.index["c"]
    s.nodes.rel_rows[c][GPU] = -3.0   # rc-0 holds 2 of c's 4 GPUs: idle 2 + releasing −3 = −1
    s.nodes.derive(c)
    assert s.nodes.free[c, GPU] == -1
    big, ra, rc = _t(s, "big-0"), _t(s, "ra-0"), _t(s, "rc-0")
    # the scenario {ra-0}: big-0 takes node a, ra-0 moves to b; rc-0 stays where it is
    assert may_place(s, task_classes(s, [big, ra]), scenario_capacity(s, [ra]))
    # every candidate evicted (ra-0 and rc-0): rc-0 may go back onto c, as leaving it there would
    assert may_place(s, task_classes(s, [big, ra, rc]), scenario_capacity(s, [ra, rc]))
    assert scenario_capacity(s, [])[c, GPU] == 0
