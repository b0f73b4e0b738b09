"""KAI's preempt action: inside one queue, a higher-priority pending job evicts lower-priority running jobs
(``pkg/scheduler/actions/preempt/preempt.go``; kai-semantics §c.5).

For every pending job in queue/job order (jobs inside their preemption delay skipped, §c.8):

- a non-preemptible job whose chunk would put its queue's non-preemptible allocation over quota at any level
  (``IsNonPreemptibleJobOverQueueQuotaFn``) is skipped;
- victim candidates (``buildFilterFuncForPreempt``): preemptible jobs of the **same** leaf queue with
  **strictly lower** priority and at least one active task, not the job itself, and not protected by the
  preempt min runtime (§c.7; elastic victims are checked per scenario instead);
- the shared solver (:mod:`.solver`) picks victims in victim order; the scenario validator is min runtime's
  elastic check only (no fair-share rules inside a queue).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..ordering import JobsOrderByQueues
from . import register_action
from .minruntime import elastic_victims_valid, preempt_min_runtime, protected_mask, runtime_by_queue
from .signatures import SignatureSkips
from .allocate import missing_config_maps
from .budgets import ActionBudget
from .solver import Solver, note_failed_search, sim_tasks_to_allocate
from .victims import JobFacts, VictimQueue, eviction_triggers


def preempt_message(session, preemptor: int, victim: int) -> str:
    p, v = session.jobs[preemptor], session.jobs[victim]
    return (f"preempt for job {p.key} (priority {p.priority}) of queue {session.queues.names[p.queue]}: "
            f"victim job {v.key} has lower priority {v.priority} in the same queue")


def preempt(session) -> None:
    """Run the preempt action on the session."""
    triggers = eviction_triggers(session)
    if not triggers:
        return
    order = JobsOrderByQueues(session, triggers)
    solver = Solver(session, "preempt", budget=ActionBudget())
    signatures = SignatureSkips(session, "preempt", per_queue=True)
    facts: Optional[JobFacts] = None
    protected: Optional[np.ndarray] = None
    qs = session.queues
    solver.validator = lambda _j, batches, _pending: elastic_victims_valid(
        session, batches, lambda jj: preempt_min_runtime(session, session.jobs[jj].queue))
    while True:
        j = order.pop()
        if j is None:
            break
        tasks = sim_tasks_to_allocate(session, j)
        if not tasks or signatures.skip(j) or missing_config_maps(session, tasks) is not None:
            continue
        info = session.jobs[j]
        if not info.preemptible:
            req = session.job_request(j, tasks, session.max_gpu_mem)
            if qs.non_preemptible_over_quota(info.queue, req) is not None:
                signatures.failed(j)  # KAI checks this inside the attempt: a failure like any other
                continue
        if facts is None:
            facts = JobFacts(session)
            rt = np.append(runtime_by_queue(session, None), 0.0)
            protected = protected_mask(session, facts.last_start, rt[facts.queue]) & ~facts.elastic
        mask = facts.base_candidates() & (facts.queue == info.queue) & (facts.priority < info.priority) & ~protected
        mask[j] = False
        order_q = facts.leaf_order(info.queue)
        sel = order_q[mask[order_q]]
        if not sel.size:
            signatures.failed(j)
            continue
        solution = solver.solve(j, lambda: VictimQueue(session, facts, {info.queue: sel}), tasks)
        if solution is None:
            note_failed_search(session, j, solver.last)
            if solver.exhausted:
                break
            signatures.failed(j)
            continue
        names = session.task_index
        solution.explanation.reason = (f"(priority {info.priority}) to take lower-priority pods of its queue "
                                       f"{qs.names[info.queue]}")
        for e in session.evictions[solution.first_eviction:]:
            e.message = preempt_message(session, j, session.task_job[names[e.task]])
            e.scenario = solution.explanation
        solution.commit(session)
        session.clear_reason(j)
        facts.refresh(solution.jobs + [j])


register_action("preempt", preempt)

__all__ = ["preempt"]
