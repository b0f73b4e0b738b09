"""Timeline: allocation per queue against fair share, cluster allocation vs DCGM use, pending jobs and wait
time, from the live loop's bounded history (full detail recently, one point a minute further back)."""

from __future__ import annotations

import holoviews as hv
import pandas as pd
import panel as pn

from ..models import TimelineModel
from .base import View
from .common import queue_colours
from .plots import lines

WINDOWS = {"all history": 0.0, "last 10 min": 600.0, "last hour": 3600.0, "last 6 h": 6 * 3600.0,
           "last 24 h": 86400.0}


class TimelineView(View):
    """Four charts over cluster time; the window applies to all of them."""

    model_class = TimelineModel
    title = "Timeline"

    def _build(self):
        m = self.model
        self.window = pn.widgets.RadioButtonGroup(options=list(WINDOWS), value="all history", button_type="primary",
                                                  button_style="outline")
        self.window.param.watch(lambda e: self._set_window(WINDOWS[e.new]), "value")
        self.alloc = pn.pane.HoloViews(None, sizing_mode="stretch_width", min_height=280)
        self.cluster = pn.pane.HoloViews(None, sizing_mode="stretch_width", min_height=240)
        self.pending = pn.pane.HoloViews(None, sizing_mode="stretch_width", min_height=220)
        self.wait = pn.pane.HoloViews(None, sizing_mode="stretch_width", min_height=220)
        self.note = pn.pane.HTML("", sizing_mode="stretch_width")
        return pn.Column(
            pn.Row(self.window, self.note, sizing_mode="stretch_width"),
            pn.Card(self.alloc, title="GPUs allocated per leaf queue (solid) and fair share (dashed)",
                    sizing_mode="stretch_width", collapsible=False),
            pn.Row(pn.Card(self.cluster, title="Cluster GPUs", sizing_mode="stretch_width", collapsible=False),
                   pn.Card(self.pending, title="Pending jobs", sizing_mode="stretch_width", collapsible=False),
                   sizing_mode="stretch_width"),
            pn.Card(self.wait, title="Wait time of pending jobs (s)", sizing_mode="stretch_width",
                    collapsible=False),
            sizing_mode="stretch_width")

    def _set_window(self, seconds: float) -> None:
        self.model.window_s = seconds
        self._update()

    def _update(self):
        m = self.model
        totals = m.totals()
        per_q = m.per_queue()
        self.note.object = (f'<div class="kd-muted" style="padding-top:8px">{len(totals)} point(s) · '
                            f'history keeps {m.state.history.fine.maxlen} ticks in full and '
                            f'{m.state.history.coarse.maxlen} one-per-{m.state.history.coarse_every}-ticks '
                            f'points (bounded memory)</div>')
        colours = queue_colours(per_q["queue"].unique()) if len(per_q) else {}
        curves = []
        for q, df in per_q.groupby("queue", sort=True):
            c = colours.get(q, "#888")
            curves.append(hv.Curve(df, "at", ("allocated", "GPUs"), label=q).opts(color=c, line_width=2))
            curves.append(hv.Curve(df, "at", ("fair_share", "GPUs")).opts(color=c, line_dash="dashed",
                                                                          line_width=1.5, alpha=0.8))
            if len(df) <= 30:
                curves.append(hv.Scatter(df, "at", ("allocated", "GPUs")).opts(color=c, size=5))
        if not curves:
            curves = [hv.Curve(pd.DataFrame({"at": [pd.Timestamp(0)], "allocated": [0.0]}), "at",
                               ("allocated", "GPUs"))]
        self.alloc.object = hv.Overlay(curves).opts(responsive=True, height=280, legend_position="right",
                                                    show_grid=True, xlabel="cluster time")
        self.cluster.object = lines(totals, "at", {"gpus_total": "total", "gpus_allocated": "allocated",
                                                     "gpus_used": "used (DCGM)",
                                                     "gpus_idle_allocated": "idle-allocated"}, "GPUs",
                                    colours={"gpus_total": "#8c8c8c", "gpus_allocated": "#f28e2b",
                                             "gpus_used": "#59a14f", "gpus_idle_allocated": "#e15759"})
        self.pending.object = lines(totals, "at", {"pending_jobs": "pending", "running_jobs": "running"}, "jobs",
                                    colours={"pending_jobs": "#edc948", "running_jobs": "#4e79a7"})
        self.wait.object = lines(totals, "at", {"wait_mean_s": "mean wait", "wait_max_s": "longest wait"},
                                 "seconds", colours={"wait_mean_s": "#76b7b2", "wait_max_s": "#e15759"})
