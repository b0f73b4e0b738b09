"""Shared look for the views: queue colours, number formatting, KPI cards, badges, table defaults."""

from __future__ import annotations

import hashlib
import html
import math
from typing import Iterable, Optional

import panel as pn
from bokeh.models import HTMLTemplateFormatter, NumberFormatter

QUEUE_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#b07aa1", "#edc948", "#9c755f", "#a0cbe8",
                 "#8cd17d", "#ffbe7d", "#86bcb6", "#d4a6c8", "#f1ce63", "#499894", "#b6992d", "#79706e",
                 "#d37295", "#fabfd2"]
"""Tableau-20-like palette without its reds (red means over-share / starved): readable on dark and light."""

STATE_COLOURS = {"starved": "#e15759", "reclaimable": "#f28e2b", "borrowing": "#edc948", "ok": "#59a14f",
                 "idle": "#8c8c8c"}
SEVERITY_COLOURS = {2: "#e15759", 1: "#f28e2b", 0: "#4e79a7"}
STATUS_COLOURS = {"ok": "#59a14f", "static": "#4e79a7", "starting": "#8c8c8c", "degraded": "#f28e2b",
                  "stale": "#e15759", "error": "#e15759"}
FREE_COLOUR = "#2b3038"
FREE_LINE = "#444b55"

CSS = """
.kd-kpis {display:flex; flex-wrap:wrap; gap:10px; width:100%;}
.kd-kpi {flex:1 1 150px; min-width:140px; border-radius:6px; padding:8px 12px; background:var(--kd-card, rgba(127,127,127,.10));
         border-left:4px solid var(--kd-accent, #4e79a7);}
.kd-kpi .kd-label {font-size:12px; opacity:.75; text-transform:uppercase; letter-spacing:.04em;}
.kd-kpi .kd-value {font-size:26px; font-weight:600; line-height:1.2; font-variant-numeric: tabular-nums;}
.kd-kpi .kd-sub {font-size:12px; opacity:.75;}
.kd-badge {display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; color:#fff;}
.kd-alerts {margin:0; padding:0; list-style:none; font-size:14px;}
.kd-alerts li {padding:5px 8px; margin-bottom:4px; border-left:4px solid; border-radius:3px; background:rgba(127,127,127,.08);}
.kd-banner {padding:6px 12px; border-radius:4px; background:#7a1f22; color:#fff; font-weight:600;}
.kd-health td {padding:1px 10px 1px 0; font-size:13px;}
.kd-health td:first-child {opacity:.7;}
.kd-muted {opacity:.7; font-size:13px;}
.kd-explain {font-size:14px; line-height:1.5;}
.kd-explain code {font-size:13px;}
"""


def ensure_css() -> None:
    """Add the dashboard's CSS once per process (works in a server and in a notebook)."""
    if CSS not in pn.config.raw_css:
        pn.config.raw_css.append(CSS)


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
    fmt_str = "0,0." + "0" * digits if digits else "0,0"
    return {c: NumberFormatter(format=fmt_str, text_align="right") for c in columns}


def state_formatter() -> HTMLTemplateFormatter:
    """Tabulator cell: the queue state as a coloured badge."""
    cases = " ".join(f"<% if (value == '{k}') {{ %><span style=\"background:{v};color:#fff;border-radius:9px;"
                     f"padding:0 7px;font-size:12px;font-weight:600\">{k}</span><% }} %>"
                     for k, v in STATE_COLOURS.items())
    return HTMLTemplateFormatter(template=cases)


def table(df, *, height: Optional[int] = 360, formatters: Optional[dict] = None, **kw) -> pn.widgets.Tabulator:
    """A read-only, dense Tabulator with our defaults."""
    opts = dict(show_index=False, disabled=True, sizing_mode="stretch_width", layout="fit_data_table",
                theme="midnight" if pn.config.theme == "dark" else "simple", formatters=formatters or {},
                pagination=None, header_align="center")
    if height:
        opts["height"] = height
    opts.update(kw)
    return pn.widgets.Tabulator(df, **opts)


def limit_formatter() -> HTMLTemplateFormatter:
    """Tabulator cell: ``-1`` (KAI's unlimited) as ∞, other numbers as they are."""
    return HTMLTemplateFormatter(template="<% if (value == -1) { %>∞<% } else { %><%= value %><% } %>")
