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

import dataclasses
import logging
import threading
import time as _time
import traceback
from typing import Any, Callable, Optional

from scheduler.errors import KaidashError
from scheduler.model import Snapshot

from .feeds import Feed, make_feed
from .health import assess, note_attempt
from .interactive import INTERACTIVE, Yielded
from .options import SourceOptions
from .state import LiveState, Tick, record_from_tick, tick_allocations

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
        self._last: Optional[tuple] = None     # (inputs fingerprint, frame, status): the simulated frame's cache
        self._last_gpus: list = []

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
        holders = holders_fingerprint(snapshot)
        if self._last is not None and self._last[0][0] == holders:
            gpus = self._last_gpus                   # the same holders: the exporter would say the same
        else:
            gpus = self._last_gpus = simulate_gpus(snapshot)
        self._recent_util = (self._recent_util + [idle_keys(gpus)])[-self.idle_window_ticks:]
        idle_max = None
        if len(self._recent_util) >= self.idle_window_ticks:
            keys = set.intersection(*(set(u) for u in self._recent_util))
            idle_max = {k: max(u[k] for u in self._recent_util) for k in keys
                        if all(u[k] is not None for u in self._recent_util)}
        key = (holders, tuple(sorted(idle_max.items())) if idle_max is not None else None)
        if self._last is not None and self._last[0] == key:
            return self._last[1], self._last[2]        # nothing a GPU shows changed: the same frame object
        per_gpu = per_instance = None
        if idle_max is not None:   # (node, GPU) and (node, physical GPU, MIG instance id) windows, as the reader's
            per_gpu = {k: v for k, v in idle_max.items() if len(k) == 2}
            per_instance = {k: v for k, v in idle_max.items() if len(k) == 3}
        frame = dcgm.build_gpu_frame(snapshot, live_samples(gpus), per_gpu, idle_instance_util=per_instance)
        status = f"simulated dcgm-exporter ({len(gpus)} GPUs; idle judged over {self.idle_window_ticks} ticks)"
        self._last = (key, frame, status)
        return frame, status


def holders_fingerprint(snapshot: Snapshot) -> tuple:
    """Everything the simulated per-GPU frame depends on besides the idle window: the GPU nodes and every pod
    holding a GPU (job, queue, status, devices, request, usage). Equal fingerprints give equal frames, so the
    simulated exporter is re-read only when one of these changed (on a 30 s step most ticks change nothing on
    the GPUs)."""
    nodes = tuple((n.name, n.gpus, n.gpu_memory_mib, n.gpu_model, n.ready, tuple(n.mig.items()))
                  for n in snapshot.nodes if n.gpus)
    pods = tuple((job.key, job.queue, t.name, t.status, t.node, tuple(t.gpu_indices), tuple(t.gpu_groups), t.gpu,
                  t.gpu_memory_mib, t.gpu_devices, tuple(t.mig.items()), t.usage.gpu_memory_mib if t.usage else None,
                  t.usage.gpu_util if t.usage else None)
                 for job, t in snapshot.iter_tasks() if t.node and t.is_gpu and t.status in HOLDING)
    return nodes, pods


HOLDING = frozenset({"running", "binding", "releasing", "pipelined"})
"""Task statuses that hold (or are about to hold) a GPU device, as the exporter and the slices frame see them."""


def live_samples(gpus) -> "pd.DataFrame":
    """The simulated exporter's samples as the live loop reads them: :func:`sim_samples` for nodes without MIG
    instances, and for MIG nodes the per-instance series dcgm-exporter prints
    (:func:`scheduler.metrics.exporter.simulated_samples`), so the frame is the one a Prometheus scrape of
    ``kaidash exporter`` gives (MIG devices named by physical GPU and instance id)."""
    import pandas as pd
    from scheduler.metrics.exporter import simulated_samples

    mig_nodes = {g.node for g in gpus if g.mig is not None}
    if not mig_nodes:
        return sim_samples(gpus)
    return pd.concat([sim_samples([g for g in gpus if g.node not in mig_nodes]),
                      simulated_samples([g for g in gpus if g.node in mig_nodes])], ignore_index=True)


def idle_keys(gpus) -> dict:
    """One tick's utilisation for the idle window, keyed as :func:`scheduler.metrics.dcgm.build_gpu_frame` reads
    it: ``(node, GPU)`` for whole GPUs (a MIG node's by physical index) and ``(node, physical GPU, instance id)``
    for MIG instances (their graphics-engine activity: NVML gives instances no utilisation)."""
    out: dict = {}
    for g in gpus:
        inst = g.mig
        if inst is None:
            out[(g.node, g.label_index)] = g.values.get("gpu_util")
        elif g.index == inst.first_cell:
            out[(g.node, inst.gpu, inst.instance_id)] = inst.values.get("gr_engine_active")
    return out


def sim_samples(gpus) -> "pd.DataFrame":
    """DCGM samples (``scheduler.metrics.dcgm.SAMPLE_COLUMNS``, canonical units) straight from the simulated
    exporter's GPUs of nodes without MIG instances (:func:`live_samples` reads MIG nodes per instance): what
    parsing its ``/metrics`` text would give, without rendering and re-parsing 10 series per GPU every tick. Each
    device series carries the pod dcgm-exporter credits (whole-GPU holder, or KAI's reservation pod on a shared
    GPU)."""
    import numpy as np
    import pandas as pd
    from scheduler.metrics.dcgm import MIG_PROFILE_COLUMN, SAMPLE_COLUMNS

    counts = [len(g.values) for g in gpus]
    per_gpu = {"host": [g.node for g in gpus], "gpu_index": [g.index for g in gpus], "uuid": [g.uuid for g in gpus],
               "model": [g.model_name for g in gpus],
               "pod": [g.credited.pod if g.credited else "" for g in gpus],
               "namespace": [g.credited.namespace if g.credited else "" for g in gpus],
               "container": [g.credited.container if g.credited else "" for g in gpus]}
    columns = {k: np.repeat(np.asarray(v, dtype=object if k != "gpu_index" else np.int64), counts)
               for k, v in per_gpu.items()}
    columns["field"] = np.asarray([f for g in gpus for f in g.values], dtype=object)
    columns["value"] = np.fromiter((float(v) for g in gpus for v in g.values.values()), dtype=float,
                                   count=sum(counts))
    columns["pod_uid"] = columns["mig"] = columns[MIG_PROFILE_COLUMN] = np.full(sum(counts), "", dtype=object)
    return pd.DataFrame({c: columns[c] for c in SAMPLE_COLUMNS + [MIG_PROFILE_COLUMN]})


