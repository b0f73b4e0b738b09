"""What a scheduling session decided, and why: the engine's output objects.

``ScheduleResult.to_contract()`` produces the ``kaidash schedule --format json`` document of design.md:
``fair_share``, ``tasks``, ``jobs`` (with reason codes), ``evicted`` and ``timings_ms``, plus ``evictions``: every
eviction with its cause and the scenario that justified it.
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


class Deferred:
    """Text computed when first read: ``fn(*args)``. The eviction actions explain every eviction, most of which
    no view ever shows, so they hand the values a message is made of to a :class:`DeferredText` field and the
    formatting runs only when the message is read (the same text as formatting it at once)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


class DeferredText:
    """A ``str`` dataclass field that also accepts a :class:`Deferred`, turned into its text on first read
    (then kept). The default is ``""``."""

    def __set_name__(self, owner, name: str) -> None:
        self.attr = "_deferred_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return ""   # the dataclass default
        value = obj.__dict__[self.attr]
        if type(value) is Deferred:
            value = obj.__dict__[self.attr] = value.fn(*value.args)
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.attr] = value


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
class EvictionScenario:
    """The victim scenario that justified a set of evictions (one object, shared by its evictions).

    ``generator``: KAI's scenario generator that emitted the accepted set (``NodeLocalGreedy`` or
    ``MultiNodeGang``); ``victims`` / ``victim_jobs``: the tasks it evicts or moves and their jobs;
    ``tried_before``: scenarios that failed for this preemptor before the accepted one (over every generator and
    probe; a probe's success that the final probe repeats is not counted), ``smaller_tried``: of which with fewer
    victim tasks; ``probes``: KAI's search over how many of the
    preemptor's tasks can be placed, one entry ``{generator, k, of, solved, scenarios}`` per probe; ``reason``:
    why the set is allowed, with numbers; ``budget_stops``: searches a scenario budget cut short (counted in
    scenarios, see ``docs/actions.md``).
    """

    action: str
    preemptor: str
    generator: str
    victims: list[str] = field(default_factory=list)
    victim_jobs: list[str] = field(default_factory=list)
    tried_before: int = 0
    smaller_tried: int = 0
    probes: list[dict] = field(default_factory=list)
    reason: str = DeferredText()
    budget_stops: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line for a view, e.g. ``reclaimed by llm/train-7 to reach its fair share of 142 GPUs; tried 2
        smaller sets first``."""
        verb = {"reclaim": "reclaimed", "preempt": "preempted", "consolidation": "moved"}.get(self.action,
                                                                                             self.action)
        text = f"{verb} by {self.preemptor}"
        if self.reason:
            text += f" {self.reason}"
        return text + self._search_tail()

    def _search_tail(self) -> str:
        text = ""
        if self.smaller_tried:
            text += f"; tried {self.smaller_tried} smaller set{'s' if self.smaller_tried != 1 else ''} first"
        elif self.tried_before:
            text += f"; tried {self.tried_before} other set{'s' if self.tried_before != 1 else ''} first"
        if self.budget_stops:
            text += "; " + "; ".join(self.budget_stops)
        return text

    @property
    def preemptor_summary(self) -> str:
        """The same scenario seen from the preemptor, e.g. ``reclaim: evicts 2 pods of team-a/j1 to reach its fair
        share of 4 GPUs (NodeLocalGreedy); tried 2 smaller sets first``."""
        verb = {"consolidation": "moves"}.get(self.action, "evicts")
        n = len(self.victims)
        text = f"{self.action}: {verb} {n} pod{'s' if n != 1 else ''} of {', '.join(self.victim_jobs)}"
        if self.reason:
            text += f" {self.reason}"
        return text + f" ({self.generator})" + self._search_tail()

    def to_contract(self) -> dict:
        return {"action": self.action, "preemptor": self.preemptor, "generator": self.generator,
                "victims": list(self.victims), "victim_jobs": list(self.victim_jobs),
                "tried_before": self.tried_before, "smaller_tried": self.smaller_tried,
                "probes": [dict(p) for p in self.probes], "reason": self.reason,
                "budget_stops": list(self.budget_stops), "summary": self.summary}


def failed_search_summary(action: str, record: dict) -> str:
    """One line for a preemptor whose victim search found nothing (a job's ``details["eviction_search"][action]``),
    e.g. ``reclaim: no victim set worked (37 scenarios tried: NodeLocalGreedy 1 of 2 pods, ...)``."""
    tried = int(record.get("scenarios_tried", 0))
    text = f"{action}: no victim set worked ({tried} scenario{'s' if tried != 1 else ''} tried"
    best: dict[str, tuple[int, int]] = {}
    for p in record.get("probes", []):
        g = p.get("generator", "?")
        k = int(p.get("k", 0)) if p.get("solved") else 0
        best[g] = (max(best.get(g, (0, 0))[0], k), int(p.get("of", 0)))
    if best:
        text += "; " + ", ".join(f"{g} placed at most {k} of {of} pods" for g, (k, of) in best.items())
    text += ")"
    stops = record.get("budget_stops") or []
    if stops:
        text += "; " + "; ".join(stops)
    return text


def eviction_notes(result: "ScheduleResult") -> dict[str, str]:
    """Per job key, the scenario explanations of the evictions the session made for or against it (victims:
    ``reclaimed by …``; preemptors: ``reclaim: evicts …``) and, for a job still waiting, why its victim searches
    failed. Jobs with nothing to say are absent."""
    notes: dict[str, list[str]] = {}
    seen: set[int] = set()
    for e in result.evicted:
        sc = e.scenario
        if sc is None:
            if e.message:
                notes.setdefault(e.job, []).append(f"{e.action}: {e.message}")
            continue
        if id(sc) in seen:
            continue
        seen.add(id(sc))
        notes.setdefault(sc.preemptor, []).append(sc.preemptor_summary)
        for job in sc.victim_jobs:
            notes.setdefault(job, []).append(sc.summary)
    for key, dec in result.jobs.items():
        for action, record in (dec.details.get("eviction_search") or {}).items():
            notes.setdefault(key, []).append(failed_search_summary(action, record))
    return {k: " | ".join(dict.fromkeys(v)) for k, v in notes.items()}


@dataclass
class Eviction:
    """A task evicted by reclaim, preempt, consolidation or stale-gang eviction, with its cause.

    ``scenario``: for reclaim, preempt and consolidation, the scenario that justified it.
    """

    task: str
    job: str
    action: str
    preemptor: Optional[str] = None
    message: str = DeferredText()
    moved_to: Optional[str] = None
    scenario: Optional[EvictionScenario] = None

    def to_contract(self) -> dict:
        return {"task": self.task, "job": self.job, "action": self.action, "preemptor": self.preemptor,
                "message": self.message, "moved_to": self.moved_to,
                "scenario": None if self.scenario is None else self.scenario.to_contract()}


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
    # task -> (binding | pipelined, node): every placement a committed statement made in the session, also
    # for tasks a later statement evicted again (KAI has sent the bind request / recorded the pipelining)
    committed_placements: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_contract(self) -> dict:
        """The ``kaidash schedule --format json`` document."""
        return {
            "fair_share": {q: {r: round(v, 6) for r, v in res.items()} for q, res in self.fair_share.items()},
            "tasks": {name: t.to_contract() for name, t in self.tasks.items()},
            "jobs": {name: j.to_contract() for name, j in self.jobs.items()},
            "evicted": [e.task for e in self.evicted],
            "evictions": [e.to_contract() for e in self.evicted],
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }
