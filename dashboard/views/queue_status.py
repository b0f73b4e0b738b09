"""The Queues view's status panel: per leaf queue, what waits (jobs, GPUs, the oldest), how long it is expected
to wait (ETA), how long started jobs waited over 24 h (p50/p90/p99), gangs, evictions, and what its idle GPUs and
unused quota cost per hour."""

from __future__ import annotations

import math

import pandas as pd
import panel as pn

from scheduler.eta import format_duration
from scheduler.waits import QUEUE_STATUS_COLUMNS

from .. import display
from .common import duration_formatter, keyed, money_formatter, number_formatters, table, update_table

COLUMNS = ["queue", "pending_jobs", "pending_gpus", "oldest_wait_s", "est_wait", "started_24h", "wait_p50_s",
           "wait_p90_s", "wait_p99_s", "gangs", "evicted", "idle_cost_per_h", "unused_quota_cost_per_h"]
WAITS = ["oldest_wait_s", "wait_p50_s", "wait_p90_s", "wait_p99_s"]
COUNTS = ["pending_jobs", "started_24h"]
WIDTHS = {"queue": 110, "pending_jobs": 60, "pending_gpus": 64, "oldest_wait_s": 72, "est_wait": 96,
          "started_24h": 60, "wait_p50_s": 66, "wait_p90_s": 66, "wait_p99_s": 66, "gangs": 80, "evicted": 84,
          "idle_cost_per_h": 80, "unused_quota_cost_per_h": 84}
"""Column widths that fit the table in a 1280 px window (headers wrap)."""
TITLES = {"pending_jobs": "waiting jobs", "pending_gpus": "waiting GPUs", "oldest_wait_s": "oldest wait",
          "est_wait": "expected wait", "started_24h": "started 24 h", "wait_p50_s": "wait p50",
          "wait_p90_s": "wait p90", "wait_p99_s": "wait p99", "gangs": "gangs whole / partial / waiting",
          "evicted": "reclaimed / preempted 24 h", "idle_cost_per_h": "idle GPUs /h", "unused_quota_cost_per_h":
          "unused quota /h"}
TOOLTIPS = {"pending_jobs": "jobs waiting now (nothing allocated)", "pending_gpus": "GPUs they request",
            "oldest_wait_s": "wait of the longest-waiting job", "est_wait": "median expected wait of the waiting "
            "jobs (ETA by forward simulation, docs/eta.md)", "started_24h": "jobs that started in the last 24 h "
            "(of what kaidash observed)", "wait_p50_s": "median wait of the jobs started in the last 24 h",
            "wait_p90_s": "90th percentile wait of the jobs started in the last 24 h",
            "wait_p99_s": "99th percentile wait of the jobs started in the last 24 h",
            "gangs": "gangs whole (running with at least their minimum pods) / partial (fewer pods than their "
            "minimum hold resources) / waiting (no pod placed)",
            "evicted": "pods reclaimed from the queue / preempted in it over the last 24 h",
            "idle_cost_per_h": "cost per hour of the queue's allocated GPUs below 5 % utilisation",
            "unused_quota_cost_per_h": "cost per hour of quota the queue holds but does not use (docs/cost.md)"}


def expected_wait(seconds: float, waiting: int, horizon_s: float = 8 * 3600.0) -> str:
    """``~8 min``, ``beyond 8.0 h``, ``none waiting``, ``no estimate yet``."""
    if waiting == 0:
        return "none waiting"
    if seconds is None or math.isnan(seconds):
        return "no estimate yet"
    if math.isinf(seconds):
        return f"beyond {format_duration(horizon_s)}"
    return f"~{format_duration(seconds)}"


def status_frame(df: pd.DataFrame, horizon_s: float = 8 * 3600.0) -> pd.DataFrame:
    """The queue-status frame as shown: waits rounded to seconds, the ETA as text, keyed by queue."""
    out = df.copy()
    out["est_wait"] = [expected_wait(s, int(n), horizon_s) for s, n in zip(out["est_wait_s"], out["pending_jobs"])]
    for c in WAITS:
        out[c] = out[c].astype(float).round(0)
    out["gangs"] = [f"{a} / {b} / {c}" for a, b, c in zip(out["gangs_whole"], out["gangs_partial"],
                                                          out["gangs_waiting"])]
    out["evicted"] = [f"{a} / {b}" for a, b in zip(out["reclaimed_24h"], out["preempted_24h"])]
    return keyed(out, "queue")[COLUMNS]


class QueueStatusPanel(pn.viewable.Viewer):
    """A card with the status table, its note (where the numbers come from) and units."""

    def __init__(self, **params):
        super().__init__(**params)
        self.note = pn.pane.HTML("", sizing_mode="stretch_width")
        self.currency = "USD"
        empty = pd.DataFrame(columns=QUEUE_STATUS_COLUMNS).astype({c: float for c in QUEUE_STATUS_COLUMNS[1:]})
        self.table = table(status_frame(empty), height=None, max_height=300,
            titles=TITLES, header_tooltips=TOOLTIPS, name="queue-status", frozen_columns=["queue"],
            formatters=self._formatters("USD"), min_width=56, layout="fit_columns", widths=WIDTHS,
            # no sort arrows: in these narrow columns they sat on the wrapped titles' words (a queue per row, in
            # the tree's order, is short enough to read without sorting)
            configuration={"columnDefaults": {"headerWordWrap": True, "minWidth": 56, "tooltip": True,
                                              "headerSort": False}},
            empty="No queue status yet (the first tick)")
        self._layout = pn.Card(self.note, self.table, title="Queue status: waiting, expected wait, waits of started "
                               "jobs (24 h), gangs, evictions, waste cost", sizing_mode="stretch_width",
                               collapsible=False)

    @staticmethod
    def _formatters(currency: str) -> dict:
        sign = display.CURRENCY_SIGNS.get(currency, currency + " ")
        money = {c: money_formatter(sign) for c in ("idle_cost_per_h", "unused_quota_cost_per_h")}
        return {**number_formatters(COUNTS, 0), **number_formatters(["pending_gpus"]),
                **{c: duration_formatter() for c in WAITS}, **money}

    def update(self, df: pd.DataFrame, currency: str, note: str, horizon_s: float = 8 * 3600.0) -> None:
        if currency != self.currency:
            self.currency = currency
            self.table.formatters = self._formatters(currency)
        self.note.object = f'<div class="kd-muted" data-queue-status-note>{note}</div>'
        update_table(self.table, status_frame(df, horizon_s))

    def __panel__(self):
        return self._layout


__all__ = ["QueueStatusPanel", "status_frame", "expected_wait", "COLUMNS"]
