"""The live loop: ONE per server process, owning the scheduler tick and the GPU-metrics poll.

Each tick: take the feed's next snapshot → ``run_session`` → why-pending explanations → GPU frame (DCGM
through Prometheus, or the simulated exporter) → publish a :class:`~dashboard.state.Tick` on the shared
:class:`~dashboard.state.LiveState` → (sim) let the feed apply the decisions. Browser sessions only read the
state; they never run the loop (design.md, process model).

The loop is a daemon thread started once per process by :func:`get_loop` (guarded by a lock, so several
sessions opening at once start it once). It lives outside ``app.py`` because ``panel serve`` re-executes the
app file for every session, while imported modules are shared. A failing source, engine or metrics reader
never stops the loop: the last good tick stays published and the state says ``stale since``.
"""

from __future__ import annotations

import logging
import threading
import time as _time
import traceback
from typing import Any, Callable, Optional

from scheduler.errors import KaidashError
from scheduler.model import Snapshot

from .feeds import Feed, make_feed
from .health import assess, note_attempt
from .options import SourceOptions
from .state import LiveState, Tick

log = logging.getLogger("kaidash.loop")


def _engine() -> Optional[Callable]:
    try:
        from scheduler.engine import run_session
    except ImportError:
        return None
    return run_session


def _explainer() -> Optional[Callable]:
    try:
        from scheduler.explain import explain_pending
    except ImportError:
        return None
    return explain_pending


def _own_metrics():
    try:
        from scheduler.metrics.own import KaidashMetrics
    except ImportError:
        return None
    return KaidashMetrics()


