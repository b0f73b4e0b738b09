"""What is wrong with the data right now, and the server's probes.

* :func:`assess` runs after every published tick: it collects what a tick succeeded *despite* — a Kubernetes
  resource forbidden, failing or reconnecting (its cached objects are stale), a required one absent (an optional
  CRD the cluster does not install, such as KAI's Topology, is not a fault), objects the converter skipped
  or adjusted (a malformed Queue, a garbage ``gpu-fraction`` annotation), GPU metrics stale or failing — and
  marks the state ``degraded`` with the reasons first in ``source_detail``. The next clean tick clears it
  (``LiveState.publish`` resets the status), so recovery needs nothing but the fault going away.
* :func:`note_attempt` is the loop's heartbeat (every tick attempt, good or failed), for readiness.
* ``/healthz`` (:class:`LivenessHandler`): the process is up and the loop thread alive — 200, else 503.
  Data going stale is not a reason to restart the process.
* ``/readyz`` (:class:`ReadinessHandler`): the loop attempted a tick recently (within ``5 × period + 5 s``) and
  has something to show (a published tick) — 200, else 503. The body is the loop health as JSON with the
  current problems.

No Panel import (the handlers are plain Tornado).
"""

from __future__ import annotations

import json
import re
import threading
import time as _time
import weakref
from typing import Any, Optional

from tornado.web import RequestHandler

MAX_LISTED = 3
"""Problems spelled out in the one-line detail; the rest are counted."""

_ATTEMPTS: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()
_PROBLEMS: "weakref.WeakKeyDictionary[Any, list[str]]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_METRICS_BAD = re.compile(r"^(DCGM via \S+: (stale|error)\b|GPU metrics failed)")


def note_attempt(state, when: Optional[float] = None) -> None:
    """Record that the loop is attempting a tick now (readiness heartbeat)."""
    with _LOCK:
        _ATTEMPTS[state] = _time.time() if when is None else when


def last_attempt(state) -> Optional[float]:
    with _LOCK:
        return _ATTEMPTS.get(state)


def problems(state) -> list[str]:
    """The reasons the latest tick is degraded (empty when it is clean)."""
    with _LOCK:
        return list(_PROBLEMS.get(state, []))


def feed_problems(feed) -> list[str]:
    """What the feed's source reports as not fully working: per-resource state, then skipped objects."""
    source = getattr(feed, "source", None)
    if source is None or not hasattr(source, "status"):
        return []
    out = []
    try:
        status = source.status()
        for name, r in getattr(status, "resources", {}).items():
            # an optional CRD the cluster does not serve is no fault (the status line still says "absent")
            if not getattr(r, "healthy", r.state == "ok"):
                out.append(f"{name} {r.state}" + (f": {r.error}" if r.error else ""))
        for w in getattr(source, "warnings", []) or []:
            if w.name is not None:          # resource-level problems are already listed above
                out.append(str(w))
    except Exception as exc:  # noqa: BLE001 — health reporting must never fail a tick
        out.append(f"source status unavailable: {type(exc).__name__}: {exc}")
    return out


def metrics_problems(metrics_status: str) -> list[str]:
    """The GPU metrics status line when it says stale or failing."""
    return [metrics_status] if metrics_status and _METRICS_BAD.match(metrics_status) else []


def assess(state, feed, metrics_status: Optional[str] = None) -> list[str]:
    """After a published tick: mark ``state`` degraded with the reasons, or leave it as published."""
    found = feed_problems(feed) + metrics_problems(state.metrics_status if metrics_status is None
                                                   else metrics_status)
    with _LOCK:
        _PROBLEMS[state] = found
    if found and state.source_status in ("ok", "static"):
        listed = "; ".join(found[:MAX_LISTED]) + (f"; and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED
                                                  else "")
        state.param.update(source_status="degraded", source_detail=f"degraded: {listed} · {state.source_detail}")
    return found


def readiness(state, loop=None, now: Optional[float] = None, factor: float = 5.0, slack_s: float = 5.0) -> dict:
    """Readiness as a dict: ``ready``, ``reason``, the loop health and the current problems."""
    now = _time.time() if now is None else now
    attempt = last_attempt(state)
    window = factor * state.period_s + slack_s
    if state.tick is None:
        ready, reason = False, "no tick published yet" + (f" ({state.error})" if state.error else "")
    elif loop is not None and not loop.running:
        ready, reason = False, "the live loop is not running"
    elif attempt is None or now - attempt > window:
        ago = "never" if attempt is None else f"{now - attempt:.0f}s ago"
        ready, reason = False, f"the loop has not ticked within {window:.0f}s (last attempt {ago})"
    else:
        ready, reason = True, state.source_status
    found = problems(state)
    if loop is not None and state.error:   # the last tick failed: ask the source now, it may know why
        found = feed_problems(getattr(loop, "_feed", None)) or found
    return {"ready": ready, "reason": reason, "last_attempt_wall": attempt, "problems": found,
            **state.health(now)}


class LivenessHandler(RequestHandler):
    """``GET /healthz``: 200 while the process serves and the loop thread is alive (503 when it died)."""

    def initialize(self, loop) -> None:
        self.loop = loop

    def get(self) -> None:
        alive = self.loop is None or self.loop.running
        self.set_status(200 if alive else 503)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"ok": alive, "loop_running": alive}))


class ReadinessHandler(RequestHandler):
    """``GET /readyz``: 200 when the loop ticked recently and has data, else 503; JSON body with why."""

    def initialize(self, loop) -> None:
        self.loop = loop

    def get(self) -> None:
        body = readiness(self.loop.state, self.loop)
        self.set_status(200 if body["ready"] else 503)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body, default=str))


def health_patterns(loop) -> list:
    """Tornado routes for ``/healthz`` and ``/readyz``."""
    return [(r"/healthz", LivenessHandler, {"loop": loop}), (r"/readyz", ReadinessHandler, {"loop": loop})]
