"""Charts shared by several views, built once and updated in place.

Each chart owns one Bokeh figure and its data sources; ``update(...)`` only assigns new column data, so a new
tick never replaces a figure (no re-layout, no jump of the page, no lost zoom). Nothing zooms on the mouse
wheel: the page scrolls, and zoom is a box drag after picking the tool (reset undoes it).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd
from bokeh.models import (AdaptiveTicker, ColumnDataSource, CustomJSHover, CustomJSTickFormatter, DatetimeTickFormatter,
                          FactorRange, GlyphRenderer, HoverTool, Label, Legend, LegendItem, Line)
from bokeh.plotting import figure

from .common import MUTED_ON_DARK, QUEUE_PALETTE, TEXT_ON_DARK

MEASURES = ("deserved", "fair_share", "allocated", "requested")
MEASURE_COLOURS = {"deserved": "#8dd3c7", "fair_share": "#56b4e9", "allocated": "#e69f00", "requested": "#9ca3af"}
MEASURE_LABELS = {"deserved": "deserved", "fair_share": "fair share", "allocated": "allocated",
                  "requested": "requested"}
TOOLS = "box_zoom,reset,save"

HOURS_MINUTES_JS = """
const s = Math.max(0, Math.round(tick));
if (s < 3600) return Math.floor(s / 60) + 'm';
return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0');
"""


def hours_minutes() -> CustomJSTickFormatter:
    """Axis ticks of a duration in seconds as ``45m``, ``13h05``: a new formatter per axis (a Bokeh model may
    belong to one document only, and every browser session is a document)."""
    return CustomJSTickFormatter(code=HOURS_MINUTES_JS)

DURATION_HOVER = """
const s = Math.max(0, Math.round(value));
if (s < 60) return s + 's';
if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
"""


def _style(fig) -> None:
    fig.background_fill_alpha = 0
    fig.border_fill_alpha = 0
    fig.outline_line_color = None
    for ax in (*fig.xaxis, *fig.yaxis):
        ax.major_label_text_color = TEXT_ON_DARK
        ax.axis_label_text_color = MUTED_ON_DARK
        ax.major_label_text_font_size = "12px"
    fig.grid.grid_line_alpha = 0.25
    fig.toolbar.active_scroll = None
    fig.toolbar.autohide = True


def add_glyph(fig, source: ColumnDataSource, glyph, name: Optional[str] = None) -> GlyphRenderer:
    """Draw ``glyph`` from ``source`` on ``fig`` with one Bokeh model for its look: its selection, non-selection
    and muted looks are left to the browser (``"auto"``), where ``figure.line`` / ``quad`` / ``text`` would send
    three glyph models per renderer. For a renderer nothing selects or mutes (a first screen builds fewer models
    on the server and sends fewer to the browser)."""
    r = GlyphRenderer(data_source=source, glyph=glyph, **({"name": name} if name else {}))
    fig.renderers.append(r)
    return r


def _empty_label(fig, text: str) -> Label:
    label = Label(x=12, y=12, x_units="screen", y_units="screen", text=text, text_color=MUTED_ON_DARK,
                  text_font_size="13px", visible=False)
    fig.add_layout(label)
    return label


class GroupedBars:
    """Bars grouped per category (queues), one bar per series, series fixed at construction."""

    def __init__(self, series: dict[str, str], ylabel: str, height: int = 300, empty: str = "No queues"):
        self.names = list(series)
        self.colours = series
        self.source = ColumnDataSource({"x": [], "value": [], "series": [], "category": [], "colour": []})
        self.fig = figure(x_range=FactorRange(), height=height, sizing_mode="stretch_width", tools=TOOLS,
                          toolbar_location="right", min_border_left=50)
        r = self.fig.vbar(x="x", top="value", width=0.9, source=self.source, fill_color="colour", line_color=None,
                          legend_field="series")
        self.fig.add_tools(HoverTool(renderers=[r], tooltips=[("queue", "@category"), ("", "@series"),
                                                              ("value", "@value{0,0.[00]}")]))
        self.fig.xaxis.group_text_font_size = "12px"
        self.fig.xaxis.group_text_color = TEXT_ON_DARK
        self.fig.xaxis.major_tick_line_color = None
        self.fig.xgrid.grid_line_color = None
        self.fig.y_range.start = 0
        self.fig.yaxis.axis_label = ylabel
        legend = self.fig.legend[0]        # one item per series, from the data: no extra renderers
        legend.orientation, legend.location = "horizontal", "top_left"
        legend.label_text_color, legend.background_fill_alpha, legend.border_line_alpha = TEXT_ON_DARK, 0, 0
        self.fig.center = [m for m in self.fig.center if m is not legend]
        self.fig.add_layout(legend, "above")
        _style(self.fig)
        # after _style (which sizes every axis label): the series names under each bar overlapped one another
        # at 1280 px ("deservedfair shaallocated..."); the legend above says them
        self.fig.xaxis.major_label_text_font_size = "0px"
        self.empty = _empty_label(self.fig, empty)
        self._factors: list = []

    def update(self, categories: list[str], values: dict[str, list[float]], ylabel: Optional[str] = None) -> None:
        """New values (and categories, when the set changed); the figure stays."""
        x = [(c, s) for c in categories for s in self.names]
        data = {"x": x,
                "value": [_finite(values[s][i]) for i, _ in enumerate(categories) for s in self.names],
                "series": [s for _ in categories for s in self.names],
                "category": [c for c in categories for _ in self.names],
                "colour": [self.colours[s] for _ in categories for s in self.names]}
        if x != self._factors:
            self._factors = x
            self.fig.x_range.factors = x
        if ylabel is not None and self.fig.yaxis[0].axis_label != ylabel:
            self.fig.yaxis.axis_label = ylabel
        assign_columns(self.source, data)
        self.empty.visible = not categories


def _finite(v) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def assign_columns(source: ColumnDataSource, data: dict) -> None:
    """Send only what changed: nothing when equal, changed columns when lengths match, else everything."""
    old = source.data
    n_old = len(next(iter(old.values()), [])) if old else -1
    n_new = len(next(iter(data.values()), []))
    if set(old) == set(data) and n_old == n_new:
        changed = {k: v for k, v in data.items() if not _same(old[k], v)}
        if changed:
            source.data.update(changed)
        return
    source.data = data


def _same(a, b) -> bool:
    try:
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind in "fc" and b.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    except (TypeError, ValueError):
        return list(a) == list(b)


def share_bars(height: int = 300) -> GroupedBars:
    """Per leaf queue: deserved, fair share, allocated, requested (KAI's Grafana shows only two of these)."""
    return GroupedBars({MEASURE_LABELS[m]: c for m, c in MEASURE_COLOURS.items()}, "GPUs", height)


def update_share_bars(chart: GroupedBars, queues: pd.DataFrame, unit: str = "GPUs", scale: float = 1.0,
                      leaves_only: bool = True) -> None:
    df = queues[queues["leaf"]] if leaves_only and len(queues) else queues
    cats = list(df["queue"]) if len(df) else []
    values = {MEASURE_LABELS[m]: list(df[m] / scale) if len(df) else [] for m in MEASURES}
    chart.update(cats, values, unit)


class TimeSeries:
    """Lines over cluster time, one per series; the series can change (a new queue) without a new figure.

    All lines of a chart read one data source: the time column once and a column per series (a series that
    went away is NaN, not drawn). A source per line would send the time column once per line and make three
    Bokeh models more per line for the browser to build (issue 16's render budget)."""

    ONE_POINT = "One point so far: a line needs two"

    def __init__(self, ylabel: str, height: int = 240, duration: bool = False, empty: str = "No history yet",
                 legend: str = "right"):
        self.fig = figure(x_axis_type="datetime", height=height, sizing_mode="stretch_width", tools=TOOLS,
                          toolbar_location="right", min_border_left=50)
        self.fig.xaxis.formatter = DatetimeTickFormatter(minutes="%H:%M", hours="%H:%M", days="%b %d %H:%M")
        self.fig.xaxis.axis_label = "cluster time"
        self.fig.yaxis.axis_label = ylabel
        if duration:
            self.fig.yaxis.formatter = hours_minutes()
            # ticks on whole minutes and hours (1, 2, 5, 10, 15, 30 min, 1, 2, 5, 10 h ...), not 1h40 / 2h13
            self.fig.yaxis.ticker = AdaptiveTicker(base=60, mantissas=[1, 2, 5, 10, 15, 30], min_interval=60)
        self.fig.y_range.start = 0
        self.legend = Legend(items=[], location="top_left", label_text_color=TEXT_ON_DARK, background_fill_alpha=0,
                             border_line_alpha=0, label_text_font_size="12px",
                             orientation="horizontal" if legend in ("above", "below") else "vertical")
        self.fig.add_layout(self.legend, legend)
        self.fig.legend.click_policy = "hide"
        _style(self.fig)
        self.empty = _empty_label(self.fig, empty)
        self.empty_text = empty
        self.too_few: dict[int, str] = {0: empty, 1: self.ONE_POINT}
        """The chart's text while it has fewer than two points (by point count)."""
        self._single = False           # one point: the time axis is hidden
        self.source = ColumnDataSource({"at": np.array([], dtype="datetime64[ns]")})
        self.lines: dict[str, GlyphRenderer] = {}
        """The line of each series key, in the order they appeared."""
        self.columns: dict[str, str] = {}
        """Each series key's column in :attr:`source`."""
        self.duration = duration
        formatters = {"@at": "datetime"}
        if duration:
            formatters["$snap_y"] = CustomJSHover(code=DURATION_HOVER)
        # the hovered line's value at the nearest point: its own column, whichever it is
        self.hover = HoverTool(renderers=[], tooltips=[("", "$name"), ("value", "$snap_y{custom}" if duration
                                                                       else "$snap_y{0,0.[00]}"), ("at", "@at{%H:%M:%S}")],
                               formatters=formatters)
        self.fig.add_tools(self.hover)

    def _line(self, key: str, label: Optional[str], colour: str, dash: str, width: float) -> GlyphRenderer:
        r = add_glyph(self.fig, self.source, Line(x="at", y=self.columns[key], line_color=colour, line_width=width,
                                                 line_dash=dash), name=label or key.replace(":fair", " fair share"))
        self.hover.renderers = [*self.hover.renderers, r]
        if label:
            self.legend.items = [*self.legend.items, LegendItem(label=label, renderers=[r])]
        self.lines[key] = r
        return r

    def update(self, x: pd.Series, lines: dict[str, tuple[Optional[str], str, str, float, pd.Series]]) -> None:
        """``lines``: ``{key: (legend label or None, colour, dash, width, y values)}``, all over ``x``."""
        xs = pd.to_datetime(x).to_numpy() if len(x) else np.array([], dtype="datetime64[ns]")
        new = [k for k in lines if k not in self.columns]
        for key in new:
            self.columns[key] = f"y{len(self.columns)}"
        data = {"at": xs}
        for key, col in self.columns.items():      # a series that went away: NaN (no line), not deleted
            data[col] = (np.asarray(lines[key][4], dtype=float) if key in lines
                         else np.full(len(xs), np.nan))
        assign_columns(self.source, data)          # the columns first: a new line never reads a missing one
        for key in new:
            label, colour, dash, width, _ = lines[key]
            self._line(key, label, colour, dash, width)
        self.empty.visible = len(xs) < 2           # one point draws no line: say so instead of a blank chart
        single = len(xs) == 1                      # one moment has no time span: no axis of ±1 ms in "us" ticks
        if single != self._single:
            self._single = single
            for axis in self.fig.xaxis:
                axis.visible = not single
        text = self.too_few.get(len(xs), self.empty_text)
        if self.empty.visible and self.empty.text != text:
            self.empty.text = text


def queue_colour_cycle(i: int) -> str:
    return QUEUE_PALETTE[i % len(QUEUE_PALETTE)]


__all__ = ["GroupedBars", "TimeSeries", "add_glyph", "assign_columns", "share_bars", "update_share_bars", "MEASURES",
           "MEASURE_COLOURS",
           "hours_minutes"]