def explanations_by_job(raw: Any) -> dict:
    """``explain_pending``'s output as ``{job key: record}`` whatever container it comes in."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    out = {}
    for rec in raw:
        key = getattr(rec, "job", None) if not isinstance(rec, dict) else rec.get("job")
        if key is not None:
            out[key] = rec
    return out


class MetricsReader:
    """GPU usage per device and slice, as the per-GPU DCGM frame of :mod:`scheduler.metrics.dcgm`.

    * ``prometheus`` set: dcgm-exporter series read through Prometheus (:class:`DcgmReader`), with the
      reader's own retries, backoff and last-good-frame fallback.
    * sim: the simulated dcgm-exporter's exposition for the tick's snapshot (per-pod usage from the scenario),
      parsed by the same code path as real data; idle-allocated GPUs are judged over the last
      ``idle_window_ticks`` ticks.
    * otherwise: no GPU metrics.

    ``frame(snapshot)`` returns ``(frame or None, status line)`` and never raises.
    """

    def __init__(self, prometheus: str = "", simulated: bool = True, idle_window_ticks: int = 5):
        self.prometheus = prometheus
        self.simulated = simulated
        self._reader = None
        self._exporter = None
        self._recent_util: list[dict] = []
        self.idle_window_ticks = idle_window_ticks
        self.up: Optional[bool] = None
        """Whether the last call delivered GPU metrics (``None``: no GPU metrics configured)."""
        self.age_s: Optional[float] = None
        """Age of the delivered data in seconds (0 fresh; the last good frame's age when stale)."""

    @property
    def exporter(self):
        """The simulated exporter's state (sim mode), for serving its ``/metrics`` too."""
        return self._exporter

    def frame(self, snapshot: Snapshot):
        self.up, self.age_s = None, None
        try:
            if self.prometheus:
                return self._from_prometheus(snapshot)
            if self.simulated:
                frame, text = self._simulated(snapshot)
                if frame is not None:
                    self.up, self.age_s = True, 0.0
                return frame, text
        except Exception as exc:  # noqa: BLE001 — metrics must never stop scheduling
            log.warning("GPU metrics failed:\n%s", traceback.format_exc())
            self.up = False
            return None, f"GPU metrics failed: {exc}"
        return None, "no GPU metrics (pass --prometheus URL for DCGM data)"

    def _from_prometheus(self, snapshot: Snapshot):
        if self._reader is None:
            from scheduler.metrics.prometheus_reader import DcgmReader

            self._reader = DcgmReader(self.prometheus)
        frame, status = self._reader.frame(snapshot)
        self.up = status.state == "ok"
        self.age_s = float(status.age_s or 0.0) if status.state in ("ok", "stale") else None
        age = f", data age {status.age_s:.0f}s" if status.age_s else ""
        text = f"DCGM via {self.prometheus}: {status.state}{age}"
        if status.message:
            text += f" — {status.message}"
        return (frame if frame is not None and len(frame) else None), text

    def _simulated(self, snapshot: Snapshot):
        from scheduler.metrics import dcgm
        from scheduler.metrics.exporter import simulate_gpus

        if not any(t.usage is not None for _, t in snapshot.iter_tasks()):
            return None, "no GPU metrics: the snapshot carries no usage (pass --prometheus URL for DCGM data)"
        gpus = simulate_gpus(snapshot)
        samples = sim_samples(gpus)
        util = {(g.node, g.index): g.values.get("gpu_util") for g in gpus}
        self._recent_util = (self._recent_util + [util])[-self.idle_window_ticks:]
        idle_max = None
        if len(self._recent_util) >= self.idle_window_ticks:
            keys = set.intersection(*(set(u) for u in self._recent_util))
            idle_max = {k: max(u[k] for u in self._recent_util) for k in keys
                        if all(u[k] is not None for u in self._recent_util)}
        frame = dcgm.build_gpu_frame(snapshot, samples, idle_max)
        return frame, f"simulated dcgm-exporter ({len(gpus)} GPUs; idle judged over {self.idle_window_ticks} ticks)"


def sim_samples(gpus) -> "pd.DataFrame":
    """DCGM samples (``scheduler.metrics.dcgm.SAMPLE_COLUMNS``, canonical units) straight from the simulated
    exporter's GPUs: what parsing its ``/metrics`` text would give, without rendering and re-parsing 10
    series per GPU every tick. Each device series carries the pod dcgm-exporter credits (whole-GPU holder, or
    KAI's reservation pod on a shared GPU)."""
    import pandas as pd
    from scheduler.metrics.dcgm import SAMPLE_COLUMNS

    rows = []
    for g in gpus:
        pod = g.credited
        for field, value in g.values.items():
            rows.append((g.node, g.index, g.uuid, g.model_name, field, float(value),
                         pod.pod if pod else "", pod.namespace if pod else "", pod.container if pod else "",
                         "", ""))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


class LiveLoop:
    """Runs ticks on a daemon thread and publishes them on ``state``."""

    def __init__(self, options: Optional[SourceOptions] = None, state: Optional[LiveState] = None,
                 feed: Optional[Feed] = None):
        self.options = options or SourceOptions()
        self.state = state or LiveState(period_s=self.options.period_s)
        self.state.period_s = self.options.period_s
        self._feed = feed
        self._feed_error: Optional[str] = None
        self.metrics = MetricsReader(self.options.prometheus)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.RLock()
        self._index = 0
        self.on_tick: list[Callable[[Tick], None]] = []
        self.explain_jobs = 4
        self.explain_budget_ms = 40.0
        self.explain_ttl_ticks = 30
        self._explained: dict[str, tuple[int, Any]] = {}
        self.own_metrics = _own_metrics()
        label = feed.label if feed is not None else self.options.label()
        self.state.reset(feed.kind if feed is not None else self.options.source, label)

    # ------------------------------------------------------------------------------------ one tick

    @property
    def feed(self) -> Optional[Feed]:
        if self._feed is None:
            try:
                self._feed = make_feed(self.options)
                self._feed_error = None
            except (KaidashError, ImportError, OSError) as exc:
                self._feed_error = str(exc)
        return self._feed

    def step(self) -> Optional[Tick]:
        """Run one tick synchronously; returns the published tick, or ``None`` when it failed."""
        with self._lock:
            note_attempt(self.state)   # readiness heartbeat (dashboard.health)
            feed = self.feed
            if feed is None:
                self.state.fail(f"source: {self._feed_error}")
                return None
            if feed.static and self.state.tick is not None:
                self.state.source_detail = feed.status()
                return self.state.tick
            run_session = _engine()
            if run_session is None:
                self.state.fail("the engine (scheduler.engine) is not available")
                return None
            started = _time.perf_counter()
            try:
                snapshot, result = feed.tick(run_session)
            except Exception as exc:  # noqa: BLE001 — a source or engine failure keeps the last good state
                log.warning("tick failed:\n%s", traceback.format_exc())
                self.state.fail(f"{feed.kind}: {type(exc).__name__}: {exc}")
                if self.own_metrics is not None:
                    self.own_metrics.source_down(feed.kind)   # the KaidashSourceDown alert can fire
                return None
            session_ms = (_time.perf_counter() - started) * 1000
            explanations, note = self._explain(snapshot, result)
            # devices as observed (the source's snapshot and DCGM), never the session's invented placements
            gpu_frame, metrics_status = self.metrics.frame(snapshot)
            duration_ms = (_time.perf_counter() - started) * 1000
            tick = Tick(index=self._index, wall_time=_time.time(), snapshot=snapshot, result=result,
                        gpu_frame=gpu_frame, explanations=explanations, duration_ms=duration_ms)
            self._index += 1
            self.state.metrics_status = metrics_status
            self.state.publish(tick)
            self.state.source_detail = (f"{feed.status()} · session {session_ms:,.0f} ms"
                                        + (f" — {note}" if note else ""))
            assess(self.state, feed)   # degraded: what this tick succeeded despite (dashboard.health)
            self._observe(tick)
            return tick

    def _explain(self, snapshot: Snapshot, result) -> tuple[dict, str]:
        """Why-pending for waiting jobs, within a per-tick budget.

        Counterfactual searches re-run the engine, so each tick explains at most ``explain_jobs`` jobs that
        have no explanation yet (longest waiting first) or whose explanation is older than
        ``explain_ttl_ticks``; the others keep their last explanation. Jobs that stopped waiting are dropped.
        The engine's own reason and message are always current (they come with every result).
        """
        explain = _explainer()
        if explain is None or self.explain_jobs <= 0:
            return {}, ""
        waiting = [k for k, d in (getattr(result, "jobs", None) or {}).items() if d.status in ("pending", "pipelined")]
        cache = {k: v for k, v in self._explained.items() if k in set(waiting)}
        due = [k for k in waiting if k not in cache or self._index - cache[k][0] >= self.explain_ttl_ticks]
        created = {j.key: j.creation_time for j in snapshot.jobs}
        due.sort(key=lambda k: (k in cache, created.get(k, 0.0), k))
        note = ""
        if due:
            try:
                fresh = explanations_by_job(explain(snapshot, result, jobs=due[:self.explain_jobs],
                                                    budget_ms_per_job=self.explain_budget_ms))
                cache.update({k: (self._index, v) for k, v in fresh.items()})
            except Exception as exc:  # noqa: BLE001
                log.warning("explain failed:\n%s", traceback.format_exc())
                note = f"explain failed: {exc}"
        self._explained = cache
        return {k: v for k, (_, v) in cache.items()}, note

    def _observe(self, tick: Tick) -> None:
        if self.own_metrics is not None and tick.result is not None:
            try:
                sources = {self.state.source_kind or "source": {"snapshot": True}}
                if self.metrics.up is not None:
                    sources["dcgm"] = {"gpu_metrics": self.metrics.up}
                self.own_metrics.update(tick.result, tick.gpu_frame, now=tick.wall_time, observed=tick.snapshot,
                                        sources=sources, gpu_metrics_age_s=self.metrics.age_s)
            except Exception:  # noqa: BLE001 — the exposition must not stop the loop
                log.warning("own metrics update failed:\n%s", traceback.format_exc())
        for cb in list(self.on_tick):
            try:
                cb(tick)
            except Exception:  # noqa: BLE001 — an observer must not stop the loop
                log.warning("tick observer failed:\n%s", traceback.format_exc())

    # ------------------------------------------------------------------------------------ control

    def switch(self, options: Optional[SourceOptions] = None, feed: Optional[Feed] = None) -> None:
        """Replace the source (settings page, snapshot import) and run a tick at once."""
        with self._lock:
            if self._feed is not None:
                self._feed.close()
            if options is not None:
                self.options = options
                self.state.period_s = options.period_s
                self.metrics = MetricsReader(options.prometheus)
            self._feed = feed
            self._feed_error = None
            self._index = 0
            self._explained = {}
            kind = feed.kind if feed is not None else self.options.source
            self.state.reset(kind, feed.label if feed is not None else self.options.label())
        self._wake.set()

    def use_snapshot(self, snapshot: Snapshot, label: str) -> None:
        """Serve an imported snapshot (static) from now on."""
        self.switch(feed=Feed(snapshot, label=label))

    def start(self) -> "LiveLoop":
        """Start the daemon thread (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kaidash-live-loop", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._feed is not None:
            self._feed.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = _time.monotonic()
            try:
                self.step()
            except Exception:  # noqa: BLE001 — the loop never dies
                log.error("tick failed:\n%s", traceback.format_exc())
                self.state.fail("internal error, see server log")
            took = _time.monotonic() - began
            # A tick slower than the period still leaves the process half its time (sessions, other work).
            wait = max(self.options.period_s - took, 0.5 * took)
            self._wake.wait(wait)
            self._wake.clear()


# ------------------------------------------------------------------------------ notebooks and tests

def publish_snapshot(state: LiveState, snapshot: Snapshot, label: str = "snapshot",
                     metrics: Optional[MetricsReader] = None) -> Optional[Tick]:
    """Schedule ``snapshot`` once and publish it on ``state`` (static): what a notebook or an import uses."""
    loop = LiveLoop(SourceOptions(source="snapshot"), state=state, feed=Feed(snapshot, label=label))
    if metrics is not None:
        loop.metrics = metrics
    return loop.step()


def state_from_snapshot(snapshot: Snapshot, label: str = "snapshot", simulated_metrics: bool = True) -> LiveState:
    """A :class:`LiveState` holding one scheduled tick of ``snapshot``: ``QueuesView(state_from_snapshot(s))``."""
    state = LiveState()
    publish_snapshot(state, snapshot, label, MetricsReader(simulated=simulated_metrics))
    return state


# ------------------------------------------------------------------------------ one loop per process

_LOOP: Optional[LiveLoop] = None
_LOOP_LOCK = threading.Lock()


def get_loop(options: Optional[SourceOptions] = None, start: bool = True) -> LiveLoop:
    """The process's live loop, created (from ``options``, else the ``KAIDASH_*`` environment) and started
    on first call; later calls return the same loop whatever they pass."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = LiveLoop(options or SourceOptions.from_env())
            if start:
                _LOOP.step()  # the first page shows data, not a spinner
                _LOOP.start()
        return _LOOP


def stop_loop() -> None:
    """Stop and forget the process's loop (tests, server shutdown)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is not None:
            _LOOP.stop()
            _LOOP = None


__all__ = ["LiveLoop", "MetricsReader", "get_loop", "stop_loop", "explanations_by_job", "publish_snapshot",
           "state_from_snapshot"]
