"""Shared look for the views: queue colours, number formatting, KPI cards, badges, table defaults."""

from __future__ import annotations

import hashlib
import html
import math
from typing import Iterable, Optional

import panel as pn
import param
from bokeh.models import HTMLTemplateFormatter, NumberFormatter

QUEUE_PALETTE = ["#56b4e9", "#e69f00", "#009e73", "#f0e442", "#cc79a7", "#0072b2", "#a6cee3", "#b2df8a",
                 "#fdbf6f", "#cab2d6", "#8dd3c7", "#ffffb3", "#bebada", "#80b1d3", "#fccde5", "#d9d9d9"]
"""Queue colours: Okabe-Ito's colour-blind-safe set first (without its vermillion: red means over-share or
starved), then light Set3/Paired tones for more queues; all readable on the dark background."""

STATE_COLOURS = {"starved": "#b91c1c", "reclaimable": "#b45309", "borrowing": "#1d4ed8", "ok": "#15803d",
                 "idle": "#4b5563"}
"""Queue state badges (white text on each has a contrast of at least 4.5:1)."""
SEVERITY_COLOURS = {2: "#ef4444", 1: "#f59e0b", 0: "#60a5fa"}
STATUS_COLOURS = {"ok": "#15803d", "static": "#1d4ed8", "starting": "#4b5563", "degraded": "#b45309",
                  "stale": "#b91c1c", "error": "#b91c1c", "disconnected": "#b91c1c"}
"""Loop / source status badges (white text, contrast >= 4.5:1)."""
FREE_COLOUR = "#2b3038"
FREE_LINE = "#5b6470"
TEXT_ON_DARK = "#e5e7eb"
MUTED_ON_DARK = "#b6bcc6"
"""Body and secondary text on the dark theme (#181818-#1f2937 backgrounds): 12:1 and 8:1."""

CSS = """
.kd-kpis {display:flex; flex-wrap:wrap; gap:10px; width:100%;}
.kd-kpi {flex:1 1 150px; min-width:140px; border-radius:6px; padding:8px 12px;
         background:var(--kd-card, rgba(127,127,127,.10));
         border-left:4px solid var(--kd-accent, #4e79a7);}
.kd-kpi .kd-label {font-size:12px; color:#b6bcc6; text-transform:uppercase; letter-spacing:.04em;}
.kd-kpi .kd-value {font-size:26px; font-weight:600; line-height:1.2; font-variant-numeric: tabular-nums;}
.kd-kpi .kd-sub {font-size:12px; color:#b6bcc6;}
.kd-badge {display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; color:#fff;
           white-space:nowrap;}
.kd-alerts {margin:0; padding:0; list-style:none; font-size:14px;}
.kd-alerts li {padding:5px 8px; margin-bottom:4px; border-left:4px solid; border-radius:3px;
               background:rgba(127,127,127,.08);}
.kd-banner {padding:6px 12px; border-radius:4px; background:#991b1b; color:#fff; font-weight:600;}
.kd-note {padding:6px 12px; border-radius:4px; background:rgba(96,165,250,.12); border-left:4px solid #60a5fa;}
.kd-private {padding:6px 12px; border-radius:4px; background:#3b2f0b; border-left:4px solid #f59e0b; color:#fde68a;}
.kd-health td {padding:1px 10px 1px 0; font-size:13px;}
.kd-health td:first-child {color:#b6bcc6; white-space:nowrap; vertical-align:top;}
.kd-muted {color:#b6bcc6; font-size:13px;}
.kd-explain {font-size:14px; line-height:1.5;}
.kd-explain code {font-size:13px;}
.kd-sr {position:absolute; width:1px; height:1px; overflow:hidden; clip:rect(0 0 0 0); white-space:nowrap;}
"""

FOCUS_CSS = """
:focus-visible, .noUi-handle:focus, .noUi-handle:focus-visible {outline:3px solid #fbbf24 !important;
  outline-offset:2px !important; box-shadow:0 0 0 2px #111827 !important;}
"""
"""A visible keyboard focus everywhere, also inside Panel's and Bokeh's shadow roots (``pn.config.global_css``
does not reach them; this goes into every component's stylesheets)."""

