"""Speed-ups of the eviction search that must not change a decision: the preemptor-alone pre-check of a scenario
(scheduler/actions/solver.py ``Solver._fits_alone``) and its watch while other jobs are placed first
(``_AloneWatch``), and the queue-order key memo (scheduler/ordering.py)."""

import json
import re
from collections import Counter

import numpy as np
import pytest

from bench.kai_diff import DEFAULT_ACTIONS, write_zip
from bench.kai_diff_gen import generate_document
from bench.whatif_latency import SLIDERS, cluster_64
from scheduler.actions import solver as solver_mod
from scheduler.decisions import eviction_notes
from scheduler.engine import run_session
from scheduler.ordering import queue_key
from scheduler.sources.kai_snapshot import import_kai_snapshot

from tests._engine_helpers import session_from_yaml

NOW = 1_780_000_000.0


def _decisions(snap) -> str:
    result = run_session(snap)
    contract = result.to_contract()
    contract.pop("timings_ms", None)
    contract.pop("meta", None)
    return json.dumps({"contract": contract, "notes": eviction_notes(result)}, sort_keys=True, default=str)


def _same_decisions(case, slow: str, fast: str) -> None:
    """The full simulation's decisions and explanations equal the fast path's. On the what-if cluster the
    explanations' scenario counts may differ: discarding a scenario the fast path never simulates (pend-77's
    failing MultiNodeGang scenario under reclaim) moves a shared GPU's idle count on h100-40 (KAI's
    history-dependent shared-GPU accounting, which its own Discard shares: docs/engine.md, *What-if states
    against KAI*), so a later failed search (pend-56) tries a few scenarios more or less."""
    if case == "whatif-quota":
        slow, fast = (re.sub(r"\(\d+ scenarios tried", "(N scenarios tried", x) for x in (slow, fast))
    assert slow == fast


def _spy(monkeypatch, owner, name: str, record) -> list:
    """Wrap ``owner.name`` so that every call appends ``record(its result)`` to the returned list."""
    seen: list = []
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(record(result))
        return result

    monkeypatch.setattr(owner, name, spy)
    return seen


@pytest.mark.parametrize("case", [3, 21, 55, "whatif-quota"])
def test_preemptor_alone_precheck_keeps_every_decision(case, tmp_path, monkeypatch):
    """Clusters under KAI's default actions whose searches reject scenarios by the pre-check (random clusters
    with no preferred pod-affinity term, where the fast path applies, and the 64-node what-if cluster): the same
    decisions (allocations, evictions, explanations) as simulating every scenario in full. On the what-if
    cluster a pre-check that rejected every scenario would change them."""
    snap = _watch_cluster(case, tmp_path)

    rejected = _spy(monkeypatch, solver_mod.Solver, "_fits_alone", lambda ok: not ok)
    fast = _decisions(snap)
    assert any(rejected), "the pre-check never rejected a scenario on this cluster: the test compares nothing"

    monkeypatch.setattr(solver_mod.Solver, "_alone_decides", lambda self, pending: False)
    _same_decisions(case, _decisions(snap), fast)


QUEUES = """
nodes:
  - {name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 4}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 6}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: r, queue: a, tasks: [{name: r-0, gpu: 1, status: running, node: n1}]}
"""


def test_queue_key_memo_follows_the_queues_allocated():
    """The memoised key is recomputed when the queue's Allocated changes, and equals a fresh computation."""
    s = session_from_yaml(QUEUES)
    qs = s.queues
    a = qs.names.index("a")
    job = np.array([2.0, 1000.0, 2**30])
    before = queue_key(s, a, job)
    assert queue_key(s, a, job) is before                   # memo hit
    qs.add(a, np.array([2.0, 0.0, 0.0]), False)               # 3 GPUs: with the job, over its quota of 4
    after = queue_key(s, a, job)
    assert after != before and after[1] and not before[1]
    qs._order_memo.clear()
    assert queue_key(s, a, job) == after
    assert queue_key(s, a, [2.0, 1000.0, 2**30]) == after     # a list request reads the same key


