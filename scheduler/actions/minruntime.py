"""Minimum-runtime protection of victims (KAI ``pkg/scheduler/plugins/minruntime/``, kai-semantics §c.7).

A running job may not be evicted by preempt (reclaim) while ``snapshot.time < last_start_time + min_runtime``.
The minimum runtime is resolved per queue:

- **preempt**: from the victim's queue upward to the first queue that sets ``preempt_min_runtime_s``, else
  ``config.default_preempt_min_runtime_s`` (``resolver.go resolvePreemptMinRuntime``).
- **reclaim**, ``config.min_runtime_resolve == "queue"``: the same walk with ``reclaim_min_runtime_s``.
- **reclaim**, ``"lca"`` (KAI's default): find the lowest common ancestor of the reclaimer's and the victim's
  queues, step one level down toward the victim, take that queue's value, else walk up toward the root, else
  the default. Queues under different top-level queues are siblings under an implicit root: the victim's
  top-level queue decides (``resolveReclaimMinRuntimeLCA``).

Non-elastic protected victims are filtered out of the candidates. Elastic victims stay candidates; a scenario
is rejected when it would take a protected elastic victim below ``min_available`` in some pod set
(``validVictimForMinAvailable``). Negative runtimes count as 0, as KAI's argument parser does.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from ..session import OCCUPIES_NODE
from .victims import merge_by_job


def _nonneg(x: Optional[float]) -> float:
    return max(0.0, float(x)) if x is not None else 0.0


def preempt_min_runtime(session, victim_queue: int) -> float:
    """Preempt min runtime for a victim in ``victim_queue`` (walk up from the victim's queue)."""
    queues = session.snapshot.queues
    for a in session.queues.chains[victim_queue]:
        value = queues[a].preempt_min_runtime_s
        if value is not None:
            return _nonneg(value)
    return _nonneg(session.config.default_preempt_min_runtime_s)


def reclaim_min_runtime(session, reclaimer_queue: int, victim_queue: int) -> float:
    """Reclaim min runtime for a victim in ``victim_queue`` reclaimed by a job of ``reclaimer_queue``."""
    queues = session.snapshot.queues
    default = _nonneg(session.config.default_reclaim_min_runtime_s)
    victim_chain = session.queues.chains[victim_queue]
    if session.config.min_runtime_resolve == "queue":
        for a in victim_chain:
            value = queues[a].reclaim_min_runtime_s
            if value is not None:
                return _nonneg(value)
        return default
    victim_path = victim_chain[::-1]            # root → leaf
    reclaimer_path = session.queues.chains[reclaimer_queue][::-1]
    if reclaimer_path[0] != victim_path[0]:
        value = queues[victim_path[0]].reclaim_min_runtime_s
        return default if value is None else _nonneg(value)
    lca = 0
    for i in range(min(len(victim_path), len(reclaimer_path))):
        if victim_path[i] != reclaimer_path[i]:
            break
        lca = i
    if lca + 1 < len(victim_path):
        lca += 1
    for i in range(lca, -1, -1):
        value = queues[victim_path[i]].reclaim_min_runtime_s
        if value is not None:
            return _nonneg(value)
    return default


def protected_mask(session, last_start: np.ndarray, runtime: np.ndarray) -> np.ndarray:
    """Per job: ``last_start`` set and ``snapshot.time < last_start + runtime`` (vectorised)."""
    with np.errstate(invalid="ignore"):
        return ~np.isnan(last_start) & (session.snapshot.time < last_start + runtime)


def is_protected(session, j: int, runtime: float) -> bool:
    """One job: KAI ``isPreemptMinRuntimeProtected`` / ``isReclaimMinRuntimeProtected``."""
    start = session.snapshot.jobs[j].last_start_time
    return start is not None and session.snapshot.time < start + runtime


def runtime_by_queue(session, reclaimer_queue: Optional[int]) -> np.ndarray:
    """Min runtime per (victim) queue index: preempt when ``reclaimer_queue`` is None, else reclaim."""
    nq = len(session.queues.names)
    if reclaimer_queue is None:
        return np.array([preempt_min_runtime(session, q) for q in range(nq)], dtype=float)
    return np.array([reclaim_min_runtime(session, reclaimer_queue, q) for q in range(nq)], dtype=float)


def elastic_victims_valid(session, batches: Iterable, runtime_of) -> bool:
    """Scenario check for protected elastic victims: no pod set of such a job may drop below its
    ``min_available`` (``runtime_of(job) -> min runtime``). Active-used tasks are counted in the simulated
    state, where the victims themselves still occupy their nodes (releasing), as KAI counts them."""
    batches = list(batches)
    if not any(b.elastic for b in batches):
        return True
    status = session.status
    for batch in merge_by_job(batches):
        j = batch.job
        if not batch.elastic:
            continue
        if not is_protected(session, j, runtime_of(j)):
            continue
        victims = set(batch.tasks)
        for ps in session.podsets(j):
            n_victims = sum(1 for i in ps.tasks if i in victims)
            if not n_victims:
                continue
            used = sum(1 for i in ps.tasks if status[i] in OCCUPIES_NODE)
            if ps.min_available > used - n_victims:
                return False
    return True