class LiveLoop:
    """Runs ticks on a daemon thread and publishes them on ``state``."""

    def __init__(self, options: Optional[SourceOptions] = None, state: Optional[LiveState] = None,
                 feed: Optional[Feed] = None, publish_metrics: bool = True, insight: bool = True,
                 prices: Optional[Any] = None):
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
        self.between_ticks_share = 0.35
        self.between_ticks_budget_ms = 600.0     # per job: a search yields to a page being built this quickly
        self._explained: dict[str, tuple[int, Any]] = {}
        self._last_input: Optional[tuple[Snapshot, Any]] = None
        self._searches_held_until = 0.0
        self.gate = INTERACTIVE      # why-pending searches stop while a what-if runs (dashboard.interactive)
        self.searches_yielded = 0    # times a search window ended early for interactive work
        self._pages_building: dict[object, float] = {}
        self._pages_lock = threading.Lock()
        self.explain_ms_last = 0.0
        self.last_timings: dict[str, float] = {}
        self.own_metrics = _own_metrics() if publish_metrics else None   # a session's private loop serves none
        self.prices = prices
        self.insight = self._new_tracker() if insight else None
        label = feed.label if feed is not None else self.options.label()
        self.state.reset(feed.kind if feed is not None else self.options.source, label)

    def _new_tracker(self):
        """Job log, ETA planner and cost ledger for the current source (dashboard.insight)."""
        from .insight import InsightTracker, load_prices

        return InsightTracker(self.prices or load_prices(self.options.prices), on_report=self._eta_ready)

    def _eta_ready(self) -> None:
        """A background ETA estimate finished: republish the current tick with it (a static snapshot publishes
        no next tick)."""
        with self._lock:
            tick = self.state.tick
            if tick is None or self.insight is None or tick.insight is None:
                return
            self.state.publish(dataclasses.replace(tick, insight=self.insight.with_current_eta(
                tick.insight, tick.scheduled)), record=False, fresh=False)

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

    def step(self, explain: bool = True) -> Optional[Tick]:
        """Run one tick synchronously; returns the published tick, or ``None`` when it failed.

        ``explain``: search counterfactuals for a few waiting jobs inside the tick (``explain_jobs`` jobs,
        ``explain_budget_ms`` each): what a notebook or a test calling ``step()`` wants. The loop thread passes
        ``False`` and searches between ticks instead (:meth:`explain_between_ticks`), so a tick stays short and
        a search gets time enough to find an answer; the tick then carries the explanations found so far.
        """
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
            marks = [_time.perf_counter()]
            explanations, note = self._explain(snapshot, result) if explain else (self._cached(result), "")
            self._last_input = (snapshot, result)
            marks.append(_time.perf_counter())
            scheduled = getattr(result, "snapshot", None) or snapshot
            # devices as observed (the source's snapshot and DCGM), never the session's invented placements
            gpu_frame, metrics_status = self.metrics.frame(snapshot)
            marks.append(_time.perf_counter())
            insight = None
            if self.insight is not None:
                try:
                    insight = self.insight.observe(snapshot, scheduled, gpu_frame, getattr(result, "evicted", None),
                                                   simulated=feed.kind == "sim")
                except Exception:  # noqa: BLE001 — waits, ETA and cost must not stop the tick
                    log.warning("waits/ETA/cost failed:\n%s", traceback.format_exc())
            marks.append(_time.perf_counter())
            tick = Tick(index=self._index, wall_time=_time.time(), snapshot=snapshot, result=result,
                        gpu_frame=gpu_frame, explanations=explanations, insight=insight)
            prev = self.state.tick
            if gpu_frame is not None and prev is not None and prev.gpu_frame is gpu_frame and prev.tables:
                tick.tables.update(prev.tables)      # the same GPU frame: the same per-GPU tables
            # (the per-GPU tables themselves are built by the first view that shows them: gpu_tables)
            record = record_from_tick(tick)          # the history point: totals and per-queue numbers
            marks.append(_time.perf_counter())
            tick = dataclasses.replace(tick, duration_ms=(marks[-1] - started) * 1000)
            record.totals["cycle_ms"] = tick.duration_ms
            self.last_timings = {name: (b - a) * 1000 for name, a, b in
                                 zip(("session_ms", "explain_ms", "gpu_frame_ms", "insight_ms", "history_ms"),
                                     [started, *marks[:-1]], marks)}
            self.last_timings["tick_ms"] = tick.duration_ms
            self._index += 1
            self.state.metrics_status = metrics_status
            self.state.history.append(record)
            self.state.publish(tick, record=False)
            t = self.last_timings
            self.state.source_detail = (f"{feed.status()} · tick {t['tick_ms']:,.0f} ms (session "
                                        f"{t['session_ms']:,.0f}, why-pending {t['explain_ms']:,.0f}, GPU frame "
                                        f"{t['gpu_frame_ms']:,.0f}, waits/cost {t['insight_ms']:,.0f}, "
                                        f"history {t['history_ms']:,.0f})"
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

    def _waiting(self, result) -> list[str]:
        return [k for k, d in (getattr(result, "jobs", None) or {}).items() if d.status in ("pending", "pipelined")]

    def _cached(self, result) -> dict:
        """The explanations found so far for the jobs still waiting (dropping the others)."""
        waiting = set(self._waiting(result))
        self._explained = {k: v for k, v in self._explained.items() if k in waiting}
        return {k: v for k, (_, v) in self._explained.items()}

    def hold_searches(self, seconds: float = 5.0) -> None:
        """No why-pending search for ``seconds`` (a page is being built: it gets the CPU first; searches are
        the loop's lowest-priority work and hold the interpreter while they run)."""
        self._searches_held_until = max(self._searches_held_until, _time.monotonic() + seconds)

    MAX_TICK_HOLD_S = 1.0
    """The longest a tick waits for page builds (data age grows by at most this)."""
    PAGE_BUILD_FORGET_S = 5.0
    """A page build not reported done after this long no longer holds ticks (a session that failed)."""

    def page_build_started(self) -> Callable[[], None]:
        """A browser session's page is being built: the next tick waits (at most :attr:`MAX_TICK_HOLD_S`) until
        the returned function is called, so the tick and the page do not share the interpreter and the page
        reaches the browser sooner."""
        token = object()
        with self._pages_lock:
            self._pages_building[token] = _time.monotonic()

        def finished() -> None:
            with self._pages_lock:
                self._pages_building.pop(token, None)
        return finished

    def _building(self) -> bool:
        now = _time.monotonic()
        with self._pages_lock:
            return any(now - t < self.PAGE_BUILD_FORGET_S for t in self._pages_building.values())

    def _wait_for_page_builds(self) -> None:
        deadline = _time.monotonic() + self.MAX_TICK_HOLD_S
        while self._building() and _time.monotonic() < deadline and not self._stop.is_set():
            _time.sleep(0.02)
        now = _time.monotonic()
        with self._pages_lock:
            for token in [k for k, t in self._pages_building.items() if now - t >= self.PAGE_BUILD_FORGET_S]:
                del self._pages_building[token]

    def explain_between_ticks(self, deadline: float) -> int:
        """Counterfactual searches on the last tick, one job at a time, until ``deadline`` (``time.monotonic``);
        returns how many jobs were explained. Jobs never explained go first, then the longest waiting; each
        search gets ``between_ticks_budget_ms`` (or what is left). Results appear with the next tick. No search
        starts while a page is being built (:meth:`hold_searches`) or interactive work runs (:attr:`gate`); the
        jobs left wait for the next window, with the explanations found so far kept."""
        explain = _explainer()
        if explain is None or self._last_input is None:
            return 0
        snapshot, result = self._last_input
        waiting = self._waiting(result)
        due = [k for k in waiting if k not in self._explained
               or self._index - self._explained[k][0] >= self.explain_ttl_ticks]
        created = {j.key: j.creation_time for j in snapshot.jobs}
        due.sort(key=lambda k: (k in self._explained, created.get(k, 0.0), k))
        done = 0
        began = _time.monotonic()
        engine = _engine()

        def probe(snap: Snapshot):
            if self.gate.busy():         # abandon this search (its job is searched again in a later window)
                raise Yielded
            return engine(snap)

        for key in due:
            left_ms = (deadline - _time.monotonic()) * 1000
            if left_ms < 50 or _time.monotonic() < self._searches_held_until:
                break
            if self.gate.busy():          # a what-if someone watches: the search waits for the next window
                self.searches_yielded += 1
                break
            try:
                fresh = explanations_by_job(explain(snapshot, result, jobs=[key], run=probe,
                                                    budget_ms_per_job=min(self.between_ticks_budget_ms, left_ms)))
            except Yielded:
                self.searches_yielded += 1
                break
            except Exception:  # noqa: BLE001 — an explanation must never stop the loop
                log.warning("explain failed:\n%s", traceback.format_exc())
                break
            with self._lock:
                self._explained.update({k: (self._index, v) for k, v in fresh.items()})
            done += 1
        self.explain_ms_last = (_time.monotonic() - began) * 1000
        feed, tick = self._feed, self.state.tick
        if done and feed is not None and feed.static and tick is not None:
            # A fixed snapshot publishes no next tick: show what was found on the one it has.
            self.state.publish(dataclasses.replace(tick, explanations=self._cached(tick.result)),
                               record=False, fresh=False)
        return done

    def _observe(self, tick: Tick) -> None:
        if self.own_metrics is not None and tick.result is not None:
            try:
                sources = {self.state.source_kind or "source": {"snapshot": True}}
                if self.metrics.up is not None:
                    sources["dcgm"] = {"gpu_metrics": self.metrics.up}
                ins = tick.insight
                self.own_metrics.update(tick.result, tick.gpu_frame, now=tick.wall_time, observed=tick.snapshot,
                                        allocated=tick_allocations(tick)[0],
                                        sources=sources, gpu_metrics_age_s=self.metrics.age_s,
                                        history=ins.history if ins is not None else None,
                                        eta=ins.eta if ins is not None else None,
                                        costs=ins.costs if ins is not None else None,
                                        ledger=ins.ledger if ins is not None else None)
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
            if self.insight is not None:
                self.insight.eta_enabled = False        # a running estimate of the old source reports nowhere
                self.insight.on_report = None
                self.insight = self._new_tracker()      # another cluster: its own job log, ETA and cost
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
            self._wait_for_page_builds()
            began = _time.monotonic()
            try:
                self.step(explain=False)
            except Exception:  # noqa: BLE001 — the loop never dies
                log.error("tick failed:\n%s", traceback.format_exc())
                self.state.fail("internal error, see server log")
            took = _time.monotonic() - began
            period = self.options.period_s
            # Why-pending searches use part of the idle time (the rest is the sessions': they render while
            # the loop waits); a tick slower than the period still leaves the process half its time.
            if not self._wake.is_set() and took < period:
                self.explain_between_ticks(began + took + self.between_ticks_share * (period - took))
            wait = max(period - (_time.monotonic() - began), 0.5 * took)
            self._wake.wait(wait)
            self._wake.clear()


# ------------------------------------------------------------------------------ notebooks and tests

def publish_snapshot(state: LiveState, snapshot: Snapshot, label: str = "snapshot",
                     metrics: Optional[MetricsReader] = None, insight: bool = False) -> Optional[Tick]:
    """Schedule ``snapshot`` once and publish it on ``state`` (static): what a notebook or an import uses.
    ``insight``: also cost it and estimate its ETA in the background (republished on ``state`` when ready)."""
    loop = LiveLoop(SourceOptions(source="snapshot"), state=state, feed=Feed(snapshot, label=label),
                    publish_metrics=False, insight=insight)
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
