"""Queues: the hierarchy as a tree with quota, limit, over-quota weight, priority and the
deserved → fair share → allocated → requested chain; borrowing / starved / reclaimable; click a queue for
its jobs and history."""

from __future__ import annotations

import html

import panel as pn

from .. import display
from ..models import QueuesModel
from .base import View
from .common import (STATE_COLOURS, badge, duration_formatter, keyed, limit_formatter, number_formatters,
                     state_formatter, table, update_table, widget_args)
from .plots import TimeSeries, share_bars, update_share_bars
from .queue_status import QueueStatusPanel

TABLE_COLUMNS = ["label", "state", "priority", "quota", "limit", "over_quota_weight", "deserved", "fair_share",
                 "allocated", "requested", "ratio", "borrowed", "reclaimable", "starved_by", "running_jobs",
                 "pending_jobs"]
AMOUNTS = ["quota", "limit", "deserved", "fair_share", "allocated", "requested", "borrowed", "reclaimable",
           "starved_by"]
SHY = "\u00ad"       # a soft hyphen: a long title breaks there instead of being cut
TITLES = {"label": "queue", "priority": f"prio{SHY}rity", "over_quota_weight": "weight",
          "deserved": f"de{SHY}served", "fair_share": "fair share", "allocated": f"al{SHY}lo{SHY}cated",
          "requested": f"re{SHY}quest{SHY}ed", "ratio": "alloc / fair", "borrowed": f"bor{SHY}rowed",
          "reclaimable": f"re{SHY}claim{SHY}able", "starved_by": f"star{SHY}ved by", "running_jobs": f"run{SHY}ning",
          "pending_jobs": f"pend{SHY}ing"}
TOOLTIPS = {"label": "queue (indented under its parent)", "state": "starved / reclaimable / borrowing / ok / idle",
            "priority": "queue priority (higher is served first)", "quota": "quota (deserved share); ∞ = unlimited",
            "limit": "limit: the most the queue may hold; ∞ = unlimited",
            "over_quota_weight": "over-quota weight: how surplus is divided among queues",
            "deserved": "deserved (guaranteed) amount", "fair_share": "fair share computed by KAI's proportion plugin",
            "allocated": "allocated now: what the queue's running and binding pods hold in the cluster (observed; "
                         "the engine's binds of this cycle are a prediction, in the selected queue's line)",
            "requested": "requested by running and pending jobs",
            "ratio": "allocated / fair share: KAI's queue order key, lowest is served first",
            "borrowed": "allocated above deserved (over-quota use)",
            "reclaimable": "preemptible allocation above fair share: what reclaim may take back",
            "starved_by": "below min(fair share, requested) while a job waits",
            "running_jobs": "running jobs in the subtree", "pending_jobs": "pending jobs in the subtree"}
JOB_COLUMNS = ["job", "queue", "status", "next_cycle", "priority", "preemptible", "tasks", "gpus", "nodes", "age_s",
               "reason"]
"""The selected queue's jobs: status as observed and, beside it, ``next_cycle``: the engine's decision (a
prediction)."""


def display_frame(df, resource: str):
    """The queue frame as shown: amounts in the resource's unit (GPUs, cores, GiB), keyed by queue name."""
    scale, _ = display.RESOURCE_SCALE[resource]
    out = keyed(df, "queue")[TABLE_COLUMNS].copy()
    if scale != 1.0:
        for c in AMOUNTS:
            out[c] = out[c].where(out[c] == -1, out[c] / scale)   # -1 (unlimited) stays -1
    return out


NO_HISTORY = "No history for this queue yet"
PICK_QUEUE = "Click a queue in the table above to see its history"