def ensure_css() -> None:
    """Add the dashboard's CSS once per process (works in a server and in a notebook)."""
    if CSS not in pn.config.raw_css:
        pn.config.raw_css.append(CSS)
    if FOCUS_CSS not in pn.config.raw_css:
        pn.config.raw_css.append(FOCUS_CSS)


def queue_colours(names: Iterable[str]) -> dict[str, str]:
    """A stable colour per queue: sorted names take palette colours in order (hash beyond 20 queues)."""
    out = {}
    for i, name in enumerate(sorted(set(names))):
        if i < len(QUEUE_PALETTE):
            out[name] = QUEUE_PALETTE[i]
        else:
            h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
            out[name] = QUEUE_PALETTE[h % len(QUEUE_PALETTE)]
    return out


def fmt(x, digits: int = 2, unit: str = "") -> str:
    """A number for humans: ``–`` for missing, ``∞`` for -1 limits handled by the caller, trailing zeros cut."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if isinstance(x, float):
        s = f"{x:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:,.0f}"
    else:
        s = f"{x:,}"
    return s + unit


def limit_text(x) -> str:
    return "unlimited" if x is not None and x == -1 else fmt(x)


def kpi_cards(items: list[dict]) -> str:
    """HTML for a row of KPI cards: ``{label, value, sub?, accent?, id?}``."""
    cards = []
    for it in items:
        accent = it.get("accent", "#4e79a7")
        ident = f' data-kpi="{html.escape(it["id"])}"' if it.get("id") else ""
        sub = f'<div class="kd-sub">{it["sub"]}</div>' if it.get("sub") else ""
        cards.append(f'<div class="kd-kpi" style="--kd-accent:{accent}"{ident}>'
                     f'<div class="kd-label">{html.escape(it["label"])}</div>'
                     f'<div class="kd-value">{it["value"]}</div>{sub}</div>')
    return f'<div class="kd-kpis">{"".join(cards)}</div>'


def badge(text: str, colour: str) -> str:
    return f'<span class="kd-badge" style="background:{colour}">{html.escape(text)}</span>'


def alerts_html(alerts: list[dict]) -> str:
    if not alerts:
        return '<div class="kd-muted">No alerts: no starved queue, no idle allocation, no long wait.</div>'
    items = "".join(f'<li style="border-color:{SEVERITY_COLOURS.get(a["severity"], "#888")}">'
                    f'<b>{html.escape(a["kind"])}</b> · {html.escape(a["text"])}</li>' for a in alerts)
    return f'<ul class="kd-alerts">{items}</ul>'


def number_formatters(columns: Iterable[str], digits: int = 2) -> dict:
    """Right-aligned numbers with thousands separators; decimals only where the value has them (420, 3.5)."""
    fmt_str = "0,0.[" + "0" * digits + "]" if digits else "0,0"
    return {c: NumberFormatter(format=fmt_str, text_align="right") for c in columns}


def percent_formatters(columns: Iterable[str]) -> dict:
    """Values already in percent (0-100) as ``73.4 %``."""
    return {c: HTMLTemplateFormatter(template="<% if (value == null || isNaN(value)) { %>–<% } else { %>"
                                              "<%= value.toFixed(1) %> %<% } %>") for c in columns}


def money_formatter(sign: str) -> HTMLTemplateFormatter:
    """Tabulator cell: an amount with its currency sign, two decimals and thousands separators (``€1,234.50``);
    the column stays numeric."""
    return HTMLTemplateFormatter(template=(
        "<% if (value == null || isNaN(value)) { %>–<% } else { %>" + html.escape(sign) +
        "<%= Number(value).toLocaleString('en-US', {minimumFractionDigits: 2, maximumFractionDigits: 2}) %><% } %>"))


def duration_formatter() -> HTMLTemplateFormatter:
    """Tabulator cell: seconds as ``42s``, ``4m05s``, ``13h53m``, ``2d04h`` (the column stays numeric, so it
    sorts by time, not by text)."""
    return HTMLTemplateFormatter(template=(
        "<% var s = Math.round(value); if (value == null || isNaN(value)) { %>–<% } "
        "else if (s < 60) { %><%= s %>s<% } "
        "else if (s < 3600) { %><%= Math.floor(s / 60) %>m<%= String(s % 60).padStart(2, '0') %>s<% } "
        "else if (s < 86400) { %><%= Math.floor(s / 3600) %>h<%= String(Math.floor(s % 3600 / 60)).padStart(2, '0') "
        "%>m<% } else { %><%= Math.floor(s / 86400) %>d<%= String(Math.floor(s % 86400 / 3600)).padStart(2, '0') "
        "%>h<% } %>"))


def state_formatter() -> HTMLTemplateFormatter:
    """Tabulator cell: the queue state as a coloured badge."""
    cases = " ".join(f"<% if (value == '{k}') {{ %><span style=\"background:{v};color:#fff;border-radius:9px;"
                     f"padding:0 7px;font-size:12px;font-weight:600\">{k}</span><% }} %>"
                     for k, v in STATE_COLOURS.items())
    return HTMLTemplateFormatter(template=cases)


TABLE_CSS = """
.tabulator .tabulator-header .tabulator-col .tabulator-col-content .tabulator-col-title {font-size: 12px;}
.tabulator .tabulator-placeholder .tabulator-placeholder-contents {color: #b6bcc6; font-size: 14px;
  font-weight: normal;}
