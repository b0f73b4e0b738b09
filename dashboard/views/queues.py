"""Queues: the hierarchy as a tree with quota, limit, over-quota weight, priority and the
deserved → fair share → allocated → requested chain; borrowing / starved / reclaimable; click a queue for
its jobs and history."""

from __future__ import annotations

import html

import pandas as pd
import panel as pn

from ..frames import format_duration
from ..models import QueuesModel
from .base import View
from .common import (STATE_COLOURS, badge, fmt, limit_formatter, limit_text, number_formatters, state_formatter,
                     table)
from .plots import lines, share_bars

TABLE_COLUMNS = ["label", "state", "priority", "quota", "limit", "over_quota_weight", "deserved", "fair_share",
                 "allocated", "requested", "ratio", "borrowed", "reclaimable", "starved_by", "running_jobs",
                 "pending_jobs"]
TITLES = {"label": "queue", "over_quota_weight": "weight", "fair_share": "fair share", "ratio": "alloc/fair",
          "starved_by": "starved by", "running_jobs": "running", "pending_jobs": "pending"}
JOB_COLUMNS = ["job", "queue", "status", "priority", "preemptible", "tasks", "gpus", "nodes", "age", "reason"]


class QueuesView(View):
    """The queue tree and, for the selected queue, its jobs and history."""

    model_class = QueuesModel
    title = "Queues"

    def _build(self):
        m = self.model
        self.table = table(m.frame()[TABLE_COLUMNS], height=None, selectable=1, titles=TITLES,
                           formatters={**number_formatters(["quota", "limit", "deserved", "fair_share", "allocated",
                                                            "requested", "borrowed", "reclaimable", "starved_by"]),
                                       **number_formatters(["ratio"], 2), "state": state_formatter(),
                                       "limit": limit_formatter(), "quota": limit_formatter()},
                           frozen_columns=["label"], name="queues-table", layout="fit_columns")
        self.table.on_click(self._on_click)
        self.table.param.watch(self._on_selection, "selection")
        self.bars = pn.pane.Bokeh(None, sizing_mode="stretch_width", min_height=300)
        self.detail_title = pn.pane.HTML("", sizing_mode="stretch_width")
        self.jobs = table(self._jobs_frame(""), height=260, formatters=number_formatters(["gpus"]))
        self.history = pn.pane.HoloViews(None, sizing_mode="stretch_width", min_height=220)
        self.legend = pn.pane.HTML(" ".join(badge(k, v) for k, v in STATE_COLOURS.items())
                                   + '<span class="kd-muted"> · alloc/fair = KAI\'s queue order key (lowest first)'
                                     ' · borrowed = above deserved · reclaimable = preemptible above fair share'
                                     ' · starved by = below min(fair share, requested)</span>')
        controls = pn.Row(pn.widgets.RadioButtonGroup.from_param(m.param.resource, button_type="primary",
                                                                 button_style="outline"),
                          pn.widgets.Checkbox.from_param(m.param.only_active, name="only queues with demand"))
        m.param.watch(lambda *_: self._update(), ["resource", "only_active"])
        self.selection.param.watch(lambda *_: self._update_detail(), "queue")
        return pn.Column(
            controls, self.legend, self.table,
            pn.Row(pn.Card(self.bars, title="Per leaf queue", sizing_mode="stretch_width", collapsible=False),
                   sizing_mode="stretch_width"),
            pn.Card(pn.Column(self.detail_title, pn.Row(self.jobs, sizing_mode="stretch_width"), self.history,
                              sizing_mode="stretch_width"),
                    title="Selected queue: jobs and history", sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    def _jobs_frame(self, queue: str):
        df = self.model.jobs(queue).copy()
        df["age"] = df["age_s"].map(format_duration)
        return df[JOB_COLUMNS]

    def _on_click(self, event) -> None:
        df = self.table.value
        if 0 <= event.row < len(df):
            name = df.iloc[event.row]["label"].strip().lstrip("\u2514").strip()
            self.selection.queue = name

    def _on_selection(self, event) -> None:
        if event.new:
            self._on_click(type("E", (), {"row": event.new[0]}))

    def _update(self):
        m = self.model
        df = m.frame()
        self.table.value = df[TABLE_COLUMNS]
        unit = {"gpu": "GPUs", "cpu": "millicores", "memory": "bytes"}[m.resource]
        self.bars.object = share_bars(df, unit=unit)
        self._update_detail()

    def _update_detail(self):
        m = self.model
        q = self.selection.queue
        df = m.frame()
        row = df[df["queue"] == q]
        if not q or not len(row):
            self.detail_title.object = ('<div class="kd-muted">Click a queue in the table to see its jobs and '
                                        'history. Showing all jobs.</div>')
        else:
            r = row.iloc[0]
            self.detail_title.object = (
                f'<div class="kd-explain"><b>{html.escape(q)}</b> {badge(r["state"], STATE_COLOURS[r["state"]])} · '
                f'quota {fmt(r["quota"])} · limit {limit_text(r["limit"])} · weight {fmt(r["over_quota_weight"])} · '
                f'priority {r["priority"]}<br>deserved <b>{fmt(r["deserved"])}</b> → fair share '
                f'<b>{fmt(r["fair_share"])}</b> → allocated <b>{fmt(r["allocated"])}</b> of requested '
                f'<b>{fmt(r["requested"])}</b> ({m.resource})</div>')
        self.jobs.value = self._jobs_frame(q or "")
        hist = m.history(q) if q else None
        if hist is not None and len(hist):
            hist = hist.assign(at=pd.to_datetime(hist["time"], unit="s"))
            self.history.object = lines(hist, "at", {"allocated": "allocated", "fair_share": "fair share",
                                                        "deserved": "deserved", "requested": "requested"},
                                        "GPUs", colours={"allocated": "#f28e2b", "fair_share": "#4e79a7",
                                                         "deserved": "#76b7b2", "requested": "#8c8c8c"})
            self.history.visible = True
        else:
            self.history.visible = False
