"""Pending: every waiting job with its reason (KAI's reason codes), the numbers behind it and the
engine's counterfactual ("would start if queue X released 2 GPUs")."""

from __future__ import annotations

import html
import json
import math

import pandas as pd
import panel as pn

from .. import display
from ..models import STARTS_NOW, PendingModel, predicts_start
from .base import View
from .common import (TABLE_CSS, badge, duration_formatter, keyed, number_formatters, table, update_table,
                     widget_args)

COLUMNS = ["job", "queue", "wait_s", "gpus_requested", "reason", "eta", "counterfactual"]
"""The table's columns; the scheduler's full message is in the expanded row and the detail card (a column of
it left no room to read the counterfactual at 1280 px)."""
TITLES = {"pending_tasks": "tasks", "gpus_requested": "GPUs", "wait_s": "waiting", "counterfactual": "would start if",
          "eta": "expected start"}
TOOLTIPS = {"pending_tasks": "pending tasks (pods) of the job", "gpus_requested": "GPUs the pending tasks request",
            "wait_s": "time since the job was created", "reason": "KAI's reason code for the last decision",
            "eta": "when it is expected to start: median over forward simulations of the engine from now, a range "
                   "holding 80 % of starts (calibrated on this cluster's past estimates once 20 jobs have started), "
                   "and what made room for it (docs/eta.md)",
            "counterfactual": "the smallest change found that would start it (why-pending search); expand the row "
                              "or click it for the full text and the scheduler's message"}
REASON_COLOURS = {"OverLimit": "#b91c1c", "NonPreemptibleOverQuota": "#b45309", "PreemptionDelayNotElapsed": "#7e22ce",
                  "QueueDoesNotExist": "#854d0e", "NotEnoughResources": "#1d4ed8", "PodSchedulingErrors": "#1d4ed8",
                  "OverCapacity": "#0f766e", "NotReadyForScheduling": "#4b5563", "Pipelined": "#15803d",
                  STARTS_NOW: "#15803d"}
"""Badge colours of KAI's reason codes (white text, contrast >= 4.5:1); any other reason gets grey."""
WRAPPED = ("job", "eta", "counterfactual")
"""Columns whose text wraps (and breaks inside a long job name) instead of being cut at the column's edge."""
WRAP_CSS = "".join(f'.tabulator-cell[tabulator-field="{c}"] {{overflow-wrap: anywhere; text-overflow: clip;}}\n'
                   for c in WRAPPED)
NOT_YET = "not explained yet (searches run between ticks, one waiting job at a time)"


def _details_html(details) -> str:
    if not details:
        return ""
    try:
        text = json.dumps(details, indent=1, default=str)
    except TypeError:
        text = str(details)
    if len(text) > 4000:
        text = text[:4000] + "\n…"
    return f"<pre style='font-size:12px;max-height:260px;overflow:auto'>{html.escape(text)}</pre>"