"""


_HAS_LABEL = "label" in pn.widgets.Widget.param
_HAS_COLOR = "color" in pn.widgets.Button.param
_HAS_VARIANT = "variant" in pn.widgets.Button.param


def widget_args(label: Optional[str] = None, button_type: Optional[str] = None, button_style: Optional[str] = None,
                **params) -> dict:
    """Keyword arguments for a Panel widget, its label and button look spelled as the installed Panel wants them.

    Newer Panel (1.9 here) names them ``label``, ``color`` and ``variant``, and warns that ``name``,
    ``button_type`` and ``button_style`` go away in Panel 2.0; older ones (pyproject allows 1.4) know only the
    latter. ``pn.widgets.Button(**widget_args(label="Pin", button_type="primary", width=170))``; the result also
    fits ``from_param`` and a ``pn.Param`` widgets entry."""
    if label is not None:
        params["label" if _HAS_LABEL else "name"] = label
    if button_type is not None:
        params["color" if _HAS_COLOR else "button_type"] = button_type
    if button_style is not None:
        params["variant" if _HAS_VARIANT else "button_style"] = button_style
    return params


def table(df, *, height: Optional[int] = 360, formatters: Optional[dict] = None, empty: str = "Nothing to show",
          min_width: int = 40, **kw) -> pn.widgets.Tabulator:
    """A read-only, dense Tabulator with our defaults: columns as wide as their data (never squeezed below
    ``min_width``; the table scrolls sideways instead of cutting headers), headers that wrap, a tooltip with
    the full title, and ``empty`` as the text when there are no rows."""
    config = kw.pop("configuration", {})
    opts = dict(show_index=False, disabled=True, sizing_mode="stretch_width", layout="fit_data_table",
                theme="midnight" if pn.config.theme == "dark" else "simple", formatters=formatters or {},
                pagination=None, header_align="center", stylesheets=[TABLE_CSS],
                configuration={"columnDefaults": {"headerWordWrap": True, "minWidth": min_width, "tooltip": True},
                               "placeholder": empty, **config})
    if height:
        opts["height"] = height
    opts.update(widget_args(label=kw.pop("name", None), **kw))     # ``name``: the table's identifier
    return pn.widgets.Tabulator(df, **opts)


def keyed(df, column: str):
    """``df`` indexed by ``column``'s values (kept as a column too): rows keep their identity from tick to tick,
    so :func:`update_table` can patch them and Tabulator keeps expanded rows and the scroll position."""
    out = df.copy()
    out.index = [str(v) for v in df[column]]
    return out


def update_table(widget: pn.widgets.Tabulator, df) -> str:
    """Show ``df`` in ``widget`` in place: nothing is sent when nothing changed, only the changed cells when the
    rows are the same (same index), the changed cells and the new rows when rows were only added at the end
    (a new waiting job, the longest-waiting first), else the new rows. Scroll position, expanded rows, hover and
    selection survive the first three; a caller that keys its frame by a stable index (a job, a queue) keeps
    them more often. Returns what was done: ``"same"``, ``"patched"``, ``"appended"`` or ``"replaced"`` (tests
    and benchmarks read it)."""
    old = widget.value
    if (old is None or not len(old) or list(old.columns) != list(df.columns) or len(df) < len(old)
            or widget.sorters):
        widget.value = df.copy()
        return "replaced"
    n = len(old)
    if not old.index.equals(df.index[:n]) or (len(df) > n and not df.index[n:].is_unique):
        widget.value = df.copy()
        return "replaced"
    patch = _changed_cells(old, df.iloc[:n])
    if patch:
        widget.patch(patch, as_index=False)
    if len(df) > n:
        _append_rows(widget, df.iloc[n:].copy())
        return "appended"
    return "patched" if patch else "same"


def _append_rows(widget: pn.widgets.Tabulator, rows) -> None:
    """Add ``rows`` at the end of the table: the browser's Tabulator adds them and leaves the rows on screen as
    they are (a new value would rebuild every row), and the scroll position where the user left it. What
    ``Tabulator.stream(..., follow=False)`` does, for a frame keyed by strings (``stream`` assumes a numeric
    index)."""
    import pandas as pd

    combined = pd.concat([widget.value, rows])
    for ref, (model, _) in widget._models.copy().items():
        # Tabulator's ``follow`` (on by default) scrolls the browser's table to the new rows: a job arriving at
        # the end of Pending's longest-first list scrolled the longest waits out of sight
        widget._apply_update([], {"follow": False}, model, ref)
    with param.discard_events(widget):
        widget.value = combined
    _, data = widget._process_df_and_convert_to_cds(rows)
    widget._updating = True
    try:
        widget.param.trigger("value")
        widget._stream(data, None)
    finally:
        widget._updating = False


def _changed_cells(old, new) -> dict:
    """``{column: [(row, new value), ...]}`` of the cells that differ between two frames of the same rows."""
    import numpy as np

    patch = {}
    for c in new.columns:
        a, b = old[c].to_numpy(), new[c].to_numpy()
        try:
            same = (a == b) | (_isnan(a) & _isnan(b))
        except (TypeError, ValueError):
            same = np.array([x == y for x, y in zip(a, b)], dtype=bool)
        changed = np.flatnonzero(~np.asarray(same, dtype=bool))
        if len(changed):
            patch[c] = [(int(i), _plain(b[i])) for i in changed]
    return patch


def _isnan(a):
    import numpy as np

    if a.dtype.kind in "fc":
        return np.isnan(a)
    return np.array([isinstance(x, float) and math.isnan(x) for x in a], dtype=bool)


def _plain(v):
    """A numpy scalar as the Python value Tabulator's patch sends."""
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v


DOWNLOAD_CSS = """
.bk-btn, .bk-btn-default {color: #e5e7eb !important; border: 1px solid #60a5fa !important;
  background: rgba(96, 165, 250, 0.12) !important;}
.bk-btn:hover {background: rgba(96, 165, 250, 0.25) !important;}
"""
"""Download buttons read as buttons you can press (Panel's FileDownload ignores ``button_type`` and renders a
grey, disabled-looking button)."""


def download_button(callback, filename: str, label: str, **kw) -> pn.widgets.FileDownload:
    """A FileDownload styled like the other action buttons."""
    return pn.widgets.FileDownload(callback=callback, filename=filename, label=label,
                                   stylesheets=[DOWNLOAD_CSS], **kw)


def limit_formatter() -> HTMLTemplateFormatter:
    """Tabulator cell: ``-1`` (KAI's unlimited) as ∞, other numbers as they are."""
    return HTMLTemplateFormatter(template="<% if (value == -1) { %>∞<% } else if (value == null || isNaN(value)) "
                                          "{ %>–<% } else { %><%= Number(value).toLocaleString('en-US', "
                                          "{maximumFractionDigits: 2}) %><% } %>")
