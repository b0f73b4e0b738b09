"""One forward run: the engine and the simulator from a snapshot, until every target job has started.

The run uses :class:`scheduler.simulate.Simulator` (KAI's cycle, between-cycle transitions, stale gangs,
min-runtime and preemption-delay deadlines) with the snapshot's historical usage held fixed (``usage=None``).
Time advances on a geometric grid: ``cycles_per_segment`` cycles at ``first_period_s``, then the same number at
twice that period, and so on to the horizon, so a start 5 minutes out is placed to within 30 s and one 5 hours out
to within about half an hour, at a bounded number of sessions. Each segment is a new simulator over the last
state (the simulator derives pending completions from ``last_start_time + duration_s``; arrivals not yet due are
carried over).

What let a job start, per run: the jobs that finished since the previous cycle on the nodes it was placed on
(else in its queue, else anywhere), or the jobs its start evicted (reclaim, preempt, consolidation).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..model import Job, Snapshot
from ..joblog import is_allocated
from ..simulate import Simulator


@dataclass
class Segment:
    """``cycles`` scheduling cycles every ``period_s``, starting ``start_s`` after the snapshot."""

    start_s: float
    period_s: float
    cycles: int


def segment_plan(horizon_s: float, first_period_s: float, cycles_per_segment: int) -> list[Segment]:
    """The geometric cycle grid up to ``horizon_s`` (the last segment is cut at the horizon)."""
    plan, start, period = [], 0.0, float(first_period_s)
    while start < horizon_s - 1e-9:
        cycles = min(cycles_per_segment, max(1, math.ceil((horizon_s - start) / period - 1e-9)))
        plan.append(Segment(start, period, cycles))
        start += cycles * period
        period *= 2
    return plan


@dataclass
class Blocker:
    """What made room for a job in one run: ``kind`` is ``finish``, ``evict`` or ``now``."""

    kind: str
    job: Optional[str] = None
    queue: Optional[str] = None
    action: Optional[str] = None
    where: str = ""          # "node" | "queue" | "cluster" for finish

    def text(self, label: Callable[[str], str] = lambda k: k) -> str:
        if self.kind == "now":
            return "fits at the next cycle"
        if self.kind == "evict":
            verb = {"reclaim": "reclaiming from", "preempt": "preempting", "consolidation": "moving"}.get(
                self.action or "", "evicting")
            return f"after {verb} {label(self.job)}"
        if self.kind == "finish":
            return f"after {label(self.job)} finishes"
        return "as capacity frees up"


@dataclass
class RunOutcome:
    """One run: start offset (s) and blocker of every target that started; sessions the engine ran."""

    starts: dict[str, float] = field(default_factory=dict)
    blockers: dict[str, Blocker] = field(default_factory=dict)
    sessions: int = 0
    end_s: float = 0.0


def _allocated_nodes(snap: Snapshot) -> dict[str, tuple[str, frozenset]]:
    """``{job key: (queue, nodes of its allocated tasks)}`` for every allocated job."""
    out = {}
    for job in snap.jobs:
        nodes = frozenset(t.node for t in job.tasks if t.status in ("running", "binding") and t.node)
        if nodes:
            out[job.key] = (job.queue, nodes)
    return out


def _blocker(job: Job, finished: dict[str, tuple[str, frozenset]], evicted_for: list) -> Blocker:
    nodes = {t.node for t in job.tasks if t.node}
    on_nodes = sorted(((len(n & nodes), k) for k, (_, n) in finished.items() if n & nodes), reverse=True)
    if on_nodes:
        k = on_nodes[0][1]
        return Blocker("finish", k, finished[k][0], where="node")
    if evicted_for:
        ev = evicted_for[0]
        return Blocker("evict", ev.job, None, action=ev.action)
    same_queue = sorted(k for k, (q, _) in finished.items() if q == job.queue)
    if same_queue:
        return Blocker("finish", same_queue[0], job.queue, where="queue")
    if finished:
        k = sorted(finished)[0]
        return Blocker("finish", k, finished[k][0], where="cluster")
    return Blocker("other")


def forward_run(snapshot: Snapshot, arrivals: list[tuple[float, Job]], targets: set[str], plan: list[Segment],
                session: Optional[Callable] = None, reasons: Optional[dict] = None) -> RunOutcome:
    """Simulate ``snapshot`` (durations already set on its jobs) along ``plan`` until every job in ``targets``
    has started or the plan ends. ``arrivals`` are ``(offset_s, Job)`` after ``snapshot.time``.

    ``reasons``, when given, receives ``{key: (reason, message)}`` from the first session for the targets it
    did not start (the engine's why-pending now)."""
    now = float(snapshot.time)
    out = RunOutcome()
    remaining = set(targets)
    future = sorted(arrivals, key=lambda p: p[0])
    state = snapshot
    prev = _allocated_nodes(state)
    recent: dict[str, tuple[str, frozenset]] = {}      # finished in the last two executed cycles
    evicted_for: dict[str, list] = {}                  # evictions naming a target as preemptor, kept until it starts
    for seg in plan:
        if not remaining:
            break
        seg_start = now + seg.start_s
        state = copy.copy(state)
        state.time = seg_start
        last_cycle = seg_start + (seg.cycles - 1) * seg.period_s   # later arrivals wait for the next segment
        due = [(max(0.0, now + off - seg_start), job) for off, job in future if now + off <= last_cycle]
        future = [(off, job) for off, job in future if now + off > last_cycle]
        sim = Simulator(state, due, period_s=seg.period_s, usage=None, fast_forward=True,
                        max_ticks=seg.cycles + 2, max_events=1000, session=session)
        for _ in range(seg.cycles):
            step = sim.step()
            if not step.ran:
                continue
            out.sessions += 1
            snap = step.snapshot
            current = _allocated_nodes(snap)
            present = {j.key: j for j in snap.jobs}
            finished = {k: v for k, v in prev.items() if k not in present}
            window = {**recent, **finished}
            for ev in step.result.evicted if step.result is not None else ():
                if ev.preemptor in remaining:
                    evicted_for.setdefault(ev.preemptor, []).append(ev)
            for key in sorted(remaining):
                job = present.get(key)
                if job is None or is_allocated(job):
                    out.starts[key] = step.time - now
                    if step.time - now < 1e-9:
                        out.blockers[key] = Blocker("now")
                    elif job is not None:
                        out.blockers[key] = _blocker(job, window, evicted_for.get(key, []))
                    else:
                        out.blockers[key] = Blocker("other")
                    remaining.discard(key)
            if reasons is not None and out.sessions == 1:
                for key in remaining:
                    d = step.result.jobs.get(key) if step.result is not None else None
                    if d is not None and d.reason:
                        reasons[key] = (d.reason, d.message)
            recent, prev = finished, current
            if not remaining:
                break
        state = sim.snapshot
        out.end_s = sim.next_cycle_time() - now
    return out


__all__ = ["Segment", "segment_plan", "Blocker", "RunOutcome", "forward_run"]
