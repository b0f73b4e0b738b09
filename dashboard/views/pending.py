"""Pending: every waiting job with its reason (KAI's reason codes), the numbers behind it and the
engine's counterfactual ("would start if queue X released 2 GPUs")."""

from __future__ import annotations

import html
import json
import math

import pandas as pd
import panel as pn
from bokeh.models import HTMLTemplateFormatter
from panel.io.model import JSCode

from .. import display
from ..models import STARTS_NOW, PendingModel, predicts_start
from .base import View
from .common import (TABLE_CSS, badge, duration_formatter, keyed, number_formatters, table, update_table,
                     widget_args)
from .pending_text import short_counterfactual, short_eta

SHOWN = ["job", "queue", "wait_s", "gpus_requested", "reason", "eta", "counterfactual"]
HIDDEN = ["reason_code", "reason_label", "eta_short", "counterfactual_short", "eta_order"]
COLUMNS = SHOWN + HIDDEN
"""The table's columns. Every row is one line tall, so a screenful of waiting jobs shows at 1280x720: the reason,
expected start and "would start if" cells show a one-line summary (:mod:`.pending_text`, from the HIDDEN
columns of the row) while their values, the tooltips, are the whole texts ("reason" is KAI's code with the scheduler's
message); the detail card of the selected job shows everything (a row expanded in place pushed the other jobs
off the screen)."""
TITLES = {"pending_tasks": "tasks", "gpus_requested": "GPUs", "wait_s": "waiting", "counterfactual": "would start if",
          "eta": "expected start"}
TOOLTIPS = {"pending_tasks": "pending tasks (pods) of the job", "gpus_requested": "GPUs the pending tasks request",
            "wait_s": "time since the job was created",
            "reason": "KAI's reason code for the last decision; hover a cell for the scheduler's message",
            "eta": "when it is expected to start: median over forward simulations of the engine from now, a range "
                   "holding 80 % of starts (calibrated on this cluster's past estimates once 20 jobs have started); "
                   "hover a cell for what makes room for it (docs/eta.md)",
            "counterfactual": "the smallest change found that would start it (why-pending search), in short; hover "
                              "a cell for the whole text, click the row for the numbers and the scheduler's message"}
REASON_COLOURS = {"OverLimit": "#b91c1c", "NonPreemptibleOverQuota": "#b45309", "PreemptionDelayNotElapsed": "#7e22ce",
                  "QueueDoesNotExist": "#854d0e", "NotEnoughResources": "#1d4ed8", "PodSchedulingErrors": "#1d4ed8",
                  "OverCapacity": "#0f766e", "NotReadyForScheduling": "#4b5563", "Pipelined": "#15803d",
                  STARTS_NOW: "#15803d"}
"""Badge colours of KAI's reason codes (white text, contrast >= 4.5:1); any other reason gets
:data:`OTHER_REASON_COLOUR`."""
OTHER_REASON_COLOUR = "#4b5563"


def reason_colour(code: str) -> str:
    """The badge colour of a reason code (:data:`REASON_COLOURS`, grey for any other)."""
    return REASON_COLOURS.get(code, OTHER_REASON_COLOUR)
