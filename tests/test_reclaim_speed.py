"""The reclaim success path's shortcuts (docs/actions.md, *Performance*): each one against its slow path or a
fresh computation, and the decisions unchanged."""

import dataclasses
import json
import pickle

import numpy as np
import pytest

from bench.reclaim_scale import make_snapshot
from scheduler.actions import generators as gen_mod
from scheduler.actions import reclaim as reclaim_mod
from scheduler.actions import solver as solver_mod
from scheduler.actions.generators import greedy_fits
from scheduler.actions.victims import JobFacts, VictimQueue, _node_gpu_capacity
from scheduler.decisions import Deferred, Eviction, eviction_notes
from scheduler.engine import run_session
from scheduler.session.nodes import GPU, SLOT_ACTIVE, SLOT_FREE, SLOT_PIPELINED, SLOT_RELEASING

from tests._engine_helpers import session_from_yaml
from tests.test_eviction_search_speed import _decisions, _spy, _watch_cluster


# ---------------------------------------------------------------------------------------------- deferred text

def test_deferred_text_reads_as_the_text():
    e = Eviction(task="t", job="j", action="reclaim")
    assert e.message == ""
    e.message = Deferred(lambda a, b: f"{a} > {b}", 4, 2)
    assert e.message == "4 > 2" and e.message == "4 > 2"
    assert e == Eviction(task="t", job="j", action="reclaim", message="4 > 2")
    e.message = Deferred(str.upper, "abc")
    assert dataclasses.replace(e, preemptor="p").message == "ABC"
    assert pickle.loads(pickle.dumps(e)).message == "ABC"
    assert e.to_contract()["message"] == "ABC"


def test_reclaim_formats_its_messages_only_when_read(monkeypatch):
    """Reclaim hands the numbers of every eviction message and scenario reason to the eviction; the text is
    formatted when a view reads it, with the numbers frozen at the search (a later commit does not change it)."""
    messages = _spy(monkeypatch, reclaim_mod, "_message_text", lambda text: text)
    reasons = _spy(monkeypatch, reclaim_mod, "_reason_text", lambda text: text)
    result = run_session(make_snapshot(nodes=3))
    assert len(result.evicted) == 24
    assert not messages and not reasons
    first = result.evicted[0]
    assert first.message == ("reclaim for job pending-0 of queue pending (allocated 0 / fair share 24 GPUs, "
                             "requests 1); victim queue running allocated 24 > fair share 0 GPUs (deserved 0)")
    assert result.evicted[-1].message.startswith("reclaim for job pending-23 of queue pending (allocated 23 / ")
    assert first.scenario.reason == ("to reach its fair share of 24 GPUs in queue pending (allocated 0, "
                                     "requests 1)")
    contract = result.to_contract()
    assert len(messages) == 24 and len(reasons) == 24
    assert {e["message"] for e in contract["evictions"]} == {e.message for e in result.evicted}
    assert eviction_notes(result)["pending-0"].startswith("reclaim: evicts 1 pod of running-")


# ---------------------------------------------------------------------------------------------- victim leaf start

LEAF = """
nodes:
  - {name: n1, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 0, over_quota_weight: 0}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: b, gpu: {quota: 8}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: r1, queue: a, creation_time: 3, tasks: [{name: r1-0, gpu: 1, status: running, node: n1}]}
  - {name: r2, queue: a, creation_time: 2, tasks: [{name: r2-0, gpu: 1, status: running, node: n1}]}
  - {name: r3, queue: a, creation_time: 1, tasks: [{name: r3-0, gpu: 1, status: running, node: n1}]}
  - {name: p, queue: b, creation_time: 9, tasks: [{name: p-0, gpu: 1}]}
"""


def _first_victim(session, cands, j, req):
    batch = VictimQueue(session, cands.facts, cands.for_job(j, req)).pop()
    return None if batch is None else session.jobs[batch.job].job.name


def test_victim_leaf_starts_where_the_last_search_found_its_first_candidate():
    """A search starts the victim leaf at the first candidate an earlier search found (the jobs before it were
    no candidates then); a job that becomes a candidate again is found again."""
    s = session_from_yaml(LEAF)
    facts = JobFacts(s)
    cands = reclaim_mod._Candidates(s, facts)
    p = s.job_index["p"]
    req = np.array([1.0, 0.0, 0.0])
    assert _first_victim(s, cands, p, req) == "r1"            # youngest first
    r1, r2 = s.job_index["r1"], s.job_index["r2"]
    a, b = s.queues.index["a"], s.queues.index["b"]
    t1, t2 = s.task_index["r1-0"], s.task_index["r2-0"]
    s.status[t1] = s.status[t2] = "releasing"                  # r1 and r2 evicted: no candidates any more
    facts.refresh([r1, r2])
    assert _first_victim(s, cands, p, req) == "r3"
    start = cands._starts[(b, a)]
    assert start.pos == 2                                      # r1 and r2 are skipped from now on
    assert _first_victim(s, cands, p, req) == "r3" and cands._starts[(b, a)] is start
    s.status[t2] = "running"                                   # r2 holds a task again: a candidate again
    facts.refresh([r2])
    assert _first_victim(s, cands, p, req) == "r2"
    assert cands._starts[(b, a)] is not start


