"""KAI's consolidation action: move running preemptible jobs to make room for a pending job that fits
nowhere, when nothing is lost (``pkg/scheduler/actions/consolidation/consolidation.go``; kai-semantics §c.3).

- Off when ``config.max_consolidation_preemptees == 0``. (KAI's operator also leaves the action out of the
  scheduler configuration of a shard whose GPU or CPU placement is ``spread``; a listed action runs.)
- Only pending **preemptible** jobs (outside their preemption delay) are tried, and only when the cluster
  has enough idle + releasing GPUs in total for the job's chunk (``IsEnoughGPUsAllocatableForJob``).
- Victim candidates: preemptible jobs of **any** queue with an active task, other than the job itself, at
  most ``max_consolidation_preemptees`` of them (−1 = unlimited), in victim order.
- The shared solver (:mod:`.solver`) simulates; a scenario is accepted only if **every** victim task was
  placed again in the same session (pipelined elsewhere or put back), none left releasing
  (``allPodsReallocated``). The preemptor is pipelined onto the freed resources.

KAI picks its candidates in Go map order (random) and its counter admits one more than N: N + 1 jobs; we take
the first N + 1 distinct jobs in victim order, so runs are reproducible and equal KAI's whenever it has no
more than N + 1 candidates.
"""

from __future__ import annotations

from typing import Optional

from ..ordering import JobsOrderByQueues
from . import register_action
from .signatures import SignatureSkips
from .allocate import missing_config_maps
from .budgets import ActionBudget
from .solver import Solver, note_failed_search, sim_tasks_to_allocate
from .victims import JobFacts, VictimQueue, eviction_triggers, node_gpu_capacity


def enabled(session) -> bool:
    """Off only when ``max_consolidation_preemptees == 0``: KAI runs the actions its configuration lists. (KAI's
    operator leaves consolidation out of the list it writes for a shard with spread placement; the what-if
    placement override does the same, :meth:`scheduler.whatif.WhatIf.apply`.)"""
    return session.config.max_consolidation_preemptees != 0


def enough_gpus(session, tasks: list[int]) -> bool:
    """KAI ``IsEnoughGPUsAllocatableForJob``: idle + releasing GPUs over ready nodes cover the chunk."""
    need = sum(session.request_gpus(i, session.min_gpu_mem) for i in tasks)
    return need <= 0 or float(node_gpu_capacity(session).sum()) + 1e-9 >= need


def smallest_chunk_gpus(session, jobs) -> float:
    """A lower bound of every job's next-chunk GPUs (as :func:`enough_gpus` counts them): the smallest request
    among the tasks a chunk can hold (pending, or evicted earlier in this session). 0 when some job could
    ask for no GPU; +inf for no jobs."""
    st, evicted = session.status, session.evict_prior
    low = float("inf")
    for j in jobs:
        for i in session.jobs[j].tasks:
            if st[i] == "pending" or (st[i] == "releasing" and i in evicted):
                low = min(low, session.request_gpus(i, session.min_gpu_mem))
                if low <= 0:
                    return 0.0
    return low


def _none_can_start(session, jobs) -> bool:
    """No job can pass :func:`enough_gpus` now. The cluster's idle + releasing GPUs change only when a
    consolidation is committed, so until then every remaining pop would be skipped."""
    return smallest_chunk_gpus(session, jobs) > float(node_gpu_capacity(session).sum()) + 1e-9


def consolidation_message(session, preemptor: int, victim: int, moved_to: Optional[str]) -> str:
    p, v = session.jobs[preemptor], session.jobs[victim]
    where = f"moved to {moved_to}" if moved_to else "placed again"
    return f"consolidation for job {p.key} of queue {session.queues.names[p.queue]}: job {v.key} {where} to defragment"


def _all_reallocated(session, _j, batches) -> bool:
    st = session.status
    return all(st[i] != "releasing" for b in batches for i in b.tasks)


def consolidation(session) -> None:
    """Run the consolidation action on the session."""
    if not enabled(session):
        return
    triggers = eviction_triggers(session, preemptible_only=True)
    if not triggers or _none_can_start(session, triggers):
        return
    order = JobsOrderByQueues(session, triggers)
    popped: set[int] = set()
    solver = Solver(session, "consolidation", validator=lambda j, b, _p: _all_reallocated(session, j, b),
                    victims_must_be_placed=True, budget=ActionBudget())
    limit = int(session.config.max_consolidation_preemptees)
    cap = -1 if limit < 0 else limit + 1   # KAI's candidate counter admits one job more than the limit
    signatures = SignatureSkips(session, "consolidation", per_queue=False)  # one table for all queues
    facts: Optional[JobFacts] = None
    while True:
        j = order.pop()
        if j is None:
            break
        popped.add(j)
        tasks = sim_tasks_to_allocate(session, j)
        if not tasks or signatures.skip(j) or missing_config_maps(session, tasks) is not None:
            continue
        if not enough_gpus(session, tasks):
            signatures.failed(j)  # a shortcut for an attempt that cannot succeed
            continue
        if facts is None:
            facts = JobFacts(session)
        mask = facts.base_candidates()
        mask[j] = False
        victims = {}
        for q in {int(q) for q in facts.queue[mask].tolist()}:
            order_q = facts.leaf_order(q)
            sel = order_q[mask[order_q]]
            if sel.size:
                victims[q] = sel
        if not victims:
            signatures.failed(j)
            continue
        solution = solver.solve(j, lambda: VictimQueue(session, facts, victims, max_jobs=cap), tasks)
        if solution is None:
            note_failed_search(session, j, solver.last)
            if solver.exhausted:
                break
            signatures.failed(j)
            continue
        names = session.task_index
        moved = len(solution.moved)
        solution.explanation.reason = (f"so that it fits: {moved} pod{'s' if moved != 1 else ''} of "
                                       f"{len(solution.explanation.victim_jobs)} job(s) move, none is lost")
        for e in session.evictions[solution.first_eviction:]:
            e.message = consolidation_message(session, j, session.task_job[names[e.task]], e.moved_to)
            e.scenario = solution.explanation
        solution.commit(session)
        session.clear_reason(j)
        facts.refresh(solution.jobs + [j])
        if _none_can_start(session, [k for k in triggers if k not in popped]):
            break


register_action("consolidation", consolidation)

__all__ = ["consolidation", "enabled", "enough_gpus", "smallest_chunk_gpus"]
