"""Overview: cluster totals, allocated vs DCGM-used, idle-but-allocated GPUs, pending, top alerts, loop health."""

from __future__ import annotations

import html
import math

import panel as pn

from .. import display
from ..models import OverviewModel
from .base import View, no_data
from .common import STATUS_COLOURS, alerts_html, badge, kpi_cards
from .plots import share_bars, update_share_bars


def health_html(h: dict, cycle_ms: float | None = None) -> str:
    """Loop health as a small table: source, status, last tick (clock time), cycle time, metrics, detail, error.
    The data age is in the header, where the browser counts it up."""
    status = badge(h["status"], STATUS_COLOURS.get(h["status"], "#4b5563"))
    rows = [("source", html.escape(h["label"] or h["source"])), ("status", status),
            ("last tick", f'{display.clock(h["last_tick_wall"])} (tick {h["ticks"]:,}; '
                          'the header counts the data age)' if h["ticks"] else "none yet"),
            ("cycle", "–" if cycle_ms is None else f"{cycle_ms:,.0f} ms"),
            ("metrics", html.escape(h["metrics"] or "–")),
            ("detail", html.escape(h["detail"] or "–"))]
    if h["stale_since"]:
        rows.append(("stale since", display.clock(h["stale_since"])))
    if h["error"]:
        rows.append(("error", f'<span style="color:#fca5a5">{html.escape(h["error"])}</span>'))
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kd-health">{body}</table>'


WASTE = ("idle_allocated", "stranded", "unused_quota")
COST_LABELS = {"capacity": "all GPUs", "allocated": "allocated", "idle_allocated": "idle but allocated",
               "stranded": "stranded fragments", "free": "free (usable)", "unavailable": "unavailable nodes",
               "unused_quota": "unused quota"}


def _period_cost(frame, category: str) -> float:
    if frame is None or not len(frame):
        return 0.0
    return float(frame.loc[frame["category"] == category, "cost"].sum())


def waits_cost_html(n: dict, insight=None) -> str:
    """The Overview's waits, ETA and cost numbers (:func:`scheduler.waits.cluster_overview`) as a table."""
    if not n:
        return '<div class="kd-muted">Waits, ETA and cost appear with the first tick.</div>'
    wait = display.wait
    classes = ", ".join(f"{html.escape(k)} {v}" for k, v in sorted(n["pending_by_priority_class"].items()))
    est = n["est_wait_median_s"]
    est_text = ("none waiting" if n["pending_jobs"] == 0 else "no estimate yet" if math.isnan(est)
                else "beyond the horizon" if math.isinf(est) else f"~{wait(est)}")
    hours = f'{n["window_s"] / 3600:.0f} h'
    evictions = ", ".join(f"{html.escape(a or 'observed')} {v}" for a, v in sorted(n["evictions_by_action"].items()))
    rows = [("waiting jobs", f'<b data-kpi="waiting">{n["pending_jobs"]}</b> · {display.gpus(n["pending_gpus"])} GPUs'
                             + (f" · {classes}" if classes else "")),
            ("expected wait", f'<b data-kpi="expected-wait">{est_text}</b> (median over waiting jobs, ETA)'),
            (f"started in {hours}", f'{n["started_in_window"]} jobs · wait p50 {wait(n["wait_p50_s"])} · p90 '
                                    f'{wait(n["wait_p90_s"])} · p99 {wait(n["wait_p99_s"])}'),
            ("gangs", f'{n["gangs"]}: {n["gangs_whole"]} whole, {n["gangs_partial"]} partial, '
                      f'{n["gangs_waiting"]} waiting'),
            (f"evicted in {hours}", f'{evictions or "none"} (pods)')]
    cur = n.get("currency", "USD")
    per_h = n.get("cost_per_h")
    if per_h:
        rows.append(("cost per hour", f'<span data-kpi="cost-per-hour">' + " · ".join(
            f'{COST_LABELS[c]} {display.money(per_h[c], cur, "h")}' for c in
            ("capacity", "allocated", "idle_allocated", "stranded", "unused_quota")) + "</span>"))
    hist = getattr(insight, "cost_history", None)
    if hist is not None:
        for label, frame in (("waste today", hist.today), ("waste 30 days", hist.month)):
            covered = float(frame.attrs.get("covered_h", 0.0)) if frame is not None else 0.0
            rows.append((label, " · ".join(f'{COST_LABELS[c]} {display.money(_period_cost(frame, c), cur)}'
                                           for c in WASTE) + f' <span class="kd-muted">({display.wait(covered * 3600)} '
                                                              'observed)</span>'))
    note = html.escape(getattr(insight, "eta_note", "") or "")
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return (f'<table class="kd-health" data-waits-cost>{body}</table>'
            + (f'<div class="kd-muted">{note}</div>' if note else ""))


