"""Waits, ETA and cost in the live loop: what the Pending, Queues, Overview and Timeline panels read.

:class:`InsightTracker` lives beside a :class:`~dashboard.loop.LiveLoop`. Each tick it

- records job lifecycles in a :class:`~scheduler.joblog.JobLog` (a simulated cluster: the state after the
  engine's decisions and its evictions; a real one: the source's snapshot, evictions derived);
- prices the tick (:func:`scheduler.cost.cost_rates`, at most every ``cost_every_s`` of wall time) into a
  :class:`~scheduler.cost.CostLedger` (daily and 30-day totals, the Timeline's cost curve);
- starts a forward ETA estimate (:class:`~scheduler.eta.EtaPlanner`) on a daemon thread when one is worth it,
  never waiting for it: the tick carries the last report re-based to its snapshot, and ``on_report`` is called
  when a new one is ready (the loop republishes, so a static snapshot gets its ETA too).
  The estimate pauses before each of its engine sessions while interactive work is in flight (a what-if run:
  :data:`dashboard.interactive.INTERACTIVE`) and resumes where it stopped; :meth:`InsightTracker.eta_note`
  says so meanwhile.

It returns an :class:`Insight` per tick (``Tick.insight``): immutable frames the views render. No Panel import.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time as _time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

import pandas as pd

from scheduler.cost import CostLedger, CostRates, GpuPrices, cost_rates
from scheduler.eta import EtaConfig, EtaPlanner, EtaReport, WorkloadModel, estimate_eta, format_duration
from scheduler.joblog import JobLog
from scheduler.model import Snapshot
from scheduler.waits import cluster_overview, queue_status

from .interactive import INTERACTIVE, InteractiveGate

log = logging.getLogger("kaidash.insight")

LARGE_CLUSTER_NODES = 300
"""Above this many nodes the forward estimate uses fewer runs and no consolidation (docs/eta.md, cost)."""
LARGE_CONFIG = EtaConfig(runs=3, actions=("allocate", "reclaim", "preempt", "stalegangeviction"), budget_s=90.0)


def load_prices(path: str = "") -> GpuPrices:
    """The price file of ``kaidash serve --prices`` (empty: the documented example prices); a bad file raises
    :class:`scheduler.cost.PriceError` naming the file and the key."""
    return GpuPrices.load(path) if path else GpuPrices()


def eta_config_for(nodes: int) -> EtaConfig:
    """The forward-estimate settings for a cluster of ``nodes`` (docs/eta.md: 5 runs up to a few hundred nodes;
    3 runs without consolidation, at most 90 s of work beyond: time paused for a what-if does not count)."""
    return LARGE_CONFIG if nodes > LARGE_CLUSTER_NODES else EtaConfig()


@dataclass(frozen=True)
class CostHistory:
    """The ledger's frames at one moment: per-day rows, the cluster cost curve, and 1-day / 30-day totals."""

    daily: pd.DataFrame
    series: pd.DataFrame
    today: pd.DataFrame
    month: pd.DataFrame
    currency: str

    @property
    def csv(self) -> str:
        """The daily rows as CSV with the currency (``CostLedger.to_csv``), made when asked (a download)."""
        return self.daily.assign(currency=self.currency).to_csv(index=False)


