"""GPUs: the node × GPU grid; each GPU is a cell filled bottom-up by its fractional slices (pod, queue,
share), coloured by queue, by DCGM utilisation or by memory used / share. Over-share pods and idle
allocations are outlined and marked; hover shows the numbers; filters by pool, GPU model and queue; pages
keep 1,000 nodes readable; a per-node table is the grid's text alternative.

The grid is drawn in layers over one coordinate system (:func:`grid_positions`), each a Bokeh renderer with its
own data source, updated in place every tick (only changed columns are sent):

* ``devices``: one cell per GPU, outlined when flagged;
* ``held``: slices of pods that hold the GPU now (running, binding);
* ``moving``: slices about to come or go (releasing, pipelined), drawn translucent with a dashed outline by their
  own renderer (no per-slice hatch pattern: hatching every quad froze the browser);
* ``marks``: a symbol on flagged GPUs (``!`` over-share, ``z`` idle), so a flag does not rely on colour alone;
* ``labels``: node names.

A later layer (e.g. the engine's next-cycle decisions over observed device holders) adds one more source and
renderer in the same coordinates: :meth:`GpusView.add_layer`.
"""

from __future__ import annotations

import html
import math
from typing import NamedTuple

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HTMLTemplateFormatter, HoverTool, Quad, Range1d, TapTool, Text
from bokeh.palettes import Viridis256
from bokeh.plotting import figure
from panel.io.document import unlocked

from .. import display
from ..frames import held_unknown
from ..models import GpusModel
from .base import View
from .common import (FREE_COLOUR, FREE_LINE, MUTED_ON_DARK, TABLE_CSS, number_formatters, percent_formatters,
                     queue_colours, keyed, table, update_table, widget_args)
from .plots import add_glyph, assign_columns

CELL_PX = 22
ROW_UNITS = 2.0
"""A row of nodes, in cell units (a GPU cell is 1 unit tall): the cells, the outlines' reach above them, the node
label, and a gap below the next row's outlines (:func:`label_clearance_px`)."""
OUTLINE_PAD = 0.06
"""How far an outline around cells (KAI's next-cycle bind around a GPU or a node, a MIG instance) reaches above
and below them, in cell units."""
LABEL_Y = 1.22
"""Bottom of a node's label above its block's bottom, in cell units: clear of the outlines around its cells."""
LABEL_FONT_PX = 9
LABEL_HEIGHT_PX = LABEL_FONT_PX * 1.25
"""The label's height as drawn (a line box of its font)."""
MIG_FONT_PX = 8
LABEL_CHAR_PX = 5.6
"""A label character's width at :data:`LABEL_FONT_PX` in Chromium's sans-serif (measured: 5.2 on average, digits
5.7)."""
GRID_MIN_WIDTH_PX = 1000
"""The grid's width in a 1,280 px window, the narrowest the dashboard is laid out for."""
OUTLINE_LINE_PX = 2.5
"""The widest outline line (a flagged GPU's); half of it lies outside the outline's box."""
PX_PER_UNIT = (20.0, 40.0)
"""Vertical pixels per cell unit, at least and at most (a cell as wide as the page allows within them): at 20 a
node label keeps 2 px from the outlines above and below it; with the old 16 it touched them."""
OVER_SHARE = "#ff4d4d"
IDLE = "#fbbf24"
NO_DATA = "#6b6f76"
SELECTED = "#e879f9"
"""Outline of the GPU(s) picked: clicked in the grid, or their row in the slice table."""
WOULD = "#4fc3f7"
"""Dashed outline of what KAI would bind next cycle (the overlay; not yet the cluster)."""
MEM_PALETTE = ["#3f4652", "#4a5566", "#50657e", "#4f7598", "#4a86b3", "#3f98cf", "#2aa9ea", "#f59e0b", "#ef4444"]
"""Memory used / share, 0 → 1.5: grey (an allocation left unused is waste, never green) through blue (used as
allocated) to amber and red above the share (OOM risk for neighbours)."""
UTIL_PALETTE = list(Viridis256)
"""DCGM utilisation, 0 → 100 %: Viridis (colour-blind safe; idle is dark, busy is bright)."""
MOVING_STATUSES = ("releasing", "pipelined")
SLICE_FIELDS = ("x0", "x1", "y0", "y1", "fill", "alpha", "line", "lw", "node", "task", "job", "queue", "status",
                "gpu", "share", "mem", "mem_share", "util", "dra")
DEVICE_FIELDS = ("x0", "x1", "y0", "y1", "line", "lw", "dash", "node", "gpu", "device", "model", "pool", "allocated",
                 "util", "mem", "mem_total", "flags", "evidence", "mig")
MIG_FIELDS = ("x0", "x1", "y0", "y1", "x", "y", "text")
MIG_LINE = "#e5e7eb"
"""Outline of a MIG instance over the GPU-equivalent cells it spans."""
OVERLAY_FIELDS = ("x0", "x1", "y0", "y1", "text")


class GridLayout(NamedTuple):
    """Where every node's block sits (:func:`grid_positions`) for a page of nodes, and the widest node's GPUs."""

    pos: dict
    columns: int
    rows: int
    gpus_per_node: int


def grid_layout(nodes: list[str], gpus: pd.DataFrame) -> GridLayout:
    """The grid layout of a page: blocks as wide as its widest node (8 GPUs when it has none)."""
    g_max = int(gpus.groupby("node")["gpu_index"].max().max() + 1) if len(gpus) else 8
    return GridLayout(*grid_positions(nodes, g_max), g_max)


