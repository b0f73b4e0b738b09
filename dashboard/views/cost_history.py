"""The Timeline's cost section: cluster cost per hour by category over time, cost per UTC day and over the last
30 days, and the ledger as CSV (one row per day, category and queue; docs/cost.md)."""

from __future__ import annotations

import io

import pandas as pd
import panel as pn

from .. import display
from .common import download_button, keyed, money_formatter, number_formatters, table, update_table
from .plots import TimeSeries

CATEGORIES = {"capacity": ("all GPUs", "#9ca3af", "dashed"), "allocated": ("allocated", "#e69f00", "solid"),
              "idle_allocated": ("idle but allocated", "#f87171", "solid"),
              "stranded": ("stranded fragments", "#f0e442", "solid"),
              "unused_quota": ("unused quota", "#56b4e9", "dotted")}
"""Categories shown (``free`` and ``unavailable`` are in the CSV); labels, colours, dashes."""
DAY_COLUMNS = ["day", *CATEGORIES, "covered_h"]


def daily_frame(daily: pd.DataFrame, month: pd.DataFrame | None = None) -> pd.DataFrame:
    """Cost per UTC day (newest first) and category, summed over queues, with the hours observed; a last row
    ``last 30 days`` with the totals."""
    if daily is None or daily.empty:
        return pd.DataFrame(columns=DAY_COLUMNS)
    cost = daily.pivot_table(index="day", columns="category", values="cost", aggfunc="sum", fill_value=0.0)
    for c in CATEGORIES:
        if c not in cost:
            cost[c] = 0.0
    covered = daily.groupby("day")["covered_h"].max()
    out = cost[list(CATEGORIES)].assign(covered_h=covered).sort_index(ascending=False).reset_index()
    if month is not None and len(month):
        total = {c: float(month.loc[month["category"] == c, "cost"].sum()) for c in CATEGORIES}
        out = pd.concat([out, pd.DataFrame([{"day": "last 30 days", **total,
                                             "covered_h": float(month.attrs.get("covered_h", 0.0))}])],
                        ignore_index=True)
    return out[DAY_COLUMNS]


class CostHistoryPanel(pn.viewable.Viewer):
    """Cost curve, per-day table and CSV download; fed an :class:`dashboard.insight.Insight` per tick."""

    def __init__(self, **params):
        super().__init__(**params)
        self.history = None
        self.currency = "USD"
        self.curve = TimeSeries("USD per hour", height=220, legend="below",
                                empty="No cost samples yet (the ledger prices every few seconds)")
        self.note = pn.pane.HTML("", sizing_mode="stretch_width")
        self.days = table(pd.DataFrame(columns=DAY_COLUMNS), height=None, max_height=260, name="cost-days",
                          titles={"day": "UTC day", **{c: lab for c, (lab, _, _) in CATEGORIES.items()},
                                  "covered_h": "hours observed"},
                          header_tooltips={"covered_h": "hours of the day kaidash was running and pricing",
                                           "stranded": "free GPU capacity no waiting job's shape can use",
                                           "unused_quota": "quota held but not used (overlaps the others)"},
                          formatters=self._formatters("USD"), widths={"day": 110},
                          empty="No cost recorded yet")
        self.download = download_button(self._csv_file, "kaidash-cost.csv", "Download cost CSV (per day, "
                                        "category and queue)", width=400)
        self._layout = pn.Card(self.note, pn.pane.Bokeh(self.curve.fig, sizing_mode="stretch_width"), self.days,
                               self.download, title="GPU cost: per hour, per day and the last 30 days",
                               sizing_mode="stretch_width", collapsible=False)

    @staticmethod
    def _formatters(currency: str) -> dict:
        sign = display.CURRENCY_SIGNS.get(currency, currency + " ")
        return {**{c: money_formatter(sign) for c in CATEGORIES},
                **number_formatters(["covered_h"], 1)}

    def _csv_file(self):
        return io.StringIO(self.history.csv if self.history is not None else "")

    def update(self, insight) -> None:
        hist = getattr(insight, "cost_history", None)
        if hist is None:
            scoped = getattr(insight, "scoped", False)
            self.note.object = ('<div class="kd-muted" data-cost-note>' + (
                "Cost history is cluster-wide: not shown in a view limited to some queues (your queues' rates "
                "are in Queues)." if scoped else "No cost yet: it starts with the first tick.") + "</div>")
            self.history, self.download.disabled = None, True
            return
        self.history, self.download.disabled = hist, hist.daily.empty
        if hist.currency != self.currency:
            self.currency = hist.currency
            self.days.formatters = self._formatters(hist.currency)
            self.curve.fig.yaxis.axis_label = f"{hist.currency} per hour"
        series = hist.series
        if len(series):
            x = pd.to_datetime(series["time"], unit="s")
            self.curve.update(x, {c: (lab, colour, dash, 2.0, series[c]) for c, (lab, colour, dash)
                                  in CATEGORIES.items() if c in series})
        covered = float(hist.month.attrs.get("covered_h", 0.0)) if hist.month is not None else 0.0
        waste = sum(float(hist.month.loc[hist.month["category"] == c, "cost"].sum())
                    for c in ("idle_allocated", "stranded")) if hist.month is not None and len(hist.month) else 0.0
        self.note.object = (f'<div class="kd-muted" data-cost-note>Cost in {hist.currency} at the configured price '
                            f'per GPU-hour (docs/cost.md). Idle and stranded GPUs over the last 30 days: '
                            f'<b data-cost-waste-30d>{display.money(waste, hist.currency)}</b> over '
                            f'{display.wait(covered * 3600)} observed. Unused quota overlaps the other categories: '
                            'do not add them up.</div>')
        update_table(self.days, keyed(daily_frame(hist.daily, hist.month), "day"))

    def __panel__(self):
        return self._layout


__all__ = ["CostHistoryPanel", "daily_frame", "CATEGORIES"]