def test_victim_leaf_start_keeps_the_decisions(monkeypatch):
    """With every search walking its victim leaves from the start, the decisions are the same."""
    snap = make_snapshot(nodes=4)
    real = reclaim_mod._Candidates.for_job
    starts = []

    def recording(self, j, req):
        out = real(self, j, req)
        starts.extend(v[2] for v in out.values())
        return out

    monkeypatch.setattr(reclaim_mod._Candidates, "for_job", recording)
    fast = _decisions(snap)
    assert max(start.pos for start in starts) > 16   # later searches started past the victims evicted before

    def from_the_start(self, j, req):
        return {q: v[:2] for q, v in real(self, j, req).items()}

    monkeypatch.setattr(reclaim_mod._Candidates, "for_job", from_the_start)
    assert _decisions(snap) == fast


# ---------------------------------------------------------------------------------------------- capacities

@pytest.mark.parametrize("case", [6, 44, "reclaim-scale"])
def test_patched_gpu_capacity_equals_a_fresh_one(case, tmp_path, monkeypatch):
    """The raw GPU capacity the solver reads, patched for the nodes changed since the last one, equals the
    capacity computed over every node; the largest-capacity shortcuts of the accumulated-GPU filter answer as
    the full greedy check."""
    snap = make_snapshot(nodes=6) if case == "reclaim-scale" else _watch_cluster(case, tmp_path)
    real = solver_mod.raw_gpu_capacity
    checked = []

    def check(session):
        cap = real(session)
        assert np.array_equal(cap, _node_gpu_capacity(session.nodes, ready_only=False))
        checked.append(1)
        return cap

    monkeypatch.setattr(solver_mod, "raw_gpu_capacity", check)
    real_fits = gen_mod.greedy_fits
    fits = []

    def check_fits(req, cap, cap_max=None):
        ok = real_fits(req, cap, cap_max)
        assert ok == real_fits(req, cap)
        if cap_max is not None:
            assert cap_max == float(cap.max())
        fits.append(cap_max is not None)
        return ok

    monkeypatch.setattr(gen_mod, "greedy_fits", check_fits)
    fast = _decisions(snap)
    assert checked and any(fits)
    # the held scenario's filter (Solver._repeat_last_probe) with the capacities copied and scanned in full
    monkeypatch.setattr(solver_mod.Solver, "_raw_max", lambda self, raw: None)
    assert _decisions(snap) == fast


def test_greedy_fits_with_a_known_maximum():
    rng = np.random.default_rng(3)
    for _ in range(300):
        cap = rng.integers(0, 9, size=int(rng.integers(1, 6))).astype(float)
        req = sorted(rng.integers(0, 9, size=int(rng.integers(1, 3))).astype(float).tolist(), reverse=True)
        assert greedy_fits(req, cap, float(cap.max())) == greedy_fits(req, cap)


# ---------------------------------------------------------------------------------------------- node slots

def _free_whole_slots_reference(ns, n, k, pipelined):
    """The vectorised device choice the plain-Python one replaced."""
    exists = ns.slot_exists[n]
    no_group = ns.sh_used[n] == 0
    idle = np.nonzero(exists & (ns.slot_whole[n] == SLOT_FREE) & no_group)[0].tolist()
    if not pipelined:
        return idle[:k]
    taken = (ns.sh_used[n] - ns.sh_alloc[n]) > 1e-9
    releasing = np.nonzero(exists & (ns.slot_whole[n] == SLOT_RELEASING) & no_group)[0].tolist()
    releasing_shared = np.nonzero(exists & ns.sh_marked[n] & ~taken)[0].tolist()
    return (releasing + releasing_shared + idle)[:k]


def test_free_whole_slots_as_the_vectorised_choice():
    s = session_from_yaml(LEAF.replace("gpus: 8", "gpus: 6"))
    ns = s.nodes
    rng = np.random.default_rng(7)
    for _ in range(400):
        ns.slot_whole[0] = rng.choice([SLOT_FREE, SLOT_ACTIVE, SLOT_RELEASING, SLOT_PIPELINED], size=ns.g)
        ns.sh_used[0] = rng.choice([0.0, 0.0, 1024.0, 2048.0], size=ns.g)
        ns.sh_alloc[0] = ns.sh_used[0] - rng.choice([0.0, 0.0, 1024.0], size=ns.g)
        ns.sh_marked[0] = rng.random(ns.g) < 0.3
        ns.refresh()   # a bulk edit of the arrays: the plain-Python rows follow
        for k in (1, 2, 8):
            for pipelined in (False, True):
                assert ns.free_whole_slots(0, k, pipelined) == _free_whole_slots_reference(ns, 0, k, pipelined)