def _watch_cluster(case, tmp_path):
    if case == "whatif-quota":   # the 64-node what-if demo with its queue quota slider moved: one session
        return SLIDERS["queue quota"].apply(cluster_64())
    path = tmp_path / f"seed-{case}.zip"
    write_zip(generate_document(case, NOW, DEFAULT_ACTIONS), path)
    return import_kai_snapshot(str(path)).snapshot


@pytest.mark.parametrize("case", [154, "whatif-quota"])
def test_preemptor_watch_keeps_every_decision(case, tmp_path, monkeypatch):
    """Following the preemptor's fit while victims are placed before it (``solver._AloneWatch``) ends some
    scenarios early on these clusters, with the same decisions as placing every job up to the preemptor's turn
    (on the what-if cluster, a watch that ended every scenario it follows would change them)."""
    snap = _watch_cluster(case, tmp_path)

    ended = _spy(monkeypatch, solver_mod._AloneWatch, "still_fits", lambda ok: not ok)
    fast = _decisions(snap)
    assert any(ended), "the watch never ended a scenario on this cluster: the test compares nothing"

    monkeypatch.setattr(solver_mod.Solver, "watch_alone", False)
    ended.clear()
    _same_decisions(case, _decisions(snap), fast)
    assert not ended


def _session_after_actions(snap):
    from scheduler.actions import get_action
    from scheduler.fairshare import compute_fair_share
    from scheduler.session import Session

    s = Session(snap, compute_fair_share(snap))
    for name in snap.config.actions:
        action = get_action(name)
        if action is not None:
            action(s)
    return s


def _session_state(s) -> dict:
    ns, qs = s.nodes, s.queues
    arrays = {name: getattr(ns, name).tobytes() for name in
              ("used", "idle", "rel", "free", "freeT", "idleT", "sh_used", "sh_alloc", "sh_rel", "sh_present",
               "sh_marked", "slot_whole", "slot_owner", "mig_idle", "mig_rel")}
    arrays.update(allocated=qs.allocated.tobytes(), allocated_np=qs.allocated_np.tobytes())
    return {"arrays": arrays, "versions": (ns.version, list(ns.change_log), list(qs.version), list(s.job_version)),
            "tasks": (list(s.status), list(s.node), [list(g) for g in s.groups], [list(x) for x in s.indices],
                      list(s.accepted), dict(s.shadow), dict(s.evict_prior)),
            "groups": ([dict(d) for d in ns.slot_group], [dict(d) for d in ns.group_slot]),
            "predicates": [list(r) for r in s.predicates.records] if s.predicates.tracking else None,
            "evictions": [(e.task, e.action, e.preemptor, e.moved_to) for e in s.evictions]}


@pytest.mark.parametrize("case", [6, 23, 44, "whatif-quota"])
def test_simple_task_transitions_keep_the_session_state(case, tmp_path, monkeypatch):
    """``Session._apply_simple`` (whole-GPU and CPU-only tasks without moves) and ``Session._restatus`` (an eviction
    where the task is, an un-eviction, and their undoing by a rollback) leave every node, queue and task array bit for
    bit as the general transition does, after KAI's default actions with their evictions, simulations and
    rollbacks."""
    snap = _watch_cluster(case, tmp_path)
    from scheduler.session import core

    calls = _spy(monkeypatch, core.Session, "_apply_simple", lambda _: True)
    restatus = _spy(monkeypatch, core.Session, "_restatus", lambda _: True)
    fast = _session_state(_session_after_actions(snap))
    assert len(calls) > 100 and len(restatus) > 100 and fast["evictions"]
    monkeypatch.setattr(core.Session, "_simple_apply", False)
    calls.clear()
    restatus.clear()
    assert _session_state(_session_after_actions(snap)) == fast
    assert not calls and not restatus


class _NeverHit(dict):
    """A memo that never answers: every lookup computes afresh (the slow path)."""

    def get(self, key, default=None):
        return default


