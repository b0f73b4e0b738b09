"""HTTP routes served next to the dashboard: kaidash's own Prometheus metrics and a health probe.

``/metrics``: :class:`scheduler.metrics.own.KaidashMetrics` exposition, refreshed by the live loop each tick.
``/healthz``: 200 with the loop health as JSON while the last good tick is younger than ``max_age_s`` (or the
source is static), 503 otherwise (source failing: the dashboard still serves the last good state).
"""

from __future__ import annotations

import json

from tornado.web import RequestHandler


class MetricsHandler(RequestHandler):
    """``GET /metrics``: Prometheus text exposition of kaidash's own metrics."""

    def initialize(self, loop) -> None:
        self.loop = loop

    def get(self) -> None:
        metrics = self.loop.own_metrics
        if metrics is None:
            self.set_status(404)
            self.finish("kaidash metrics are not available in this build\n")
            return
        body, content_type = metrics.exposition()
        self.set_header("Content-Type", content_type)
        self.finish(body)


class HealthHandler(RequestHandler):
    """``GET /healthz``: liveness/readiness of the live loop (JSON body, 200 or 503)."""

    def initialize(self, state, max_age_factor: float = 5.0) -> None:
        self.state = state
        self.max_age_factor = max_age_factor

    def get(self) -> None:
        health = self.state.health()
        age = health["data_age_s"]
        ok = health["status"] == "static" or (age is not None and age <= self.max_age_factor * self.state.period_s
                                              + 5.0)
        self.set_status(200 if ok else 503)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"ok": ok, **health}, default=str))


def extra_patterns(loop) -> list:
    """Tornado routes for ``pn.serve(..., extra_patterns=...)``."""
    from .health import health_patterns   # /healthz (liveness) and /readyz (readiness)

    return [(r"/metrics", MetricsHandler, {"loop": loop}), *health_patterns(loop)]