def test_job_request_sums_as_an_array_would():
    s = session_from_yaml(LEAF)
    tasks = list(range(len(s.status)))
    ref = np.zeros(3)
    for i in tasks:
        ref[0] += s.request_gpus(i, s.min_gpu_mem)
        ref[1] += s.cpu[i]
        ref[2] += s.mem[i]
    assert s.job_request(0, tasks, s.min_gpu_mem).tobytes() == ref.tobytes()


def test_reclaim_scale_decisions_in_json():
    """The benchmark's own check, on a small cluster: every running job evicted, every pending one pipelined."""
    result = run_session(make_snapshot(nodes=2))
    out = json.loads(json.dumps(result.to_contract()))["tasks"]
    assert sum(t["status"] == "releasing" for t in out.values()) == 16
    assert sum(t["status"] == "pipelined" for t in out.values()) == 16


# ---------------------------------------------------------------------------------------------- victim queue reads

def _queues_built(monkeypatch) -> list:
    """Spy on VictimQueue construction: one entry per queue, whether it was read without its tree."""
    seen: list = []
    real = VictimQueue.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self._single is not None)

    monkeypatch.setattr(VictimQueue, "__init__", init)
    return seen


@pytest.mark.parametrize("case", [6, 21, 44, 55, "reclaim-scale", "whatif-quota"])
def test_single_leaf_victim_queue_keeps_every_decision(case, tmp_path, monkeypatch):
    """A victim queue with one candidate leaf is read without its tree of queues, with the same decisions
    (allocations, evictions, explanations) as the tree gives; queues with several leaves still build it."""
    snap = make_snapshot(nodes=6) if case == "reclaim-scale" else _watch_cluster(case, tmp_path)
    built = _queues_built(monkeypatch)
    fast = _decisions(snap)
    assert any(built), "no single-leaf victim queue on this cluster: the test compares nothing"
    monkeypatch.setattr(VictimQueue, "single_leaf_shortcut", False)
    built.clear()
    assert _decisions(snap) == fast
    assert built and not any(built)


def test_both_victim_queue_reads_occur_on_the_seeded_clusters(tmp_path, monkeypatch):
    """The seeded clusters above exercise the tree as well (several candidate leaves)."""
    built = _queues_built(monkeypatch)
    for case in (6, 21, 44):
        _decisions(_watch_cluster(case, tmp_path))
    assert True in built and False in built


@pytest.mark.parametrize("case", [44, 154, "reclaim-scale", "whatif-quota"])
def test_victim_leaf_head_and_capacity_maximum_equal_fresh_ones(case, tmp_path, monkeypatch):
    """The victim leaf's remembered first candidate equals a fresh walk of its order from the same position, and
    the largest raw GPU capacity carried over a patch equals the array's maximum."""
    from scheduler.actions.victims import _VictimLeaf
    snap = make_snapshot(nodes=6) if case == "reclaim-scale" else _watch_cluster(case, tmp_path)
    real_head = _VictimLeaf._arr_head
    heads, memo = [], []

    def head(self):
        fresh = _VictimLeaf(self.arr, self.facts, self.mask, self.pos)
        want, want_pos = real_head(fresh), fresh.pos
        memo.append(self._head[0] == self.pos)
        got = real_head(self)
        assert (got, self.pos) == (want, want_pos)
        heads.append(got)
        return got

    monkeypatch.setattr(_VictimLeaf, "_arr_head", head)
    real_max = solver_mod.Solver._raw_max
    maxima = []

    def raw_max(self, raw):
        got = real_max(self, raw)
        assert got == (float(raw.max()) if raw.size else None)
        maxima.append(got)
        return got

    monkeypatch.setattr(solver_mod.Solver, "_raw_max", raw_max)
    _decisions(snap)
    assert heads and any(memo) and maxima


def test_victim_leaf_walk_finds_the_first_candidate_from_its_position():
    """The leaf's walk to its next candidate (the next job, then growing chunks) lands where a scan of the whole
    rest of the order does, on short and long stretches of non-candidates."""
    from scheduler.actions.victims import _VictimLeaf
    rng = np.random.default_rng(11)
    for _ in range(400):
        n = int(rng.integers(1, 400))
        arr = rng.permutation(n).astype(np.int64)
        mask = rng.random(n) < rng.choice([0.0, 0.002, 0.02, 0.3, 0.9])
        pos = int(rng.integers(0, n + 1))
        leaf = _VictimLeaf(arr, None, mask, pos)
        rest = np.nonzero(mask[arr[pos:]])[0]
        want = None if not rest.size else int(arr[pos + rest[0]])
        assert leaf._arr_head() == want
        assert leaf.pos == (n if want is None else pos + int(rest[0]))
        assert leaf._arr_head() == want   # read again: the same answer
