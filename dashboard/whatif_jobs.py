"""What-if runs off the caller's thread: latest request wins, interim diffs after each cycle, finished diffs cached.

:class:`LatestWins` owns at most one worker thread per session's what-if. :meth:`LatestWins.submit` replaces
whatever is waiting or running: the running request is abandoned at the engine's next interruption point, before
its next victim scenario (:mod:`scheduler.interrupt`), or at its next cycle boundary (its hook raises
:class:`Superseded`), and nothing it produced afterwards is delivered. Every delivery is a :class:`WhatIfUpdate`
carrying the request's ``generation`` and a ``seq`` that grows with every update; the receiver drops an update
whose generation is no longer the latest (:meth:`LatestWins.is_current`), which closes the gap between the
worker's check and the UI applying it, and one older than what it already applied (an event loop need not run
callbacks scheduled from another thread in the order they were scheduled).

:class:`ResultCache` keeps finished diffs per override set (a small LRU); one cache belongs to one pinned
snapshot's runner, so re-pinning starts a new one and a run still finishing on the old base cannot fill it.

While a request runs, :meth:`LatestWins.activity` names the eviction search the engine is in
(:mod:`scheduler.progress`): what a "computing… 4,000 ms so far" line adds so a user knows what takes the time.

While a request runs, the worker holds the process's :data:`~dashboard.interactive.INTERACTIVE` gate, so the
ETA estimate and the why-pending searches pause until it has finished (someone is watching this one).

No Panel import: the view hands in ``notify`` (which schedules the update on its document's event loop).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from scheduler.errors import KaidashError
from scheduler.interrupt import interruptible
from scheduler.progress import Search, observing

from .interactive import INTERACTIVE, InteractiveGate

log = logging.getLogger("kaidash.whatif")

COMPUTING, INTERIM, STEADY, ERROR = "computing", "interim", "steady", "error"


class Superseded(Exception):
    """Raised inside a run's per-cycle hook when a newer request replaced it."""


@dataclass(frozen=True)
class WhatIfUpdate:
    """One message from a what-if run.

    ``phase``: ``computing`` (a cycle of the base side finished; no diff yet), ``interim`` (``diff`` as it stands
    after ``cycle`` of the modified side), ``steady`` (the final ``diff``) or ``error`` (``error``: the message).
    ``elapsed_ms``: since the request was submitted; ``cached``: the final diff came from :class:`ResultCache`;
    ``seq``: the update's place among its request's updates (1, 2, …; later updates supersede earlier ones).
    """

    generation: int
    phase: str
    cycle: int = 0
    cycles: int = 0
    elapsed_ms: float = 0.0
    diff: Any = None
    error: str = ""
    cached: bool = False
    side: str = "modified"
    seq: int = 0

    def newer_than(self, applied: tuple[int, int]) -> bool:
        """Whether this update comes after ``applied`` (a ``(generation, seq)`` already shown)."""
        return (self.generation, self.seq) > applied


def overrides_key(overrides: dict, cycles: int) -> str:
    """A stable key for an override mapping (and the cycle limit): equal edits, equal key."""
    return json.dumps({"overrides": overrides, "cycles": cycles}, sort_keys=True, default=str)


