"""Timeline: allocation per queue against fair share, cluster allocation vs DCGM use, pending jobs and wait
time, from the live loop's bounded history (full detail recently, one point a minute further back)."""

from __future__ import annotations

import panel as pn

from .. import display
from ..models import TimelineModel
from .base import View
from .common import queue_colours, widget_args
from .cost_history import CostHistoryPanel
from .plots import TimeSeries

WINDOWS = {"all history": 0.0, "last 10 min": 600.0, "last hour": 3600.0, "last 6 h": 6 * 3600.0,
           "last 24 h": 86400.0}
TOTALS = {"gpus_total": ("total", "#9ca3af", "dashed"), "gpus_allocated": ("allocated", "#e69f00", "solid"),
          "gpus_used": ("used (DCGM)", "#56b4e9", "solid"),
          "gpus_idle_allocated": ("idle but allocated", "#f87171", "solid")}
ALLOC_HEIGHT = 420
"""The per-queue chart's height: at 1280x720 it and the window buttons fill the first screen."""


def coverage_note(points: int, span_s: float, period_s: float, static: bool, window_s: float = 0.0) -> str:
    """What the charts cover, in words: never a bare "0 point(s)" on the first screen.

    ``points``: history points in the window; ``span_s``: the cluster time they cover; ``static``: the source is
    a fixed snapshot (one moment, so one point for good)."""
    if points == 0:
        return (f"No tick recorded yet: the first point comes with the loop's first tick (every {period_s:g} s)."
                if not window_s else "Nothing in this window yet: choose a longer one or all history.")
    if static:
        return ("A static snapshot is one moment: each chart has one point (no line). A live source (the "
                "simulated cluster, Kubernetes) records a point every tick.")
    if points == 1:
        return (f"History starts now: 1 tick recorded; the lines start with the next tick (every "
                f"{period_s:g} s).")
    text = f"{points:,} points over {display.wait(span_s)} of cluster time"
    if window_s and span_s < window_s:
        text += " (all the history there is: less than the window)"
    return text


ONE_MOMENT = "One moment (a static snapshot): no line to draw"
"""A chart's text when its only point is a static snapshot's (a live source's first point says a line is coming)."""


class TimelineView(View):
    """Four charts over cluster time; the window applies to all of them. Charts are built once and their
    data replaced on each tick."""

    model_class = TimelineModel
    title = "Timeline"

    def _build(self):
        self.window = pn.widgets.RadioButtonGroup(options=list(WINDOWS), value="all history", **widget_args(
            label="Time window", button_type="primary", button_style="outline"))
        self.window.param.watch(lambda e: self._set_window(WINDOWS[e.new]), "value")
        # the first screen is this chart (fold()): tall enough to read ten lines and to fill the screen
        self.alloc = TimeSeries("GPUs", height=ALLOC_HEIGHT)
        self.cluster = TimeSeries("GPUs", height=240, legend="below")
        self.pending = TimeSeries("jobs", height=220, legend="below")
        self.wait = TimeSeries("wait (h:m)", height=220, duration=True)
        self.note = pn.pane.HTML("", sizing_mode="stretch_width")
        self.cost = CostHistoryPanel()
        pane = lambda chart: pn.pane.Bokeh(chart.fig, sizing_mode="stretch_width")  # noqa: E731
        return pn.Column(
            pn.Row(self.window, self.note, sizing_mode="stretch_width"),
            pn.Card(pane(self.alloc), title="GPUs allocated per leaf queue (solid) and its fair share (dashed)",
                    sizing_mode="stretch_width", collapsible=False),
            pn.Row(pn.Card(pane(self.cluster), title="Cluster GPUs", sizing_mode="stretch_width", collapsible=False),
                   pn.Card(pane(self.pending), title="Pending and running jobs", sizing_mode="stretch_width",
                           collapsible=False),
                   sizing_mode="stretch_width"),
            pn.Card(pane(self.wait), title="Wait of pending jobs: mean and longest", sizing_mode="stretch_width",
                    collapsible=False),
            self.cost,
            sizing_mode="stretch_width")

    def _set_window(self, seconds: float) -> None:
        self.model.window_s = seconds
        self._update()

    def fold(self):
        # first screen: the window buttons and the per-queue chart (one figure); the cluster and job charts, the
        # wait and cost charts below. Each figure is a canvas, axes, tickers, a toolbar and a legend for the
        # browser to build: three on the first screen took about twice as long to draw as one.
        return [(self._layout, 2)]

    def _update(self):
        m = self.model
        totals = m.totals()
        per_q = m.per_queue()
        h = m.state.history
        fine, coarse = getattr(h, "fine", None), getattr(h, "coarse", None)
        keeps = (f"history keeps {fine.maxlen} ticks in full and {coarse.maxlen} one-per-{h.coarse_every}-ticks "
                 f"points (bounded memory)" if fine is not None and coarse is not None else "")
        span = float(totals["time"].max() - totals["time"].min()) if len(totals) else 0.0
        static = m.state.source_status == "static"
        covered = coverage_note(len(totals), span, m.state.period_s, static, m.window_s)
        self.note.object = (f'<div class="kd-muted" style="padding-top:8px" data-history-note>{covered}'
                            + (f" · {keeps}" if keeps and not static else "") + "</div>")
        for chart in (self.alloc, self.cluster, self.pending, self.wait):
            chart.too_few[1] = ONE_MOMENT if static else TimeSeries.ONE_POINT
        queues = sorted(per_q["queue"].unique()) if len(per_q) else []
        colours = queue_colours(queues)
        lines = {}
        x = totals["at"]
        for q in queues:
            df = (per_q[per_q["queue"] == q].drop_duplicates("time", keep="last").set_index("time")
                  .reindex(totals["time"]))
            c = colours.get(q, "#9ca3af")
            lines[q] = (q, c, "solid", 2.0, df["allocated"])
            lines[q + ":fair"] = (None, c, "dashed", 1.5, df["fair_share"])
        self.alloc.update(x, lines)
        self.cluster.update(x, {k: (label, c, dash, 2.0, totals[k]) for k, (label, c, dash) in TOTALS.items()})
        self.pending.update(x, {"pending_jobs": ("pending", "#f0e442", "solid", 2.0, totals["pending_jobs"]),
                                "running_jobs": ("running", "#56b4e9", "solid", 2.0, totals["running_jobs"])})
        self.cost.update(m.tick.insight if m.tick is not None else None)
        self.wait.update(x, {"wait_mean_s": ("mean wait", "#8dd3c7", "solid", 2.0, totals["wait_mean_s"]),
                             "wait_max_s": ("longest wait", "#f87171", "solid", 2.0, totals["wait_max_s"])})
