"""The victim-scenario solver shared by reclaim, preempt and consolidation (KAI
``actions/common/solvers/{job_solver,pod_scenario_builder,sub_scenario_emitter,by_pod_solver}.go``,
``actions/common/action.go``; kai-semantics §c.4 step 4).

For one pending job (the *preemptor*) and a :class:`~scheduler.actions.victims.VictimQueue`:

1. **Accumulate** victim batches in victim order. After each batch, the accumulated-idle-GPUs filter checks
   that the preemptor's GPU requests could fit greedily (largest first) on the nodes with the most idle +
   releasing GPUs once the accumulated victims are gone; if not, take another batch.
2. **Sub-scenarios** of a passing accumulation pick victims by node, so that the fewest victims are evicted:
   nodes holding victims are sorted by the GPUs they would offer (idle + releasing + victims on it),
   ascending, nodes that could not hold the smallest task dropped; the first sub-scenario takes the smallest
   prefix of nodes whose capacity covers the demand not already covered by victim-free nodes, later ones grow
   the prefix by 1, 2, 4, … nodes. Picking a node takes every batch with a task on it, with all that batch's
   tasks (gangs stay whole). Scenarios already simulated for this job are skipped.
3. **Simulate** a scenario in a :class:`~scheduler.session.Statement`: evict its victims, then allocate, in
   KAI's queue/job order, the preemptor and every victim job once each, pipeline-only: a victim placed back on
   its own node (same GPU group) is un-evicted, one placed elsewhere is moved (pipelined), one that fits
   nowhere stays evicted. The preemptor's chunk must be placed whole, else the scenario fails.
4. **Validate** (reclaim: fair-share rules; preempt: min runtime; consolidation: nothing lost) and check the
   preemptor's gangs are satisfied. The first valid scenario wins; its statement is returned uncommitted.

Deviations (docs/actions.md): KAI first probes how many of the preemptor's tasks can be placed (k = 1, 2,
4, …, then bisection) and carries the victims found for smaller k into the final probe; we probe the full
chunk directly. KAI's search budgets are wall-clock (4 min per job, 5 min per action); ours count simulated
scenarios (:data:`MAX_SCENARIOS_PER_JOB`, :data:`MAX_SCENARIOS_PER_ACTION`) so results are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from ..ordering import job_order_key, queue_key, queue_less
from ..placement import topology
from ..session import ACTIVE_ALLOCATED, KIND_WHOLE, OCCUPIES_NODE, Statement
from ..session.nodes import GPU
from .packing import capacity_with, may_place, task_classes, victim_delta
from .victims import Batch, VictimQueue, node_gpu_capacity

MAX_SCENARIOS_PER_JOB = 256
"""Simulated scenarios per preemptor before the search gives up (KAI: 4 minutes per job)."""

MAX_SCENARIOS_PER_ACTION = 50_000
"""Simulated scenarios per action run before it stops trying further jobs (KAI: 5 minutes per action)."""


@dataclass
class Solution:
    """An accepted scenario: its statement (not yet committed) and what happened to the victims."""

    statement: Statement
    batches: list[Batch]
    evicted: list[int]        # victim tasks left releasing
    moved: list[int]          # victim tasks pipelined onto another node / GPU
    restored: list[int]       # victim tasks placed back where they were (un-evicted)
    first_eviction: int       # index into session.evictions of this statement's first eviction

    def commit(self, session) -> None:
        self.statement.commit()

    @property
    def jobs(self) -> list[int]:
        return list(dict.fromkeys(b.job for b in self.batches))


# ---------------------------------------------------------------------------------------------- simulation

def sim_tasks_to_allocate(session, j: int) -> list[int]:
    """KAI ``GetTasksToAllocate(isRealAllocation=false)``: like allocate's chunk, but tasks evicted in this
    session (virtually releasing) may be placed again."""
    st = session.status
    evicted = session.evict_prior
    sets = session.podsets(j)
    chunks = []
    gang = False
    for ps in sets:
        active = sum(1 for i in ps.tasks if st[i] in ACTIVE_ALLOCATED)
        free = [i for i in ps.tasks if st[i] == "pending" or (st[i] == "releasing" and i in evicted)]
        chunks.append((active, free, ps.min_available))
        gang = gang or active < ps.min_available
    if gang:
        out: list[int] = []
        for active, free, need in chunks:
            if active < need:
                out.extend(free[: need - active])
        return out
    for _, free, _ in chunks:
        if free:
            return free[:1]
    return []


def _job_resources(session, j: int) -> np.ndarray:
    return session.job_request(j, sim_tasks_to_allocate(session, j), session.min_gpu_mem)


def sim_job_order(session, jobs: Iterable[int], known: Optional[dict] = None):
    """Yield ``jobs`` in KAI's queue/job order, re-evaluated after each one (allocations in between change
    the queues' Allocated), each job once (``TryToVirtuallyAllocatePreemptorAndGetVictims``). ``known``:
    chunk resources already computed per job (still valid: a job's chunk changes only when it is placed)."""
    remaining = list(dict.fromkeys(jobs))
    resources: dict[int, np.ndarray] = dict(known or {})
    qs = session.queues
    # A job's order key changes only when its own tasks do, and each job is placed once, after it is
    # yielded: the keys of the jobs still waiting are fixed for the whole walk (sorted once per leaf).
    per_leaf: dict[int, list] = {}
    for j in remaining:
        per_leaf.setdefault(session.jobs[j].queue, []).append((job_order_key(session, j), j))
    for lst in per_leaf.values():
        lst.sort(reverse=True)  # the leaf's next job is last
    left = len(remaining)
    while left:
        if left == 1:
            yield next(iter(per_leaf.values()))[0][1]
            return
        by_leaf = {q: lst[-1][1] for q, lst in per_leaf.items()}
        children: dict[int, set[int]] = {}
        roots: set[int] = set()
        for q in by_leaf:
            child = q
            for a in qs.chains[q][1:]:
                children.setdefault(a, set()).add(child)
                child = a
            roots.add(child)
        memo: dict[int, tuple[int, tuple]] = {}

        def best(q: int) -> tuple[int, tuple]:
            hit = memo.get(q)
            if hit is None:
                job = by_leaf[q] if q not in children else best(select(children[q]))[0]
                res = resources.get(job)
                if res is None:
                    res = resources[job] = _job_resources(session, job)
                hit = memo[q] = (job, queue_key(session, q, res))
            return hit

        def select(queues) -> int:
            out, out_key = -1, None
            for q in sorted(queues):
                key = best(q)[1]
                if out < 0 or queue_less(session, q, key, out, out_key):
                    out, out_key = q, key
            return out

        q = select(roots)
        while q in children:
            q = select(children[q])
        j = by_leaf[q]
        per_leaf[q].pop()
        if not per_leaf[q]:
            del per_leaf[q]
        left -= 1
        yield j


def allocate_job_sim(session, stmt: Statement, j: int, tasks: Optional[list[int]] = None) -> bool:
    """KAI ``AllocateJob(isPipelineOnly=true)``: place the job's next chunk (``tasks`` when already known),
    every task pipelined (or un-evicted where it was); all or nothing."""
    if tasks is None:
        tasks = sim_tasks_to_allocate(session, j)
    if not tasks:
        return False
    if not _may_fit(session, tasks):
        return False  # no node has the GPUs: fails like the node search below would, without side effects
    if session.job_over_capacity(j, tasks) is not None:
        return False
    plan = topology.plan(session, j, tasks)  # KAI's topology plugin: one domain after another
    if plan is not None and plan.failure is not None:
        return False
    for k in range(1 if plan is None else len(plan.candidates)):
        allowed, bonus = (None, None) if plan is None else plan.subset(k)
        cp = stmt.checkpoint()
        for i in tasks:
            n = session.best_node(i, allowed=allowed, bonus=bonus)
            if n < 0 or not session.place(stmt, i, n, pipeline_only=True):
                stmt.rollback(cp)
                break
        else:
            return True
    return False


def _may_fit(session, tasks: list[int]) -> bool:
    """Necessary condition for whole-GPU tasks: some ready node has that many idle + releasing GPUs."""
    need = 0.0
    for i in tasks:
        if session.kind_list[i] == KIND_WHOLE:
            need = max(need, float(session.gpu[i]))
    if need <= 0:
        return True
    ns = session.nodes
    free = ns.non_allocated(GPU)
    return bool((free[ns.ready] >= need).any())


def active_used(session, j: int) -> int:
    st = session.status
    return sum(1 for i in session.jobs[j].tasks if st[i] in OCCUPIES_NODE)


def gang_satisfied(session, j: int) -> bool:
    st = session.status
    return all(sum(1 for i in ps.tasks if st[i] in OCCUPIES_NODE) >= ps.min_available for ps in session.podsets(j))


# ---------------------------------------------------------------------------------------------- solver

Validator = Callable[[int, list[Batch]], bool]


class Solver:
    """Finds, for one action run, the first valid victim scenario of each preemptor."""

    def __init__(self, session, action: str, validator: Optional[Validator] = None,
                 victims_must_be_placed: bool = False):
        """``victims_must_be_placed``: the validator rejects any scenario that leaves a victim releasing
        (consolidation), so the packing pre-check may count every victim as a task to place."""
        self.s = session
        self.action = action
        self.validator = validator
        self.victims_must_be_placed = victims_must_be_placed
        self.simulations = 0      # scenarios tried, simulated or ruled out by the packing pre-check
        self.pruned = 0           # of which ruled out without simulating
        self.ruled_out = 0        # preemptors whose search was skipped: no victim set can work
        self.exhausted = False

    def solve(self, j: int, victims: VictimQueue, tasks: Optional[list[int]] = None,
              request: Optional[np.ndarray] = None) -> Optional[Solution]:
        """Search victims for job ``j``'s next chunk (``tasks`` / its ``request`` when already computed);
        None when no valid scenario was found."""
        s = self.s
        if tasks is None:
            tasks = sim_tasks_to_allocate(s, j)
        if not tasks:
            return None
        self._preemptor = j
        self._tasks = tasks
        self._known = {} if request is None else {j: request}
        req = sorted((s.request_gpus(i, s.min_gpu_mem) for i in tasks), reverse=True)
        demand, min_task = sum(req), req[-1]
        base_cap = node_gpu_capacity(s)
        cap = base_cap.copy()
        total_cap = float(base_cap.sum())
        accepted = s.accepted
        node = s.node
        batches: list[Batch] = []
        self._batches = batches  # the current search's accumulated batches (diagnostics and tests)
        node_batches: dict[int, list[int]] = {}
        first_seen: dict[int, int] = {}
        seen_tasks = 0
        tried: set[tuple] = set()
        budget = MAX_SCENARIOS_PER_JOB
        # Packing pre-check (.packing): worth its cost where simulations are long (gangs, consolidation).
        check = self.victims_must_be_placed or len(tasks) > 1
        own = task_classes(s, tasks) if check else None
        if check and not self._may_ever_succeed(own, victims):
            self.ruled_out += 1
            return None
        deltas: list = []   # per batch: what evicting it adds to the nodes (.packing.victim_delta)
        must: list = []     # per batch: its task classes that must be placed again (consolidation)
        while True:
            batch = victims.pop()
            if batch is None:
                return None
            b = len(batches)
            batches.append(batch)
            if check:
                deltas.append(victim_delta(s, batch.tasks))
                if self.victims_must_be_placed:
                    must.append(self._must_place(batch))
            for i in batch.tasks:
                n = node[i]
                if n < 0:
                    continue
                cap[n] += accepted[i]
                lst = node_batches.setdefault(n, [])
                if not lst or lst[-1] != b:
                    lst.append(b)
                first_seen.setdefault(n, seen_tasks)
                seen_tasks += 1
            if not _greedy_fits(req, cap):
                continue
            # The chunk's own fit only grows with victims: if it fails on everything accumulated so far, it
            # fails on every sub-scenario of this accumulation.
            chunk_may_fit = not check or may_place(s, own, capacity_with(s, deltas))
            for picked in self._sub_scenarios(node_batches, first_seen, cap, base_cap, total_cap, demand,
                                              min_task, len(batches)):
                # Batches are disjoint, non-empty task sets (each pop takes tasks no earlier pop took), so the
                # set of batch indices identifies the scenario's victim tasks.
                fingerprint = tuple(picked)
                if not fingerprint or fingerprint in tried:
                    continue
                tried.add(fingerprint)
                chosen = [batches[k] for k in picked]
                if budget <= 0 or self.simulations >= MAX_SCENARIOS_PER_ACTION:
                    self.exhausted = self.simulations >= MAX_SCENARIOS_PER_ACTION
                    return None
                budget -= 1
                self.simulations += 1
                if check and not (chunk_may_fit and self._may_succeed(own, picked, deltas, must)):
                    self.pruned += 1
                    continue
                solution = self._simulate(j, chosen)
                if solution is not None:
                    return solution

    @staticmethod
    def _sub_scenarios(node_batches, first_seen, cap, base_cap, total_cap, demand, min_task, n_batches):
        """Batch-index lists of the sub-scenarios of an accumulated scenario (``subScenarioEmitter``)."""
        nodes = [n for n in node_batches if not (min_task > 0 and cap[n] < min_task)]
        nodes.sort(key=lambda n: (cap[n], first_seen[n]))
        baseline = total_cap - sum(float(base_cap[n]) for n in node_batches)
        remaining = max(0.0, demand - baseline)
        k = 0
        if remaining > 0:
            acc = 0.0
            k = len(nodes) + 1
            for idx, n in enumerate(nodes):
                acc += float(cap[n])
                if acc >= remaining:
                    k = idx + 1
                    break
        dk = 1
        while k <= len(nodes):
            picked: dict[int, None] = {}
            for n in nodes[:k]:
                for b in node_batches[n]:
                    picked[b] = None
            yield sorted(picked)
            if k >= len(nodes):
                return
            k = min(k + dk, len(nodes))
            dk *= 2

    def _must_place(self, batch: Batch) -> dict:
        """Task classes of a victim batch that must be placed again for consolidation to accept: a victim
        left releasing fails the scenario; a pipelined one with no old node goes back to pending when
        evicted, which the validator accepts."""
        st, shadow = self.s.status, self.s.shadow
        return task_classes(self.s, [i for i in batch.tasks if st[i] != "pipelined" or i in shadow])

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
        for c, n in self._must_place(Batch(job=-1, tasks=every)).items():
            classes[c] = classes.get(c, 0) + n
        return may_place(s, classes, cap)

    def _may_succeed(self, own: dict, picked: list[int], deltas: list, must: list) -> bool:
        """Packing pre-check of one scenario (:func:`.packing.may_place`): the chunk — plus every victim when
        victims must all be placed again — must fit on idle + releasing resources with the victims gone."""
        s = self.s
        cap = capacity_with(s, [deltas[k] for k in picked])
        if not self.victims_must_be_placed:
            return may_place(s, own, cap)
        classes = dict(own)
        for k in picked:
            for c, n in must[k].items():
                classes[c] = classes.get(c, 0) + n
        return may_place(s, classes, cap)  # implies the chunk's own check (same eligibility, larger sums)

    def _simulate(self, j: int, batches: list[Batch]) -> Optional[Solution]:
        s = self.s
        stmt = Statement(s)
        first = len(s.evictions)
        preemptor = s.jobs[j].key
        before = active_used(s, j)
        for bt in batches:
            for i in bt.tasks:
                stmt.evict(i, self.action, preemptor=preemptor)
        placed = False
        for jj in sim_job_order(s, [j] + [bt.job for bt in batches], self._known):
            ok = allocate_job_sim(s, stmt, jj, self._tasks if jj == j else None)
            if jj == j:
                if not ok:
                    stmt.discard()
                    return None
                placed = True
        st = s.status
        victim_tasks = [i for bt in batches for i in bt.tasks]
        if not placed or (self.validator is not None and not self.validator(j, batches)) \
                or not gang_satisfied(s, j) or active_used(s, j) <= before:
            stmt.discard()
            return None
        return Solution(statement=stmt, batches=batches,
                        evicted=[i for i in victim_tasks if st[i] == "releasing"],
                        moved=[i for i in victim_tasks if st[i] == "pipelined"],
                        restored=[i for i in victim_tasks if st[i] in ("running", "binding")],
                        first_eviction=first)


def _greedy_fits(req: list[float], cap: np.ndarray) -> bool:
    """KAI's accumulated-idle-GPUs filter: the GPU requests (largest first) fit greedily on the
    ``len(req)`` nodes with the most capacity."""
    if not req or req[0] <= 0:
        return True
    k = min(len(req), cap.size)
    if k == 0:
        return False
    if k == 1:
        holders = [float(cap.max())]
    else:
        top = np.argpartition(-cap, k - 1)[:k]
        holders = sorted(cap[top].tolist(), reverse=True)
    used = [0.0] * len(holders)
    for r in req:
        if r <= 0:
            return True
        matched = False
        for h, total in enumerate(holders):
            if total < r:
                break
            if total - used[h] >= r:
                used[h] += r
                matched = True
                break
        if not matched:
            return False
    return True