class _Checked(dict):
    """A per-job memo ``{j: (job_version, value)}`` that checks every hit against a fresh computation."""

    def __init__(self, session, attr, fresh):
        super().__init__()
        self.session, self.attr, self.fresh, self.hits = session, attr, fresh, 0

    def get(self, key, default=None):
        hit = super().get(key, default)
        if hit is not None and hit[0] == self.session.job_version[key]:
            setattr(self.session, self.attr, {})
            try:
                assert hit[1] == self.fresh(self.session, key), (self.attr, key)
            finally:
                setattr(self.session, self.attr, self)
            self.hits += 1
        return hit


@pytest.mark.parametrize("case", [6, 44, "whatif-quota"])
def test_session_memos_answer_as_a_fresh_computation(case, tmp_path, monkeypatch):
    """The per-job memos of the job order key and of a simulation's chunk (valid while the job's tasks keep their
    states), the per-task queue amounts and request-shape keys: every memo hit equals the value computed
    afresh, and with every memo off the decisions are the same."""
    from scheduler.actions.simulation import sim_tasks_to_allocate
    from scheduler.ordering import job_order_key
    from scheduler.session import core

    snap = _watch_cluster(case, tmp_path)
    memos = []
    init = core.Session.__init__

    def checked_init(self, *a, **k):
        init(self, *a, **k)
        self.job_order_memo = _Checked(self, "job_order_memo", job_order_key)
        self.sim_tasks_memo = _Checked(self, "sim_tasks_memo", sim_tasks_to_allocate)
        memos.extend([self.job_order_memo, self.sim_tasks_memo])
        amount = core.Session.queue_amount

        def checked_amount(i):
            got = amount(self, i)
            assert got.tobytes() == np.array([self.accepted[i], float(self.cpu[i]), float(self.mem[i])]).tobytes()
            return got
        self.queue_amount = checked_amount

    monkeypatch.setattr(core.Session, "__init__", checked_init)
    fast = _decisions(snap)
    assert all(m.hits > 10 for m in memos)

    def uncached_init(self, *a, **k):
        init(self, *a, **k)
        self.job_order_memo, self.sim_tasks_memo = _NeverHit(), _NeverHit()
        self._amount_cache, self._shape_keys = _NeverHit(), _NeverHit()

    monkeypatch.setattr(core.Session, "__init__", uncached_init)
    assert _decisions(snap) == fast


@pytest.mark.parametrize("case", [6, "whatif-quota"])
def test_moves_in_the_simple_transition_keep_the_session_state(case, tmp_path, monkeypatch):
    """A whole-GPU or CPU-only task moved by a simulation (its releasing placement kept as its copy) and the move
    rolled back take ``Session._apply_simple``: every node, queue and task array ends bit for bit as through the
    general transition."""
    snap = _watch_cluster(case, tmp_path)
    from scheduler.session import core

    kinds: list = []
    real = core.Session._apply_simple

    def spy(self, i, new, keep_old=False, reuse_new=False):
        kinds.append((keep_old, reuse_new))
        return real(self, i, new, keep_old, reuse_new)

    monkeypatch.setattr(core.Session, "_apply_simple", spy)
    moves = _spy(monkeypatch, core.Session, "_apply_move", lambda _: True)   # a move and its undo, flagged in the op
    fast = _session_state(_session_after_actions(snap))
    assert (True, False) in kinds and (False, True) in kinds, "no move took the simple path: nothing compared"
    assert moves
    monkeypatch.setattr(core.Session, "_move_apply", False)
    kinds.clear()
    moves.clear()
    assert _session_state(_session_after_actions(snap)) == fast
    assert (True, False) not in kinds and (False, True) not in kinds and not moves