def grid_positions(nodes: list[str], gpus_per_node: int, columns: int | None = None) -> tuple[dict, int, int]:
    """Top-left corner of each node's block: ``{node: (x, y)}``, columns and rows (first row at the top)."""
    block = gpus_per_node + 1
    if columns is None:
        columns = max(1, min(len(nodes), max(1, 64 // block)))
    rows = max(1, math.ceil(len(nodes) / columns))
    pos = {n: ((i % columns) * block, (rows - 1 - i // columns) * ROW_UNITS) for i, n in enumerate(nodes)}
    return pos, columns, rows


def grid_px(x_range: tuple[float, float]) -> float:
    """Vertical pixels per cell unit of a grid spanning ``x_range``: about as many as a cell gets across in a
    1,150 px wide plot, within :data:`PX_PER_UNIT`."""
    return max(PX_PER_UNIT[0], min(PX_PER_UNIT[1], 1150.0 / max(x_range[1] - x_range[0], 1)))


def label_clearance_px(px: float) -> tuple[float, float]:
    """Pixels between a node's label and the outlines below it (its own cells') and above it (the next row's), at
    ``px`` pixels per unit, counting the outline lines' outer halves."""
    line = OUTLINE_LINE_PX / 2
    below = (LABEL_Y - 1 - OUTLINE_PAD) * px - line
    above = (ROW_UNITS - OUTLINE_PAD - LABEL_Y) * px - LABEL_HEIGHT_PX - line
    return below, above


def label_chars(gpus_per_node: int, x_range: tuple[float, float]) -> int:
    """How many characters of a node label fit over its block (up to the next node's label) in the narrowest
    window (:data:`GRID_MIN_WIDTH_PX`)."""
    px = GRID_MIN_WIDTH_PX / max(x_range[1] - x_range[0], 1)
    return max(8, int(((gpus_per_node + 1) * px - 6) / LABEL_CHAR_PX))


def fit_label(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters with an ellipsis (the whole text is the label's hover)."""
    return text if len(text) <= chars else text[:chars - 1].rstrip(" ·") + "…"


def _palette_map(values: np.ndarray, palette: list[str], lo: float, hi: float) -> np.ndarray:
    out = np.full(len(values), NO_DATA, dtype=object)
    ok = ~np.isnan(values)
    idx = np.clip(((values[ok] - lo) / (hi - lo) * (len(palette) - 1)).round().astype(int), 0, len(palette) - 1)
    out[ok] = np.asarray(palette, dtype=object)[idx]
    return out


def slice_colours(slices: pd.DataFrame, colour_by: str, colours: dict[str, str]) -> np.ndarray:
    """Fill colour per slice: the queue's colour, utilisation on Viridis, or memory used / share grey→blue→red."""
    if colour_by == "utilisation":
        return _palette_map(slices["gpu_util"].to_numpy(float), UTIL_PALETTE, 0.0, 100.0)
    if colour_by == "memory":
        ratio = slices["memory_used_mib"].to_numpy(float) / np.maximum(slices["memory_share_mib"].to_numpy(float), 1)
        return _palette_map(ratio, MEM_PALETTE, 0.0, 1.5)
    return slices["queue"].map(colours).fillna(NO_DATA).to_numpy(object)


def _slice_layer(slices: pd.DataFrame, pos: dict, colour_by: str, colours: dict[str, str]) -> dict:
    if not len(slices):
        return {k: [] for k in SLICE_FIELDS}
    sx = slices["node"].map(lambda n: pos[n][0]).to_numpy(float) + slices["gpu_index"].to_numpy(float)
    sy = slices["node"].map(lambda n: pos[n][1]).to_numpy(float)
    off = slices["offset"].to_numpy(float)
    share = slices["share"].to_numpy(float)
    height = slices["height"].to_numpy(float) if "height" in slices else share
    status = slices["status"].to_numpy(object)
    over = slices["over_share"].to_numpy(bool)
    return {"x0": sx + 0.12, "x1": sx + 0.88, "y0": sy + off + 0.02, "y1": sy + off + height - 0.02,
            "fill": slice_colours(slices, colour_by, colours),
            "alpha": np.where(status == "running", 0.95, np.where(status == "binding", 0.75, 0.3)),
            "line": np.where(over, OVER_SHARE, np.where(np.isin(status, MOVING_STATUSES), "#e5e7eb", "#000000")),
            "lw": np.where(over, 2.0, np.where(np.isin(status, MOVING_STATUSES), 1.2, 0.3)),
            **{c: slices[c].to_numpy(object) for c in ("node", "task", "job", "queue", "status")},
            "gpu": slices["gpu_index"].to_numpy(int), "share": share.round(3),
            "mem": (slices["memory_used_mib"].to_numpy(float) / 1024).round(1),
            "mem_share": (slices["memory_share_mib"].to_numpy(float) / 1024).round(1),
            "util": slices["gpu_util"].round(1).to_numpy(float),
            "dra": (slices["dra"] if "dra" in slices else pd.Series("", index=slices.index)).to_numpy(object)}


def fit_cells(slices: pd.DataFrame) -> pd.DataFrame:
    """``slices`` drawn within their cells: on a GPU whose slices' shares add up to more than one (pods sharing
    one DRA claim each hold the whole device) every slice is scaled down so they fill the cell together, where
    they stacked above it over the node's label and the row above. ``offset`` is rescaled and ``height`` added;
    ``share`` (the hover's) stays."""
    if not len(slices):
        return slices
    top = (slices["offset"] + slices["share"]).groupby([slices["node"], slices["gpu_index"]]).transform("max")
    scale = 1.0 / np.maximum(top.to_numpy(float), 1.0)
    return slices.assign(offset=slices["offset"].to_numpy(float) * scale,
                         height=slices["share"].to_numpy(float) * scale)


def mig_source(mig: pd.DataFrame, pos: dict, cell_px: float = 2 * PX_PER_UNIT[0]) -> dict:
    """Outlines of MIG instances over the cells (GPU-equivalents) each spans, labelled with the profile (its
    compute part, ``1g``, when the instance is too narrow for the whole name at ``cell_px`` pixels a cell: at
    1280 px neighbouring 2g.20gb names ran into each other)."""
    mig = mig[mig["node"].isin(pos)] if len(mig) else mig
    if not len(mig):
        return {k: [] for k in MIG_FIELDS}
    x = mig["node"].map(lambda n: pos[n][0]).to_numpy(float) + mig["first"].to_numpy(float)
    y = mig["node"].map(lambda n: pos[n][1]).to_numpy(float)
    w = mig["width"].to_numpy(float)
    char_px = LABEL_CHAR_PX * MIG_FONT_PX / LABEL_FONT_PX
    text = [p if len(p) * char_px <= wd * cell_px - 4 else p.split(".")[0]
            for p, wd in zip(mig["profile"], mig["width"])]
    return {"x0": x + 0.03, "x1": x + w - 0.03, "y0": y - 0.03, "y1": y + 1.03, "x": x + w / 2, "y": y + 0.08,
            "text": text}


def _node_label(node: str, domains: dict, mig: pd.DataFrame, unknown: dict) -> str:
    """Domain (when grouped) · node · GPUs held on an unknown device · MIG instances: the most telling first, as
    a label too long for its block loses its end (:func:`fit_label`)."""
    text = f"{domains[node]} · {node}" if node in domains else node
    if node in unknown:
        text += f" · {unknown[node].split(':')[0]}"
    if len(mig) and (mig["node"] == node).any():
        counts = mig[mig["node"] == node]["profile"].value_counts(sort=False)
        text += " · MIG " + " ".join(f"{p.split('.')[0]}×{c}" for p, c in counts.items())   # full names: hover
    return text


def grid_sources(gpus: pd.DataFrame, slices: pd.DataFrame, nodes: list[str], colour_by: str,
                 colours: dict[str, str], domains: dict | None = None,
                 mig: pd.DataFrame | None = None, layout: GridLayout | None = None) -> tuple[dict[str, dict], tuple]:
    """Column data of every layer (``devices``, ``held``, ``moving``, ``marks``, ``labels``, ``mig``), and (x range,
    y range). Memory in the hover is in GiB. ``domains`` (node → topology domain) prefixes node labels when the
    grid is grouped; ``mig`` (:func:`dashboard.frames.mig_frame`) outlines MIG instances; ``layout``: the page's
    :func:`grid_layout` when the caller already has it."""
    domains = domains or {}
    mig = mig if mig is not None else pd.DataFrame(columns=["node", "profile", "first", "width"])
    pos, columns, rows, g_max = layout if layout is not None else grid_layout(nodes, gpus)
    bx = gpus["node"].map(lambda n: pos[n][0]).to_numpy(float) + gpus["gpu_index"].to_numpy(float)
    by = gpus["node"].map(lambda n: pos[n][1]).to_numpy(float)
    over, idle = gpus["over_share"].to_numpy(bool), gpus["idle_allocated"].to_numpy(bool)
    devices = {"x0": bx + 0.06, "x1": bx + 0.94, "y0": by, "y1": by + 1.0,
               "line": np.where(over, OVER_SHARE, np.where(idle, IDLE, FREE_LINE)),
               "lw": np.where(over | idle, OUTLINE_LINE_PX, 0.6),
               "dash": np.where(idle & ~over, "dashed", "solid").astype(object),
               "node": gpus["node"].to_numpy(object), "gpu": gpus["gpu_index"].to_numpy(int),
               "device": _device_text(gpus), "model": gpus["gpu_model"].to_numpy(object),
               "pool": gpus["pool"].to_numpy(object),
               "allocated": gpus["allocated"].round(3).to_numpy(float),
               "util": gpus["gpu_util"].round(1).to_numpy(float),
               "mem": (gpus["memory_used_mib"].to_numpy(float) / 1024).round(1),
               "mem_total": (gpus["gpu_memory_mib"].to_numpy(float) / 1024).round(1),
               "flags": np.where(over, "a pod uses more memory than its share (OOM risk)",
                                 np.where(idle, "allocated but idle (wasted)", "")).astype(object),
               "evidence": (gpus["evidence"] if "evidence" in gpus else pd.Series("", index=gpus.index)).to_numpy(object),
               "mig": _cell_profiles(gpus, mig)}
    flagged = over | idle
    marks = {"x": bx[flagged] + 0.5, "y": by[flagged] + 0.5,
             "text": np.where(over[flagged], "!", "z").astype(object),
             "colour": np.where(over[flagged], OVER_SHARE, IDLE).astype(object)}
    unknown = held_unknown(slices)
    slices = fit_cells(slices[slices["gpu_index"] >= 0]) if len(slices) else slices   # unknown: in the node label
    moving = slices["status"].isin(MOVING_STATUSES).to_numpy() if len(slices) else np.zeros(0, bool)
    held = _slice_layer(slices[~moving] if len(slices) else slices, pos, colour_by, colours)
    moved = _slice_layer(slices[moving] if len(slices) else slices, pos, colour_by, colours)
    x_range = (-0.3, columns * (g_max + 1))
    full = [_node_label(n, domains, mig, unknown) for n in nodes]
    chars = label_chars(g_max, x_range)
    labels = {"x": [pos[n][0] + 0.06 for n in nodes], "y": [pos[n][1] + LABEL_Y for n in nodes],
              "text": [fit_label(t, chars) for t in full], "full": full}
    # the top row's label fits at the fewest pixels per unit
    y_range = (-0.2, (rows - 1) * ROW_UNITS + LABEL_Y + LABEL_HEIGHT_PX / PX_PER_UNIT[0] + 0.05)
    return ({"devices": devices, "held": held, "moving": moved, "marks": marks, "labels": labels,
             "mig": mig_source(mig, pos, GRID_MIN_WIDTH_PX / (x_range[1] - x_range[0]))}, (x_range, y_range))


def _device_text(gpus: pd.DataFrame) -> np.ndarray:
    """Per GPU cell, the device as ``nvidia-smi`` numbers it (``GPU 3``; on a MIG node ``GPU 0 MIG instance 2
    (1g.10gb)`` or ``GPU 1`` where instance series say so), else the cell as a GPU-equivalent (``cell 7``)."""
    named = gpus["device"].fillna("").to_numpy(object) if "device" in gpus else np.full(len(gpus), "", object)
    cells = np.asarray([f"cell {i}" for i in gpus["gpu_index"].tolist()], dtype=object)
    return np.where(named != "", named, cells)


def _cell_profiles(gpus: pd.DataFrame, mig: pd.DataFrame) -> np.ndarray:
    """Per GPU cell: the MIG instance it belongs to (``3g.40gb instance 2``), else empty."""
    out = np.full(len(gpus), "", dtype=object)
    if not len(mig) or not len(gpus):
        return out
    where = {}
    for node, rows in mig.groupby("node", sort=False):
        for k, (profile, first, width) in enumerate(zip(rows["profile"], rows["first"], rows["width"])):
            for c in range(int(first), int(first + width)):
                where[(node, c)] = f"{profile} (instance {k + 1} of the node, {int(width)} GPU-equivalent(s))"
    for i, key in enumerate(zip(gpus["node"], gpus["gpu_index"])):
        out[i] = where.get(key, "")
    return out


NODE_TABLE_COLUMNS = ["node", "pool", "gpu_model", "gpus", "allocated", "gpu_util", "memory_used_gib",
                      "idle_allocated", "over_share"]
NODE_TABLE_TITLES = {"gpu_model": "GPU model", "gpus": "GPUs", "allocated": "allocated GPUs",
                     "gpu_util": "mean util", "memory_used_gib": "memory used (GiB)",
                     "idle_allocated": "idle-allocated GPUs", "over_share": "over-share GPUs"}
SLICE_COLUMNS = ["gpu_index", "job_pod", "mig", "queue", "status", "share", "memory_share_gib", "memory_used_gib",
                 "gpu_util", "over_share", "device_source", "dra"]
"""The node's slices, one row per pod and GPU, one per MIG instance (:func:`slice_rows`), each keyed by node, GPU
and pod (:func:`slice_keys`). "job / pod" names the job, and the pod only where it adds something
(:func:`job_pod_label`): a pod column beside the job column mostly repeated it."""
SLICE_TITLES = {"gpu_index": "GPU", "job_pod": "job / pod", "mig": "MIG instance", "memory_share_gib": "share GiB",
                "memory_used_gib": "used GiB", "gpu_util": "util", "over_share": "over share",
                "device_source": "device from", "dra": "DRA claim"}
"""Short titles (two lines at most in their fixed widths: "memory share GiB" took three); the full meaning of
the memory columns is their tooltip."""
SLICE_TOOLTIPS = {"job_pod": "the job; for a job with several pods also the pod (\"· pod 3\": the job's pod named "
                             "<job>-3); a pod not named after its job by its whole name",
                  "gpu_index": "the GPU's index on the node; ? when no evidence says which GPU the pod holds",
                  "mig": "the MIG instance's profile: it spans G grid cells (GPU-equivalents, as KAI counts them; "
                         "3g.40gb: 3) from the GPU column's; its memory is the instance's (40 GiB)",
                  "share": "the pod's share of the GPU (1 = whole); for a MIG instance the GPU-equivalents KAI "
                           "counts it as (3g.40gb: 3)",
                  "memory_share_gib": ("GPU memory the pod's share entitles it to (GiB): share × the GPU's memory; "
                                       "on MIG, its instance's memory from the profile name (3g.40gb: 40)"),
                  "memory_used_gib": "GPU memory the pod uses now, from DCGM (GiB)",
                  "gpu_util": "utilisation from DCGM: the pod's where the exporter attributes it, else its GPU's",
                  "over_share": "uses more GPU memory than its share: KAI does not isolate it (OOM risk for "
                                "the GPU's other pods)",
                  "device_source": "where the GPU index comes from (dcgm-exporter's pod labels, the snapshot, "
                                   "KAI's reservation pod)",
                  "dra": "the pod's DRA ResourceClaims"}
SLICE_WIDTHS = {"gpu_index": 62, "mig": 84, "queue": 104, "status": 80, "share": 76, "memory_share_gib": 96,
                "memory_used_gib": 96, "gpu_util": 68, "over_share": 76, "device_source": 96}
"""Fixed widths of the slice table's short columns: "job / pod" takes the rest and wraps, so every column of
the table fits the card from 1280 px on (with the free width it scrolled sideways and cut the memory used and
DRA columns at 1280 and 1440 px)."""


def slice_rows(slices: pd.DataFrame, node: str) -> pd.DataFrame:
    """The slice table's rows for ``node`` (none for ``""``): one per pod and GPU, and one per MIG instance with
    its cells together (a 3g.40gb reads as one instance of 40 GiB, not three cells of 13.33), memory in GiB as
    the table shows it, ``cells`` (the GPU indices a row covers, for outlining them in the grid), ``mig`` (the
    instance's profile) and ``key`` (:func:`slice_keys`)."""
    rows = slices[slices["node"] == node] if node and len(slices) else slices.iloc[0:0]
    rows = mig_instance_rows(rows)
    rows["memory_share_gib"] = (rows["memory_share_mib"] / 1024).round(2)
    rows["memory_used_gib"] = (rows["memory_used_mib"] / 1024).round(2)
    rows["key"] = slice_keys(rows)
    return rows


def mig_instance_rows(slices: pd.DataFrame) -> pd.DataFrame:
    """Slices (:data:`dashboard.frames.SLICE_COLUMNS`) with the cells of each MIG instance merged into one row:
    share, memory share and memory used summed over its cells, utilisation their mean, over share if any cell
    is; its ``gpu_index`` is its first cell (-1 when no evidence gives its devices). Other slices stay as they
    are. Adds ``cells`` and ``mig`` (the instance's profile; the table's GPU column gives its first cell: a
    "cells 4–6" beside it wrapped to two lines at 1280 px)."""
    rows = slices.reset_index(drop=True)
    mig = (rows["mig_instance"] >= 0).to_numpy() if "mig_instance" in rows else np.zeros(len(rows), bool)
    if not mig.any():
        return rows.assign(cells=[[int(g)] for g in rows["gpu_index"]], mig="")
    group = np.where(mig, rows["node"].astype(str) + "\0" + rows["task"].astype(str) + "\0"
                     + rows["mig_instance"].astype(str), rows.index.astype(str))
    grouped = rows.groupby(group, sort=False)
    out = grouped.first()
    out["cells"] = grouped["gpu_index"].agg(lambda g: sorted(int(x) for x in g))
    out["gpu_index"] = [next((c for c in cells if c >= 0), -1) for cells in out["cells"]]
    out[["share", "memory_share_mib"]] = grouped[["share", "memory_share_mib"]].sum()
    out["memory_used_mib"] = grouped["memory_used_mib"].sum(min_count=1)
    out["gpu_util"] = grouped["gpu_util"].mean()
    out["over_share"] = grouped["over_share"].any()
    out["mig"] = out["mig_profile"]
    return out.reset_index(drop=True)


def slice_keys(rows: pd.DataFrame) -> list[str]:
    """A unique key per slice table row: ``node/GPU/pod`` (``?`` for a device no evidence gives, ``#2`` on the
    second such row of a pod), so a pod on two GPUs has two rows that patches and selections tell apart."""
    if not len(rows):
        return []
    base = (rows["node"].astype(str) + "/" + rows["gpu_index"].map(lambda g: str(int(g)) if g >= 0 else "?")
            + "/" + rows["task"].astype(str))
    nth = base.groupby(base, sort=False).cumcount()
    return [b if n == 0 else f"{b}#{n + 1}" for b, n in zip(base, nth)]


def over_share_cell() -> HTMLTemplateFormatter:
    """The over-share flag as the grid marks it (``!``, red), empty otherwise: a tick would read as "fine". A new
    formatter per table (a Bokeh model belongs to one session's document)."""
    return HTMLTemplateFormatter(
        template='<% if (value) { %><span style="color:#f87171;font-weight:600">! over</span><% } %>')


def gpu_index_cell() -> HTMLTemplateFormatter:
    """The slice's GPU, or ``?`` for a pod whose device no evidence gives (index -1: "-1" read like a GPU)."""
    return HTMLTemplateFormatter(template='<div style="text-align:right"><% if (value < 0) { %>'
                                          '<span title="device unknown">?</span><% } else { %><%= value %><% } %></div>')


SLICE_WRAP_CSS = "".join(f'.tabulator-cell[tabulator-field="{c}"] {{overflow-wrap: anywhere; text-overflow: clip;}}\n'
                         for c in ("job_pod", "dra"))


def job_pod_label(pod: str, job: str, pods_of_job: int) -> str:
    """The slice table's "job / pod" cell: ``job`` when its pod adds nothing (the job's single pod, named after
    it, or the pod is the job), ``"job · pod 3"`` for pod ``<job>-3`` of a job with several pods, ``"job · pod
    name"`` (without the namespace the job shows) for a pod not named after its job."""
    if not job or pod == job:
        return pod or job
    if pod.startswith(job + "-"):
        return job if pods_of_job <= 1 else f"{job} · pod {pod[len(job) + 1:]}"
    ns = job.split("/", 1)[0] + "/" if "/" in job else ""
    return f"{job} · {pod[len(ns):] if ns and pod.startswith(ns) else pod}"


def job_pod_labels(rows: pd.DataFrame, slices: pd.DataFrame) -> list[str]:
    """:func:`job_pod_label` of each of ``rows`` (slices of one node); a job's pods are counted over ``slices``
    (every node: a gang's pods on other nodes count too)."""
    pods = slices.groupby("job")["task"].nunique() if len(slices) else pd.Series(dtype=int)
    return [job_pod_label(str(t), str(j), int(pods.get(j, 1))) for t, j in zip(rows["task"], rows["job"])]


def node_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The grid as text, one row per node (the text alternative to the picture)."""
    df = summary.copy()
    df["memory_used_gib"] = (df.get("memory_used_mib", pd.Series(np.nan, index=df.index)) / 1024).round(1)
    for c in ("idle_allocated", "over_share", "gpus"):
        df[c] = df[c].astype(int)
    df["allocated"] = df["allocated"].round(2)
    df["gpu_util"] = df["gpu_util"].round(1)
    return keyed(df, "node")[NODE_TABLE_COLUMNS]


def overlay_source(overlay: pd.DataFrame, gpus: pd.DataFrame, nodes: list[str],
                   layout: GridLayout | None = None) -> dict:
    """Dashed outlines for the engine's next-cycle binds (``scheduler.overlay``): around the device when it is
    known (a pod joining an observed GPU group), else around the node (the device plugin picks the GPUs).
    ``layout``: the page's :func:`grid_layout` (the grid's own, reused), else computed."""
    rows = overlay[(overlay["action"] != "evict") & overlay["node"].isin(nodes)]
    if not len(rows):
        return {k: [] for k in ("x0", "x1", "y0", "y1", "text")}
    pos, _, _, g_max = layout if layout is not None else grid_layout(nodes, gpus)
    dev = rows[rows["gpu_index"] >= 0]
    per_node = rows[rows["gpu_index"] < 0].drop_duplicates("task").groupby("node", sort=False)["text"].agg(
        lambda t: "; ".join(t))
    x = dev["node"].map(lambda n: pos[n][0]).to_numpy(float) + dev["gpu_index"].to_numpy(float)
    y = dev["node"].map(lambda n: pos[n][1]).to_numpy(float)
    width = (gpus.groupby("node")["gpu_index"].max() + 1).reindex(per_node.index).fillna(g_max).to_numpy(float)
    nx = np.array([pos[n][0] for n in per_node.index], dtype=float)
    ny = np.array([pos[n][1] for n in per_node.index], dtype=float)
    # around the node's cells only: its label sits above the outline, never crossed by it
    return {"x0": np.concatenate([x + 0.02, nx - 0.04]), "x1": np.concatenate([x + 0.98, nx + width + 0.04]),
            "y0": np.concatenate([y - 0.04, ny - OUTLINE_PAD]), "y1": np.concatenate([y + 1.04, ny + 1 + OUTLINE_PAD]),
            "text": np.concatenate([dev["text"].to_numpy(object), per_node.to_numpy(object)])}


class GpusView(View):
    """Node × GPU grid with filters, pages, legend, the selected node's slices and a per-node table."""

    model_class = GpusModel
    title = "GPUs"

    def _build(self):
        m = self.model
        self.colour = pn.widgets.RadioButtonGroup.from_param(m.param.colour_by, **widget_args(
            label="Colour by", button_type="primary", button_style="outline", width=300))
        self.pool = pn.widgets.Select(**widget_args(label="Node pool"), options=[""] + m.pools(), width=140)
        self.gpu_model = pn.widgets.Select(**widget_args(label="GPU model"), options=[""] + m.models(), width=200)
        self.queue = pn.widgets.Select(**widget_args(label="Queue"), options=[""] + m.queues(), width=150)
        self.flagged = pn.widgets.Checkbox.from_param(m.param.flagged_only, **widget_args(label="only flagged nodes"))
        self.page = pn.widgets.Select(**widget_args(label="Page"), options=[1], value=1, width=80)
        self.group = pn.widgets.Select(**widget_args(label="Group by"), options=["none"], value="none", width=110,
                                       visible=False)
        self.group.param.watch(lambda e: self._set_group(e.new), "value")
        self.page_size = pn.widgets.Select(**widget_args(label="Nodes per page"), options=[32, 64, 128, 256, 512],
                                           value=m.page_size, width=110)
        for w, p in ((self.pool, "pool"), (self.gpu_model, "gpu_model"), (self.queue, "queue")):
            w.param.watch(lambda e, p=p: self._set_filter(p, e.new), "value")
        self.page.param.watch(lambda e: self._set_page(e.new - 1), "value")
        self.page_size.param.watch(lambda e: self._set_page_size(e.new), "value")
        m.param.watch(lambda *_: self._update_grid(), ["colour_by"])
        m.param.watch(lambda *_: (self._update_grid(), self._update_node()), ["flagged_only"])
        self.sources = {name: ColumnDataSource() for name in ("devices", "held", "moving", "marks", "labels",
                                                                  "overlay", "mig")}
        # One figure for the view's life: a layout change (filter, page) resizes it and moves its ranges in
        # place. A new figure per layout raced with the browser: messages about models one side had already
        # dropped ("reference pNNN isn't known" console errors) and a tap on the old grid read against the new
        # grid's sources.
        self.fig = self._figure()
        self.plot = pn.pane.Bokeh(self.fig, sizing_mode="stretch_width", height=310)
        self.alt = pn.pane.HTML("", sizing_mode="stretch_width", margin=0)
        self.legend = pn.pane.HTML("", sizing_mode="stretch_width")
        self.summary = pn.pane.HTML("", sizing_mode="stretch_width")
        self.topology = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self.node_select = pn.widgets.Select(**widget_args(label="Node"), options=[""], width=200)
        self.node_select.param.watch(lambda e: setattr(self.selection, "node", e.new or ""), "value")
        self.selection.param.watch(lambda *_: self._update_node(), "node")
        # as tall as its rows up to ten or so (a fixed 220 px showed two and a half wrapped rows)
        self.node_table = table(pd.DataFrame(columns=SLICE_COLUMNS), height=None, max_height=340, titles=SLICE_TITLES,
                                formatters={**number_formatters(["share", "memory_share_gib", "memory_used_gib"], 2),
                                            **percent_formatters(["gpu_util"]),
                                            "over_share": over_share_cell(), "gpu_index": gpu_index_cell(),
                                            **{c: {"type": "textarea"} for c in ("job_pod", "dra")}},
                                header_tooltips=SLICE_TOOLTIPS, layout="fit_columns", widths=SLICE_WIDTHS,
                                stylesheets=[TABLE_CSS, SLICE_WRAP_CSS], hidden_columns=["mig", "dra"],
                                selectable=1, name="node-slices", empty="No pod holds a GPU on this node")
        # A row picked in the table outlines its GPU(s) in the grid; a GPU clicked in the grid picks its rows.
        self._row_cells: dict[str, list[tuple[str, int]]] = {}
        self._linking = False
        self.node_table.param.watch(lambda e: self._on_row_select(e.new), "selection")
        self.nodes_table = table(pd.DataFrame(columns=NODE_TABLE_COLUMNS), height=300, titles=NODE_TABLE_TITLES,
                                 formatters={**number_formatters(["allocated", "memory_used_gib"], 2),
                                             **percent_formatters(["gpu_util"])},
                                 name="gpu-nodes-table", empty="No GPU node matches the filters", visible=False)
        self.show_table = pn.widgets.Toggle(**widget_args(label="Show the grid as a table (per node)",
                                                          button_type="primary", button_style="outline", width=300))
        self.show_table.param.watch(lambda e: self._toggle_table(e.new), "value")
        self._layout_key = None
        self._layout_cache: tuple | None = None
        self._table_node = None
        return pn.Column(
            pn.Row(pn.pane.HTML('<div style="padding-top:8px">Colour by</div>', width=70), self.colour,
                   pn.Column(pn.Spacer(height=4), self.flagged), sizing_mode="stretch_width"),
            pn.Row(self.pool, self.gpu_model, self.queue, self.group, self.page_size, self.page,
                   sizing_mode="stretch_width"),
            self.summary, self.topology, self.legend, self.alt,
            self.plot,
            pn.Card(pn.Column(self.node_select, self.node_table, sizing_mode="stretch_width"),
                    title="Selected node: slices", sizing_mode="stretch_width", collapsible=False),
            self.show_table, self.nodes_table,
            sizing_mode="stretch_width")

    def _figure(self, height: int = 300):
        fig = figure(tools="reset", toolbar_location=None, x_axis_type=None, y_axis_type=None,
                     sizing_mode="stretch_width", height=height, min_border=4, outline_line_color=None,
                     x_range=Range1d(0, 1), y_range=Range1d(0, 1))
        fig.grid.visible = False
        fig.background_fill_alpha = 0
        fig.border_fill_alpha = 0
        src = self.sources
        src["devices"].data = {k: [] for k in DEVICE_FIELDS}
        src["held"].data = {k: [] for k in SLICE_FIELDS}
        src["moving"].data = {k: [] for k in SLICE_FIELDS}
        src["marks"].data = {"x": [], "y": [], "text": [], "colour": []}
        src["labels"].data = {"x": [], "y": [], "text": [], "full": []}
        src["overlay"].data = {k: [] for k in OVERLAY_FIELDS}
        src["mig"].data = {k: [] for k in MIG_FIELDS}
        r_dev = fig.quad(left="x0", right="x1", bottom="y0", top="y1", source=src["devices"], fill_color=FREE_COLOUR,
                         line_color="line", line_width="lw", line_dash="dash", nonselection_fill_alpha=1.0,
                         nonselection_line_alpha=1.0, selection_fill_color="#3d4450", selection_line_color=SELECTED,
                         selection_line_width=OUTLINE_LINE_PX, selection_line_dash="solid")
        # The layers above the devices: only a tap on a device selects, so their selection looks are the browser's
        # own (add_glyph: one glyph model each instead of three).
        box = dict(left="x0", right="x1", bottom="y0", top="y1")
        r_held = add_glyph(fig, src["held"], Quad(**box, fill_color="fill", fill_alpha="alpha", line_color="line",
                                                  line_width="lw"))
        r_moving = add_glyph(fig, src["moving"], Quad(**box, fill_color="fill", fill_alpha="alpha", line_color="line",
                                                      line_width="lw", line_dash="dashed"))
        r_ov = add_glyph(fig, src["overlay"], Quad(**box, fill_alpha=0, line_color=WOULD, line_width=2,
                                                   line_dash="dashed"))
        fig.add_tools(HoverTool(renderers=[r_ov], tooltips=[("next cycle", "@text")]))
        add_glyph(fig, src["mig"], Quad(**box, fill_alpha=0, line_color=MIG_LINE, line_width=1.5))
        add_glyph(fig, src["mig"], Text(x="x", y="y", text="text", text_font_size=f"{MIG_FONT_PX}px",
                                        text_color=MIG_LINE, text_align="center", text_baseline="bottom"))
        add_glyph(fig, src["marks"], Text(x="x", y="y", text="text", text_color="colour", text_font_size="11px",
                                          text_font_style="bold", text_align="center", text_baseline="middle"))
        r_labels = add_glyph(fig, src["labels"], Text(x="x", y="y", text="text", text_font_size=f"{LABEL_FONT_PX}px",
                                                      text_color=MUTED_ON_DARK, text_baseline="bottom"))
        fig.add_tools(HoverTool(renderers=[r_labels], tooltips=[("node", "@full")]))     # a label cut short
        slice_tips = [("pod", "@task"), ("job", "@job"), ("queue", "@queue"), ("status", "@status"),
                      ("node / GPU", "@node / @gpu"), ("share", "@share{0.[00]} GPU"),
                      ("memory used / share", "@mem{0,0.0} / @mem_share{0,0.0} GiB"), ("util", "@util{0.0} %"),
                      ("GPUs via", "@dra")]
        fig.add_tools(HoverTool(renderers=[r_held, r_moving], tooltips=slice_tips))
        fig.add_tools(HoverTool(renderers=[r_dev], tooltips=[
            ("node / GPU", "@node / @device"), ("model / pool", "@model / @pool"), ("allocated", "@allocated{0.[00]}"),
            ("util", "@util{0.0} %"), ("memory used", "@mem{0,0.0} / @mem_total{0,0.0} GiB"), ("flag", "@flags"),
            ("evidence", "@evidence"), ("MIG", "@mig")]))
        fig.add_tools(TapTool(renderers=[r_dev]))
        fig.toolbar.active_scroll = None
        src["devices"].selected.on_change("indices", self._on_tap)
        return fig

    def add_layer(self, name: str, draw) -> ColumnDataSource:
        """Add a layer over the grid: ``draw(figure, source)`` adds its renderer(s) to the view's one figure;
        fill the returned source with columns in grid coordinates (:func:`grid_positions`)."""
        self.sources[name] = ColumnDataSource()
        draw(self.fig, self.sources[name])
        return self.sources[name]

    # ---------------------------------------------------------------------------------------- events

    def _set_filter(self, name: str, value: str) -> None:
        setattr(self.model, name, value or "")
        self.model.page = 0
        self._update_grid()
        self._update_node()       # the slice table follows the filters: never a node they leave out

    def _set_group(self, level: str) -> None:
        level = "" if level == "none" else level
        if level != self.model.group_by:
            self.model.param.update(group_by=level, page=0)
            self._update_grid()

    def _set_page(self, page: int) -> None:
        if page != self.model.page:
            self.model.page = max(0, page)
            self._update_grid()

    def _set_page_size(self, size: int) -> None:
        self.model.param.update(page_size=int(size), page=0)
        self._update_grid()

    def _on_tap(self, attr, old, new) -> None:
        if new:
            data = self.sources["devices"].data
            if 0 <= new[0] < len(data["node"]):
                node, gpu = str(data["node"][new[0]]), int(data["gpu"][new[0]])
                self.selection.node = node
                if not self._linking:       # a click in the grid: the GPU's rows in the table
                    keys = list(self.node_table.value.index) if self.node_table.value is not None else []
                    self._link(lambda: setattr(self.node_table, "selection", [
                        i for i, k in enumerate(keys) if (node, gpu) in self._row_cells.get(k, ())]))

    def _on_row_select(self, positions: list[int]) -> None:
        """Outline in the grid the GPU(s) of the slice table's selected row (a MIG instance: every cell it
        spans); none on this page: nothing outlined."""
        if self._linking:
            return
        keys = self.node_table.value.index if self.node_table.value is not None else []
        want = {c for i in positions if 0 <= i < len(keys) for c in self._row_cells.get(keys[i], ())}
        data = self.sources["devices"].data
        idx = [i for i, (n, g) in enumerate(zip(data["node"], data["gpu"])) if (n, int(g)) in want]
        self._link(lambda: setattr(self.sources["devices"].selected, "indices", idx))

    def _picked_gpus(self) -> set[tuple[str, int]]:
        """``(node, GPU)`` of the devices picked in the grid now."""
        data = self.sources["devices"].data
        nodes, gpus = data.get("node", []), data.get("gpu", [])
        return {(str(nodes[i]), int(gpus[i])) for i in self.sources["devices"].selected.indices if i < len(nodes)}

    def _link(self, change) -> None:
        """Make a selection ``change`` without its watcher answering back. Unlocked: a table's selection event
        arrives outside the document's lock, where changing a Bokeh model directly raised ("_pending_writes
        should be non-None")."""
        self._linking = True
        try:
            with unlocked():
                change()
        finally:
            self._linking = False

    # ---------------------------------------------------------------------------------------- render

    def fold(self):
        # first screen: the filters and the grid; the selected node's slices and the grid as a table below
        return [(self._layout, 7)]

    def _update(self):
        m = self.model
        for widget, options in ((self.pool, m.pools()), (self.gpu_model, m.models()), (self.queue, m.queues())):
            if list(widget.options) != [""] + options:
                widget.options = [""] + options
        levels = m.group_levels()
        if list(self.group.options) != ["none"] + levels:
            self.group.options = ["none"] + levels
        self.group.visible = bool(levels)
        self._update_grid()
        self._update_node()

    def _update_grid(self) -> None:
        m = self.model
        pages = m.pages()
        if list(self.page.options) != list(range(1, pages + 1)):
            self.page.options = list(range(1, pages + 1))
        self.page.value = min(m.page, pages - 1) + 1
        self.page.disabled = pages <= 1
        nodes = m.page_nodes()
        gpus, slices = m.page_frames()
        colours = queue_colours(q.name for q in m.snapshot.leaf_queues()) if m.snapshot else {}
        layout = self._grid_layout(nodes, gpus)
        layers, (xr, yr) = grid_sources(gpus, slices, nodes, m.colour_by, colours, domains=m.node_domains(),
                                        mig=m.mig_instances(nodes), layout=layout)
        layers["overlay"] = overlay_source(m.overlay(), gpus, nodes, layout)
        key = (tuple(nodes), xr, yr)
        if key != self._layout_key:
            # A new layout (filter, page): the same figure, resized, its ranges moved (models keep their ids).
            self._layout_key = key
            height = int(max(120, (yr[1] - yr[0]) * grid_px(xr) + 20))
            self.fig.update(height=height)
            self.fig.x_range.update(start=xr[0], end=xr[1])
            self.fig.y_range.update(start=yr[0], end=yr[1])
            self.plot.height = height + 10
        picked = self._picked_gpus()
        for name, data in layers.items():
            assign_columns(self.sources[name], data)
        if picked:      # the picked GPUs where the new layout draws them (an index would now be another GPU's)
            idx = [i for i, c in enumerate(zip(layers["devices"]["node"], layers["devices"]["gpu"]))
                   if (str(c[0]), int(c[1])) in picked]
            if idx != list(self.sources["devices"].selected.indices):
                self._link(lambda: setattr(self.sources["devices"].selected, "indices", idx))
        if list(self.node_select.options) != [""] + list(nodes):
            self.node_select.options = [""] + list(nodes)
        all_g = m.gpus()
        n_nodes = len(m.selected_nodes())
        n_over, n_idle = int(all_g["over_share"].sum()), int(all_g["idle_allocated"].sum())
        self.summary.object = (
            f'<div class="kd-muted">{n_nodes} node(s) match · page {m.page + 1}/{pages} · {len(gpus)} GPUs shown · '
            f'<b style="color:{OVER_SHARE}">{n_over} over-share (!)</b>, <b style="color:{IDLE}">{n_idle} '
            f'idle-allocated (z)</b> cluster-wide · a cell is one GPU, filled bottom-up by its pods\' shares; '
            f'translucent with a dashed edge = releasing or pipelined; red edge and ! = a pod over its memory share '
            f'(OOM risk); amber dashed edge and z = allocated but idle; '
            f'<span style="color:{WOULD}">blue dashed outline</span> = KAI would bind there next cycle (around a GPU when its device is known, else around the node; '
            f'{len(layers["overlay"]["x0"])} on this page; not yet the cluster); click a GPU for its node\'s pods (its own rows picked); '
            f'<span style="color:{SELECTED}">pink outline</span> = the GPU(s) picked, here or as a row of the table.'
            + (' On MIG nodes a cell is one GPU-equivalent as KAI counts them: a white outline is one MIG instance '
               '(a 3g.40gb spans 3 cells), cells outside the outlines are whole GPUs.'
               if len(layers["mig"]["x0"]) else '') + '</div>')
        self.alt.object = (f'<div class="kd-sr" role="img" aria-label="GPU grid">GPU grid: {len(gpus)} GPUs on '
                           f'{len(nodes)} nodes, {int(gpus["allocated"].gt(0).sum()) if len(gpus) else 0} with an '
                           f'allocation, {n_over} over-share and {n_idle} idle-allocated cluster-wide. The button '
                           f'"Show the grid as a table" below lists the same per node.</div>')
        self.legend.object = self._legend(slices, colours)
        self.topology.object = topology_html(m.domains(), m.pending_gangs(), m.group_by)
        if self.nodes_table.visible:
            update_table(self.nodes_table, node_table(m.node_summary_of(gpus)))

    def _grid_layout(self, nodes: list[str], gpus: pd.DataFrame) -> GridLayout:
        """The page's grid layout, computed again only when its nodes or their widest GPU count changed."""
        key = (tuple(nodes), int(gpus["gpu_index"].max()) + 1 if len(gpus) else 8)
        if self._layout_cache is None or self._layout_cache[0] != key:
            self._layout_cache = (key, grid_layout(nodes, gpus))
        return self._layout_cache[1]

    def _toggle_table(self, shown: bool) -> None:
        """The per-node table is built on demand (a page of 512 nodes is a big table to send every tick)."""
        self.nodes_table.visible = shown
        if shown:
            gpus, _ = self.model.page_frames()
            update_table(self.nodes_table, node_table(self.model.node_summary_of(gpus)))

    def _legend(self, slices: pd.DataFrame, colours: dict[str, str]) -> str:
        m = self.model
        if m.colour_by == "queue":
            present = sorted(set(slices["queue"])) if len(slices) else []
            if not present:
                return '<span class="kd-muted">No pod holds a GPU on this page.</span>'
            return " ".join(
                f'<span style="display:inline-block;margin-right:10px"><span style="display:inline-block;width:11px;'
                f'height:11px;background:{colours.get(q, NO_DATA)};margin-right:4px"></span>{html.escape(q)}</span>'
                for q in present)
        if m.colour_by == "utilisation":
            return ('<span class="kd-muted">utilisation (DCGM): </span>'
                    + _gradient(UTIL_PALETTE[::32], "0 % (idle)", "100 %"))
        return ('<span class="kd-muted">memory used / its share: </span>'
                + _gradient(MEM_PALETTE, "0 (unused: waste)", "1 = as allocated · above: over share"))

    def _update_node(self) -> None:
        shown = set(self.model.selected_nodes())
        node = self.selection.node if self.selection.node in shown else ""
        if not node:
            # Nothing selected among the nodes the filters keep: show the one most worth a look there (an
            # over-share pod, else an idle allocation, else the first node holding a pod), never a node of
            # another pool, model or queue. With no node, the table read "No pod holds a GPU on this node" under
            # a grid full of pods (the MIG pool).
            g = self.model.gpus()
            g = g[g["node"].isin(shown)]
            flagged = (g.loc[g["over_share"], "node"].tolist() or g.loc[g["idle_allocated"], "node"].tolist()
                       or g.loc[g["allocated"] > 0, "node"].tolist())
            node = flagged[0] if flagged else ""
        if node and node not in self.node_select.options:
            self.node_select.options = [*self.node_select.options, node]
        self.node_select.value = node if node in self.node_select.options else ""
        sl = self.model.slices()
        rows = slice_rows(sl, node)
        rows["job_pod"] = job_pod_labels(rows, sl)
        if node != self._table_node:       # another node's rows: no row and no GPU stays picked
            self._table_node = node
            self._link(lambda: setattr(self.node_table, "selection", []))
            devices = self.sources["devices"]
            if any(str(devices.data["node"][i]) != node for i in devices.selected.indices
                   if i < len(devices.data["node"])):
                self._link(lambda: setattr(devices.selected, "indices", []))
        self._row_cells = {k: [(node, c) for c in cells] for k, cells in zip(rows["key"], rows["cells"])}
        update_table(self.node_table, keyed(rows, "key")[SLICE_COLUMNS])
        # the MIG and DRA columns: only where they say something
        hidden = [c for c in ("mig", "dra") if not (rows[c].astype(str) != "").any()]
        if self.node_table.hidden_columns != hidden:
            self.node_table.hidden_columns = hidden


def topology_html(domains: pd.DataFrame, gangs: pd.DataFrame, level: str) -> str:
    """The grouped level's domains by free whole GPUs, and where each pending topology gang would best land."""
    parts = []
    if level and len(domains):
        items = " · ".join(f"<b>{html.escape(str(d))}</b> {int(f)}/{int(g)} free"
                           for d, f, g in zip(domains["domain"], domains["free_gpus"], domains["gpus"]))
        parts.append(f'<div class="kd-muted">Grouped by {html.escape(level)} (nodes labelled with it): {items}</div>')
    for r in gangs.itertuples():
        if r.best_domain:
            verdict = ("enough free GPUs there" if r.fits else
                       f"no {html.escape(r.level)} with {r.gpus:g} free GPUs; largest {r.best_free}")
            where = f"best {html.escape(r.level)} <b>{html.escape(r.best_domain)}</b> ({r.best_free} free): {verdict}"
        else:
            where = f"no node carries the {html.escape(r.level)} label"
        parts.append(f'<div class="kd-gang">Pending gang <b>{html.escape(r.job)}</b> needs {r.gpus:g} GPUs in one '
                     f'{html.escape(r.level)}: {where}</div>')
    return "".join(parts)


def _gradient(colours: list[str], lo: str, hi: str) -> str:
    stops = ",".join(colours)
    return (f'<span class="kd-muted">{lo}</span> <span style="display:inline-block;width:160px;height:10px;'
            f'background:linear-gradient(to right,{stops});vertical-align:middle"></span> '
            f'<span class="kd-muted">{hi}</span>')


__all__ = ["GpusView", "GridLayout", "grid_layout", "grid_positions", "grid_sources", "mig_source", "node_table",
           "overlay_source", "slice_rows", "topology_html"]