STARTS_NOW_LABEL = "KAI would start"
"""The table's badge of a job the engine binds this cycle (its expected start reads "this cycle")."""
BADGE_LABELS = {STARTS_NOW: STARTS_NOW_LABEL, "PreemptionDelayNotElapsed": "PreemptionDelay"}
"""The table's badge text where it is not the reason code: codes too long for the reason column at 1280 px (the
cell's tooltip and the card keep the whole code)."""
WIDTHS_PX = {"job": 222, "queue": 104, "wait_s": 86, "gpus_requested": 72, "reason": 184, "eta": 116}
"""Fixed widths (waiting and GPUs: the title beside its sort arrow; queue: "infrastructure"); "would start if"
takes the rest (about 225 px at 1280, 390 px at 1440)."""
ONE_LINE_CSS = """
.tabulator-row .tabulator-cell {white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 13px;}
.tabulator-row .tabulator-cell .kd-job {direction: rtl; text-align: left; overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap;}
.tabulator-row .tabulator-cell .kd-badge {display:inline-block; padding:0 5px; border-radius:9px; font-size:11.5px;
  font-weight:normal; color:#fff; max-width:100%; overflow:hidden; text-overflow:ellipsis; vertical-align:middle;}
"""
"""Every cell one line, a longer text ends in an ellipsis (its tooltip is the whole text); a job name longer than
its column loses its start instead ("…ucture/infrastructure-etl-0031"): its end tells jobs apart."""
NOT_YET = "not explained yet (searches run between ticks, one waiting job at a time)"
BEYOND_HORIZON_S, NEVER_S, UNKNOWN_S = 1e15, 2e15, 3e15
"""Sort keys (``eta_order``) of an expected start past the estimate's horizon ("> 24.0 h"), of a job that cannot
start on this cluster, and of one without an estimate; the last two stay at the bottom in either direction."""
ETA_SORTER = JSCode(f"""function(a, b, aRow, bRow, column, dir) {{
  const x = aRow.getData().eta_order, y = bRow.getData().eta_order;
  const lastX = !(x < {NEVER_S:.0f}), lastY = !(y < {NEVER_S:.0f});
  if (lastX !== lastY) return (lastX ? 1 : -1) * (dir === "asc" ? 1 : -1);
  return lastX ? 0 : x - y;
}}""")
"""Tabulator sorts the expected-start column by ``eta_order`` (seconds), not by its text ("~12 min" before "~5 min");
no estimate and "cannot start" last whichever way (Tabulator swaps the rows it compares when descending)."""


def _details_html(details) -> str:
    """The engine's numbers behind the decision, folded (a screenful of JSON pushed the card's sentences up and
    the rest of the page down; one click opens it)."""
    if not details:
        return ""
    try:
        text = json.dumps(details, indent=1, default=str)
    except TypeError:
        text = str(details)
    if len(text) > 4000:
        text = text[:4000] + "\n…"
    return ("<details data-numbers><summary class='kd-muted'>the engine's numbers (JSON)</summary>"
            f"<pre style='font-size:12px;max-height:260px;overflow:auto'>{html.escape(text)}</pre></details>")


def summary_formatters() -> dict:
    """Cell formatters showing the one-line summaries (hidden columns of the same row) instead of the values;
    the reason as its coloured badge. New Bokeh models per table (a model belongs to one session's document)."""
    colours = json.dumps(REASON_COLOURS)
    return {"reason": HTMLTemplateFormatter(template=(
                f"<% var c = ({colours})[reason_code] || '{OTHER_REASON_COLOUR}'; %>"
                '<span class="kd-badge" style="background:<%= c %>"><%- reason_label %></span>')),
            "job": HTMLTemplateFormatter(template='<div class="kd-job"><%- value %></div>'),
            "eta": HTMLTemplateFormatter(template="<%- eta_short %>"),
            "counterfactual": HTMLTemplateFormatter(template="<%- counterfactual_short %>")}


def eta_order(p50_s, short: str) -> float:
    """The expected-start column's sort key: seconds from now (0 for a start this cycle), then
    :data:`BEYOND_HORIZON_S`, :data:`NEVER_S` ("cannot start") and :data:`UNKNOWN_S` (no estimate)."""
    if short == "cannot start":
        return NEVER_S
    if p50_s is None or pd.isna(p50_s):
        return UNKNOWN_S
    return float(p50_s) if math.isfinite(p50_s) else BEYOND_HORIZON_S


