"""One process-wide gate: background work yields while someone waits on interactive work.

The server's 2 cores (and one interpreter) are shared by a what-if run that a person is watching, the ETA
estimate thread (:mod:`dashboard.insight`) and the loop's why-pending searches (:mod:`dashboard.loop`). The
first is what someone waits for; the others only keep the page's background figures fresh. :data:`INTERACTIVE`
says when interactive work is in flight (``with INTERACTIVE.hold("what-if"): ...``, nestable, any thread) and
background work calls :meth:`InteractiveGate.wait_idle` at its safe points (between engine sessions, between
searches): it blocks there, without the interpreter, until nothing interactive runs, then carries on where it
stopped, so nothing it had computed is lost. :meth:`InteractiveGate.busy` lets a loop skip optional work
instead.

A hold lingers ``linger_s`` after its block ends: the page renders the final result on another thread right
after the run delivered it, and that render is part of what the person waits for. A wait never lasts longer
than ``max_wait_s`` (someone dragging sliders for minutes must not stop the ETA for
good): after that the background work takes one step and asks again. No Panel import.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator


class Yielded(Exception):
    """Raised by background work's own hook to abandon a step that interactive work should not wait for (a
    why-pending search that will be redone in full later)."""


class InteractiveGate:
    """Counts interactive work in flight; background work waits on it (see the module doc)."""

    def __init__(self, max_wait_s: float = 30.0, linger_s: float = 0.5):
        self.max_wait_s = max_wait_s
        self.linger_s = linger_s
        self._cond = threading.Condition()
        self._in_flight: dict[str, int] = {}
        self._until = 0.0              # time.monotonic() until which a finished hold still counts
        self.paused_s = 0.0
        """Seconds background work has spent waiting here so far (all callers)."""

    @contextmanager
    def hold(self, what: str = "interactive work") -> Iterator[None]:
        """Mark ``what`` as in flight for the ``with`` block (background work waits meanwhile)."""
        with self._cond:
            self._in_flight[what] = self._in_flight.get(what, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                left = self._in_flight[what] - 1
                if left:
                    self._in_flight[what] = left
                else:
                    del self._in_flight[what]
                self._until = max(self._until, time.monotonic() + self.linger_s)
                self._cond.notify_all()

    def _blocked(self) -> bool:
        return bool(self._in_flight) or time.monotonic() < self._until

    def busy(self) -> bool:
        """Whether interactive work is in flight now (or finished less than ``linger_s`` ago)."""
        with self._cond:
            return self._blocked()

    def in_flight(self) -> str:
        """What runs now, for a status line ("what-if", "what-if ×2"), or ``""``."""
        with self._cond:
            return ", ".join(w if n == 1 else f"{w} ×{n}" for w, n in sorted(self._in_flight.items()))

    def wait_idle(self, max_wait_s: float | None = None) -> float:
        """Block while interactive work is in flight, at most ``max_wait_s`` (default :attr:`max_wait_s`);
        returns the seconds waited (0.0 when nothing was in flight)."""
        limit = self.max_wait_s if max_wait_s is None else max_wait_s
        with self._cond:
            if not self._blocked():
                return 0.0
            began = time.monotonic()
            deadline = began + limit
            while self._blocked():
                now = time.monotonic()
                if now >= deadline:
                    break
                wake = self._until if not self._in_flight else deadline   # a linger ends by the clock
                self._cond.wait(max(0.0, min(wake, deadline) - now))
            waited = time.monotonic() - began
            self.paused_s += waited
            return waited


INTERACTIVE = InteractiveGate()
"""The server process's gate: what-if runs hold it, the ETA estimate and why-pending searches yield to it."""

__all__ = ["INTERACTIVE", "InteractiveGate", "Yielded"]
