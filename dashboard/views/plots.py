"""Charts shared by several views: grouped per-queue bars (Bokeh) and time series (HoloViews)."""

from __future__ import annotations

import holoviews as hv
import pandas as pd
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Legend, LegendItem
from bokeh.plotting import figure

from .common import QUEUE_PALETTE

MEASURES = ("deserved", "fair_share", "allocated", "requested")
MEASURE_COLOURS = {"deserved": "#76b7b2", "fair_share": "#4e79a7", "allocated": "#f28e2b", "requested": "#8c8c8c"}
MEASURE_LABELS = {"deserved": "deserved", "fair_share": "fair share", "allocated": "allocated",
                  "requested": "requested"}


def grouped_bars(categories: list[str], series: dict[str, list[float]], colours: dict[str, str],
                 ylabel: str, height: int = 300):
    """Bars grouped per category, one bar per series, in the order given (Bokeh, nested factors)."""
    names = list(series)
    x = [(c, s) for c in categories for s in names]
    values = [float(series[s][i]) if series[s][i] == series[s][i] else 0.0
              for i, _ in enumerate(categories) for s in names]
    src = ColumnDataSource({"x": x, "value": values, "series": [s for _ in categories for s in names],
                            "category": [c for c in categories for _ in names],
                            "colour": [colours[s] for _ in categories for s in names]})
    fig = figure(x_range=FactorRange(*x, group_padding=0.6, subgroup_padding=0.05) if x else FactorRange(),
                 height=height, sizing_mode="stretch_width", toolbar_location=None, min_border_left=50)
    r = fig.vbar(x="x", top="value", width=0.9, source=src, fill_color="colour", line_color=None)
    fig.add_tools(HoverTool(renderers=[r], tooltips=[("queue", "@category"), ("", "@series"),
                                                     ("value", "@value{0,0.[00]}")]))
    fig.xaxis.major_label_text_font_size = "0pt"     # series names: the legend says them
    fig.xaxis.group_text_font_size = "12px"
    fig.xaxis.major_tick_line_color = None
    fig.xgrid.grid_line_color = None
    fig.y_range.start = 0
    fig.yaxis.axis_label = ylabel
    items = []
    for s in names:
        dummy = fig.vbar(x=[x[0]] if x else [], top=[0], width=0, fill_color=colours[s], line_color=None)
        items.append(LegendItem(label=s, renderers=[dummy]))
    fig.add_layout(Legend(items=items, orientation="horizontal", location="top_left"), "above")
    return fig


def share_bars(queues: pd.DataFrame, unit: str = "GPUs", height: int = 300, leaves_only: bool = True):
    """Per queue: deserved, fair share, allocated, requested (KAI's Grafana shows only two of these)."""
    df = queues[queues["leaf"]] if leaves_only and len(queues) else queues
    cats = list(df["queue"]) if len(df) else []
    series = {MEASURE_LABELS[m]: list(df[m]) if len(df) else [] for m in MEASURES}
    colours = {MEASURE_LABELS[m]: c for m, c in MEASURE_COLOURS.items()}
    return grouped_bars(cats, series, colours, unit, height)


def lines(df: pd.DataFrame, x: str, ys: dict[str, str], ylabel: str, height: int = 240,
          colours: dict[str, str] | None = None) -> hv.Overlay:
    """Several columns of ``df`` over ``x`` as labelled curves."""
    curves = []
    for i, (col, label) in enumerate(ys.items()):
        colour = (colours or {}).get(col, QUEUE_PALETTE[i % len(QUEUE_PALETTE)])
        data = df[[x, col]] if len(df) else pd.DataFrame({x: [pd.Timestamp(0)], col: [0.0]})
        curves.append(hv.Curve(data, x, (col, ylabel), label=label).opts(color=colour, line_width=2))
        if len(data) <= 30:          # few points (a static source, a young loop): show them
            curves.append(hv.Scatter(data, x, (col, ylabel)).opts(color=colour, size=5))
    return hv.Overlay(curves).opts(responsive=True, height=height, legend_position="top_left", show_grid=True,
                                   toolbar="above", ylabel=ylabel, xlabel="cluster time")