class QueuesView(View):
    """The queue tree and, for the selected queue, its jobs and history."""

    model_class = QueuesModel
    title = "Queues"

    def _build(self):
        m = self.model
        self.table = table(display_frame(m.frame(), m.resource), height=None, selectable=1, titles=TITLES,
                           header_tooltips=TOOLTIPS,
                           formatters={**number_formatters(AMOUNTS), **number_formatters(["ratio"], 2),
                                       **number_formatters(["over_quota_weight", "priority"], 1),
                                       "state": state_formatter(), "limit": limit_formatter(),
                                       "quota": limit_formatter()},
                           widths={"state": 108, "label": 140}, frozen_columns=["label"], name="queues-table",
                           empty="No queues in this snapshot", layout="fit_columns", min_width=50,
                           configuration={"columnDefaults": {"headerWordWrap": True, "minWidth": 50, "tooltip": True,
                                                             "headerSort": False}})
        self.table.on_click(self._on_click)
        self.table.param.watch(self._on_selection, "selection")
        self.bars = share_bars()
        self.status = QueueStatusPanel()
        self.unit = pn.pane.HTML("", sizing_mode="stretch_width")
        self.detail_title = pn.pane.HTML("", sizing_mode="stretch_width")
        self.jobs = table(self._jobs_frame("").iloc[0:0], height=260,
                          titles={"age_s": "age", "next_cycle": "this cycle (prediction)"},
                          header_tooltips={"status": "as observed in the cluster",
                                           "next_cycle": "what KAI would do with the job this cycle (kaidash's "
                                                         "shadow session; not yet the cluster)"},
                          formatters={**number_formatters(["gpus"]), "age_s": duration_formatter(),
                                      "next_cycle": {"type": "textarea"}},
                          widths={"nodes": 160, "reason": 200, "job": 230, "next_cycle": 190}, name="queue-jobs",
                          empty="No queue selected, or no jobs in it")
        self.history = TimeSeries("GPUs", height=220, empty=PICK_QUEUE)
        self.legend = pn.pane.HTML(" ".join(badge(k, v) for k, v in STATE_COLOURS.items())
                                   + '<span class="kd-muted"> · hover a column title for what it means · alloc / '
                                     'fair = KAI\'s queue order key (lowest first) · ∞ = unlimited</span>')
        controls = pn.Row(pn.widgets.RadioButtonGroup.from_param(m.param.resource, **widget_args(
                              label="Resource", button_type="primary", button_style="outline")),
                          pn.widgets.Checkbox.from_param(m.param.only_active,
                                                         **widget_args(label="only queues with demand")),
                          self.unit)
        m.param.watch(lambda *_: self._update(), ["resource", "only_active"])
        self.selection.param.watch(lambda *_: self._update_detail(), "queue")
        return pn.Column(
            controls, self.legend, self.table, self.status,
            pn.Card(pn.pane.Bokeh(self.bars.fig, sizing_mode="stretch_width"), title="Per leaf queue",
                    sizing_mode="stretch_width", collapsible=False),
            pn.Card(pn.Column(self.detail_title, self.jobs,
                              pn.pane.Bokeh(self.history.fig, sizing_mode="stretch_width"),
                              sizing_mode="stretch_width"),
                    title="Selected queue: jobs and history", sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    def _jobs_frame(self, queue: str):
        df = self.model.jobs(queue).copy()
        df["age_s"] = df["age_s"].round(0)
        return keyed(df, "job")[JOB_COLUMNS]

    def _on_click(self, event) -> None:
        df = self.table.value
        if 0 <= event.row < len(df):
            self.selection.queue = str(df.index[event.row])

    def _on_selection(self, event) -> None:
        if event.new:
            self._on_click(type("E", (), {"row": event.new[0]}))

    def fold(self):
        # first screen: the controls, the queue table and the status panel; the per-queue bars and the selected
        # queue below. The status table stays on the first screen: deferred, a tick's patch could reach the
        # browser while its Tabulator was still being built ("Cannot read properties of null (reading
        # 'verticalFillMode')", 1 page load in 3 in tests/test_kube_apiserver_browser.py)
        return [(self._layout, 4)]

    def _update(self):
        m = self.model
        df = m.frame()
        update_table(self.table, display_frame(df, m.resource))
        scale, unit = display.RESOURCE_SCALE[m.resource]
        self.unit.object = f'<div class="kd-muted" style="padding-top:8px">amounts in {unit}</div>'
        update_share_bars(self.bars, df, unit=unit, scale=scale)
        self._update_status()
        self._update_detail()

    def _update_status(self):
        m = self.model
        ins = m.tick.insight if m.tick is not None else None
        if ins is None:
            note = "Waits, ETA and cost appear with the first tick."
        else:
            note = html.escape(ins.eta_note) + (" · waste cost at the configured GPU prices (docs/cost.md)"
                                                if ins.costs is not None else "")
        horizon = ins.eta.horizon_s if ins is not None and ins.eta is not None else 8 * 3600.0
        self.status.update(m.status(), m.currency(), note, horizon)

    def _update_detail(self):
        m = self.model
        q = self.selection.queue
        df = m.frame()
        row = df[df["queue"] == q]
        res = m.resource
        if not q or not len(row):
            self.detail_title.object = ('<div class="kd-muted">Click a queue in the table to see its jobs (the '
                                        'whole subtree for a department) and its history.</div>')
        else:
            r = row.iloc[0]
            amount = lambda x: "unlimited" if x == -1 else display.resource(x, res)  # noqa: E731
            self.detail_title.object = (
                f'<div class="kd-explain"><b>{html.escape(q)}</b> {badge(r["state"], STATE_COLOURS[r["state"]])} · '
                f'quota {amount(r["quota"])} · limit {amount(r["limit"])} · weight '
                f'{display.number(r["over_quota_weight"])} · priority {r["priority"]}<br>deserved '
                f'<b>{amount(r["deserved"])}</b> → fair share <b>{amount(r["fair_share"])}</b> → allocated '
                f'<b>{amount(r["allocated"])}</b> of requested <b>{amount(r["requested"])}</b>'
                + (f'<br><span class="kd-muted" data-allocated-next>KAI would hold {amount(r["allocated_next"])} after '
                   f'this cycle\'s binds and evictions (kaidash\'s prediction; the figures above are the cluster as '
                   f'observed)</span>' if abs(r["allocated_next"] - r["allocated"]) > 1e-6 else "")
                + '</div>')
        # Only a selected queue's jobs: all jobs of a large cluster are a big table to send with every page.
        update_table(self.jobs, self._jobs_frame(q) if q and len(row) else self._jobs_frame("").iloc[0:0])
        hist = m.history(q) if q else None
        # with no queue selected there is nothing to have history of: say what to do, not "no history yet"
        self.history.too_few[0] = NO_HISTORY if q and len(row) else PICK_QUEUE
        if hist is not None and len(hist):
            import pandas as pd

            x = pd.to_datetime(hist["time"], unit="s")
            self.history.update(x, {"allocated": ("allocated", "#e69f00", "solid", 2.0, hist["allocated"]),
                                    "fair_share": ("fair share", "#56b4e9", "solid", 2.0, hist["fair_share"]),
                                    "deserved": ("deserved", "#8dd3c7", "dashed", 1.5, hist["deserved"]),
                                    "requested": ("requested", "#9ca3af", "dotted", 1.5, hist["requested"])})
        else:
            import pandas as pd

            self.history.update(pd.Series([], dtype="datetime64[ns]"), {})