class PendingView(View):
    """Waiting jobs, longest wait first, filterable by queue and reason; expand a row for the numbers. Rows are
    keyed by job, so expanded rows and the scroll position survive new ticks."""

    model_class = PendingModel
    title = "Pending"

    def _build(self):
        m = self.model
        self.summary = pn.pane.HTML("", sizing_mode="stretch_width")
        self.queue = pn.widgets.Select(**widget_args(label="Queue"), options=[""], width=180)
        self.reason = pn.widgets.Select(**widget_args(label="Reason"), options=[""], width=240)
        self.queue.param.watch(lambda e: setattr(m, "queue", e.new or ""), "value")
        self.reason.param.watch(lambda e: setattr(m, "reason", e.new or ""), "value")
        m.param.watch(lambda *_: self._update_table(), ["queue", "reason"])
        self.table = table(pd.DataFrame(columns=COLUMNS), height=None, max_height=460,
                           # the expected start and the counterfactual wrap: at 1280 px a one-line cell showed
                           # a tenth of "would start if"; the whole text is in the row (and its tooltip)
                           formatters={**number_formatters(["gpus_requested"]), "wait_s": duration_formatter(),
                                       **{c: {"type": "textarea"} for c in WRAPPED}},
                           stylesheets=[TABLE_CSS, WRAP_CSS], name="pending-table",
                           titles=TITLES, header_tooltips=TOOLTIPS, layout="fit_columns",
                           # waiting and GPUs: wide enough for the title beside its sort arrow
                           widths={"job": 170, "queue": 86, "wait_s": 86, "gpus_requested": 72, "reason": 196,
                                   "eta": 180},
                           selectable=1, row_content=self._row_detail, embed_content=False,
                           empty="No job is waiting: every job has what it asked for.")
        self.table.on_click(self._on_click)
        self.detail = pn.pane.HTML("", sizing_mode="stretch_width")
        return pn.Column(self.summary, pn.Row(self.queue, self.reason), self.table,
                         pn.Card(self.detail, title="Selected job: why it waits", sizing_mode="stretch_width",
                                 collapsible=False),
                         sizing_mode="stretch_width")

    def _row_detail(self, row) -> pn.pane.HTML:
        return pn.pane.HTML(self._explain(row["job"]), sizing_mode="stretch_width")

    def _on_click(self, event) -> None:
        df = self.table.value
        if 0 <= event.row < len(df):
            self.selection.job = str(df.index[event.row])
            self.detail.object = self._explain(self.selection.job)

    def _explain(self, job: str) -> str:
        m = self.model
        df = m.frame()
        row = df[df["job"] == job]
        if not len(row):
            return f'<div class="kd-muted">{html.escape(job)} is not pending any more.</div>'
        r = row.iloc[0]
        dec = m.decision(job)
        details = getattr(dec, "details", None) if dec is not None else None
        exp = m.explanation(job)
        extra = getattr(exp, "numbers", None) if exp is not None and not isinstance(exp, dict) else (
            exp.get("numbers") if isinstance(exp, dict) else None)
        reason = r["reason"] or (STARTS_NOW if predicts_start(r.get("next_cycle")) else "no reason recorded")
        limit = "unlimited" if r["queue_limit"] == -1 else display.gpus(r["queue_limit"])
        return (f'<div class="kd-explain"><b>{html.escape(job)}</b> in queue <b>{html.escape(r["queue"])}</b> '
                f'{badge(reason, REASON_COLOURS.get(reason, "#4b5563"))} · waiting {display.wait(r["wait_s"])}'
                f' · {r["pending_tasks"]} task(s), {display.gpus(r["gpus_requested"])} GPU<br>'
                f'{html.escape(r["message"] or "")}<br>'
                f'<b>Expected start:</b> <span data-eta="{html.escape(job)}">{html.escape(r["eta"])}</span>'
                f'{self._eta_basis(job)}<br>'
                f'<b>Would start if:</b> {html.escape(r["counterfactual"] or NOT_YET)}<br>'
                + (f'<b>This cycle:</b> <span data-next-cycle>{html.escape(r["next_cycle"])}</span> <span '
                   f'class="kd-muted">(kaidash\'s prediction; the cluster has not bound it yet)</span><br>'
                   if r.get("next_cycle") else "")
                + (f'<b>Evictions:</b> {html.escape(r["eviction"])}<br>' if r.get("eviction") else "")
                + f'queue allocated {display.gpus(r["queue_allocated"])}{self._allocated_next(r)} · fair share '
                f'{display.gpus(r["queue_fair_share"])} · limit {limit} GPUs</div>'
                + _details_html(extra or details))

    @staticmethod
    def _allocated_next(r) -> str:
        """`` (2 after this cycle, predicted)`` when the engine's decisions change the queue's allocation."""
        after = r.get("queue_allocated_next")
        if after is None or pd.isna(after) or abs(after - r["queue_allocated"]) <= 1e-6:
            return ""
        return f' <span class="kd-muted">({display.gpus(after)} after this cycle, predicted)</span>'

    def _eta_basis(self, job: str) -> str:
        """Where the blocker's run time came from (recorded, the history of similar jobs, assumed)."""
        ins = self.model.tick.insight if self.model.tick is not None else None
        est = ins.eta.estimates.get(job) if ins is not None and ins.eta is not None else None
        if est is None:
            return ""
        parts = []
        if est.blocker_duration_source:
            parts.append(f'run time of {html.escape(est.blocker_job or "the blocker")}: '
                         f'{html.escape(est.blocker_duration_source)}')
        if not est.never and math.isfinite(est.p50_s):
            parts.append("range " + html.escape(est.range_basis) if est.range_basis != "model" else
                         "range: spread of the forward runs, not yet calibrated against past starts")
        return f' <span class="kd-muted" data-eta-basis>({"; ".join(parts)})</span>' if parts else ""

    def fold(self):
        # first screen: the table; the selected job's card below
        return [(self._layout, 3)]

    def _update(self):
        m = self.model
        reasons = m.reasons()
        total = sum(reasons.values())
        ins = m.tick.insight if m.tick is not None else None
        note = (f'<br><span class="kd-muted" data-eta-note>{html.escape(ins.eta_note)}</span>'
                if ins is not None and ins.eta_note else "")
        self.summary.object = (f'<div class="kd-explain"><b>{total}</b> pending job(s) · ' + " ".join(
            f'{badge(f"{k} {v}", REASON_COLOURS.get(k, "#4b5563"))}' for k, v in reasons.items()) + note + "</div>")
        queues = sorted(q.name for q in m.snapshot.leaf_queues()) if m.snapshot else []
        if list(self.queue.options) != [""] + queues:
            self.queue.options = [""] + queues
        reason_options = [""] + sorted(k for k in reasons if k not in ("(none)", STARTS_NOW))
        if list(self.reason.options) != reason_options:
            self.reason.options = reason_options
        self._update_table()
        df = self.table.value
        job = self.selection.job if self.selection.job in set(df.index) else (str(df.index[0]) if len(df) else "")
        self.detail.object = self._explain(job) if job else '<div class="kd-muted">No job is waiting.</div>'

    def _update_table(self):
        df = self.model.frame().copy()
        df["wait_s"] = df["wait_s"].round(0)          # a patch only when the wait moved by a second or more
        df["counterfactual"] = df["counterfactual"].replace("", NOT_YET)
        df = keyed(df, "job")[COLUMNS]
        old = self.table.value
        expanded = [old.index[i] for i in self.table.expanded if i < len(old)] if old is not None else []
        if update_table(self.table, df) == "replaced" and expanded:
            self.table.expanded = [df.index.get_loc(k) for k in expanded if k in df.index]
