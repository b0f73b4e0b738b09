"""KAI's reclaim action: a queue below its fair share takes resources back from queues above theirs
(``pkg/scheduler/actions/reclaim/reclaim.go``, ``plugins/proportion/reclaimable/*``; kai-semantics §c.4).

For every pending job in queue/job order (jobs inside their preemption delay skipped, §c.8):

1. ``CanReclaimResources``: the job's leaf queue ``Allocated + chunk ≤ FairShare`` in all three resources;
   a non-preemptible job also needs ``AllocatedNonPreemptible + chunk ≤ Deserved``. Every comparison here is
   exact float64, as KAI's ``compareQuantities`` (docs/actions.md, *Float comparisons*).
2. Victim candidates: preemptible jobs with an active task in *other* leaf queues, passing

   - the proportion victim filter on the *leveled* queues (the first hierarchy level where the two ancestor
     chains diverge): if the reclaimer's leveled queue would exceed its deserved quota with the chunk, the
     victim's leveled queue must be above its allocatable share (``max(deserved, fair share)`` capped by
     the limit) in some resource; otherwise the victim's leveled queue must be over deserved in a resource
     the reclaimer requests, or exactly at deserved in all of them;
   - min runtime (§c.7, :mod:`.minruntime`) for non-elastic victims.
3. The solver (:mod:`.solver`) takes victims in victim order (:class:`.victims.VictimQueue`) and simulates.
4. :class:`ReclaimValidator` checks a simulated scenario against the queue values frozen when the job's
   search started: every victim (elastic surplus tasks one by one, the core of a job as one) must leave its
   leveled queue above its allocatable share (*MaintainFairShare*) or — when the reclaimer's leveled queue
   stays within deserved — above deserved (*GuaranteeDeservedQuota*), checked before subtracting it; then,
   walking up the reclaimer's chain, at each level the reclaimer (with the chunk) must not end up
   proportionally more saturated than a sibling that lost resources:
   fail if ``ratio_r > 1 and fair_sibling > 0 and ratio_r · m ≥ ratio_sibling`` with
   ``ratio = allocated / fair share`` and ``m = config.reclaimer_saturation_multiplier``; non-preemptible
   reclaimers also stay within deserved at every level. With ``allow_consolidating_reclaim`` victims that
   were only moved (or put back) are not counted as reclaimed.
5. The first valid scenario is committed: victims evicted (or moved), the job pipelined.

Every eviction message names the reclaimer, its queue's allocated / fair share and the victim queue's.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..decisions import Deferred
from ..model import UNLIMITED
from ..ordering import JobsOrderByQueues
from ..session import ACTIVE_ALLOCATED
from . import register_action
from .minruntime import elastic_victims_valid, protected_mask, reclaim_min_runtime, runtime_by_queue
from .signatures import SignatureSkips
from .allocate import missing_config_maps
from .budgets import ActionBudget
from .solver import Solver, note_failed_search, sim_tasks_to_allocate
from .victims import Batch, JobFacts, LeafStart, VictimQueue, eviction_triggers, merge_by_job

R_GPU, R_CPU, R_MEM = 0, 1, 2


def _le(a: float, b: float) -> bool:
    """KAI ``compareQuantities(a, b) <= 0`` with −1 as +infinity: exact, no float tolerance, as KAI compares
    (``resource_share/resource_quantities.go``). A sum one ulp above a share is above it (docs/actions.md,
    *Float comparisons*)."""
    if a == UNLIMITED:
        return b == UNLIMITED
    if b == UNLIMITED:
        return True
    return a <= b


def _le3(a: list, b: list) -> bool:
    """:func:`_le` in all three resources (rows of plain floats)."""
    return _le(a[0], b[0]) and _le(a[1], b[1]) and _le(a[2], b[2])


def _le_sum(a: list, req: list, b: list) -> bool:
    """``_le3(a + req, b)`` (the same float64 sums as the arrays')."""
    return _le(a[0] + req[0], b[0]) and _le(a[1] + req[1], b[1]) and _le(a[2] + req[2], b[2])


class QueueRows:
    """The queue values reclaim reads that are fixed for a session (deserved, fair share, allocatable, parents,
    leveled queue pairs) as plain-Python rows, read once per action run: numpy's per-call cost on a row of 3 is
    several times the comparison, and a reclaim reads them for every reclaimer. Python's float arithmetic is
    numpy's, operation for operation, so every check gives the same answer."""

    __slots__ = ("deserved", "fair", "allocatable", "parent", "chains", "_leveled")

    def __init__(self, queues):
        self.deserved = queues.deserved.tolist()
        self.fair = queues.fair_share.tolist()
        self.allocatable = queues.allocatable.tolist()
        self.parent = queues.parent.tolist()
        self.chains = queues.chains
        self._leveled: dict[tuple, tuple] = {}

    def leveled(self, reclaimer_queue: int, victim_queue: int) -> tuple[int, int]:
        """:func:`leveled`, kept per queue pair."""
        key = (reclaimer_queue, victim_queue)
        hit = self._leveled.get(key)
        if hit is None:
            hit = self._leveled[key] = _leveled(self.chains, reclaimer_queue, victim_queue)
        return hit


def leveled(session, reclaimer_queue: int, victim_queue: int) -> tuple[int, int]:
    """KAI ``getLeveledQueues``: the two queues at the first level where the ancestor chains diverge."""
    return _leveled(session.queues.chains, reclaimer_queue, victim_queue)


def _leveled(chains: list, reclaimer_queue: int, victim_queue: int) -> tuple[int, int]:
    rp, vp = chains[reclaimer_queue][::-1], chains[victim_queue][::-1]
    r = v = -1
    for i in range(min(len(rp), len(vp))):
        r, v = rp[i], vp[i]
        if r != v:
            break
    return r, v


def can_reclaim(session, j: int, req: np.ndarray, rows: Optional[QueueRows] = None) -> bool:
    """KAI ``CanReclaimResources``: the reclaimer's leaf queue stays within its fair share with the chunk
    (non-preemptible jobs also within deserved). ``rows``: the session's :class:`QueueRows` when the caller
    keeps them."""
    qs = session.queues
    rows = QueueRows(qs) if rows is None else rows
    q = session.jobs[j].queue
    req = _floats(req)
    if not _le_sum(qs.allocated_rows[q], req, rows.fair[q]):
        return False
    if not session.jobs[j].preemptible and not _le_sum(qs.allocated_np_rows[q], req, rows.deserved[q]):
        return False
    return True


def _floats(v) -> list:
    return v.tolist() if isinstance(v, np.ndarray) else [float(x) for x in v]


def filter_victim_queue(session, reclaimer_queue: int, req: np.ndarray, victim_queue: int,
                        rows: Optional[QueueRows] = None) -> bool:
    """KAI proportion ``FilterVictim`` (live queue values): can any reclaim strategy take from this queue?
    ``rows``: as for :func:`can_reclaim`."""
    qs = session.queues
    rows = QueueRows(qs) if rows is None else rows
    r, v = rows.leveled(reclaimer_queue, victim_queue)
    if r < 0 or v < 0:
        return True
    req = _floats(req)
    alloc = qs.allocated_rows
    deserved_v = rows.deserved[v]
    if not _le_sum(alloc[r], req, rows.deserved[r]):
        return not _le3(alloc[v], rows.allocatable[v])  # MaintainFairShare
    has_under = False
    alloc_v = alloc[v]
    for res in range(3):
        if req[res] <= 0 or deserved_v[res] == UNLIMITED:
            continue
        if alloc_v[res] > deserved_v[res]:   # exact, as KAI's filter_victims.go
            return True
        if alloc_v[res] < deserved_v[res]:
            has_under = True
    return not has_under


def _ratio(allocated: float, fair: float) -> float:
    if fair == 0:
        return float("inf") if allocated > 0 else 0.0
    if fair == UNLIMITED:
        return 0.0
    return allocated / fair


class ReclaimValidator:
    """KAI ``Reclaimable`` + minruntime's reclaim validator, with queue values frozen at construction
    (``OnJobSolutionStart`` clones the queues)."""

    def __init__(self, session, j: int, req: np.ndarray, tasks: Optional[list[int]] = None,
                 rows: Optional[QueueRows] = None):
        """``req``: the request of the job's chunk ``tasks`` (when given, a probe of that whole chunk reuses
        it instead of summing the tasks again); ``rows``: the session's :class:`QueueRows` when the caller keeps
        them."""
        qs = session.queues
        self.s = session
        self.j = j
        self.queue = session.jobs[j].queue
        self.preemptible = session.jobs[j].preemptible
        self.req = np.asarray(req, dtype=float)
        self._req = self.req.tolist()
        self.tasks = None if tasks is None else tuple(tasks)
        # the frozen Allocated rows (KAI clones the queues): QueueState.add replaces a queue's row, never edits it,
        # so a shallow copy of the lists keeps them
        self._alloc_rows = list(qs.allocated_rows)
        self._alloc_np_rows = list(qs.allocated_np_rows)
        self.rows = QueueRows(qs) if rows is None else rows
        self.multiplier = float(session.config.reclaimer_saturation_multiplier)
        self.allow_consolidating = bool(session.config.allow_consolidating_reclaim)
        self.last_failure = ""

    # ---- victims as KAI counts them

    def victim_vectors(self, batch: Batch) -> list[list[float]]:
        """``getVictimResources``: elastic tasks one vector each, the gang core one vector (GPUs, CPU, memory as
        the tasks add to their queue's Allocated); tasks that are still active (moved or put back) are skipped
        when consolidating reclaim is allowed."""
        s = self.s
        st = s.status
        sets = s.podsets(batch.job)
        if len(sets) == 1 and sets[0].min_available >= len(batch.tasks):
            parts = [batch.tasks]   # the whole batch is the gang core
        else:
            core: list[int] = []
            elastic: list[int] = []
            for ps in sets:
                group = batch.tasks if len(sets) == 1 else [i for i in batch.tasks if i in ps.tasks]
                if not group:
                    continue
                if ps.min_available >= len(group):
                    core.extend(group)
                else:
                    core.extend(group[: ps.min_available])
                    elastic.extend(group[ps.min_available:])
            parts = [[i] for i in elastic] + [core]
        accepted, cpu, mem = s.accepted, s._cpu_l, s._mem_l
        skip_active = self.allow_consolidating
        out = []
        for part in parts:
            g = c = m = 0.0   # Session.queue_amount summed from zero, as the float64 array sum does
            counted = False
            for i in part:
                if skip_active and st[i] in ACTIVE_ALLOCATED:
                    continue
                counted = True
                g += accepted[i]
                c += cpu[i]
                m += mem[i]
            if counted:
                out.append([g, c, m])
        return out

    def __call__(self, j: int, batches: list[Batch], pending: Optional[tuple] = None) -> bool:
        """``pending``: the tasks the probe placed (KAI's reclaimer is the probe's partial job, whose request
        is those tasks'); None = the whole chunk."""
        s = self.s
        by_queue: dict[int, list] = {}
        merged = batches if len(batches) == 1 else merge_by_job(batches)   # one batch: already one per job
        jobs = s.jobs
        for bt in merged:
            vecs = self.victim_vectors(bt)
            if vecs:
                q = jobs[bt.job].queue
                have = by_queue.get(q)
                if have is None:
                    by_queue[q] = vecs
                else:
                    have.extend(vecs)
        if pending is None or pending == self.tasks:
            req = self._req
        else:
            req = list(s._job_request(list(pending), s.min_gpu_mem))
        if not self.reclaimable(by_queue, req):
            return False
        if not any(b.elastic for b in merged):
            return True   # (elastic_victims_valid's own first check)
        rq = self.queue
        return elastic_victims_valid(s, merged, lambda jj: reclaim_min_runtime(s, rq, s.jobs[jj].queue))

    def _fits_strategy(self, r_lvl: int, v_lvl: int, remaining: list, req: list) -> bool:
        rows = self.rows
        if not _le3(remaining, rows.allocatable[v_lvl]):
            return True  # MaintainFairShare
        return _le_sum(self._alloc_rows[r_lvl], req, rows.deserved[r_lvl]) and \
            not _le3(remaining, rows.deserved[v_lvl])  # GuaranteeDeservedQuota

    def reclaimable(self, by_queue: dict[int, list], req=None) -> bool:
        """The *Reclaimable* rules for victim vectors ``{victim leaf queue: [(GPUs, CPU, memory)]}`` (lists or
        arrays) and the reclaimer's request (default: the chunk's)."""
        req = self._req if req is None else _floats(req)
        qs = self.s.queues
        rows = self.rows
        chains = qs.chains
        alloc = self._alloc_rows
        remaining: dict[int, list] = {}
        involved: dict[int, set[int]] = {}
        rq = self.queue
        for vq, vecs in by_queue.items():
            r_lvl, v_lvl = rows.leveled(rq, vq)
            involved[vq] = {r for v in vecs for r in range(3) if v[r] > 0}
            if v_lvl not in remaining:
                remaining[v_lvl] = list(alloc[v_lvl])
            for vec in vecs:
                if not self._fits_strategy(r_lvl, v_lvl, remaining[v_lvl], req):
                    self.last_failure = f"victim queue {qs.names[v_lvl]} would not stay above its share"
                    return False
                v0, v1, v2 = vec
                for a in chains[vq]:
                    mine = remaining.get(a)
                    if mine is None:
                        mine = remaining[a] = list(alloc[a])
                    mine[0] -= v0
                    mine[1] -= v1
                    mine[2] -= v2
                    involved[a] = involved.get(a, set()) | involved[vq]
        req_involved = {r for r in range(3) if req[r] > 0}
        parent, fair = rows.parent, rows.fair
        q0, q1, q2 = req
        for a in chains[rq]:
            mine = remaining.get(a)
            if mine is not None:
                mine[0] += q0   # KAI adds the request to the shared map entry
                mine[1] += q1
                mine[2] += q2
            else:
                al = alloc[a]
                mine = [al[0] + q0, al[1] + q1, al[2] + q2]
            for sib, sib_rem in remaining.items():
                if sib == a or parent[sib] != parent[a]:
                    continue
                for r in involved.get(sib, set()) | req_involved:
                    f_r, f_s = fair[a][r], fair[sib][r]
                    if f_r == UNLIMITED and f_s == UNLIMITED:
                        continue
                    ratio_r = _ratio(float(mine[r]), f_r)
                    ratio_s = _ratio(float(sib_rem[r]), f_s)
                    if ratio_r > 1 and f_s > 0 and ratio_r * self.multiplier >= ratio_s:
                        self.last_failure = (f"queue {qs.names[a]} would be more saturated than sibling "
                                             f"{qs.names[sib]}")
                        return False
            if not self.preemptible and not _le_sum(self._alloc_np_rows[a], req, rows.deserved[a]):
                self.last_failure = f"non-preemptible job would put {qs.names[a]} over its deserved quota"
                return False
        return True

    # ---- message

    def reason(self) -> str:
        """Why the reclaimer may take resources, e.g. ``to reach its fair share of 142 GPUs (allocated 130,
        requests 8)``: its leaf queue's numbers in the resource it asks most of."""
        d = self.deferred_reason()
        return d.fn(*d.args)

    def deferred_reason(self) -> Deferred:
        """:meth:`reason`, formatted when first read (the queue values it reads are the frozen ones and the
        session's fixed fair shares)."""
        qs = self.s.queues
        return Deferred(_reason_text, qs.names, qs.fair_share, self._alloc_rows, self.req, self.queue)

    def message(self, victim_job: int) -> str:
        """Why this victim was taken, with the frozen queue numbers."""
        d = self.deferred_message(victim_job)
        return d.fn(*d.args)

    def deferred_message(self, victim_job: int) -> Deferred:
        """:meth:`message`, formatted when first read."""
        s = self.s
        qs = s.queues
        return Deferred(_message_text, qs.names, qs.chains, qs.fair_share, qs.deserved, self._alloc_rows, self.req,
                        self.queue, s.jobs[victim_job].queue, s.jobs[self.j].key)


def _main_resource(req: np.ndarray) -> int:
    return R_GPU if req[R_GPU] > 0 else (R_CPU if req[R_CPU] > 0 else R_MEM)


def _reason_text(names: list, fair_share: np.ndarray, alloc: list, req: np.ndarray, q: int) -> str:
    """:meth:`ReclaimValidator.reason` from the values it reads (``alloc``: the frozen Allocated rows)."""
    res = _main_resource(req)
    scale, unit = {R_GPU: (1.0, "GPUs"), R_CPU: (1000.0, "CPU cores"), R_MEM: (2**30, "GiB memory")}[res]
    return (f"to reach its fair share of {fair_share[q, res] / scale:g} {unit} in queue {names[q]} "
            f"(allocated {alloc[q][res] / scale:g}, requests {req[res] / scale:g})")


def _message_text(names: list, chains: list, fair_share: np.ndarray, deserved: np.ndarray, alloc: list,
                  req: np.ndarray, rq: int, vq: int, reclaimer: str) -> str:
    """:meth:`ReclaimValidator.message` from the values it reads (``alloc``: the frozen Allocated rows)."""
    r_lvl, v_lvl = _leveled(chains, rq, vq)
    res = _main_resource(req)

    def amount(x: float) -> str:
        if res == R_GPU:
            return f"{x:g}"
        if res == R_CPU:
            return f"{x / 1000:g}"
        return f"{x / 2**30:.3g}"

    unit = {R_GPU: "GPUs", R_CPU: "CPU cores", R_MEM: "GiB memory"}[res]

    def where(leaf: int, lvl: int) -> str:
        return f"queue {names[leaf]}" + ("" if lvl == leaf else f" (compared at {names[lvl]})")

    va, vfs, vd = alloc[v_lvl][res], fair_share[v_lvl, res], deserved[v_lvl, res]
    rel = ">" if va > vfs else "≤"
    vd_text = "unlimited" if vd == UNLIMITED else amount(vd)
    return (f"reclaim for job {reclaimer} of {where(rq, r_lvl)} "
            f"(allocated {amount(alloc[r_lvl][res])} / fair share {amount(fair_share[r_lvl, res])} "
            f"{unit}, requests {amount(req[res])}); victim queue {names[v_lvl]} allocated "
            f"{amount(va)} {rel} fair share {amount(vfs)} {unit} (deserved {vd_text})")


# ---------------------------------------------------------------------------------------------- candidates

class _Candidates:
    """Victim candidates per reclaimer queue, as numpy masks over jobs."""

    def __init__(self, session, facts: JobFacts, rows: Optional[QueueRows] = None):
        self.s = session
        self.facts = facts
        self.rows = QueueRows(session.queues) if rows is None else rows
        leaves = np.unique(facts.queue[facts.preemptible & facts.queue_ok])
        self.leaves = [int(q) for q in leaves.tolist()]
        self._protected: dict[int, np.ndarray] = {}
        self._masks: dict[int, tuple] = {}     # reclaimer queue -> (facts version, candidate mask)
        self._starts: dict[tuple, LeafStart] = {}   # (reclaimer queue, victim leaf) -> its first candidate

    def protected(self, rq: int) -> np.ndarray:
        """Non-elastic jobs protected from reclaim by this reclaimer queue (§c.7); fixed for the session."""
        mask = self._protected.get(rq)
        if mask is None:
            f = self.facts
            rt = np.append(runtime_by_queue(self.s, rq), 0.0)
            mask = protected_mask(self.s, f.last_start, rt[f.queue]) & ~f.elastic
            self._protected[rq] = mask
        return mask

    def for_job(self, j: int, req: np.ndarray) -> dict[int, tuple]:
        """``{victim leaf queue: (its jobs in victim order, candidate mask)}`` for the reclaimer ``j``; the
        victim queue checks the mask as it walks a leaf."""
        s, f = self.s, self.facts
        rq = s.jobs[j].queue
        rows = self.rows
        ok = [q for q in self.leaves if q != rq and filter_victim_queue(s, rq, req, q, rows)]
        if not ok:
            return {}
        mask = self._masks.get(rq)
        if mask is None or mask[0] != f.version:
            changed = None if mask is None else f.refreshed_since(mask[0])
            if changed is None or len(changed) > 64:
                mask = (f.version, f.base_candidates() & ~self.protected(rq))
                for q in self.leaves:
                    self._starts.pop((rq, q), None)
            else:  # after a commit: only the refreshed jobs' entries can differ, patched in place (the victim
                # queues of earlier searches that read this array are not used again)
                arr = mask[1]
                protected = self.protected(rq)
                for jj in set(changed):
                    now = f.base_candidate(jj) and not protected[jj]
                    if now and not arr[jj]:   # a new candidate: its leaf's first one may be earlier now
                        self._starts.pop((rq, int(f.queue[jj])), None)
                    arr[jj] = now
                mask = (f.version, arr)
            self._masks[rq] = mask
        out = {}
        for q in ok:
            order = f.leaf_order(q)
            start = self._starts.get((rq, q))
            if start is None or start.arr is not order:   # a rebuilt order starts over
                start = self._starts[(rq, q)] = LeafStart(order)
            out[q] = (order, mask[1], start)
        return out


# ---------------------------------------------------------------------------------------------- action

def reclaim(session) -> None:
    """Run the reclaim action on the session."""
    triggers = eviction_triggers(session)
    if not triggers:
        return
    order = JobsOrderByQueues(session, triggers)
    solver = Solver(session, "reclaim", budget=ActionBudget())
    signatures = SignatureSkips(session, "reclaim", per_queue=True)
    facts: Optional[JobFacts] = None
    cands: Optional[_Candidates] = None
    rows = QueueRows(session.queues)
    while True:
        j = order.pop()
        if j is None:
            break
        tasks = sim_tasks_to_allocate(session, j)
        if not tasks:
            continue
        req = session.job_request(j, tasks, session.min_gpu_mem)
        if not can_reclaim(session, j, req, rows):
            continue
        if signatures.skip(j) or missing_config_maps(session, tasks) is not None:
            continue
        if facts is None:
            facts = JobFacts(session)
            cands = _Candidates(session, facts, rows)
        victims = cands.for_job(j, req)
        if not victims:
            signatures.failed(j)
            continue
        validator = ReclaimValidator(session, j, req, tasks, rows)
        solver.validator = validator
        # the candidates are a function of the reclaimer's queue and the victim leaves it may take from
        # (facts change only with a commit): searches with equal ones share the victim queue's pops
        solution = solver.solve(j, lambda: VictimQueue(session, facts, victims), tasks, req,
                                victims_key=(session.jobs[j].queue, tuple(sorted(victims))))
        if solution is None:
            note_failed_search(session, j, solver.last)
            if solver.exhausted:
                break
            signatures.failed(j)
            continue
        names = session.task_index
        solution.explanation.reason = validator.deferred_reason()
        for e in session.evictions[solution.first_eviction:]:
            e.message = validator.deferred_message(session.task_job[names[e.task]])
            e.scenario = solution.explanation
        solution.commit(session)
        session.clear_reason(j)
        facts.refresh(solution.jobs + [j])


register_action("reclaim", reclaim)

__all__ = ["reclaim", "can_reclaim", "filter_victim_queue", "leveled", "ReclaimValidator", "QueueRows"]