def overview_kpis(n: dict) -> list[dict]:
    """The KPI cards of the overview from :func:`dashboard.frames.overview_numbers`."""
    if not n:
        return []
    used = n["gpus_used"]
    idle = n["gpus_idle_allocated"]
    has_idle = isinstance(idle, (int, float)) and not math.isnan(idle) and idle > 0
    return [
        {"id": "gpus", "label": "GPUs", "value": display.gpus(n["gpus_total"]),
         "sub": f'{n["nodes_ready"]}/{n["nodes"]} nodes ready'},
        {"id": "allocated", "label": "Allocated", "value": display.gpus(n["gpus_allocated"]),
         "sub": f'{display.percent(n["allocation_pct"])} of GPUs', "accent": "#e69f00"},
        {"id": "used", "label": "Used (DCGM)", "value": display.gpus(used),
         "sub": "no GPU metrics" if math.isnan(used) else f'{display.percent(n["utilisation_pct"])} of GPUs busy',
         "accent": "#56b4e9"},
        {"id": "idle", "label": "Idle but allocated", "value": display.gpus(idle),
         "sub": "GPUs below 5 % utilisation: wasted", "accent": "#f87171" if has_idle else "#6b7280"},
        {"id": "pending", "label": "Pending jobs", "value": display.number(n["pending_jobs"]),
         "sub": f'{n["running_jobs"]} running', "accent": "#f0e442"},
        {"id": "decisions", "label": "This cycle", "value": display.number(n["tasks_started"]),
         "sub": f'tasks placed · {n["tasks_evicted"]} evicted', "accent": "#cc79a7"},
    ]


class OverviewView(View):
    """Totals, alerts, loop health and the per-queue fair-share picture at a glance."""

    model_class = OverviewModel
    title = "Overview"

    def _build(self):
        self.kpis = pn.pane.HTML("", sizing_mode="stretch_width", margin=(5, 10))
        self.alerts = pn.pane.HTML("", sizing_mode="stretch_width")
        self.health = pn.pane.HTML("", sizing_mode="stretch_width")
        self.waits = pn.pane.HTML("", sizing_mode="stretch_width")
        self.bars = share_bars()
        self.empty = pn.pane.Markdown("", visible=False, disable_math=True)
        return pn.Column(
            self.empty, self.kpis,
            pn.Row(pn.Card(self.alerts, title="Top alerts", sizing_mode="stretch_width", collapsible=False),
                   pn.Card(self.health, title="Loop health", width=460, collapsible=False),
                   sizing_mode="stretch_width"),
            pn.Card(self.waits, title="Waits, expected waits and GPU cost", sizing_mode="stretch_width",
                    collapsible=False),
            pn.Card(pn.pane.Bokeh(self.bars.fig, sizing_mode="stretch_width"),
                    title="GPUs per leaf queue: deserved → fair share → allocated → requested",
                    sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    def fold(self):
        # first screen: the cards and alerts; waits and cost and the per-queue bars below
        return [(self._layout, 3)]

    def _update(self):
        m = self.model
        st = self.state
        cycle = m.tick.duration_ms if m.tick is not None else None
        self.health.object = health_html(m.health(), cycle)
        self.alerts.object = alerts_html(m.alerts())
        if m.tick is None:
            self.empty.object, self.empty.visible = no_data(st), True
            return
        self.empty.visible = False
        self.kpis.object = kpi_cards(overview_kpis(m.numbers()))
        self.waits.object = waits_cost_html(m.waits_and_cost(), m.tick.insight)
        update_share_bars(self.bars, m.queue_table())

    def refresh(self, force: bool = False) -> bool:
        """Loop health and alerts also change without a new tick (a failing source, a degraded one)."""
        changed = super().refresh(force)
        revision = self.state.revision
        if not changed and revision != getattr(self, "_revision", None):
            cycle = self.model.tick.duration_ms if self.model.tick is not None else None
            self.health.object = health_html(self.model.health(), cycle)
            self.alerts.object = alerts_html(self.model.alerts())
        self._revision = revision
        return changed