class ResultCache:
    """Finished what-if results per override key, least recently used dropped beyond ``size``. Thread-safe."""

    def __init__(self, size: int = 16):
        self.size = size
        self._items: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Optional[tuple[Any, float]]:
        """``(diff, run_ms)`` of the run that produced it, or ``None``."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: str, diff: Any, run_ms: float) -> None:
        with self._lock:
            self._items[key] = (diff, run_ms)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


@dataclass
class _Request:
    generation: int
    runner: Any
    overrides: Any            # scheduler.whatif.WhatIf
    key: str
    cache: ResultCache
    notify: Callable[[WhatIfUpdate], None]
    submitted: float
    seq: int = 0


class LatestWins:
    """Runs what-if requests one at a time on a daemon thread; a newer request supersedes an older one."""

    def __init__(self, name: str = "kaidash-whatif", gate: Optional[InteractiveGate] = None):
        self.name = name
        self.gate = gate if gate is not None else INTERACTIVE
        self._lock = threading.Lock()
        self._generation = 0
        self._pending: Optional[_Request] = None
        self._thread: Optional[threading.Thread] = None
        self._search: Optional[tuple[int, Search]] = None   # (generation, the engine's latest eviction search)

    @property
    def generation(self) -> int:
        """The latest request's generation (updates from older ones are stale)."""
        return self._generation

    def is_current(self, generation: int) -> bool:
        return generation == self._generation

    def activity(self, generation: Optional[int] = None) -> Optional[Search]:
        """The eviction search the latest request's engine run is in (the last one it started), or ``None``
        (no search yet, the run finished, or a newer request; ``generation``: the request asked about, default
        the latest)."""
        held = self._search
        if held is None:
            return None
        gen, search = held
        want = self._generation if generation is None else generation
        return search if gen == want == self._generation else None

    def busy(self) -> bool:
        """Whether a request is waiting or running."""
        with self._lock:
            return self._pending is not None or self._thread is not None

    def cancel(self) -> int:
        """Abandon whatever waits or runs (at its next interruption point); returns the new generation."""
        with self._lock:
            self._generation += 1
            self._pending = None
            return self._generation

    def submit(self, runner, overrides, key: str, cache: ResultCache,
               notify: Callable[[WhatIfUpdate], None]) -> int:
        """Queue ``runner.run(overrides)`` as the latest request; returns its generation. ``notify`` is called
        on the worker thread with each :class:`WhatIfUpdate` that is still current when produced."""
        with self._lock:
            self._generation += 1
            self._pending = _Request(self._generation, runner, overrides, key, cache, notify, time.perf_counter())
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            return self._generation

    def wait(self, timeout: float = 30.0) -> bool:
        """Block until idle (tests, notebooks); returns whether it got there in ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                thread = self._thread
            if thread is None:
                return True
            thread.join(min(0.05, max(0.0, deadline - time.monotonic())))
        return not self.busy()

    def _work(self) -> None:
        while True:
            with self._lock:
                req, self._pending = self._pending, None
                if req is None:
                    self._thread = None        # under the lock: a submit now starts a new thread
                    return
            with self.gate.hold("what-if"):
                self._run(req)

    def _deliver(self, req: _Request, update: WhatIfUpdate) -> None:
        self._stop_if_superseded(req)
        req.seq += 1
        try:
            req.notify(replace(update, seq=req.seq))
        except Superseded:
            raise
        except Exception as exc:        # the page went away: the run is of no use to anyone
            log.info("what-if update not delivered (%s: %s); the run stops", type(exc).__name__, exc)
            raise Superseded from None

    def _stop_if_superseded(self, req: _Request) -> None:
        """Raise :class:`Superseded` once a newer request exists: before each delivery, and as the engine's
        interruption check (:mod:`scheduler.interrupt`), where a superseded run stops inside its cycle."""
        if not self.is_current(req.generation):
            raise Superseded

    def _run(self, req: _Request) -> None:
        def since() -> float:
            return (time.perf_counter() - req.submitted) * 1000

        def on_cycle(progress) -> None:
            phase = INTERIM if progress.diff is not None else COMPUTING
            self._deliver(req, WhatIfUpdate(req.generation, phase, progress.cycle, progress.cycles, since(),
                                            diff=progress.diff, side=progress.side))

        try:
            if not self.is_current(req.generation):
                return
            def searching(search: Optional[Search]) -> None:   # the engine's eviction search starts / ends
                self._search = None if search is None else (req.generation, search)

            try:
                with interruptible(lambda: self._stop_if_superseded(req)), observing(searching):
                    diff = req.runner.run(req.overrides, on_cycle=on_cycle)
            finally:
                self._search = None
            run_ms = since()
            req.cache.put(req.key, diff, run_ms)     # valid for its override set even when superseded
            self._deliver(req, WhatIfUpdate(req.generation, STEADY, diff.after.cycles_run, req.runner.cycles,
                                            run_ms, diff=diff))
        except Superseded:
            return
        except KaidashError as exc:
            self._quietly(req, WhatIfUpdate(req.generation, ERROR, elapsed_ms=since(), error=str(exc)))
        except Exception as exc:     # a bug must not leave the page computing for ever, nor take the server down
            log.exception("what-if run failed")
            self._quietly(req, WhatIfUpdate(req.generation, ERROR, elapsed_ms=since(),
                                            error=f"internal error ({type(exc).__name__}: {exc}); it was logged"))

    def _quietly(self, req: _Request, update: WhatIfUpdate) -> None:
        try:
            self._deliver(req, update)
        except Superseded:
            pass


__all__ = ["COMPUTING", "ERROR", "INTERIM", "STEADY", "LatestWins", "ResultCache", "Superseded", "WhatIfUpdate",
           "overrides_key"]
