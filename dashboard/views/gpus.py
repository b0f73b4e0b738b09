"""GPUs: the node × GPU grid; each GPU is a cell filled bottom-up by its fractional slices (pod, queue,
share), coloured by queue, by DCGM utilisation or by memory used / share. Over-share pods and idle
allocations are outlined; hover shows the numbers; filters by pool, GPU model and queue; pages (and a
per-node cluster map) keep 1,000 nodes readable."""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d, TapTool
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from ..frames import held_unknown
from ..models import GpusModel
from .base import View
from .common import FREE_COLOUR, FREE_LINE, fmt, number_formatters, queue_colours, table

CELL_PX = 22
ROW_UNITS = 1.75        # a GPU cell is 1 unit tall; the rest of a row is the node label
OVER_SHARE = "#ff3b3b"
IDLE = "#edc948"
NO_DATA = "#6b6f76"
WOULD = "#4fc3f7"
MEM_PALETTE = ["#1a9850", "#66bd63", "#a6d96a", "#d9ef8b", "#fee08b", "#fdae61", "#f46d43", "#d73027", "#a50026"]


def grid_positions(nodes: list[str], gpus_per_node: int, columns: int | None = None) -> tuple[dict, int, int]:
    """Top-left corner of each node's block: ``{node: (x, y)}``, columns and rows (first row at the top)."""
    block = gpus_per_node + 1
    if columns is None:
        columns = max(1, min(len(nodes), max(1, 64 // block)))
    rows = max(1, math.ceil(len(nodes) / columns))
    pos = {n: ((i % columns) * block, (rows - 1 - i // columns) * ROW_UNITS) for i, n in enumerate(nodes)}
    return pos, columns, rows


def _palette_map(values: np.ndarray, palette: list[str], lo: float, hi: float) -> np.ndarray:
    out = np.full(len(values), NO_DATA, dtype=object)
    ok = ~np.isnan(values)
    idx = np.clip(((values[ok] - lo) / (hi - lo) * (len(palette) - 1)).round().astype(int), 0, len(palette) - 1)
    out[ok] = np.asarray(palette, dtype=object)[idx]
    return out


def slice_colours(slices: pd.DataFrame, colour_by: str, colours: dict[str, str]) -> np.ndarray:
    """Fill colour per slice: the queue's colour, utilisation on Viridis, or memory used/share green→red."""
    if colour_by == "utilisation":
        return _palette_map(slices["gpu_util"].to_numpy(float), list(Viridis256), 0.0, 100.0)
    if colour_by == "memory":
        ratio = slices["memory_used_mib"].to_numpy(float) / np.maximum(slices["memory_share_mib"].to_numpy(float), 1)
        return _palette_map(ratio, MEM_PALETTE, 0.0, 1.5)
    return slices["queue"].map(colours).fillna(NO_DATA).to_numpy(object)


def grid_sources(gpus: pd.DataFrame, slices: pd.DataFrame, nodes: list[str], colour_by: str,
                 colours: dict[str, str]) -> tuple[dict, dict, dict, tuple]:
    """Column data for the GPU backgrounds, the slices and the node labels, plus (x range, y range)."""
    g_max = int(gpus.groupby("node")["gpu_index"].max().max() + 1) if len(gpus) else 8
    pos, columns, rows = grid_positions(nodes, g_max)
    bx = gpus["node"].map(lambda n: pos[n][0]).to_numpy(float) + gpus["gpu_index"].to_numpy(float)
    by = gpus["node"].map(lambda n: pos[n][1]).to_numpy(float)
    flag_colour = np.where(gpus["over_share"], OVER_SHARE, np.where(gpus["idle_allocated"], IDLE, FREE_LINE))
    bg = {"x0": bx + 0.06, "x1": bx + 0.94, "y0": by, "y1": by + 1.0, "line": flag_colour,
          "lw": np.where(gpus["over_share"] | gpus["idle_allocated"], 2.5, 0.6),
          "node": gpus["node"].to_numpy(object), "gpu": gpus["gpu_index"].to_numpy(int),
          "model": gpus["gpu_model"].to_numpy(object), "pool": gpus["pool"].to_numpy(object),
          "allocated": gpus["allocated"].round(3).to_numpy(float), "util": gpus["gpu_util"].round(1).to_numpy(float),
          "mem": gpus["memory_used_mib"].round(0).to_numpy(float), "mem_total": gpus["gpu_memory_mib"].to_numpy(float),
          "flags": np.where(gpus["over_share"], "over-share pod", np.where(gpus["idle_allocated"], "idle allocation",
                                                                           "")).astype(object),
          "evidence": (gpus["evidence"] if "evidence" in gpus else pd.Series("", index=gpus.index)).to_numpy(object)}
    unknown = held_unknown(slices)
    slices = slices[slices["gpu_index"] >= 0] if len(slices) else slices   # unknown devices: in the label
    if len(slices):
        sx = slices["node"].map(lambda n: pos[n][0]).to_numpy(float) + slices["gpu_index"].to_numpy(float)
        sy = slices["node"].map(lambda n: pos[n][1]).to_numpy(float)
        off = slices["offset"].to_numpy(float)
        share = slices["share"].to_numpy(float)
        status = slices["status"].to_numpy(object)
        sl = {"x0": sx + 0.12, "x1": sx + 0.88, "y0": sy + off + 0.02, "y1": sy + off + share - 0.02,
              "fill": slice_colours(slices, colour_by, colours),
              "alpha": np.where(status == "running", 0.95, np.where(status == "binding", 0.7, 0.35)),
              "line": np.where(slices["over_share"], OVER_SHARE, "#000000"),
              "lw": np.where(slices["over_share"], 2.0, 0.3),
              "hatch": np.where(status == "releasing", "x", np.where(status == "pipelined", "/", " ")).astype(object),
              **{c: slices[c].to_numpy(object) for c in ("node", "task", "job", "queue", "status")},
              "gpu": slices["gpu_index"].to_numpy(int), "share": share.round(3),
              "mem": slices["memory_used_mib"].round(0).to_numpy(float),
              "mem_share": slices["memory_share_mib"].round(0).to_numpy(float),
              "util": slices["gpu_util"].round(1).to_numpy(float)}
    else:
        sl = {k: [] for k in ("x0", "x1", "y0", "y1", "fill", "alpha", "line", "lw", "hatch", "node", "task", "job",
                              "queue", "status", "gpu", "share", "mem", "mem_share", "util")}
    labels = {"x": [pos[n][0] + 0.06 for n in nodes], "y": [pos[n][1] + 1.05 for n in nodes],
              "text": [n + (f" · {unknown[n].split(':')[0]}" if n in unknown else "") for n in nodes]}
    x_range = (-0.3, columns * (g_max + 1))
    y_range = (-0.2, rows * ROW_UNITS + 0.1)
    return bg, sl, labels, (x_range, y_range)


def overlay_source(overlay: pd.DataFrame, gpus: pd.DataFrame, nodes: list[str]) -> dict:
    """Dashed outlines for the engine's next-cycle binds (``scheduler.overlay``): around the device when it is
    known (a pod joining an observed GPU group), else around the node (the device plugin picks the GPUs)."""
    rows = overlay[(overlay["action"] != "evict") & overlay["node"].isin(nodes)]
    if not len(rows):
        return {k: [] for k in ("x0", "x1", "y0", "y1", "text")}
    g_max = int(gpus.groupby("node")["gpu_index"].max().max() + 1) if len(gpus) else 8
    pos, _, _ = grid_positions(nodes, g_max)
    dev = rows[rows["gpu_index"] >= 0]
    per_node = rows[rows["gpu_index"] < 0].drop_duplicates("task").groupby("node", sort=False)["text"].agg(
        lambda t: "; ".join(t))
    x = dev["node"].map(lambda n: pos[n][0]).to_numpy(float) + dev["gpu_index"].to_numpy(float)
    y = dev["node"].map(lambda n: pos[n][1]).to_numpy(float)
    width = (gpus.groupby("node")["gpu_index"].max() + 1).reindex(per_node.index).fillna(g_max).to_numpy(float)
    nx = np.array([pos[n][0] for n in per_node.index], dtype=float)
    ny = np.array([pos[n][1] for n in per_node.index], dtype=float)
    return {"x0": np.concatenate([x + 0.02, nx - 0.02]), "x1": np.concatenate([x + 0.98, nx + width + 0.02]),
            "y0": np.concatenate([y - 0.04, ny - 0.1]), "y1": np.concatenate([y + 1.04, ny + 1.1]),
            "text": np.concatenate([dev["text"].to_numpy(object), per_node.to_numpy(object)])}


class GpusView(View):
    """Node × GPU grid with filters, pages, legend, a cluster map and the selected node's slices."""

    model_class = GpusModel
    title = "GPUs"

    def _build(self):
        m = self.model
        self.colour = pn.widgets.RadioButtonGroup.from_param(m.param.colour_by, button_type="primary",
                                                             button_style="outline")
        self.pool = pn.widgets.Select(name="Node pool", options=[""] + m.pools(), width=150)
        self.gpu_model = pn.widgets.Select(name="GPU model", options=[""] + m.models(), width=150)
        self.queue = pn.widgets.Select(name="Queue", options=[""] + m.queues(), width=170)
        self.flagged = pn.widgets.Checkbox.from_param(m.param.flagged_only, name="only flagged nodes")
        self.page = pn.widgets.Select(name="Page", options=[1], value=1, width=90)
        self.page_size = pn.widgets.Select(name="Nodes per page", options=[32, 64, 128, 256, 512], value=m.page_size,
                                           width=120)
        for w, p in ((self.pool, "pool"), (self.gpu_model, "gpu_model"), (self.queue, "queue")):
            w.param.watch(lambda e, p=p: self._set_filter(p, e.new), "value")
        self.page.param.watch(lambda e: self._set_page(e.new - 1), "value")
        self.page_size.param.watch(lambda e: self._set_page_size(e.new), "value")
        m.param.watch(lambda *_: self._update_grid(rebuild=False), ["colour_by"])
        m.param.watch(lambda *_: self._update_grid(rebuild=True), ["flagged_only"])
        self.bg = ColumnDataSource()
        self.sl = ColumnDataSource()
        self.lb = ColumnDataSource()
        self.ov = ColumnDataSource()
        self.fig = self._figure()
        self.plot = pn.pane.Bokeh(self.fig, sizing_mode="stretch_width")
        self.legend = pn.pane.HTML("", sizing_mode="stretch_width")
        self.summary = pn.pane.HTML("", sizing_mode="stretch_width")
        self.node_select = pn.widgets.Select(name="Node", options=[""], width=200)
        self.node_select.param.watch(lambda e: setattr(self.selection, "node", e.new or ""), "value")
        self.selection.param.watch(lambda *_: self._update_node(), "node")
        self.node_table = table(pd.DataFrame(), height=220,
                                formatters=number_formatters(["share", "memory_share_mib", "memory_used_mib",
                                                              "gpu_util"], 1))
        self._layout_key = None
        return pn.Column(
            pn.Row(self.colour, self.pool, self.gpu_model, self.queue, self.page_size, self.page,
                   pn.Column(pn.Spacer(height=18), self.flagged), sizing_mode="stretch_width"),
            self.summary, self.legend,
            self.plot,
            pn.Card(pn.Column(self.node_select, self.node_table, sizing_mode="stretch_width"),
                    title="Selected node: slices", sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    def _figure(self, height: int = 300):
        fig = figure(tools="pan,wheel_zoom,reset", toolbar_location="above", x_axis_type=None, y_axis_type=None,
                     sizing_mode="stretch_width", height=height, min_border=4, outline_line_color=None,
                     x_range=Range1d(0, 1), y_range=Range1d(0, 1))
        fig.grid.visible = False
        fig.background_fill_alpha = 0
        fig.border_fill_alpha = 0
        self.bg.data = {k: [] for k in ("x0", "x1", "y0", "y1", "line", "lw", "node", "gpu", "model", "pool",
                                        "allocated", "util", "mem", "mem_total", "flags", "evidence")}
        self.sl.data = {k: [] for k in ("x0", "x1", "y0", "y1", "fill", "alpha", "line", "lw", "hatch", "node", "task",
                                        "job", "queue", "status", "gpu", "share", "mem", "mem_share", "util")}
        self.lb.data = {"x": [], "y": [], "text": []}
        self.ov.data = {k: [] for k in ("x0", "x1", "y0", "y1", "text")}
        r_bg = fig.quad(left="x0", right="x1", bottom="y0", top="y1", source=self.bg, fill_color=FREE_COLOUR,
                        line_color="line", line_width="lw", nonselection_fill_alpha=1.0, nonselection_line_alpha=1.0,
                        selection_fill_color="#3d4450")
        r_sl = fig.quad(left="x0", right="x1", bottom="y0", top="y1", source=self.sl, fill_color="fill",
                        fill_alpha="alpha", line_color="line", line_width="lw", hatch_pattern="hatch",
                        hatch_color="#ffffff", hatch_alpha=0.5, hatch_scale=6)
        r_ov = fig.quad(left="x0", right="x1", bottom="y0", top="y1", source=self.ov, fill_alpha=0,
                        line_color=WOULD, line_width=2, line_dash="dashed")
        fig.add_tools(HoverTool(renderers=[r_ov], tooltips=[("next cycle", "@text")]))
        fig.text(x="x", y="y", text="text", source=self.lb, text_font_size="9px", text_color="#9aa3ad",
                 text_baseline="bottom")
        fig.add_tools(HoverTool(renderers=[r_sl], tooltips=[
            ("pod", "@task"), ("job", "@job"), ("queue", "@queue"), ("status", "@status"),
            ("node / GPU", "@node / @gpu"), ("share", "@share{0.00} GPU"),
            ("memory used / share", "@mem{0,0} / @mem_share{0,0} MiB"), ("util", "@util{0.0} %")]))
        fig.add_tools(HoverTool(renderers=[r_bg], tooltips=[
            ("node / GPU", "@node / @gpu"), ("model / pool", "@model / @pool"), ("allocated", "@allocated{0.00}"),
            ("util", "@util{0.0} %"), ("memory used", "@mem{0,0} / @mem_total{0,0} MiB"), ("flag", "@flags"),
            ("evidence", "@evidence")]))
        tap = TapTool(renderers=[r_bg])
        fig.add_tools(tap)
        self.bg.selected.on_change("indices", self._on_tap)
        return fig

    # ---------------------------------------------------------------------------------------- events

    def _set_filter(self, name: str, value: str) -> None:
        setattr(self.model, name, value or "")
        self.model.page = 0
        self._update_grid(rebuild=True)

    def _set_page(self, page: int) -> None:
        if page != self.model.page:
            self.model.page = max(0, page)
            self._update_grid(rebuild=True)

    def _set_page_size(self, size: int) -> None:
        self.model.param.update(page_size=int(size), page=0)
        self._update_grid(rebuild=True)

    def _on_tap(self, attr, old, new) -> None:
        if new:
            nodes = self.bg.data["node"]
            if 0 <= new[0] < len(nodes):
                self.selection.node = str(nodes[new[0]])

    # ---------------------------------------------------------------------------------------- render

    def _update(self):
        m = self.model
        self.pool.options = [""] + m.pools()
        self.gpu_model.options = [""] + m.models()
        self.queue.options = [""] + m.queues()
        self._update_grid(rebuild=False)
        self._update_node()

    def _update_grid(self, rebuild: bool) -> None:
        m = self.model
        pages = m.pages()
        if list(self.page.options) != list(range(1, pages + 1)):
            self.page.options = list(range(1, pages + 1))
        self.page.value = min(m.page, pages - 1) + 1
        self.page.disabled = pages <= 1
        nodes = m.page_nodes()
        gpus, slices = m.page_frames()
        colours = queue_colours(q.name for q in m.snapshot.leaf_queues()) if m.snapshot else {}
        bg, sl, lb, (xr, yr) = grid_sources(gpus, slices, nodes, m.colour_by, colours)
        ov = overlay_source(m.overlay(), gpus, nodes)
        self.bg.data, self.sl.data, self.lb.data, self.ov.data = bg, sl, lb, ov
        key = (tuple(nodes), xr, yr)
        if key != self._layout_key:
            # A new layout gets a new figure: Bokeh does not re-lay-out a plot whose height changed.
            self._layout_key = key
            px = max(16.0, min(40.0, 1150.0 / max(xr[1] - xr[0], 1)))
            height = int(max(120, (yr[1] - yr[0]) * px + 40))
            self.bg, self.sl, self.lb = ColumnDataSource(), ColumnDataSource(), ColumnDataSource()
            self.ov = ColumnDataSource()
            self.fig = self._figure(height)
            self.fig.x_range.start, self.fig.x_range.end = xr
            self.fig.y_range.start, self.fig.y_range.end = yr
            self.bg.data, self.sl.data, self.lb.data, self.ov.data = bg, sl, lb, ov
            self.plot.height = height + 30
            self.plot.object = self.fig
        self.node_select.options = [""] + list(nodes)
        all_g = m.gpus()
        n_nodes = len(m.selected_nodes())
        self.summary.object = (
            f'<div class="kd-muted">{n_nodes} node(s) match · page {m.page + 1}/{pages} · '
            f'{len(gpus)} GPUs shown · {int(all_g["over_share"].sum())} over-share, '
            f'{int(all_g["idle_allocated"].sum())} idle-allocated cluster-wide · '
            f'cell = one GPU, filled bottom-up by its slices; hatched = releasing; '
            f'<span style="color:{OVER_SHARE}">red outline</span> = a pod over its memory share; '
            f'<span style="color:{IDLE}">yellow outline</span> = allocated but idle; '
            f'<span style="color:{WOULD}">dashed outline</span> = KAI would bind there next cycle (around a GPU '
            f'when its device is known, else around the node; {len(ov["x0"])} on this page; not yet the '
            f'cluster)</div>')
        if m.colour_by == "queue":
            present = sorted(set(slices["queue"])) if len(slices) else []
            self.legend.object = " ".join(
                f'<span style="display:inline-block;margin-right:10px"><span style="display:inline-block;width:11px;'
                f'height:11px;background:{colours.get(q, NO_DATA)};margin-right:4px"></span>{html.escape(q)}</span>'
                for q in present)
        elif m.colour_by == "utilisation":
            self.legend.object = ('<span class="kd-muted">utilisation (DCGM): </span>'
                                  + _gradient(list(Viridis256)[::32], "0%", "100%"))
        else:
            self.legend.object = ('<span class="kd-muted">memory used / share: </span>'
                                  + _gradient(MEM_PALETTE, "0", "≥1.5 (over share)"))

    def _update_node(self) -> None:
        node = self.selection.node
        if not node:
            # Nothing selected yet: show the node most worth a look (an over-share pod, else an idle allocation).
            g = self.model.gpus()
            flagged = g.loc[g["over_share"], "node"].tolist() or g.loc[g["idle_allocated"], "node"].tolist()
            node = flagged[0] if flagged else ""
        if node and node not in self.node_select.options:
            self.node_select.options = [*self.node_select.options, node]
        self.node_select.value = node if node in self.node_select.options else ""
        sl = self.model.slices()
        cols = ["gpu_index", "task", "job", "queue", "status", "share", "memory_share_mib", "memory_used_mib",
                "gpu_util", "over_share", "device_source"]
        self.node_table.value = (sl[sl["node"] == node][cols].reset_index(drop=True) if node and len(sl)
                                 else pd.DataFrame(columns=cols))


def _gradient(colours: list[str], lo: str, hi: str) -> str:
    stops = ",".join(colours)
    return (f'<span class="kd-muted">{lo}</span> <span style="display:inline-block;width:160px;height:10px;'
            f'background:linear-gradient(to right,{stops});vertical-align:middle"></span> '
            f'<span class="kd-muted">{hi}</span>')


__all__ = ["GpusView", "grid_positions", "grid_sources", "fmt"]