@dataclass
class Insight:
    """Waits, ETA and cost as of one tick (see the module doc). ``eta`` is None before the first estimate;
    ``eta_note`` says how old it is or why there is none; ``cost_history`` is None in a scoped view (the ledger is
    cluster-wide)."""

    eta: Optional[EtaReport] = None
    eta_note: str = ""
    history: Optional[dict[str, pd.DataFrame]] = None
    costs: Optional[CostRates] = None
    cost_history: Optional[CostHistory] = None
    ledger: Optional[CostLedger] = field(default=None, repr=False)
    scoped: bool = False
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def eta_frame(self) -> pd.DataFrame:
        """One row per waiting job (:meth:`scheduler.eta.EtaReport.frame`), empty before the first estimate."""
        return self._once("eta", lambda: self.eta.frame() if self.eta is not None else pd.DataFrame(
            columns=["job", "eta_p10_s", "eta_p50_s", "eta_p90_s", "text"]))

    def queue_status(self, snapshot: Snapshot) -> pd.DataFrame:
        """:func:`scheduler.waits.queue_status` for ``snapshot`` (computed once per insight)."""
        return self._once("queues", lambda: queue_status(snapshot, self.history, self.eta, self.costs))

    def overview(self, snapshot: Snapshot) -> dict[str, Any]:
        """:func:`scheduler.waits.cluster_overview` for ``snapshot`` (computed once per insight)."""
        return self._once("overview", lambda: cluster_overview(snapshot, self.history, self.eta, self.costs))

    def _once(self, key: str, fn: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def scoped_to(self, queues: frozenset, jobs: set) -> "Insight":
        """What a user limited to ``queues`` may see: their jobs' estimates (a blocker of another queue is not
        named), their queues' history and cost rows, cluster-wide rates; no ledger (cluster-wide totals)."""
        eta = self.eta
        if eta is not None:
            estimates = {k: e if not e.blocker_job or e.blocker_job in jobs else
                         dataclasses.replace(e, blocker="after a job of another queue", blocker_job=None)
                         for k, e in eta.estimates.items() if k in jobs}
            eta = dataclasses.replace(eta, estimates=estimates,
                                      running={k: r for k, r in eta.running.items() if k in jobs})
        history = None
        if self.history is not None:
            history = {name: f[f["queue"].isin(queues)].reset_index(drop=True) if "queue" in f else f
                       for name, f in self.history.items()}
            for name, f in self.history.items():
                history[name].attrs.update(f.attrs)
        costs = None
        if self.costs is not None:
            f = self.costs.frame
            costs = dataclasses.replace(self.costs, frame=f[(f["queue"] == "") | f["queue"].isin(queues)])
        return Insight(eta=eta, eta_note=self.eta_note, history=history, costs=costs, cost_history=None,
                       ledger=None, scoped=True)


NO_ESTIMATE = "no estimate yet"


def with_eta(pending: pd.DataFrame, insight: Optional[Insight]) -> pd.DataFrame:
    """``pending`` (one row per waiting job, a ``job`` column) with ``eta_p50_s`` (seconds from now; inf: not
    within the horizon) and ``eta`` (one line: "starts in ~40 min (20 min–1.5 h), after llm/train-7
    finishes"); jobs without an estimate say why."""
    out = pending.copy()
    frame = insight.eta_frame() if insight is not None else None
    if frame is None or frame.empty or not len(out):
        out["eta_p50_s"] = math.nan
        why = (insight.eta_note if insight is not None and insight.eta is None else NO_ESTIMATE) or NO_ESTIMATE
        out["eta"] = NO_ESTIMATE + (f" ({why})" if why != NO_ESTIMATE else "")
        return out
    by_job = frame.set_index("job")
    out["eta_p50_s"] = out["job"].map(by_job["eta_p50_s"]).astype(float)
    out["eta"] = out["job"].map(by_job["text"]).fillna(NO_ESTIMATE + " (arrived after the last estimate)")
    return out


class InsightTracker:
    """The job log, ETA planner, prices and cost ledger of one live loop (see the module doc)."""

    def __init__(self, prices: Optional[GpuPrices] = None, *, eta: bool = True, background: bool = True,
                 config: Optional[EtaConfig] = None, every_wall_s: float = 300.0, min_wall_s: float = 120.0,
                 cost_every_s: float = 5.0, history_every_s: float = 10.0,
                 on_report: Optional[Callable[[], None]] = None, gate: Optional[InteractiveGate] = None):
        self.prices = prices or GpuPrices()
        self.gate = gate if gate is not None else INTERACTIVE
        self.eta_enabled = eta
        self.background = background
        self.config = config
        self.every_wall_s, self.min_wall_s = every_wall_s, min_wall_s
        self.cost_every_s, self.history_every_s = cost_every_s, history_every_s
        self.on_report = on_report
        self.log = JobLog()
        self.ledger = CostLedger(currency=self.prices.currency)
        self.planner: Optional[EtaPlanner] = None
        self._lock = threading.Lock()
        self._costs: Optional[CostRates] = None
        self._costs_at = -math.inf
        self._history: Optional[dict[str, pd.DataFrame]] = None
        self._history_at = -math.inf
        self._cost_history: Optional[CostHistory] = None
        self._eta_started = -math.inf
        self._eta_thread: Optional[threading.Thread] = None
        self.eta_error = ""
        self.eta_refreshes = 0
        self.eta_paused = False
        """The background estimate is waiting for a what-if to finish right now."""
        self.eta_paused_s = 0.0
        """Seconds the current (or last) background estimate spent paused for interactive work."""

    # ------------------------------------------------------------------------------------ per tick

    def observe(self, snapshot: Snapshot, scheduled: Snapshot, gpu_frame: Optional[pd.DataFrame],
                evictions: Any = None, simulated: bool = False) -> Insight:
        """Record one tick and return its :class:`Insight`. ``simulated``: the source applies the engine's
        decisions (log and price ``scheduled``, with ``evictions``); otherwise the source's ``snapshot`` is logged
        and priced: on a live cluster the engine's binds are predictions, never billed allocations."""
        now = _time.monotonic()
        with self._lock:
            if simulated:
                self.log.observe(scheduled, evictions)
            else:
                self.log.observe(snapshot)
            if now - self._costs_at >= self.cost_every_s or self._costs is None:
                self._costs = cost_rates(scheduled if simulated else snapshot, self.prices, gpu_frame)
                self._costs_at = now
                self.ledger.add(self._costs)
                self._cost_history = None
            if now - self._history_at >= self.history_every_s or self._history is None:
                self._history = self.log.frames()
                self._history_at = now
            if self._cost_history is None:
                self._cost_history = self._ledger_frames()
            history, costs, cost_history = self._history, self._costs, self._cost_history
        if self.eta_enabled:
            self._maybe_estimate(scheduled, now)
        planner = self.planner
        if planner is not None:
            planner.observe(scheduled if simulated else snapshot)   # which estimated jobs started (calibration)
        report = planner.current(scheduled) if planner is not None else None
        return Insight(eta=report, eta_note=self.eta_note(now), history=history, costs=costs,
                       cost_history=cost_history, ledger=self.ledger)

    def with_current_eta(self, insight: Optional[Insight], snapshot: Snapshot) -> Optional[Insight]:
        """``insight`` with the newest report (after a background estimate finished)."""
        if insight is None or self.planner is None:
            return insight
        return dataclasses.replace(insight, eta=self.planner.current(snapshot),
                                   eta_note=self.eta_note(_time.monotonic()), _cache={})

    def _ledger_frames(self) -> CostHistory:
        ledger = self.ledger
        return CostHistory(daily=ledger.daily(), series=ledger.series(), today=ledger.totals(1),
                           month=ledger.totals(30), currency=ledger.currency)

    # ------------------------------------------------------------------------------------ ETA

    @property
    def estimating(self) -> bool:
        return self._eta_thread is not None and self._eta_thread.is_alive()

    def _maybe_estimate(self, snapshot: Snapshot, now: float) -> None:
        if self.estimating:
            return
        if self.planner is None:
            self.planner = EtaPlanner(self.config or eta_config_for(len(snapshot.nodes)),
                                      estimate=self._yielding_estimate if self.background else estimate_eta)
        since = now - self._eta_started
        if not (self.planner.report is None and since >= self.min_wall_s / 4 or since >= self.every_wall_s
                or (since >= self.min_wall_s and self.planner.due(snapshot))):
            return
        with self._lock:
            workload = WorkloadModel.from_log(self.log)     # read on this thread: the log changes every tick
        self._eta_started = now
        if not self.background:
            self._estimate(snapshot, workload)
            return
        self._eta_thread = threading.Thread(target=self._estimate, args=(snapshot, workload),
                                            name="kaidash-eta", daemon=True)
        self._eta_thread.start()

    def _yielding_estimate(self, snapshot: Snapshot, workload: Optional[WorkloadModel],
                           config: EtaConfig) -> EtaReport:
        """:func:`scheduler.eta.estimate_eta` whose engine sessions each wait, first, for interactive work to
        finish (the forward runs' state is kept meanwhile: the estimate resumes, it does not restart)."""
        from scheduler.engine import run_session

        engine = partial(run_session, actions=list(config.actions)) if config.actions is not None else run_session
        self.eta_paused_s = 0.0

        def session(snap: Snapshot):
            if self.gate.busy():
                self.eta_paused = True
                try:
                    self.eta_paused_s += self.gate.wait_idle()
                finally:
                    self.eta_paused = False
            return engine(snap)

        # the budget (90 s above 300 nodes) counts work only: time paused for what-ifs would starve the estimate
        return estimate_eta(snapshot, workload, config, session=session, paused_s=lambda: self.eta_paused_s)

    def _estimate(self, snapshot: Snapshot, workload: WorkloadModel) -> None:
        try:
            self.planner.refresh(snapshot, workload)
            self.eta_error = ""
            self.eta_refreshes += 1
        except Exception as exc:  # noqa: BLE001 — an estimate must never take the loop down
            log.warning("ETA estimate failed: %s: %s", type(exc).__name__, exc)
            self.eta_error = f"{type(exc).__name__}: {exc}"
        if self.on_report is not None:
            try:
                self.on_report()
            except Exception:  # noqa: BLE001
                log.warning("ETA report callback failed", exc_info=True)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for a running estimate (tests, notebooks)."""
        thread = self._eta_thread
        if thread is not None:
            thread.join(timeout)

    def eta_note(self, now: Optional[float] = None) -> str:
        """How old the ETA is, what it cost, or why there is none."""
        if not self.eta_enabled:
            return "ETA off"
        report = self.planner.report if self.planner is not None else None
        running = self.estimating and threading.current_thread() is not self._eta_thread
        paused = running and self.eta_paused
        busy = (" · re-estimate paused while a what-if computes (it resumes after)" if paused and report is not None
                else " · re-estimating now" if running and report is not None else "")
        if self.eta_error and report is None:
            return f"ETA failed: {self.eta_error}"
        if report is None:
            if paused:
                return "first ETA estimate paused while a what-if computes (it resumes after)"
            return "first ETA estimate running (forward simulation, seconds to a minute)"
        made = getattr(report, "made_at", None)
        waited = (f", {self.eta_paused_s:.1f} s of it paused for what-ifs"
                  if self.eta_paused_s >= 0.05 and not running else "")
        age = f"{format_duration(max(0.0, _time.time() - made))} ago" if made else "earlier"
        return (f"ETA estimated {age} ({report.runs} forward run(s), {report.wall_ms / 1000:.1f} s{waited}); "
                f"re-estimated every {format_duration(self.every_wall_s)} or sooner when the queue changes{busy}")


__all__ = ["Insight", "InsightTracker", "CostHistory", "eta_config_for", "load_prices", "with_eta",
           "LARGE_CLUSTER_NODES"]