def test_scenarios_answered_from_another_preemptors_record_fail_when_simulated(monkeypatch):
    """On the 64-node what-if cluster with its queue quota slider moved, two 4-GPU preemptors of one queue tree
    (pend-77, pend-56) try the same victim sets: the second one's scenarios that failed for the first before its
    turn (``Solver._lost_key``) are not simulated. Each such scenario, simulated in full, fails too; and with the
    records off every decision is the same."""
    snap = _watch_cluster("whatif-quota", None)
    real = solver_mod.Solver._simulate
    answered: list = []

    def checked(self, sc, feasible, request):
        before = self.lost_hits
        result = real(self, sc, feasible, request)
        if self.lost_hits > before:
            assert result is None
            self.remember_lost = False
            try:
                full = real(self, sc, feasible, request)
            finally:
                del self.remember_lost
            answered.append(full is None)
            if full is not None:
                full.statement.discard()
        return result

    monkeypatch.setattr(solver_mod.Solver, "_simulate", checked)
    run_session(snap)
    assert len(answered) > 20 and all(answered)

    monkeypatch.setattr(solver_mod.Solver, "_simulate", real)
    fast = _decisions(snap)
    monkeypatch.setattr(solver_mod.Solver, "remember_lost", False)
    hits = _spy(monkeypatch, solver_mod.Solver, "_lost_key", lambda key: key is not None)
    assert _decisions(snap) == fast
    assert not any(hits)


def _answered_and_simulated(monkeypatch, snap) -> tuple[Counter, Counter]:
    """Per preemptor (job name), its scenarios answered from a record and those simulated, in one session of
    ``snap``; every answered scenario is simulated in full as well, and must fail."""
    simulated, answered = Counter(), Counter()
    real = solver_mod.Solver._simulate

    def counting(self, sc, feasible, request):
        before = self.lost_hits
        result = real(self, sc, feasible, request)
        name = self.s.jobs[self._j].job.name
        if self.lost_hits > before:
            assert result is None
            answered[name] += 1
            self.remember_lost = False
            try:
                full = real(self, sc, feasible, request)
            finally:
                del self.remember_lost
            assert full is None, f"{name}: a scenario answered as failed succeeds when simulated"
        else:
            simulated[name] += 1
        return result

    monkeypatch.setattr(solver_mod.Solver, "_simulate", counting)
    run_session(snap)
    monkeypatch.setattr(solver_mod.Solver, "_simulate", real)
    return answered, simulated


def _with_cpu(snap, job: str, delta: int):
    import dataclasses

    for j in snap.jobs:
        if j.name == job:
            j.tasks[0] = dataclasses.replace(j.tasks[0], cpu_millis=j.tasks[0].cpu_millis + delta)
    return snap


@pytest.mark.parametrize("cpu_delta", [-1000, 0, 1000])
def test_a_record_answers_only_preemptors_that_fit_where_it_fits(cpu_delta, monkeypatch):
    """The what-if quota cluster with pend-56 asking ``cpu_delta`` millicores more than pend-77 (same GPUs and
    memory, same node constraints). With less CPU it may fit a node pend-77 does not: none of its scenarios is
    answered from pend-77's records. With the same or more CPU it fits only where pend-77 fits
    (``_LostPreemptor.dominated_by``): its scenarios are answered, and each fails when simulated in full. Either
    way the decisions equal those with the records off."""
    snap = _with_cpu(_watch_cluster("whatif-quota", None), "pend-56", cpu_delta)
    answered, simulated = _answered_and_simulated(monkeypatch, snap)
    assert simulated["pend-56"] > 20
    if cpu_delta < 0:
        assert not answered["pend-56"]
    else:
        assert answered["pend-56"] > 20
    fast = _decisions(snap)
    monkeypatch.setattr(solver_mod.Solver, "remember_lost", False)
    assert _decisions(snap) == fast


def _priority_last_cycle():
    """The input of the last cycle of the 64-node what-if demo with its queue priority slider moved."""
    from scheduler.whatif import run_to_steady_state

    inputs: list = []
    run_to_steady_state(SLIDERS["queue priority"].apply(cluster_64()), 10, on_session=lambda snap, _: inputs.append(snap))
    return inputs[-1]