def table_frame(pending: pd.DataFrame) -> pd.DataFrame:
    """The table's rows of :meth:`PendingModel.frame`, keyed by job: the whole texts as values (escaped: Tabulator
    writes a tooltip as HTML) and their one-line summaries beside them."""
    df = pending.copy()
    df["wait_s"] = df["wait_s"].round(0)          # a patch only when the wait moved by a second or more
    df["counterfactual"] = df["counterfactual"].replace("", NOT_YET)
    starts = df["next_cycle"].map(predicts_start).astype(bool) if len(df) else pd.Series([], dtype=bool)
    df["reason_code"] = df["reason"].where(df["reason"] != "", starts.map({True: STARTS_NOW, False: "none"}))
    df["reason_label"] = df["reason_code"].map(lambda code: BADGE_LABELS.get(code, code))
    df["eta_short"] = df["eta"].map(short_eta)
    p50 = df["eta_p50_s"] if "eta_p50_s" in df else pd.Series(math.nan, index=df.index)
    df["eta_order"] = [eta_order(s, short) for s, short in zip(p50, df["eta_short"])]
    df["counterfactual_short"] = [short_counterfactual(t, q) for t, q in zip(df["counterfactual"], df["queue"])]
    df["reason"] = [f"{code}: {msg}" if msg else code for code, msg in zip(df["reason_code"], df["message"])]
    for c in ("reason", "eta", "counterfactual"):
        df[c] = df[c].map(lambda t: html.escape(str(t), quote=False))
    return keyed(df, "job")[COLUMNS]


class PendingView(View):
    """Waiting jobs, longest wait first, one line each, filterable by queue and reason; click a row for the whole
    story in the card below (the row stays highlighted while its job waits). Rows are keyed by job, so the
    selection and the scroll position survive new ticks."""

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
                           formatters={**number_formatters(["gpus_requested"]), "wait_s": duration_formatter(),
                                       **summary_formatters()},
                           stylesheets=[TABLE_CSS, ONE_LINE_CSS], name="pending-table",
                           titles=TITLES, header_tooltips=TOOLTIPS, layout="fit_columns", widths=WIDTHS_PX,
                           hidden_columns=HIDDEN, selectable=1,
                           configuration={"columns": [{"field": "eta", "sorter": ETA_SORTER}]},
                           empty="No job is waiting: every job has what it asked for.")
        self.table.on_click(self._on_click)
        self.detail = pn.pane.HTML("", sizing_mode="stretch_width")
        return pn.Column(self.summary, pn.Row(self.queue, self.reason), self.table,
                         pn.Card(self.detail, title="Selected job: why it waits", sizing_mode="stretch_width",
                                 collapsible=False),
                         sizing_mode="stretch_width")

    def _on_click(self, event) -> None:
        df = self.table.value
        if 0 <= event.row < len(df):
            self.selection.job = str(df.index[event.row])
            self._show_selected()

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
                f'{badge(reason, reason_colour(reason))} · waiting {display.wait(r["wait_s"])}'
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
            f'{badge(f"{k} {v}", reason_colour(k))}' for k, v in reasons.items()) + note + "</div>")
        queues = sorted(q.name for q in m.snapshot.leaf_queues()) if m.snapshot else []
        if list(self.queue.options) != [""] + queues:
            self.queue.options = [""] + queues
        reason_options = [""] + sorted(k for k in reasons if k not in ("(none)", STARTS_NOW))
        if list(self.reason.options) != reason_options:
            self.reason.options = reason_options
        self._update_table()

    def _update_table(self):
        update_table(self.table, table_frame(self.model.frame()))
        self._show_selected()

    def _show_selected(self) -> None:
        """The card explains the selected job (else the longest-waiting one shown) and its row is the table's
        highlighted one, found by job: after rows left, a highlight kept by position would mark another job."""
        df = self.table.value
        job = self.selection.job if self.selection.job in set(df.index) else (str(df.index[0]) if len(df) else "")
        self.detail.object = self._explain(job) if job else '<div class="kd-muted">No job is waiting.</div>'
        selected = [int(df.index.get_loc(job))] if job else []
        if list(self.table.selection) != selected:
            self.table.selection = selected
