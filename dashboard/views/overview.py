"""Overview: cluster totals, allocated vs DCGM-used, idle-but-allocated GPUs, pending, top alerts, loop health."""

from __future__ import annotations

import datetime as _dt
import html
import math

import panel as pn

from ..frames import format_duration
from ..models import OverviewModel
from .base import View, no_data
from .common import STATUS_COLOURS, alerts_html, badge, fmt, kpi_cards
from .plots import share_bars


def _clock(ts) -> str:
    if ts is None:
        return "–"
    return _dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def health_html(h: dict, cycle_ms: float | None = None) -> str:
    """Loop health as a small table: source, status, last tick, data age, cycle time, error."""
    status = badge(h["status"], STATUS_COLOURS.get(h["status"], "#888"))
    age = h["data_age_s"]
    rows = [("source", html.escape(h["label"] or h["source"])), ("status", status),
            ("last tick", _clock(h["last_tick_wall"])),
            ("data age", "–" if age is None else format_duration(age)),
            ("cycle", "–" if cycle_ms is None else f"{cycle_ms:,.0f} ms"),
            ("metrics", html.escape(h["metrics"] or "–")),
            ("detail", html.escape(h["detail"] or "–"))]
    if h["stale_since"]:
        rows.append(("stale since", _clock(h["stale_since"])))
    if h["error"]:
        rows.append(("error", f'<span style="color:#e15759">{html.escape(h["error"])}</span>'))
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kd-health">{body}</table>'


def overview_kpis(n: dict) -> list[dict]:
    """The KPI cards of the overview from :func:`dashboard.frames.overview_numbers`."""
    if not n:
        return []
    used = n["gpus_used"]
    idle = n["gpus_idle_allocated"]
    return [
        {"id": "gpus", "label": "GPUs", "value": fmt(n["gpus_total"], 0),
         "sub": f'{n["nodes_ready"]}/{n["nodes"]} nodes ready'},
        {"id": "allocated", "label": "Allocated", "value": fmt(n["gpus_allocated"], 2),
         "sub": f'{n["allocation_pct"]:.1f}% of GPUs', "accent": "#f28e2b"},
        {"id": "used", "label": "Used (DCGM)", "value": fmt(used, 2),
         "sub": "no GPU metrics" if math.isnan(used) else f'{n["utilisation_pct"]:.1f}% of GPUs busy',
         "accent": "#59a14f"},
        {"id": "idle", "label": "Idle but allocated", "value": fmt(idle, 0),
         "sub": "GPUs < 5% util", "accent": "#e15759" if isinstance(idle, (int, float)) and idle > 0 else "#59a14f"},
        {"id": "pending", "label": "Pending jobs", "value": fmt(n["pending_jobs"]),
         "sub": f'{n["running_jobs"]} running', "accent": "#edc948"},
        {"id": "decisions", "label": "This cycle", "value": fmt(n["tasks_started"]),
         "sub": f'tasks placed · {n["tasks_evicted"]} evicted', "accent": "#b07aa1"},
    ]


class OverviewView(View):
    """Totals, alerts, loop health and the per-queue fair-share picture at a glance."""

    model_class = OverviewModel
    title = "Overview"

    def _build(self):
        self.banner = pn.pane.HTML("", sizing_mode="stretch_width", visible=False)
        self.kpis = pn.pane.HTML("", sizing_mode="stretch_width", margin=(5, 10))
        self.alerts = pn.pane.HTML("", sizing_mode="stretch_width")
        self.health = pn.pane.HTML("", sizing_mode="stretch_width")
        self.bars = pn.pane.Bokeh(None, sizing_mode="stretch_width", min_height=300)
        self.empty = pn.pane.Markdown("", visible=False)
        return pn.Column(
            self.banner, self.empty, self.kpis,
            pn.Row(pn.Card(self.alerts, title="Top alerts", sizing_mode="stretch_width", collapsible=False),
                   pn.Card(self.health, title="Loop health", width=460, collapsible=False),
                   sizing_mode="stretch_width"),
            pn.Card(self.bars, title="GPUs per leaf queue: deserved → fair share → allocated → requested",
                    sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    def _update(self):
        m = self.model
        st = self.state
        stale = bool(st.error) and st.tick is not None
        self.banner.visible = stale
        if stale:
            self.banner.object = (f'<div class="kd-banner">Data stale since {_clock(st.stale_since)}: '
                                  f'{html.escape(st.error)} — showing the last good state.</div>')
        cycle = m.tick.duration_ms if m.tick is not None else None
        self.health.object = health_html(m.health(), cycle)
        self.alerts.object = alerts_html(m.alerts())
        if m.tick is None:
            self.empty.object, self.empty.visible = no_data(st), True
            return
        self.empty.visible = False
        self.kpis.object = kpi_cards(overview_kpis(m.numbers()))
        self.bars.object = share_bars(m.queue_table())

    def refresh(self, force: bool = False) -> bool:
        """Loop health (data age) moves every second even when no new tick arrives."""
        changed = super().refresh(force)
        if not changed:
            cycle = self.model.tick.duration_ms if self.model.tick is not None else None
            self.health.object = health_html(self.model.health(), cycle)
        return changed