def test_a_record_answers_a_gang_probe_behind_the_recorded_preemptor(monkeypatch):
    """In the last cycle of the queue priority slider, pend-52 (a gang of two 8-GPU tasks in ``llm``) probes its
    first task alone: a request its pending-job index entry (both tasks) does not hold. It sits behind pend-16
    (one 8-GPU task) in the same leaf queue, so pend-16's failed scenarios answer its k = 1 probe; each answered
    one fails when simulated in full, and the decisions equal those with the records off."""
    snap = _priority_last_cycle()
    answered, _ = _answered_and_simulated(monkeypatch, snap)
    assert answered["pend-52"] > 5
    fast = _decisions(snap)
    monkeypatch.setattr(solver_mod.Solver, "remember_lost", False)
    assert _decisions(snap) == fast


@pytest.mark.parametrize("case", [3, 55, "whatif-quota", "whatif-priority-last"])
def test_shared_victim_pops_keep_every_decision(case, tmp_path, monkeypatch):
    """Probes and searches read their victim queues through shared pops (``Solver._victims``, ``VictimTape``):
    each reader gets exactly the batches a queue of its own pops, and the decisions equal those with a queue per
    probe. On these clusters some reader replays pops another one took (else the test compares nothing)."""
    from scheduler.actions import victims as victims_mod

    snap = _priority_last_cycle() if case == "whatif-priority-last" else _watch_cluster(case, tmp_path)
    real_pop = victims_mod.TapedVictims.pop
    replayed: list = []
    own: dict = {}   # id(reader) -> (reader, a queue of its own popped beside the shared one)

    def checked_pop(self, recorded=frozenset()):
        mine = own.setdefault(id(self), (self, self._make()))[1]
        tape = self._tapes.get(recorded)
        before = -1 if tape is None else len(tape.batches)
        batch = real_pop(self, recorded)
        expected = mine.pop(recorded)
        assert (batch is None) == (expected is None)
        if batch is not None:
            assert (batch.job, batch.tasks, batch.elastic) == (expected.job, expected.tasks, expected.elastic)
            replayed.append(len(self._tape.batches) == before)
        return batch

    monkeypatch.setattr(victims_mod.TapedVictims, "pop", checked_pop)
    run_session(snap)
    assert any(replayed)
    monkeypatch.setattr(victims_mod.TapedVictims, "pop", real_pop)
    fast = _decisions(snap)
    monkeypatch.setattr(solver_mod.Solver, "share_victim_pops", False)
    assert _decisions(snap) == fast


def test_a_record_dominates_only_requests_that_fit_a_subset_of_its_nodes():
    """``_LostPreemptor.dominated_by``: at least the recorded GPUs, CPU and memory, the same kind, and static
    predicates passing a subset of the recorded preemptor's nodes (None: every node)."""
    lost = solver_mod._LostPreemptor
    some = np.array([True, True, False, True])
    fewer = np.array([True, False, False, True])
    other = np.array([False, False, True, True])
    rec = lost(0, 1, ("a",), True, 1, 4.0, 32000.0, 256.0, some)
    assert lost(1, 1, ("b",), True, 1, 4.0, 32000.0, 256.0, some).dominated_by(rec)
    assert lost(1, 1, ("b",), True, 1, 8.0, 64000.0, 512.0, fewer).dominated_by(rec)
    assert not lost(1, 1, ("b",), True, 1, 8.0, 64000.0, 512.0, other).dominated_by(rec)
    assert not lost(1, 1, ("b",), True, 1, 8.0, 64000.0, 512.0, None).dominated_by(rec)   # every node: more
    assert not lost(1, 1, ("b",), True, 1, 2.0, 64000.0, 512.0, fewer).dominated_by(rec)
    assert not lost(1, 1, ("b",), True, 1, 4.0, 32000.0, 255.0, fewer).dominated_by(rec)
    assert not lost(1, 1, ("b",), True, 0, 4.0, 32000.0, 256.0, fewer).dominated_by(rec)   # another kind
    anywhere = lost(0, 1, ("a",), True, 1, 4.0, 32000.0, 256.0, None)
    assert lost(1, 1, ("b",), True, 1, 4.0, 32000.0, 256.0, other).dominated_by(anywhere)
