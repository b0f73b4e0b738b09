"""The victim-scenario solver shared by reclaim, preempt and consolidation (KAI
``actions/common/solvers/job_solver.go: SolveWithResult``, ``by_pod_solver.go``; kai-semantics §c.4 step 4).

For one pending job (the *preemptor*) and its next chunk of ``n`` tasks, KAI tries its scenario generators in
registration order (:data:`~.generators.GENERATOR_CLASSES`: NodeLocalGreedy, then MultiNodeGang). With each:

1. **Probe** how many of the chunk's tasks can be placed: k = 1, 2, 4, … until a probe fails or k reaches n,
   then bisection between the last success and the first failure (``searchMaxSolvableK``). A probe at k
   searches scenarios for the chunk's first k tasks (a partial copy of the job whose gangs need only those)
   and is always rolled back; a successful probe *records* its victims (the victim batches that were evicted
   or moved), and later probes evict the recorded victims in every scenario, adding new ones on top.
2. If some k > 0 worked, probe at k = n with the victims recorded last (``probeAtK``); the first valid
   scenario found there is the solution (its statement is returned uncommitted). Otherwise, or when the
   final probe fails, the next generator starts afresh.

A scenario is **simulated** (:mod:`.simulation`): evict its victims, allocate the preemptor and every victim
job once each in queue/job order, pipeline-only, on the solver's feasible nodes (every node when some task
of the job asks for no GPU, else the nodes with idle or releasing GPUs, ``FeasibleNodesForJob``) plus the
victims' nodes. The preemptor's tasks must all be placed, then the action's validator decides (reclaim:
fair-share rules; preempt: min runtime; consolidation: nothing lost). A scenario already tried for this
preemptor (same tasks, recorded and new victims) is skipped. The final solution must leave the job's gangs
satisfied with more active tasks than before.

Budgets are counted in scenarios (:mod:`.budgets`): a generator out of budget ends (the next one is tried), a
job out of budget ends the action. Each solution carries its :class:`~scheduler.decisions.EvictionScenario`
(generator, probes, scenarios tried, budget stops); each failed search leaves a record in the job's details.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..decisions import EvictionScenario
from ..interrupt import checkpoint
from ..ordering import job_order_key
from ..progress import searching
from ..session import KIND_NONE, KIND_WHOLE, Statement
from .budgets import ActionBudget, Budget, JobBudget
from .generators import GENERATOR_CLASSES, ProbeContext, Scenario, greedy_fits
from .packing import capacity_with, may_place, task_classes, victim_delta
from .simulation import (PendingJobs, active_used, allocate_job_sim, gang_satisfied, may_fit, sim_job_order,
                         sim_tasks_to_allocate)
from .victims import Batch, TapedVictims, VictimQueue, raw_gpu_capacity, raw_gpu_capacity_max

Validator = Callable[[int, list, tuple], bool]
"""``validator(preemptor, victim batches, the probe's pending tasks) -> bool``."""


@dataclass
class Solution:
    """An accepted scenario: its statement (not yet committed) and what happened to the victims."""

    statement: Statement
    batches: list[Batch]
    evicted: list[int]        # victim tasks left releasing
    moved: list[int]          # victim tasks pipelined onto another node / GPU
    restored: list[int]       # victim tasks placed back where they were (un-evicted)
    first_eviction: int       # index into session.evictions of this statement's first eviction
    scenario: Optional[Scenario] = None
    explanation: Optional[EvictionScenario] = None
    preemptor: int = -1
    pending: Optional[PendingJobs] = None     # the action's index of pending jobs, refreshed on commit
    victim_nodes: dict = field(default_factory=dict)   # victim task -> (node, accepted GPUs) before the scenario

    def commit(self, session) -> None:
        self.statement.commit()
        if self.pending is not None:
            self.pending.refresh(self.jobs + [self.preemptor])

    @property
    def jobs(self) -> list[int]:
        return list(dict.fromkeys(b.job for b in self.batches))


@dataclass
class _Probe:
    """The outcome of one probe."""

    solution: Optional[Solution] = None
    stop: bool = False                   # the job's budget ran out: the action stops


@dataclass
class SearchRecord:
    """What one preemptor's search did (the explanation of its evictions, or of its failure)."""

    action: str
    probes: list[dict] = field(default_factory=list)
    tried: int = 0                       # scenarios simulated or ruled out
    pruned: int = 0                      # of which ruled out by arithmetic (.packing)
    sizes: list[tuple] = field(default_factory=list)   # (victim tasks, solved) of every scenario tried, in order
    budget_stops: list[str] = field(default_factory=list)
    stopped_action: bool = False

    def to_details(self) -> dict:
        return {"action": self.action, "scenarios_tried": self.tried, "probes": [dict(p) for p in self.probes],
                "budget_stops": list(self.budget_stops)}


class Solver:
    """Finds, for one action run, the first valid victim scenario of each preemptor (see module doc)."""

    def __init__(self, session, action: str, validator: Optional[Validator] = None,
                 victims_must_be_placed: bool = False, budget: Optional[ActionBudget] = None):
        """``victims_must_be_placed``: the validator rejects any scenario that leaves a victim releasing
        (consolidation), so the packing pre-check may count every victim as a task to place."""
        self.s = session
        self.action = action
        self.validator = validator
        self.victims_must_be_placed = victims_must_be_placed
        self.budget = budget if budget is not None else ActionBudget()
        self.simulations = 0      # scenarios tried in this action run, simulated or ruled out
        self.pruned = 0           # of which ruled out without simulating
        self.ruled_out = 0        # preemptors whose search was skipped: no victim set can work
        self.exhausted = False    # a job's budget ran out: the action stops (KAI SearchResultDeadlineExhausted)
        self.last: Optional[SearchRecord] = None
        self._pending: Optional[PendingJobs] = None
        self._lost: dict[tuple, list] = {}   # scenario key -> [_LostPreemptor]: see _lost_key
        self.lost_hits = 0        # scenarios answered by _lost (tests, diagnostics)
        self._tapes: dict[tuple, dict] = {}   # victims key -> {recorded victims: VictimTape}: see _victims
        self._tape_window: Optional[tuple] = None
        self._solves = 0
        self.trace = _TRACE[-1] if _TRACE else None   # see scenario_trace

    # ------------------------------------------------------------------ one preemptor

    def solve(self, j: int, make_victims: Callable[[], VictimQueue], tasks: Optional[list[int]] = None,
              request: Optional[np.ndarray] = None, victims_key: Optional[tuple] = None) -> Optional[Solution]:
        """Search victims for job ``j``'s next chunk (``tasks`` when already computed, ``request`` their
        ``session.job_request`` with the smallest GPU memory when computed too); ``make_victims``
        returns a fresh victim queue (one per generator and probe). ``victims_key``: equal for two searches
        whose ``make_victims`` build the same queue (the action's candidates; see :meth:`_victims`). None
        when no valid scenario was found; ``self.last`` says what was tried, ``self.exhausted`` whether the
        action must stop."""
        s = self.s
        self._solves += 1
        self._victims_key = ("search", self._solves) if victims_key is None else ("action", victims_key)
        if tasks is None:
            tasks = sim_tasks_to_allocate(s, j)
        self.last = rec = SearchRecord(self.action)
        if not tasks:
            return None
        with searching(self.action, s.jobs[j].key, len(tasks), rec):   # a caller showing progress reads rec
            return self._search(j, tasks, make_victims, request, rec)

    def _search(self, j: int, tasks: list[int], make_victims: Callable[[], VictimQueue],
                request: Optional[np.ndarray], rec: SearchRecord) -> Optional[Solution]:
        """:meth:`solve` once the chunk is known and not empty."""
        s = self.s
        job_budget = self.budget.begin_job()
        if job_budget.exhausted():
            self._stop(rec, "the action's scenario budget was spent before this job")
            return None
        check = self.victims_must_be_placed or len(tasks) > 1
        if check and not self._may_ever_succeed(task_classes(s, tasks), make_victims()):
            self.ruled_out += 1
            return None
        self._j, self._tasks, self._check = j, tasks, check
        self._request = request
        self._failed: set = set()
        self._raw = raw_gpu_capacity(s)
        self._feasible = self._feasible_nodes(j)
        if self._pending is None:
            self._pending = PendingJobs(s)
        self._make_victims = make_victims
        self._before = active_used(s, j)
        n = len(tasks)
        for gen_cls in GENERATOR_CLASSES:
            gen_budget = job_budget.begin_generator(gen_cls.name)
            self._recorded: list[Batch] = []
            self._recorded_victims: list[int] = []
            self._held = None
            best, probe = self._search_max_k(n, lambda k: self._probe(gen_cls, k, job_budget, gen_budget, True))
            if probe is not None and probe.stop:
                return self._stopped(rec, job_budget)
            if best > 0:
                probe = self._repeat_last_probe(gen_cls, n, gen_budget)
                if probe is None:
                    probe = self._probe(gen_cls, n, job_budget, gen_budget, False)
                if probe.stop:
                    return self._stopped(rec, job_budget)
                if probe.solution is not None:
                    sol = probe.solution
                    if gang_satisfied(s, j) and active_used(s, j) > self._before:
                        sol.explanation = self._explain(rec, sol)
                        return sol
                    sol.statement.discard()
            if gen_budget.used >= gen_budget.limit:
                rec.budget_stops.append(f"{gen_cls.name} stopped at its budget of {gen_budget.limit} scenarios")
        return None

    @staticmethod
    def _search_max_k(n: int, probe: Callable[[int], _Probe]) -> tuple[int, Optional[_Probe]]:
        """KAI ``searchMaxSolvableK``: the largest k ≤ n a probe solves (doubling, then bisection), 0 if
        none; stops at once when a probe says the job's budget is spent."""
        lo, k = 0, 1
        last = None
        while True:
            last = probe(k)
            if last.stop:
                return 0, last
            if last.solution is None:
                hi = k
                break
            lo = k
            if k == n:
                return n, None
            k = min(k * 2, n)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            last = probe(mid)
            if last.stop:
                return 0, last
            if last.solution is not None:
                lo = mid
            else:
                hi = mid
        return lo, None

    def _probe(self, gen_cls, k: int, job_budget: JobBudget, gen_budget: Budget, discard: bool) -> _Probe:
        """KAI ``probeAtK`` / ``tryProbeAndDiscard``: search scenarios for the chunk's first k tasks."""
        s = self.s
        pending = tuple(self._tasks[:k])
        recorded = self._recorded
        feasible = self._feasible
        if self._recorded_victims:
            feasible = feasible.copy()
            for i in self._recorded_victims:
                if s.node[i] >= 0:
                    feasible[s.node[i]] = True
        quota = [s.request_gpus(i, None) for i in pending]
        # KAI builds the probe's accumulated filters from the nodes as they are now (NewPodAccumulatedScenarioBuilder
        # per probe, idle_gpus.go createGpuMap), not as they were when the search began: a rolled-back scenario
        # can leave a node's GPU counts drifted (docs/engine.md, one idle GPU less after a discard).
        raw = raw_gpu_capacity(s)
        ctx = ProbeContext(s, self._j, pending, recorded, feasible, self._victims(), raw, quota, self._raw_max(raw))
        gen = gen_cls(ctx)
        own = task_classes(s, list(pending)) if self._check else None
        if k == len(self._tasks) and self._request is not None:
            request = self._request
        else:
            request = s.job_request(self._j, list(pending), s.min_gpu_mem)
        self.probe_nodes, self.probe_request = feasible, request   # the current probe's (tests, diagnostics)
        rec = self.last
        tried = 0
        while True:
            if job_budget.exhausted():
                self._note_probe(gen_cls.name, k, False, tried)
                return _Probe(stop=True)
            if gen_budget.exhausted():
                break
            checkpoint()   # a superseded what-if stops here, not at the end of its cycle (scheduler.interrupt)
            sc = gen.next()
            if sc is None:
                break
            failed = self._failed
            if failed and sc.fingerprint() in failed:   # (no fingerprint to build before a scenario failed)
                continue
            victims = sc.victim_tasks()
            if not victims:
                failed.add(sc.fingerprint())
                self._trace(sc, k, False)
                continue
            gen_budget.spend()
            self.simulations += 1
            tried += 1
            rec.tried += 1
            if self._check and not self._may_succeed(own, sc):
                self.pruned += 1
                rec.pruned += 1
                rec.sizes.append((len(victims), False))
                failed.add(sc.fingerprint())
                self._trace(sc, k, False)
                continue
            sol = self._simulate(sc, feasible, request)
            rec.sizes.append((len(victims), sol is not None))
            self._trace(sc, k, sol is not None)
            if sol is None:
                failed.add(sc.fingerprint())
                continue
            self._note_probe(gen_cls.name, k, True, tried)
            if discard:
                moved_or_evicted = set(sol.evicted) | set(sol.moved)
                self._recorded = [b for b in sol.batches if any(i in moved_or_evicted for i in b.tasks)]
                self._recorded_victims = sol.evicted + sol.moved
                if k == len(self._tasks) and not sol.restored:
                    self._held = (sol, feasible, quota, gen.acc.affinity, raw)   # see _repeat_last_probe
                else:
                    sol.statement.discard()
            return _Probe(solution=sol)
        self._note_probe(gen_cls.name, k, False, tried)
        return _Probe()

    def _victims(self):
        """A fresh victim queue for a probe, read through the pops an earlier probe or search already took from
        the same queue (:class:`~.victims.VictimTape`): between two commits every probe starts from the same
        session state (its simulations roll back before the generator pops again), and a queue built from the
        same candidates pops the same batches in that state, whoever the preemptor is."""
        if not self.share_victim_pops:
            return self._make_victims()
        s = self.s
        window = (s.commits, len(s.evictions))
        if window != self._tape_window:
            self._tapes.clear()   # a commit since: those pops cannot apply any more
            self._tape_window = window
        tapes = self._tapes.get(self._victims_key)
        if tapes is None:
            tapes = self._tapes[self._victims_key] = {}
        return TapedVictims(tapes, self._make_victims)

    share_victim_pops = True
    """Read victim queues through :meth:`_victims`' shared pops; off: a queue of its own per probe (tests compare)."""

    def _repeat_last_probe(self, gen_cls, n: int, gen_budget: Budget) -> Optional[_Probe]:
        """The final probe at k = n when the last probe already solved k = n with every victim evicted or
        moved (none put back): the final probe's first scenario is then exactly that one — the same victims,
        now recorded — so its simulation would repeat the held one step for step. KAI simulates it again; we
        keep the held statement. Otherwise (or when the recorded scenario fails the accumulated filters, was
        already tried, or no budget is left) the held statement is discarded and the caller probes."""
        held, self._held = self._held, None
        if held is None:
            return None
        # affinity: the probe's node-affinity masks (same pending tasks); raw: the nodes' idle + releasing GPUs as
        # that probe found them (KAI's final probe reads them after discarding the held simulation: the same values
        # but for the drift of this probe's rolled-back scenarios, which kaidash's emitter leaves out too)
        sol, feasible, quota, affinity, raw = held
        pending = tuple(self._tasks)
        sc = Scenario(gen_cls.name, pending, list(self._recorded), [])
        ok = not gen_budget.exhausted() and not (self._failed and sc.fingerprint() in self._failed)
        if ok:
            # the accumulated filters on the recorded victims, with the nodes and GPUs they had before
            freed: dict[int, float] = {}   # node -> its capacity with the victims gone
            for n_, acc in sol.victim_nodes.values():
                if n_ >= 0:
                    have = freed.get(n_)
                    freed[n_] = (raw[n_] if have is None else have) + acc
            cap_max = self._raw_max(raw)
            if cap_max is not None and len(quota) == 1 and all(v >= raw[n_] for n_, v in freed.items()):
                cap = raw   # one task: the filter reads the largest capacity only
                cap_max = max([cap_max] + [float(v) for v in freed.values()])
            else:
                cap = raw.copy()
                for n_, v in freed.items():
                    cap[n_] = v
                cap_max = None
            ok = greedy_fits(sorted(quota, reverse=True), cap, cap_max)
            masks = affinity if ok else None
            if masks:
                covered = feasible.copy()
                covered[list(freed)] = True
                ok = all(bool((m & covered).any()) for m in masks)
        if not ok:
            sol.statement.discard()
            return None
        gen_budget.spend()
        self.simulations += 1
        rec = self.last
        rec.tried += 1
        rec.sizes.append((len(sc.victim_tasks()), True))
        self._trace(sc, n, True)
        self._note_probe(gen_cls.name, n, True, 1)
        sol.scenario = sc
        sol.batches = sc.batches()
        return _Probe(solution=sol)

    # ------------------------------------------------------------------ one scenario

    def _simulate(self, sc: Scenario, feasible: np.ndarray, request: np.ndarray) -> Optional[Solution]:
        s = self.s
        j = self._j
        stmt = Statement(s)
        first = len(s.evictions)
        preemptor = s.jobs[j].key
        batches = sc.batches()
        allowed = feasible.copy()
        victim_tasks = sc.victim_tasks()
        victim_nodes = {i: (s.node[i], s.accepted[i]) for i in victim_tasks}
        node = s.node
        for i in victim_tasks:
            if node[i] >= 0:
                allowed[node[i]] = True
        pending = list(sc.pending)
        lost = self._lost_key(victim_tasks, batches, allowed, pending, request)
        popped: Optional[list] = None
        if lost is not None:
            key, mine = lost
            if self._lost and next(iter(self._lost))[:2] != key[:2]:
                self._lost.clear()   # a commit since: those records cannot apply any more
            if any(self._answers(rec, mine) for rec in self._lost.get(key, ())):
                self.lost_hits += 1
                return None
            if mine.conform and len(self._lost) < _LOST_LIMIT:
                popped = []
        for i in victim_tasks:
            stmt.evict(i, self.action, preemptor=preemptor)
        # A preemptor that _alone_decides and does not fit right after the evictions fails whatever the job order
        # (placed first, it fails at its turn; after others, at the first of them): checked before the order is
        # built where a queue tree orders the scenario (where every queue is top-level the preemptor mostly goes
        # first and fits, and the check would only add a node search).
        q = s.jobs[j].queue
        alone = self._alone_decides(pending) if q >= 0 and s.queues.parent[q] >= 0 else None   # None: not asked yet
        if alone and not self._fits_alone(pending, allowed):
            return self._fits_nowhere(stmt, lost, popped, pending)
        placed = False
        checked = False
        watch: Optional[_AloneWatch] = None
        for jj in sim_job_order(s, [j] + [b.job for b in batches], {j: request}, self._pending, popped):
            if not placed and jj != j:   # another job goes before the preemptor
                if not checked:
                    checked = True
                    if alone is None:
                        alone = self._alone_decides(pending)
                        if alone and not self._fits_alone(pending, allowed):
                            return self._fits_nowhere(stmt, lost, popped, pending)
                    if alone:
                        watch = _AloneWatch.start(s, j, pending, allowed) if self.watch_alone else None
                mark = len(s.nodes.change_log)
            ok = allocate_job_sim(s, stmt, jj, pending if jj == j else None, allowed)
            if jj == j:
                if not ok:
                    stmt.discard()
                    return None
                placed = True
            elif watch is not None and not placed and not watch.still_fits(mark, jj):
                if popped is not None and not watch.nodes:
                    self._remember(lost, popped)   # no node left for it: see _lost_key
                stmt.discard()   # the preemptor fits nowhere any more: it fails at its turn (see _AloneWatch)
                return None
        if not placed or (self.validator is not None and not self.validator(j, batches, sc.pending)):
            stmt.discard()
            return None
        st = s.status
        return Solution(statement=stmt, batches=batches,
                        evicted=[i for i in victim_tasks if st[i] == "releasing"],
                        moved=[i for i in victim_tasks if st[i] == "pipelined"],
                        restored=[i for i in victim_tasks if st[i] in ("running", "binding")],
                        first_eviction=first, scenario=sc, preemptor=j, pending=self._pending,
                        victim_nodes=victim_nodes)

    def _fits_nowhere(self, stmt: Statement, lost: Optional[tuple], popped: Optional[list], pending: list) -> None:
        """The scenario fails: the preemptor that :meth:`_alone_decides` fits no allowed node right after the
        evictions (recorded for other preemptors when it is not its queue's capacity: see :meth:`_lost_key`)."""
        if popped is not None and self.s.job_over_capacity(self._j, pending) is None:
            self._remember(lost, popped)
        stmt.discard()
        return None

    remember_lost = True
    """Answer a scenario from :meth:`_lost_key`'s record of another preemptor's (tests compare both)."""

    def _lost_key(self, victim_tasks: list, batches: list, allowed: np.ndarray, pending: list,
                  request: np.ndarray) -> Optional[tuple]:
        """``(key, preemptor)``: the key under which a scenario that failed before the preemptor's turn because it
        fit nowhere is remembered, for other preemptors, and this preemptor's :class:`_LostPreemptor` (None where
        no record can apply).

        Between two commits every search starts from the same session state. Take preemptors P (the record's)
        and P2 that :meth:`_alone_decides`, in leaf queues under one top-level queue, neither a victim, P2
        *dominated* by P: of P's kind (CPU-only or whole GPUs), asking at least P's GPUs, CPU and memory, with
        static predicates that pass a subset of the nodes P's pass (:meth:`_LostPreemptor.dominated_by`), so P2
        fits only where P fits, in every state. A simulation of victims V (same tasks, same order, same allowed
        nodes) builds one queue tree for P and for P2 — each is the other's skipped pending job — and pops the
        same jobs and places the same victims in the same way until P or P2 comes up, when

        - both are in the action's pending-job index with the order key and resources their own simulations
          give them (``conform``), or
        - P is, P2 is in the index with its own order key, and P2 sits behind P in the same leaf queue: P2 is
          then never the head of its leaf before P is popped, so its resources (a probe's partial chunk) are
          never read.

        P's simulation failed right after the evictions or at its first victim (``_fits_alone``: no allowed node
        fits it) or when its watch ran out of nodes (``_AloneWatch``) before P2 was popped: at that step P2 fits
        no allowed node either, and what is placed after it only takes resources, so P2's simulation fails at
        its turn (or earlier: its queue's capacity, its own watch), and everything it did would be rolled back
        (no KAI side effect of a discarded scenario is kept for such placements). So P2's scenario fails
        without being simulated."""
        if not self.remember_lost or len(pending) != 1:
            return None
        s = self.s
        j = self._j
        q = s.jobs[j].queue
        qs = s.queues
        if q < 0 or qs.parent[q] < 0 or not self._alone_decides(pending):
            return None
        index = self._pending
        key = index.keys.get(j)
        if key is None or key != job_order_key(s, j):
            return None
        if any(b.job == j for b in batches):
            return None
        i = pending[0]
        if s.shape_key(i) is None:
            return None
        static = s.predicates.static(i)[0]   # node_values (Session._eval) reads it whatever predicates_apply says
        mine = _LostPreemptor(j, q, key, index.resources_of(j).tobytes() == request.tobytes(), s.kind_list[i],
                              s._node_gpu_l[i], s._cpu_l[i], s._mem_l[i], static)
        return (s.commits, len(s.evictions), qs.chains[q][-1], tuple(victim_tasks),
                np.packbits(allowed).tobytes()), mine

    def _remember(self, lost: tuple, popped: list) -> None:
        key, mine = lost
        mine.popped = frozenset(popped)
        self._lost.setdefault(key, []).append(mine)

    @staticmethod
    def _answers(rec: "_LostPreemptor", p2: "_LostPreemptor") -> bool:
        """Whether record ``rec`` (of the same scenario key) answers preemptor ``p2``'s scenario (see _lost_key)."""
        if p2.job in rec.popped or not p2.dominated_by(rec):
            return False
        return p2.conform or (p2.leaf == rec.leaf and rec.key < p2.key)

    def _alone_decides(self, pending: list[int]) -> bool:
        """Whether the preemptor's placement can only get harder as the simulation places other jobs before it:
        one task, whole GPUs or none (no shared GPU, MIG or DRA device to pick), no pod (anti-)affinity or host
        port, no topology constraint, no preferred pod-affinity term in the session. Every job placed before it
        then only takes node resources (idle, releasing) and queue quota, so a preemptor that fits nowhere right
        after the evictions fails the scenario whatever the job order does (KAI's simulation, same outcome)."""
        if len(pending) != 1:
            return False
        s = self.s
        i = pending[0]
        if s.kind_list[i] > KIND_WHOLE or i in s.mig_req or s.predicates.is_dynamic(i):
            return False
        if s._dra_nodes is not None:
            return False
        if s.predicates_apply and s.predicates.scores_affinity:
            # every node search KAI makes in the simulation may mark a task's pod-affinity score skipped for the
            # rest of the session (Predicates.preferred_score): the victims' placements cannot be left out
            return False
        c = s.jobs[self._j].job.topology
        return c is None or not c.topology

    def _fits_alone(self, pending: list[int], allowed: np.ndarray) -> bool:
        """Whether the preemptor's task would be placed right after the evictions (what
        :func:`.simulation.allocate_job_sim` checks, without placing it): a failure fails the scenario (see
        :meth:`_alone_decides`) without placing the victims first."""
        s = self.s
        if not may_fit(s, pending) or s.job_over_capacity(self._j, pending) is not None:
            return False
        return s.best_node(pending[0], allowed=allowed) >= 0

    def _raw_max(self, raw: np.ndarray) -> Optional[float]:
        """``raw.max()`` (None without nodes) of a :func:`raw_gpu_capacity` answer, once per capacity array."""
        hit = self.__dict__.get("_raw_max_of")
        if hit is None or hit[0] is not raw:
            hit = self._raw_max_of = (raw, raw_gpu_capacity_max(self.s, raw) if raw.size else None)
        return hit[1]

    watch_alone = True
    """Follow the preemptor's fit while jobs are placed before it (:class:`_AloneWatch`); off: only the check
    before the first of them (tests compare both)."""

    # ------------------------------------------------------------------ nodes and jobs

    def _feasible_nodes(self, j: int) -> np.ndarray:
        """KAI ``FeasibleNodesForJob``: every node when some task of the job asks for no GPU, else the nodes
        with idle or releasing GPUs."""
        s = self.s
        if any(s.kind_list[i] == KIND_NONE for i in s.jobs[j].tasks):
            return np.ones(s.nodes.n, dtype=bool)
        return self._raw > 0

    # ------------------------------------------------------------------ packing pre-check

    def _must_place(self, tasks: list[int]) -> dict:
        """Task classes of victims that must be placed again for consolidation to accept: every victim (one
        left releasing fails the scenario)."""
        return task_classes(self.s, list(tasks))

    def _may_ever_succeed(self, own: dict, victims: VictimQueue) -> bool:
        """Packing pre-check with every candidate victim evicted. If the chunk (plus, for consolidation,
        every victim) cannot be packed then, no scenario can work: a packing for some victim set extends to
        all candidates by leaving the others where they are, so feasibility only grows with the victims."""
        s = self.s
        every = victims.candidate_tasks()
        cap = capacity_with(s, [victim_delta(s, every)])
        if not self.victims_must_be_placed:
            return may_place(s, own, cap)
        classes = dict(own)
        for c, n in self._must_place(every).items():
            classes[c] = classes.get(c, 0) + n
        return may_place(s, classes, cap)

    def _may_succeed(self, own: dict, sc: Scenario) -> bool:
        """Packing pre-check of one scenario (:func:`.packing.may_place`): the probe's tasks — plus every
        victim when victims must all be placed again — must fit on idle + releasing resources with the
        victims gone."""
        s = self.s
        victims = sc.victim_tasks()
        cap = capacity_with(s, [victim_delta(s, victims)])
        if not self.victims_must_be_placed:
            return may_place(s, own, cap)
        classes = dict(own)
        for c, n in self._must_place(victims).items():
            classes[c] = classes.get(c, 0) + n
        return may_place(s, classes, cap)

    # ------------------------------------------------------------------ records

    def _note_probe(self, generator: str, k: int, solved: bool, scenarios: int) -> None:
        self.last.probes.append({"generator": generator, "k": k, "of": len(self._tasks), "solved": solved,
                                 "scenarios": scenarios})

    def _trace(self, sc: Scenario, k: int, solved: bool) -> None:
        if self.trace is not None:
            names = self.s.task_names
            self.trace.append((self.action, self.s.jobs[self._j].key, sc.generator, k,
                               sorted(names[i] for i in sc.pending),
                               sorted(names[i] for b in sc.recorded for i in b.tasks),
                               sorted(names[i] for b in sc.potential for i in b.tasks), solved))

    def _stop(self, rec: SearchRecord, why: str) -> None:
        self.exhausted = True
        rec.stopped_action = True
        rec.budget_stops.append(why)

    def _stopped(self, rec: SearchRecord, job_budget: JobBudget) -> None:
        if job_budget.reduced:
            self._stop(rec, f"the action's scenario budget ({self.budget.limit}) ran out during this job's "
                            f"search; {self.action} stopped")
        else:
            self._stop(rec, f"this job's scenario budget ({job_budget.limit}) ran out; {self.action} stopped")
        return None

    def _explain(self, rec: SearchRecord, sol: Solution) -> EvictionScenario:
        s = self.s
        names = s.task_names
        earlier = [n for n, solved in rec.sizes[:-1] if not solved]   # sets that failed before this one
        size = len(sol.scenario.victim_tasks()) if earlier else 0
        victims = sol.evicted + sol.moved
        jobs, task_job = s.jobs, s.task_job
        return EvictionScenario(
            action=self.action, preemptor=jobs[self._j].key, generator=sol.scenario.generator,
            victims=[names[i] for i in victims],
            victim_jobs=list(dict.fromkeys(jobs[task_job[i]].key for i in victims)),
            tried_before=len(earlier), smaller_tried=sum(1 for n in earlier if n < size),
            probes=[dict(p) for p in rec.probes], budget_stops=list(rec.budget_stops))


class _AloneWatch:
    """The nodes where the preemptor fits, followed while the simulation places other jobs before it.

    Under :meth:`Solver._alone_decides` the preemptor's placement at its turn succeeds exactly when its queue
    is not over capacity and some allowed node fits it (:func:`.simulation.allocate_job_sim`: the fit check,
    ``best_node``, ``place``). A job placed before it only takes node resources and queue quota, so nodes only
    drop out of that set and the capacity check only gets harder: once the set is empty or the queue is over
    capacity, the scenario fails whatever the rest of the order does, and the victims left are not placed.
    Only the nodes a placement changed (``NodeState.change_log``) are checked again. Not used on clusters with
    MIG instances (a whole-GPU request's free GPUs are read beside them) or where the node values are not
    cached (:meth:`~scheduler.session.Session.node_values`)."""

    __slots__ = ("s", "j", "i", "pending", "nodes", "chain")

    def __init__(self, session, j: int, pending: list, nodes: set):
        self.s, self.j, self.i, self.pending, self.nodes = session, j, pending[0], pending, nodes
        q = session.jobs[j].queue
        self.chain = set(session.queues.chains[q]) if q >= 0 else set()

    @classmethod
    def start(cls, session, j: int, pending: list, allowed: np.ndarray) -> Optional["_AloneWatch"]:
        if session._mig_nodes:
            return None
        values = session.node_values(pending[0])
        if values is None:
            return None
        return cls(session, j, pending, set(np.nonzero((values > -np.inf) & allowed)[0].tolist()))

    def still_fits(self, mark: int, placed_job: int) -> bool:
        """After job ``placed_job`` was allocated (node changes logged from ``mark`` on): whether the preemptor
        still fits somewhere."""
        s = self.s
        log = s.nodes.change_log
        if len(log) > mark:
            nodes = self.nodes
            for n in set(log[mark:]):
                if n in nodes and not s._eval_node(self.i, n)[0]:
                    nodes.discard(n)
            if not nodes:
                return False
        q = s.jobs[placed_job].queue
        if q >= 0 and self.chain.intersection(s.queues.chains[q]):
            return s.job_over_capacity(self.j, self.pending) is None
        return True


class _LostPreemptor:
    """A one-task preemptor as a failed-scenario record (:meth:`Solver._lost_key`) sees it."""

    __slots__ = ("job", "leaf", "key", "conform", "kind", "gpus", "cpu", "mem", "static", "popped")

    def __init__(self, job: int, leaf: int, key: tuple, conform: bool, kind: int, gpus: float, cpu: float,
                 mem: float, static: Optional[np.ndarray]):
        self.job, self.leaf, self.key, self.conform = job, leaf, key, conform
        self.kind, self.gpus, self.cpu, self.mem, self.static = kind, gpus, cpu, mem, static
        self.popped: frozenset = frozenset()   # the jobs the record's simulation popped before it failed

    def dominated_by(self, other: "_LostPreemptor") -> bool:
        """Whether this task fits only on nodes where ``other`` fits, in every state (``Session._eval_node``:
        ready, free GPUs, CPU, memory and a pod slot, the static predicates)."""
        if self.kind != other.kind or self.gpus < other.gpus or self.cpu < other.cpu or self.mem < other.mem:
            return False
        mask, theirs = self.static, other.static
        if theirs is None or mask is theirs:
            return True
        return mask is not None and not bool((mask & ~theirs).any())


_LOST_LIMIT = 20_000
"""Failed-scenario records kept per commit window (bounds memory on long searches; fewer records, same outcome)."""

_TRACE: list = []


@contextmanager
def scenario_trace():
    """Collect every scenario the solvers created inside the block try, in order: ``(action, preemptor, generator,
    k, pending tasks, recorded victim tasks, new victim tasks, solved)`` (names sorted), as KAI logs them
    (``Trying to solve scenario``, verbosity 5). A debugging aid for ``bench/kai_diff_scenarios.py``."""
    out: list = []
    _TRACE.append(out)
    try:
        yield out
    finally:
        _TRACE.remove(out)


def note_failed_search(session, j: int, record: Optional[SearchRecord]) -> None:
    """Keep what a failed eviction search tried in the job's reason details (``eviction_search``, per
    action), for the Pending view and ``explain``."""
    if record is None or (not record.tried and not record.budget_stops):
        return
    reason = session.job_reasons.get(j)
    if reason is None:
        return
    details = reason[2]
    details.setdefault("eviction_search", {})[record.action] = record.to_details()


__all__ = ["Solver", "Solution", "SearchRecord", "note_failed_search", "scenario_trace", "sim_tasks_to_allocate"]
