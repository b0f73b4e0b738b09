"""Feeds: the live loop's view of a source — each tick, the snapshot a session ran on and its result.

A feed wraps one of ``scheduler.sources`` behind one call, so the loop does not care where snapshots come
from: ``tick(schedule) -> (snapshot, result)``, where ``schedule`` is the engine's ``run_session`` (the loop
passes it in so it can time and guard it).

* :class:`Feed` — a fixed snapshot (our file or a KAI zip): scheduled once, static.
* :class:`KubeFeed` — a live cluster, read-only: shadow scheduling of what KAI would do next.
* :class:`SimFeed` — the embedded synthetic scenario (or a trace replay) run by
  :class:`scheduler.simulate.Simulator`: decisions happen (binding → running, evictions), jobs complete
  after ``duration_s``, new jobs arrive; one scheduling cycle per tick.

No Panel import.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from scheduler.errors import SourceError
from scheduler.model import Snapshot

from .options import SourceOptions

Schedule = Callable[[Snapshot], Any]


class Feed:
    """A fixed snapshot, scheduled once (``static``)."""

    kind = "snapshot"
    static = True

    def __init__(self, snapshot: Snapshot, label: str = "snapshot"):
        self._snapshot = snapshot
        self.label = label

    def snapshot(self) -> Snapshot:
        """The snapshot the next session runs on."""
        return self._snapshot

    def tick(self, schedule: Schedule) -> tuple[Snapshot, Any]:
        """Run one session; returns ``(input snapshot, result)``; both are safe to keep (never mutated later)."""
        snap = self.snapshot()
        return snap, schedule(snap)

    def status(self) -> str:
        return f"static: {self.label}"

    def close(self) -> None:
        """Release connections (kube watches); nothing for in-memory feeds."""


class KubeFeed(Feed):
    """A live cluster through ``scheduler.sources.kube.KubeSource``: read-only shadow scheduling."""

    kind = "kube"
    static = False

    def __init__(self, context: str = "", sync_timeout_s: float = 30.0, **source_options):
        from scheduler.sources.kube import KubeSource

        try:
            self.source = KubeSource(context=context or None, **source_options)
        except SourceError:
            if context:
                raise
            self.source = KubeSource.in_cluster(**source_options)   # no kubeconfig: running in a pod
        self.label = f"kube {context or '(current context)'} — read-only"
        self.source.start()
        self.source.wait_until_synced(sync_timeout_s)

    def snapshot(self) -> Snapshot:
        return self.source.snapshot()

    def status(self) -> str:
        st = getattr(self.source, "status", None)
        st = st() if callable(st) else st
        return f"{self.label}: {st}" if st else self.label

    def close(self) -> None:
        for name in ("close", "stop"):
            fn = getattr(self.source, name, None)
            if callable(fn):
                fn()
                return


class SimFeed(Feed):
    """A simulated cluster: the :class:`~scheduler.simulate.Simulator` applies each cycle's decisions.

    One tick = one scheduling cycle, ``step_s`` cluster seconds after the previous one. The simulator is
    copy-on-write (each step starts from a fresh container and replaces jobs rather than modifying them), so
    the session's input (for why-pending explanations) and the post-decision state are handed on as they are:
    nothing modifies them later. (Deep-copying both cost more than the scheduling session itself.)
    """

    kind = "sim"
    static = False

    def __init__(self, snapshot: Snapshot, arrivals: Optional[list] = None, step_s: float = 30.0,
                 label: str = "simulated cluster", refill: Optional[Callable[[int], list]] = None,
                 usage: Optional[Callable] = None, patience_s: Optional[float] = None):
        from scheduler.simulate import Simulator

        super().__init__(snapshot, label)
        self.step_s = step_s
        self.refill = refill
        self.refills = 0
        self.usage = usage
        self._horizon = max((_offset(a) for a in arrivals or []), default=0.0)
        self._schedule: Optional[Schedule] = None
        self._input: Optional[Snapshot] = None
        self.sim = Simulator(snapshot, arrivals or [], period_s=step_s, fast_forward=False,
                             session=self._session, patience_s=patience_s)
        self.last_step = None

    def _session(self, snap: Snapshot):
        self._input = snap
        return self._schedule(snap)

    def tick(self, schedule: Schedule) -> tuple[Snapshot, Any]:
        self._schedule = schedule
        self._input = None
        self._maybe_refill()
        step = self.sim.step()
        self.last_step = step
        result = step.result
        if result is None:
            raise SourceError("the simulator ran no session")
        scheduled = step.snapshot
        self._give_usage(scheduled)
        result = dataclasses.replace(result, snapshot=scheduled)
        return (self._input if self._input is not None else scheduled), result

    def snapshot(self) -> Snapshot:
        return self.sim.snapshot

    def _give_usage(self, snap: Snapshot) -> None:
        """Pods that started since the last tick get their real usage (the scenario's model), so jobs that
        arrived later are not all read as idle allocations. (Set on the pod in place: a pod's usage is a
        property of the pod, the same in every snapshot that holds it.)"""
        if self.usage is None:
            return
        nodes = snap.node_map()
        for job, t in snap.iter_tasks():
            if t.usage is None and t.node in nodes and t.is_gpu and t.status in ("running", "binding"):
                t.usage = self.usage(job, t, nodes[t.node])

    def _maybe_refill(self) -> None:
        """A dashboard runs for days: when the scenario's arrivals run out, queue the next batch."""
        if self.refill is None or self.sim.elapsed_s + self.step_s < self._horizon:
            return
        self.refills += 1
        batch = self.refill(self.refills)
        start = self.sim.time
        for item in batch:
            self.sim.events.push_arrival(start + _offset(item), _job(item))
        self._horizon = self.sim.elapsed_s + max((_offset(a) for a in batch), default=self.step_s)

    def status(self) -> str:
        s = self.sim
        gave_up = f" · {s.withdrawn_total} withdrawn after waiting too long" if s.withdrawn_total else ""
        return (f"{self.label}: cycle {s.cycles_run} every {self.step_s:g} cluster-s · {s.arrived_total} arrived · "
                f"{s.completed_total} completed{gave_up} · {s.evicted_total} evicted · {len(s.events)} events queued")


def _offset(item: Any) -> float:
    return float(item[0]) if isinstance(item, tuple) else float(getattr(item, "offset_s"))


def _job(item: Any):
    return item[1] if isinstance(item, tuple) else item.job


def _renamed(job, suffix: str):
    """A copy of ``job`` with every name suffixed (a refill batch must not clash with jobs still running)."""
    import copy

    job = copy.deepcopy(job)
    job.name += suffix
    for t in job.tasks:
        t.name += suffix
    return job


def make_feed(options: SourceOptions) -> Feed:
    """The feed for a set of options; raises ``SourceError``/``SnapshotError`` naming what is missing."""
    if options.source == "snapshot":
        if not options.snapshot:
            raise SourceError("--source snapshot needs --snapshot FILE")
        from scheduler.safe_io import server_reads
        from scheduler.snapshot_io import load_snapshot

        with server_reads():   # only inside the data directories (kaidash serve --data-dir), a regular file, in time
            return Feed(load_snapshot(options.snapshot), label=options.label())
    if options.source == "kube":
        # a hung API server shows as stale within about two loop periods (KubeSource's liveness probe)
        return KubeFeed(options.context, probe_interval_s=max(0.5, min(float(options.period_s), 30.0)))
    step = options.sim_step_s or options.period_s
    if options.source == "trace":
        return _trace_feed(options, step)
    try:
        from scheduler.sources.synthetic import generate_scenario, usage_for
    except ImportError as exc:
        raise SourceError(f"the synthetic scenario generator is not available ({exc}); "
                          "start with --snapshot FILE instead") from exc
    scenario = generate_scenario(seed=options.seed, nodes=options.nodes, extensions=options.demo_extensions)

    def refill(k: int) -> list:
        more = generate_scenario(seed=options.seed + k, nodes=options.nodes)
        return [(a.offset_s, _renamed(a.job, f"-r{k}")) for a in more.arrivals]

    return SimFeed(scenario.snapshot, list(scenario.arrivals), step_s=step, label=options.label(), refill=refill,
                   usage=usage_for, patience_s=DEMO_PATIENCE_S)


DEMO_PATIENCE_S = 8 * 3600.0
"""In the embedded demo, a job that never started is withdrawn after waiting 8 cluster hours, as people delete
jobs stuck pending: the backlog of huge gangs stays bounded when the demo runs for days."""


def _trace_feed(options: SourceOptions, step: float) -> Feed:
    """Alibaba trace replay (FGD protocol order): the GPU node list, pods arriving one after another."""
    from scheduler.sources import trace

    nodes = trace.load_nodes()
    pods = trace.load_pods("default")
    snap = trace.trace_to_snapshot(nodes)
    jobs = trace.trace_to_snapshot(nodes.iloc[:0], pods)
    snap.queues = jobs.queues
    gap = step / 10.0   # ten pods per cycle: the trace has no times, only an order
    arrivals = [((i + 1) * gap, job) for i, job in enumerate(jobs.jobs)]
    return SimFeed(snap, arrivals, step_s=step, label=options.label())
