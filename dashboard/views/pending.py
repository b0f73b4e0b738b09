"""Pending: every waiting job with its reason (KAI's reason codes), the numbers behind it and the
engine's counterfactual ("would start if queue X released 2 GPUs")."""

from __future__ import annotations

import html
import json

import pandas as pd
import panel as pn

from ..frames import format_duration
from ..models import PendingModel
from .base import View
from .common import badge, fmt, number_formatters, table

COLUMNS = ["job", "queue", "priority", "pending_tasks", "gpus_requested", "wait", "reason", "counterfactual",
           "message"]
REASON_COLOURS = {"OverLimit": "#e15759", "NonPreemptibleOverQuota": "#f28e2b", "PreemptionDelayNotElapsed": "#b07aa1",
                  "QueueDoesNotExist": "#9c755f", "NotEnoughResources": "#4e79a7", "PodSchedulingErrors": "#4e79a7",
                  "OverCapacity": "#76b7b2", "NotReadyForScheduling": "#8c8c8c", "Pipelined": "#59a14f"}


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
    """Waiting jobs, longest wait first, filterable by queue and reason; expand a row for the numbers."""

    model_class = PendingModel
    title = "Pending"

    def _build(self):
        m = self.model
        self.summary = pn.pane.HTML("", sizing_mode="stretch_width")
        self.queue = pn.widgets.Select(name="Queue", options=[""], width=180)
        self.reason = pn.widgets.Select(name="Reason", options=[""], width=220)
        self.queue.param.watch(lambda e: setattr(m, "queue", e.new or ""), "value")
        self.reason.param.watch(lambda e: setattr(m, "reason", e.new or ""), "value")
        m.param.watch(lambda *_: self._update_table(), ["queue", "reason"])
        self.table = table(pd.DataFrame(columns=COLUMNS), height=480,
                           formatters={**number_formatters(["gpus_requested"]),
                                       "counterfactual": {"type": "textarea"}, "message": {"type": "textarea"}},
                           name="pending-table",
                           titles={"pending_tasks": "tasks", "gpus_requested": "GPUs", "wait": "waiting"},
                           widths={"message": 420, "counterfactual": 380}, selectable=1,
                           row_content=self._row_detail, embed_content=False)
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
            self.selection.job = df.iloc[event.row]["job"]
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
        reason = r["reason"] or "no reason recorded"
        return (f'<div class="kd-explain"><b>{html.escape(job)}</b> in queue <b>{html.escape(r["queue"])}</b> '
                f'{badge(reason, REASON_COLOURS.get(r["reason"], "#8c8c8c"))} · waiting {format_duration(r["wait_s"])}'
                f' · {r["pending_tasks"]} task(s), {fmt(r["gpus_requested"])} GPU<br>'
                f'{html.escape(r["message"] or "")}<br>'
                f'<b>Counterfactual:</b> {html.escape(r["counterfactual"] or "–")}<br>'
                + (f'<b>Evictions:</b> {html.escape(r["eviction"])}<br>' if r.get("eviction") else "")
                + f'queue allocated {fmt(r["queue_allocated"])} · fair share {fmt(r["queue_fair_share"])} · '
                f'limit {"unlimited" if r["queue_limit"] == -1 else fmt(r["queue_limit"])}</div>'
                + _details_html(extra or details))

    def _update(self):
        m = self.model
        reasons = m.reasons()
        total = sum(reasons.values())
        self.summary.object = (f'<div class="kd-explain"><b>{total}</b> pending job(s) · ' + " ".join(
            f'{badge(f"{k} {v}", REASON_COLOURS.get(k, "#8c8c8c"))}' for k, v in reasons.items()) + "</div>")
        queues = sorted(q.name for q in m.snapshot.leaf_queues()) if m.snapshot else []
        self.queue.options = [""] + queues
        self.reason.options = [""] + sorted(k for k in reasons if k != "(none)")
        self._update_table()
        df = self.table.value
        job = self.selection.job if self.selection.job in set(df["job"]) else (df["job"].iloc[0] if len(df) else "")
        self.detail.object = self._explain(job) if job else '<div class="kd-muted">No job is waiting.</div>'


    def _update_table(self):
        df = self.model.frame().copy()
        df["wait"] = df["wait_s"].map(format_duration)
        self.table.value = df[COLUMNS]
