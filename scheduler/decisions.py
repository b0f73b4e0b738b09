"""What a scheduling session decided, and why: the engine's output objects.

``ScheduleResult.to_contract()`` produces the ``kaidash schedule --format json`` document of design.md:
``fair_share``, ``tasks``, ``jobs`` (with reason codes), ``evicted`` and ``timings_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .model import Snapshot

# Reason codes: KAI's names where KAI has one (PodGroup schedulingConditions reasons, fit errors).
OVER_LIMIT = "OverLimit"
NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
PREEMPTION_DELAY_NOT_ELAPSED = "PreemptionDelayNotElapsed"
QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
OVER_CAPACITY = "OverCapacity"
GANG_NOT_READY = "NotReadyForScheduling"
NOT_ENOUGH_RESOURCES = "NotEnoughResources"
PIPELINED = "Pipelined"


@dataclass
class TaskDecision:
    """Where a task ended up after the session."""

    status: str
    node: Optional[str] = None
    gpu_groups: list[str] = field(default_factory=list)
    gpu_indices: list[int] = field(default_factory=list)
    observed_gpu_indices: Optional[list[int]] = None
    """The device indices the input snapshot recorded for the task (``None``: not known to the engine)."""

    @property
    def gpu_index_source(self) -> Optional[str]:
        """``observed`` when ``gpu_indices`` are what the input recorded, ``session`` when the session chose
        them (a new placement, or a device for a task whose device was not observed), ``None`` without any."""
        if not self.gpu_indices:
            return None
        if self.observed_gpu_indices is None:
            return None
        return "observed" if list(self.observed_gpu_indices) == list(self.gpu_indices) else "session"

    def to_contract(self) -> dict:
        def one_or_list(values):
            if not values:
                return None
            return values[0] if len(values) == 1 else list(values)

        return {"status": self.status, "node": self.node, "gpu_group": one_or_list(self.gpu_groups),
                "gpu_index": one_or_list(self.gpu_indices), "gpu_index_source": self.gpu_index_source,
                "observed_gpu_index": one_or_list(self.observed_gpu_indices or [])}


@dataclass
class JobDecision:
    """A job's outcome. ``reason`` is set when the job (or part of its gang) is still waiting.

    ``details`` carries the numbers behind the reason (queue quota/limit/allocated/requested, per-node
    first failure reasons, ...) for the pending view and ``explain``.
    """

    status: str
    reason: Optional[str] = None
    message: str = ""
    gpus_accepted: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_contract(self) -> dict:
        return {"status": self.status, "reason": self.reason, "message": self.message,
                "gpus_accepted": round(self.gpus_accepted, 6)}


@dataclass
class Eviction:
    """A task evicted by reclaim, preempt, consolidation or stale-gang eviction, with its cause."""

    task: str
    job: str
    action: str
    preemptor: Optional[str] = None
    message: str = ""
    moved_to: Optional[str] = None


@dataclass
class ScheduleResult:
    """The decisions of one session (or of N cycles) over a snapshot.

    ``snapshot`` is the state after the decisions were applied (a copy; the input is never mutated).
    """

    fair_share: dict[str, dict[str, float]]
    tasks: dict[str, TaskDecision]
    jobs: dict[str, JobDecision]
    evicted: list[Eviction] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    snapshot: Optional[Snapshot] = None
    queue_stats: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_contract(self) -> dict:
        """The ``kaidash schedule --format json`` document."""
        return {
            "fair_share": {q: {r: round(v, 6) for r, v in res.items()} for q, res in self.fair_share.items()},
            "tasks": {name: t.to_contract() for name, t in self.tasks.items()},
            "jobs": {name: j.to_contract() for name, j in self.jobs.items()},
            "evicted": [e.task for e in self.evicted],
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }
