"""The Panel views without a browser: they update in place, read well and say what they show.

* a new tick patches data sources and tables; figures, panes and table rows keep their identity (what keeps the
  scroll position and expanded rows in the browser);
* the GPU grid draws releasing / pipelined slices with their own renderer, no hatch pattern, no wheel zoom;
* numbers carry units (GPUs as integers, %, GiB, h:m, clock time) and tables say something when empty;
* the what-if's sliders span 0 … the cluster's GPUs, an error clears the result, a change that starts nothing
  says why, and "re-place running work" places both sides from scratch;
* colours: badge text contrast >= 4.5:1, wasted memory never green.
"""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
import pytest

from dashboard import display
from dashboard.feeds import Feed
from dashboard.loop import LiveLoop, MetricsReader, publish_snapshot
from dashboard.options import SourceOptions
from dashboard.state import LiveState
from scheduler.snapshot_io import loads_snapshot
from scheduler.whatif import WhatIf, WhatIfRunner

from test_dashboard_models import SCENARIO, snapshot, state  # noqa: F401 (fixtures)

pn = pytest.importorskip("panel")

from dashboard.app import configure_panel  # noqa: E402
from dashboard.views import GpusView, OverviewView, PendingView, QueuesView, TimelineView, WhatIfView  # noqa: E402
from dashboard.views import common, gpus as gpus_view, plots  # noqa: E402
from dashboard.views.whatif import summary_rows  # noqa: E402

configure_panel()


@pytest.fixture(scope="module")
def sim_loop():
    """A small simulated cluster that moves every tick (jobs start, finish, arrive)."""
    loop = LiveLoop(SourceOptions(source="sim", nodes=8, seed=3, sim_step_s=120))
    loop.explain_jobs = 1
    loop.step()
    yield loop
    loop.stop()


# ------------------------------------------------------------------------------------------ tables in place

def test_update_table_sends_nothing_patches_cells_or_replaces_rows():
    t = common.table(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=["j1", "j2"]))
    same = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=["j1", "j2"])
    assert common.update_table(t, same) == "same"
    changed = pd.DataFrame({"a": [1, 5], "b": ["x", "y"]}, index=["j1", "j2"])
    assert common.update_table(t, changed) == "patched"
    assert list(t.value["a"]) == [1, 5]
    other_rows = pd.DataFrame({"a": [7], "b": ["z"]}, index=["j3"])
    assert common.update_table(t, other_rows) == "replaced"
    assert list(t.value.index) == ["j3"]


def test_update_table_appends_new_rows_without_rebuilding_the_others():
    """A new waiting job at the end: the rows on screen stay (hover, selection, expanded rows), the browser gets
    the changed cells and the new row only."""
    t = common.table(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=["j1", "j2"]), selectable=1)
    t.selection = [1]
    from bokeh.document import Document

    doc = Document()
    model = t.get_root(doc)
    doc.add_root(model)
    events = []
    doc.on_change(lambda e: events.append(type(e).__name__ + ":" + getattr(e, "attr", "")))
    grown = pd.DataFrame({"a": [1, 3, 4, 5], "b": ["x", "y", "z", "w"]}, index=["j1", "j2", "j3", "j4"])
    assert common.update_table(t, grown) == "appended"
    assert list(t.value.index) == ["j1", "j2", "j3", "j4"] and list(t.value["a"]) == [1, 3, 4, 5]
    assert list(model.source.data["a"]) == [1, 3, 4, 5] and list(model.source.data["b"]) == ["x", "y", "z", "w"]
    assert {"ColumnsStreamedEvent:data", "ColumnsPatchedEvent:data"} <= set(events), events
    assert "ModelChangedEvent:data" not in events and "ColumnDataChangedEvent:" not in events, events
    assert t.selection == [1]                            # streamed and patched: the rows were not replaced
    assert model.follow is False        # the browser keeps its scroll position (follow scrolls to the new rows)
    assert common.update_table(t, grown.copy()) == "same"
    gone = grown.drop(index="j2")                        # a row left: Tabulator gets the rows anew
    assert common.update_table(t, gone) == "replaced"
    assert list(t.value.index) == ["j1", "j3", "j4"]
    moved = gone.loc[["j3", "j1", "j4"]]                 # reordered: the same
    assert common.update_table(t, moved) == "replaced"


def test_tables_say_something_when_empty_and_wrap_their_titles():
    t = common.table(pd.DataFrame(columns=["a"]), empty="No job is waiting")
    config = t.get_root().configuration          # what the browser's Tabulator is built with
    assert config["placeholder"] == "No job is waiting"
    assert config["columnDefaults"]["headerWordWrap"] is True


def test_views_keep_their_figures_and_tables_across_ticks(sim_loop):
    st = sim_loop.state
    views = {"overview": OverviewView(st), "queues": QueuesView(st), "gpus": GpusView(st), "pending": PendingView(st),
             "timeline": TimelineView(st)}
    for v in views.values():
        v.__panel__().get_root()
    before = {"overview": views["overview"].bars.fig, "queues": (views["queues"].bars.fig, views["queues"].table),
              "gpus": (views["gpus"].fig, views["gpus"].plot.object),
              "timeline": (views["timeline"].alloc.fig, views["timeline"].wait.fig),
              "pending": views["pending"].table}
    for _ in range(3):
        sim_loop.step()
        for v in views.values():
            assert v.refresh()
    assert views["overview"].bars.fig is before["overview"]
    assert (views["queues"].bars.fig, views["queues"].table) == before["queues"]
    assert views["gpus"].fig is before["gpus"][0] and views["gpus"].plot.object is before["gpus"][1]
    assert (views["timeline"].alloc.fig, views["timeline"].wait.fig) == before["timeline"]
    assert views["pending"].table is before["pending"]
    assert views["timeline"].alloc.lines, "the per-queue lines were drawn"


def test_queue_rows_are_keyed_by_queue_so_a_new_tick_patches_them(sim_loop):
    view = QueuesView(sim_loop.state)
    keys = list(view.table.value.index)
    assert keys == list(view.model.frame()["queue"])
    sim_loop.step()
    view.refresh()
    assert list(view.table.value.index) == keys


def test_pending_keeps_the_selected_job_highlighted_by_job_when_rows_change(state, snapshot):
    """The highlighted row and the card follow the selected job, not a row position: after a job ahead of it
    leaves, the highlight moves with it (kept by position it marked another job beside the card's)."""
    from dashboard.models import Selection

    sel = Selection()
    view = PendingView(state, sel)
    assert list(view.table.value.index) == ["b-serve", "b-big"]
    assert view.table.selection == [0] and "<b>b-serve</b>" in view.detail.object   # the longest wait at first
    view._on_click(type("Click", (), {"row": 1})())                                  # b-big
    assert sel.job == "b-big" and view.table.selection == [1] and "<b>b-big</b>" in view.detail.object
    snap = snapshot.copy()
    snap.jobs = [j for j in snap.jobs if j.name != "b-serve"]                       # b-serve leaves the list
    snap.jobs.append(loads_snapshot(SCENARIO.replace("b-big", "b-new").replace("creation_time: 500",
                                                                                 "creation_time: 600")).jobs[-1])
    publish_snapshot(state, snap, "b-serve gone, one more job")
    view.refresh()
    df = view.table.value
    assert list(df.index) == ["b-big", "b-new"]
    assert view.table.selection == [0] and "<b>b-big</b>" in view.detail.object


# --------------------------------------------------------------------------------------------- GPU grid

def _grid(view):
    return view.fig


def test_gpu_grid_has_no_hatch_and_no_wheel_zoom(sim_loop):
    view = GpusView(sim_loop.state)
    fig = _grid(view)
    from bokeh.models import GlyphRenderer, WheelZoomTool

    glyphs = [r.glyph for r in fig.renderers if isinstance(r, GlyphRenderer)]
    assert all(getattr(g, "hatch_pattern", None) is None for g in glyphs)
    assert not any(isinstance(t, WheelZoomTool) for t in fig.tools)
    assert fig.toolbar.active_scroll is None


def test_releasing_and_pipelined_slices_have_their_own_layer(sim_loop):
    slices = pd.DataFrame({
        "node": ["n0", "n0", "n0"], "pool": ["p"] * 3, "gpu_model": ["H100"] * 3, "gpu_index": [0, 1, 2],
        "task": ["t-run", "t-rel", "t-pip"], "job": ["j1", "j2", "j3"], "queue": ["a", "a", "b"],
        "status": ["running", "releasing", "pipelined"], "share": [1.0, 1.0, 0.5], "offset": [0.0, 0.0, 0.0],
        "gpu_memory_mib": [81920.0] * 3, "memory_share_mib": [81920.0, 81920.0, 40960.0],
        "memory_used_mib": [40960.0, 1024.0, float("nan")], "gpu_util": [90.0, 0.0, float("nan")],
        "over_share": [False, False, False]})
    gpus = pd.DataFrame({"node": ["n0"] * 4, "pool": ["p"] * 4, "gpu_model": ["H100"] * 4, "gpu_index": [0, 1, 2, 3],
                         "allocated": [1.0, 1.0, 0.0, 0.0], "slices": [1, 1, 0, 0],
                         "memory_used_mib": [40960.0, 1024.0, 0.0, 0.0], "gpu_memory_mib": [81920.0] * 4,
                         "gpu_util": [90.0, 0.0, 0.0, 0.0], "idle_allocated": [False, True, False, False],
                         "over_share": [False] * 4, "busy_unallocated": [False] * 4})
    layers, _ = gpus_view.grid_sources(gpus, slices, ["n0"], "queue", {"a": "#111111", "b": "#222222"})
    assert list(layers["held"]["task"]) == ["t-run"]
    assert list(layers["moving"]["task"]) == ["t-rel", "t-pip"]
    assert list(layers["marks"]["text"]) == ["z"]                 # idle: a symbol, not only a colour
    assert layers["devices"]["mem"][0] == 40.0                    # GiB in the hover, not MiB


def test_memory_colouring_never_paints_waste_green():
    unused = gpus_view.MEM_PALETTE[0]
    r, g, b = (int(unused[i:i + 2], 16) for i in (1, 3, 5))
    assert not (g > r + 30 and g > b + 30), "an unused allocation must not read as good (green)"
    over = gpus_view.MEM_PALETTE[-1]
    r, g, b = (int(over[i:i + 2], 16) for i in (1, 3, 5))
    assert r > g and r > b                                        # above the share: red


# ----------------------------------------------------------------------------------------------- formats

def test_numbers_read_with_units():
    assert display.gpus(420.0) == "420" and display.gpus(3.5) == "3.5" and display.gpus(0.25) == "0.25"
    assert display.percent(0.734, 1.0) == "73.4 %"
    assert display.gib(5.154e10) == "48 GiB"
    assert display.cores(12500) == "12.5 cores"
    assert display.wait(50_000) == "13h53m"
    now = dt.datetime(2026, 1, 1, 3, 12, 5).timestamp()
    assert display.clock(now, now=now) == "03:12:05"
    assert display.clock(now, now=now + 3 * 86400) == "2026-01-01 03:12"


def test_queue_table_shows_memory_in_gib_and_cpu_in_cores(state):
    from dashboard.views.queues import display_frame

    view = QueuesView(state)
    view.model.resource = "memory"
    raw = view.model.frame()
    shown = display_frame(raw, "memory")
    a = raw.set_index("queue").loc["a"]
    assert shown.loc["a", "allocated"] == pytest.approx(a["allocated"] / 2 ** 30)
    assert shown.loc["a", "limit"] == -1                         # unlimited stays unlimited


def test_queue_history_says_to_pick_a_queue_until_one_is_picked(state):
    """With no queue selected the history chart asks for a click; "No history for this queue yet" read as if
    the selected (none) queue had a problem. A picked queue with one point says why there is no line."""
    view = QueuesView(state)
    view.__panel__()
    view._update_detail()
    assert view.history.empty.visible and view.history.empty.text.startswith("Click a queue")
    view.selection.queue = "a"
    view._update_detail()
    assert view.history.empty.visible and "Click a queue" not in view.history.empty.text


def _contrast(fg: str, bg: str) -> float:
    def lum(hex_colour: str) -> float:
        c = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("colour", sorted({*common.STATE_COLOURS.values(), *common.STATUS_COLOURS.values()}))
def test_white_badge_text_has_enough_contrast(colour):
    assert _contrast("#ffffff", colour) >= 4.5


@pytest.mark.parametrize("text", [common.TEXT_ON_DARK, common.MUTED_ON_DARK])
def test_text_on_the_dark_theme_has_enough_contrast(text):
    for background in ("#181818", "#1f2937", "#2b3038"):
        assert _contrast(text, background) >= 4.5


def test_pending_reason_badges_have_enough_contrast():
    from dashboard.views.pending import REASON_COLOURS

    assert all(_contrast("#ffffff", c) >= 4.5 for c in REASON_COLOURS.values())


def test_charts_never_zoom_on_the_wheel():
    from bokeh.models import WheelZoomTool

    for chart in (plots.share_bars(), plots.TimeSeries("GPUs")):
        assert chart.fig.toolbar.active_scroll is None
        assert not any(isinstance(t, WheelZoomTool) for t in chart.fig.tools)


def test_grouped_bars_name_queues_under_the_bars_and_series_in_the_legend_only():
    """Four series names under each queue's bars overlapped into one unreadable line at 1280 px: the axis keeps
    the queue (group) labels and hides the series (the legend above names them), whatever the common style sets."""
    chart = plots.share_bars()
    axis = chart.fig.xaxis[0]
    assert axis.major_label_text_font_size in ("0px", "0pt") and axis.group_text_font_size == "12px"
    legend = chart.fig.legend[0]
    assert legend in chart.fig.above and legend.orientation == "horizontal"


# -------------------------------------------------------------------------------------------------- what-if

def test_whatif_sliders_span_the_cluster_and_unlimited_is_a_box(state):
    view = WhatIfView(state)
    view.model.queue = "b"
    view._load_sliders()
    assert view.quota.start == 0 and view.quota.end == 8            # the cluster has 8 GPUs
    assert view.limit.start == 0 and view.limit.end == 8 and view.limit.value == 3
    view.model.queue = "a"                                          # a has no limit
    view._load_sliders()
    assert view.no_limit.value is True and view.limit.visible is False


def test_whatif_error_clears_the_previous_result(state):
    view = WhatIfView(state)
    view.model.queue, view.model.limit = "b", 4
    view._rerun()
    assert len(view.queues.value) == 3
    view.model.queue_edits["no-such-queue"] = {"quota": 1}
    view._rerun()
    assert "no-such-queue" in view.changes.object and "could not run" in view.changes.object
    assert len(view.queues.value) == 0 and len(view.summary.value) == 0 and len(view.jobs.value) == 0


def test_whatif_placement_change_that_starts_nothing_says_why(state):
    view = WhatIfView(state)
    view.model.placement_gpu = "spread"            # the watcher re-runs
    text = view.outcome.object
    assert "starts nothing" in text and "only places pending jobs" in text
    assert "OverLimit" in text                    # b-big still waits, and why


def test_whatif_summary_is_formatted_with_units_and_delta(state):
    view = WhatIfView(state)
    view.model.queue, view.model.limit = "b", 4
    view.model.run()
    rows = summary_rows(view.model.summary())
    alloc = rows.loc["GPUs allocated"]
    assert (alloc["before"], alloc["after"], alloc["delta"]) == ("6", "8", "+2")
    util = rows.loc["GPU allocation (allocated / GPUs)"]
    assert (util["before"], util["after"], util["delta"]) == ("75.0 %", "100.0 %", "+25.0 pp")


def test_replace_running_places_both_sides_from_scratch(snapshot):
    runner = WhatIfRunner(snapshot)
    diff = runner.run(WhatIf(placement_gpu="spread", replace_running=True))
    replaced = WhatIf(replace_running=True).apply(snapshot)
    assert all(t.status == "pending" and t.node is None for _, t in replaced.iter_tasks())
    assert diff.notes["tasks_replaced"] == ["a-train-0"]
    assert diff.before is runner.base_for(True) and diff.before is not runner.base
    assert diff.after.snapshot.job_map()["a-train"].tasks[0].node is not None      # placed again
    assert snapshot.job_map()["a-train"].tasks[0].node == "n0"                     # the input is untouched


# -------------------------------------------------------------------------------------------------- overview

def test_overview_kpis_read_as_integers_and_percent(state):
    from dashboard.views.overview import overview_kpis

    view = OverviewView(state)
    cards = {c["id"]: c for c in overview_kpis(view.model.numbers())}
    assert cards["gpus"]["value"] == "8"
    assert cards["allocated"]["sub"].endswith("% of GPUs") and "." in cards["allocated"]["sub"]


def test_static_feed_publishes_once(snapshot):
    st = LiveState()
    loop = LiveLoop(SourceOptions(source="snapshot"), state=st, feed=Feed(snapshot, "x"), publish_metrics=False)
    loop.metrics = MetricsReader(simulated=False)
    first = loop.step()
    assert loop.step() is first and loop.own_metrics is None


def test_simulated_pods_that_started_later_have_real_usage(sim_loop):
    for _ in range(3):
        sim_loop.step()
    snap = sim_loop.state.tick.scheduled
    running = [t for _, t in snap.iter_tasks() if t.status == "running" and t.is_gpu]
    assert running and all(t.usage is not None for t in running)       # none reads as idle for want of data
    started_later = [t for j, t in snap.iter_tasks() if t.status == "running" and j.creation_time > 1767225600.0]
    assert started_later, "some arrival started during the run"


def test_queues_and_pending_views_show_the_engines_binds_as_a_prediction(state):
    """b-serve waits in the cluster; the engine binds it this cycle: the views say so beside the observed
    numbers, never instead of them."""
    from dashboard.models import Selection

    q = QueuesView(state, Selection(queue="b"))
    assert "KAI would hold 2 after this cycle" in q.detail_title.object
    assert "allocated <b>0</b>" in q.detail_title.object
    jobs = q.jobs.value.set_index("job")
    assert jobs.loc["b-serve", "status"] == "pending"
    assert jobs.loc["b-serve", "next_cycle"] == "KAI would bind it this cycle"
    p = PendingView(state, Selection(job="b-serve"))
    assert list(p.table.value.index) == ["b-serve", "b-big"]
    assert p.table.value.loc["b-serve", "eta"] == "KAI would bind it this cycle"
    assert "KAI would start this cycle 1" in p.summary.object and "OverLimit 1" in p.summary.object
    assert "This cycle:" in p.detail.object and "has not bound it yet" in p.detail.object


TWO_POOLS = """
version: 1
time: 1000
nodes:
  - {name: t0, gpus: 2, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi,
     labels: {kai.scheduler/node-pool: train}}
  - {name: i0, gpus: 2, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi,
     labels: {kai.scheduler/node-pool: infer}}
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: idle, queue: q, tasks: [{name: idle-0, gpu: 1, status: running, node: t0, gpu_index: 0,
      usage: {gpu_memory_mib: 100, gpu_util: 0.0}}]}
  - {name: busy, queue: q, tasks: [{name: busy-0, gpu: 1, status: running, node: i0, gpu_index: 1,
      usage: {gpu_memory_mib: 60000, gpu_util: 0.9}}]}
"""


def test_gpu_slice_table_never_shows_a_node_the_pool_filter_leaves_out():
    from dashboard.loop import state_from_snapshot
    from dashboard.models import Selection

    st = state_from_snapshot(loads_snapshot(TWO_POOLS), simulated_metrics=False)
    sel = Selection()
    v = GpusView(st, sel)
    assert v.node_select.value == "t0"                          # the idle allocation is worth a look first
    assert list(v.node_table.value.index) == ["t0/0/idle-0"]    # rows keyed by node / GPU / pod
    v.pool.value = "infer"                                      # t0 is in pool train: out of the picture
    assert v.node_select.value != "t0" and "t0/0/idle-0" not in list(v.node_table.value.index)
    assert set(v.node_table.value.index) <= {"i0/1/busy-0"}
    v.pool.value = ""
    sel.node = "i0"
    assert list(v.node_table.value.index) == ["i0/1/busy-0"]
    v.pool.value = "train"                                      # a selected node the filter drops is not kept
    assert list(v.node_table.value.index) == ["t0/0/idle-0"]


def test_gpu_grid_keeps_one_figure_when_the_layout_changes():
    """A filter or page change resizes the same figure and moves its ranges; its data sources keep their ids,
    so a click the browser sends for the grid it drew always refers to models the server still has."""
    from dashboard.loop import state_from_snapshot

    v = GpusView(state_from_snapshot(loads_snapshot(TWO_POOLS), simulated_metrics=False))
    fig, sources = v.fig, dict(v.sources)
    ids = {name: s.id for name, s in sources.items()}
    assert v.plot.object is fig
    x_end = fig.x_range.end
    v.pool.value = "infer"                                     # one node: a narrower grid
    assert v.fig is fig and v.plot.object is fig
    assert {name: s.id for name, s in v.sources.items()} == ids
    assert fig.x_range.end < x_end and list(v.sources["devices"].data["node"]) == ["i0", "i0"]
    assert v.plot.height == fig.height + 10
    # a tap on the grid as drawn now selects the node drawn there
    v.sources["devices"].selected.indices = [1]
    assert v.selection.node == "i0"


def test_gpu_grid_positions_are_computed_once_per_layout(monkeypatch):
    """The grid and the next-cycle overlay share the page's positions, computed again only when the layout
    (the page's nodes) changes, not on every tick or colour change."""
    from dashboard.loop import state_from_snapshot

    calls = []
    real = gpus_view.grid_positions
    monkeypatch.setattr(gpus_view, "grid_positions", lambda *a, **k: calls.append(a) or real(*a, **k))
    v = GpusView(state_from_snapshot(loads_snapshot(TWO_POOLS), simulated_metrics=False))
    assert len(calls) == 1
    v.model.colour_by = "memory"
    v.refresh(force=True)
    assert len(calls) == 1                                     # same nodes: the positions are reused
    v.pool.value = "infer"
    assert len(calls) == 2 and calls[-1][0] == ["i0"]
    overlay = pd.DataFrame({"task": ["x-0"], "action": ["bind"], "node": ["i0"], "gpu_index": [-1],
                            "text": ["KAI would bind x-0 to i0"]})
    out = gpus_view.overlay_source(overlay, v.model.page_frames()[0], ["i0"], v._layout_cache[1])
    assert len(calls) == 2 and list(out["text"]) == ["KAI would bind x-0 to i0"]


def test_time_series_lines_share_one_source_and_a_gone_series_is_not_drawn():
    chart = plots.TimeSeries("GPUs")
    x = pd.Series(pd.to_datetime([0, 60, 120], unit="s"))
    chart.update(x, {"a": ("a", "#111111", "solid", 2.0, pd.Series([1.0, 2.0, 3.0])),
                     "a:fair": (None, "#111111", "dashed", 1.5, [2.0, 2.0, 2.0])})
    data = chart.source.data
    assert list(data) == ["at", "y0", "y1"]                      # the time column once, a column per line
    assert {r.data_source for r in chart.lines.values()} == {chart.source}
    assert [r.glyph.y for r in chart.lines.values()] == ["y0", "y1"]
    assert list(data["y0"]) == [1.0, 2.0, 3.0] and list(data["y1"]) == [2.0, 2.0, 2.0]
    assert [i.label.value for i in chart.legend.items] == ["a"]  # the fair-share line has no legend entry
    assert chart.lines["a:fair"].glyph.line_dash == [6]          # Bokeh's "dashed"
    assert chart.hover.renderers == list(chart.lines.values())

    renderers = list(chart.fig.renderers)
    x2 = pd.Series(pd.to_datetime([0, 60, 120, 180], unit="s"))
    chart.update(x2, {"b": ("b", "#222222", "solid", 2.0, [5.0, 5.0, 6.0, 7.0])})
    data = chart.source.data
    assert list(data) == ["at", "y0", "y1", "y2"] and len(data["at"]) == 4
    assert all(pd.isna(data["y0"])) and all(pd.isna(data["y1"]))    # gone: NaN, not a stale line
    assert list(data["y2"]) == [5.0, 5.0, 6.0, 7.0]
    assert chart.fig.renderers[:len(renderers)] == renderers and len(chart.fig.renderers) == len(renderers) + 1
    assert not chart.empty.visible
    chart.update(pd.Series([], dtype="datetime64[ns]"), {})
    assert len(chart.source.data["at"]) == 0 and chart.empty.visible


def test_every_view_builds_without_panels_pending_deprecations(state):  # noqa: F811
    """Widget labels and button looks use the names Panel 2.0 keeps (``label``, ``color``, ``variant``) where the
    installed Panel has them: building the whole app and every view warns of nothing being removed."""
    import warnings

    from dashboard.app import Dashboard

    with warnings.catch_warnings():
        warnings.simplefilter("error", PendingDeprecationWarning)
        app = Dashboard(state)
        app.__panel__()
        for view in ("overview", "queues", "gpus", "pending", "whatif", "timeline", "snapshot", "settings"):
            app.selection.view = view
        for view in app.views.values():
            view.__panel__()
    assert len(app.views) == 8
    assert app.views["whatif"].pin_btn.label == "Pin latest live state"
    assert app.views["whatif"].pin_btn.name == "Pin latest live state"     # name stays in step (Panel's alias)


def test_widget_args_spells_label_and_button_look_as_the_installed_panel_wants():
    import panel as pn

    args = common.widget_args(label="Apply", button_type="danger", button_style="outline", width=100)
    button = pn.widgets.Button(**args)
    assert args["width"] == 100 and button.label == "Apply" and button.button_type == "danger"
    assert button.button_style == "outline"
    new = "color" in pn.widgets.Button.param
    assert ("color" in args and "button_type" not in args) if new else ("button_type" in args)
    assert common.widget_args() == {}


# ------------------------------------------------------------------------------------------ timeline's first screen

def test_timeline_note_says_what_the_history_covers_never_a_bare_zero():
    from dashboard.views.timeline import coverage_note

    assert coverage_note(0, 0, 2, False).startswith("No tick recorded yet: the first point comes with the loop's "
                                                     "first tick (every 2 s)")
    assert "choose a longer one" in coverage_note(0, 0, 2, False, window_s=600)
    assert coverage_note(1, 0, 2, False).startswith("History starts now: 1 tick recorded; the lines start")
    assert coverage_note(1, 0, 2, True).startswith("A static snapshot is one moment")
    assert coverage_note(46, 5400, 2, False) == "46 points over 1h30m of cluster time"
    assert coverage_note(46, 5400, 2, False, window_s=6 * 3600).endswith("(all the history there is: less than the "
                                                                         "window)")
    assert not any(coverage_note(n, 60 * n, 2, s).startswith("0") for n in (0, 1, 5) for s in (False, True))


def test_timeline_first_screen_explains_a_single_point_instead_of_blank_charts(snapshot):  # noqa: F811
    from dashboard.views.plots import TimeSeries
    from dashboard.views.timeline import ONE_MOMENT

    static = LiveState()
    publish_snapshot(static, snapshot, "static")
    v = TimelineView(static)
    v.__panel__()
    v._update()
    assert "A static snapshot is one moment" in v.note.object and "0 point" not in v.note.object
    assert v.alloc.empty.visible and v.alloc.empty.text == ONE_MOMENT

    live = LiveState()
    from test_dashboard_models import _LiveFeed

    loop = LiveLoop(SourceOptions(source="snapshot"), state=live, feed=_LiveFeed(snapshot, "live"),
                    publish_metrics=False, insight=False)
    loop.step(explain=False)                     # a live source at its first tick
    v = TimelineView(live)
    v.__panel__()
    v._update()
    assert "History starts now: 1 tick recorded" in v.note.object
    assert v.wait.empty.visible and v.wait.empty.text == TimeSeries.ONE_POINT
    loop.step(explain=False)
    v._update()
    assert "2 points over" in v.note.object and not v.alloc.empty.visible


def test_slice_table_flags_over_share_in_red_words_and_fits_fixed_widths(state):  # noqa: F811
    """The node's slice table: short columns at fixed widths ("job / pod" takes the rest and wraps),
    the over-share flag as a red "! over" (a tick read as "fine"), the DRA column only when a pod has a claim."""
    from dashboard.views.gpus import SLICE_WIDTHS

    v = GpusView(state)
    v.__panel__()
    t = v.node_table
    assert t.layout == "fit_columns" and t.widths == SLICE_WIDTHS
    assert "job_pod" not in t.widths
    cell = t.formatters["over_share"]
    assert "! over" in cell.template and "#f87171" in cell.template
    assert t.hidden_columns == ["mig", "dra"]                    # no MIG instance, no DRA claim on the node
    other = GpusView(state)
    other.__panel__()
    assert other.node_table.formatters["over_share"] is not cell      # one Bokeh model per session's table


def test_the_first_tick_reads_tick_1_with_its_clock_time_everywhere(snapshot):  # noqa: F811
    """After the loop's first tick the page says "tick 1" (a person's count), with the tick's clock time, in
    the sidebar, Overview's loop health, the what-if base and the Snapshot page; never "tick 0"."""
    from dashboard.app import Dashboard
    from dashboard.views.overview import health_html

    st = LiveState()
    app = Dashboard(st)
    app.__panel__()
    assert "no tick yet" in app.sidebar_info.object and 'data-tick="0"' in app.sidebar_info.object
    assert "none yet" in health_html(st.health())
    publish_snapshot(st, snapshot, "test scenario")
    app._update_status()
    when = display.clock(st.tick.wall_time)
    assert f"tick 1 at {when}" in app.sidebar_info.object and 'data-tick="1"' in app.sidebar_info.object
    assert "tick 0" not in app.sidebar_info.object
    assert st.health()["ticks"] == 1 and st.health()["tick_index"] == 0       # /readyz keeps the 0-based index
    assert f"{when} (tick 1;" in health_html(st.health())
    for view in ("whatif", "snapshot"):
        app.selection.view = view
    whatif, snap_view = app.views["whatif"], app.views["snapshot"]
    whatif.model.pin()
    assert whatif.model.base_label.startswith("live state at tick 1 (")
    snap_view.__panel__()
    snap_view._update()
    assert f"tick 1 at {when}" in snap_view.current.object


def test_settings_show_only_the_options_the_selected_source_reads(state):  # noqa: F811
    """A kube context or a snapshot path typed while "sim" is selected did nothing: the form shows the options of
    the selected source (and the ones every source reads), and the node count is a number input."""
    from dashboard.views.settings import SettingsView

    view = SettingsView(state)
    view.__panel__()
    shown = lambda: {n for n, w in view.form._widgets.items() if w.visible and n != "name"}  # noqa: E731
    always = {"source", "prometheus", "period_s"}
    assert shown() == always | {"seed", "nodes", "sim_step_s", "demo_extensions"}
    assert isinstance(view.form._widgets["nodes"], pn.widgets.IntInput)
    view.options.source = "kube"
    assert shown() == always | {"context"}
    view.options.source = "snapshot"
    assert shown() == always | {"snapshot"}
    view.options.source = "trace"
    assert shown() == always | {"trace", "sim_step_s"}
    view.options.source = "sim"
    assert "context" not in shown() and "seed" in shown()


def test_the_snapshot_file_input_is_labelled_for_people(state):  # noqa: F811
    """The file input's visible label says what to choose (it read "snapshot-file", an identifier)."""
    from dashboard.views.snapshot import SnapshotView

    view = SnapshotView(state)
    label = view.upload.label if hasattr(view.upload, "label") else view.upload.name
    assert label.startswith("Snapshot file") and ".zip" in label


# ------------------------------------------------------------------------------------------ on-call pass

def test_pending_rows_show_one_line_summaries_and_keep_the_whole_texts(state):  # noqa: F811
    """Every Pending row is one line: the reason, expected start and "would start if" cells show a summary
    (hidden columns of the row) while the values (the tooltips) and the detail card keep the whole texts."""
    from dashboard.views.pending import COLUMNS, HIDDEN, ONE_LINE_CSS
    from dashboard.views.pending_text import MAX_CHARS

    v = PendingView(state)
    t = v.table
    df = t.value
    assert list(df.columns) == COLUMNS and t.hidden_columns == HIDDEN
    assert not any(f == {"type": "textarea"} for f in t.formatters.values())   # a textarea cell wraps
    assert "white-space: nowrap" in ONE_LINE_CSS and ONE_LINE_CSS in t.stylesheets
    for column, short in (("eta", "eta_short"), ("counterfactual", "counterfactual_short"),
                          ("reason", "reason_label")):
        assert short in t.formatters[column].template                       # the cell shows the summary
    full = v.model.frame().set_index("job")
    big = df.loc["b-big"]
    assert big["counterfactual"] == full.loc["b-big", "counterfactual"]     # the value: the explainer's text
    assert big["counterfactual"].startswith("over the queue limit by 1 GPU")
    assert big["counterfactual_short"] == "limit +1 GPU"                    # b's own limit: the row names b
    assert big["reason"] == f"OverLimit: {full.loc['b-big', 'message']}" and big["reason_code"] == "OverLimit"
    serve = df.loc["b-serve"]                                                # the engine binds it this cycle
    assert serve["eta"] == "KAI would bind it this cycle" and serve["eta_short"] == "this cycle"
    assert serve["reason_label"] == "KAI would start"
    assert all(len(s) <= MAX_CHARS for s in df["counterfactual_short"]), list(df["counterfactual_short"])
    v._on_click(type("Click", (), {"row": 1})())                            # the card: every word of it
    assert "over the queue limit by 1 GPU" in v.detail.object and full.loc["b-big", "message"] in v.detail.object
    assert "<details data-numbers><summary" in v.detail.object          # the engine's JSON: folded, one click away


def test_pending_tooltips_are_escaped_text():
    """Tabulator writes a cell's tooltip (its value) as HTML: the whole texts are escaped, the summaries are
    escaped by the cell template."""
    from dashboard.views.pending import table_frame

    row = {"job": "q/j", "queue": "q", "wait_s": 61.4, "gpus_requested": 1.0, "reason": "OverLimit",
           "message": "<img src=x onerror=alert(1)>", "eta": "starts in ~2 h, after q/<b>", "next_cycle": "",
           "counterfactual": "no single change found <script>"}
    df = table_frame(pd.DataFrame([row]))
    assert df.loc["q/j", "reason"] == "OverLimit: &lt;img src=x onerror=alert(1)&gt;"
    assert "<" not in df.loc["q/j", "eta"] and "<" not in df.loc["q/j", "counterfactual"]
    assert df.loc["q/j", "wait_s"] == 61 and df.loc["q/j", "eta_short"] == "~2 h"


GANG_NODE = """
version: 1
time: 1000
nodes:
  - {name: n0, gpus: 8, gpu_memory_mib: 80000, cpu_millis: 64000, memory_bytes: 512Gi}
  - {name: n1, gpus: 8, gpu_memory_mib: 80000, cpu_millis: 64000, memory_bytes: 512Gi}
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: solo, queue: q, tasks: [{name: solo-0, gpu: 1, status: running, node: n0, gpu_index: 0}]}
  - name: gang
    queue: q
    tasks:
      - {name: gang-0, gpu: 1, status: running, node: n0, gpu_index: 1}
      - {name: gang-1, gpu: 1, status: running, node: n0, gpu_index: 2}
      - {name: gang-2, gpu: 1, status: running, node: n1, gpu_index: 0}
  - {name: odd, queue: q, tasks: [{name: worker-x, gpu: 1, status: running, node: n0, gpu_index: 3}]}
  - name: spread
    queue: q
    tasks:
      - {name: spread-0, gpu: 1, status: running, node: n0, gpu_index: 4}
      - {name: spread-1, gpu: 1, status: running, node: n1, gpu_index: 1}
"""


def test_slice_table_names_the_job_once_and_the_pod_only_where_it_adds_something():
    """One "job / pod" column: the job's single pod named after it reads as the job; a pod of a job with several
    pods (here or on another node) adds its suffix; a pod not named after its job adds its name."""
    from dashboard.loop import state_from_snapshot
    from dashboard.models import Selection

    st = state_from_snapshot(loads_snapshot(GANG_NODE), simulated_metrics=False)
    v = GpusView(st, Selection(node="n0"))
    v.__panel__()
    df = v.node_table.value
    assert "task" not in df.columns and "job" not in df.columns                  # no second name column
    assert v.node_table.titles["job_pod"] == "job / pod"
    assert dict(zip(df.index, df["job_pod"])) == {"n0/0/solo-0": "solo", "n0/1/gang-0": "gang · pod 0",
                                                  "n0/2/gang-1": "gang · pod 1", "n0/3/worker-x": "odd · worker-x",
                                                  "n0/4/spread-0": "spread · pod 0"}
    assert sorted(df["job_pod"]) == ["gang · pod 0", "gang · pod 1", "odd · worker-x", "solo", "spread · pod 0"]
    assert gpus_view.job_pod_label("ns/a-0", "ns/a", 1) == "ns/a"
    assert gpus_view.job_pod_label("ns/w", "ns/a", 1) == "ns/a · w"                # the namespace once


BUSY_SECOND_NODE = """
version: 1
time: 1000
nodes:
  - {name: n0, gpus: 2, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi}
  - {name: n1, gpus: 2, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi}
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: busy, queue: q, tasks: [{name: busy-0, gpu: 1, status: running, node: n1, gpu_index: 1,
      usage: {gpu_memory_mib: 60000, gpu_util: 0.9}}]}
"""


def test_slice_table_lists_a_node_with_pods_when_nothing_is_flagged():
    """Nothing selected and no flagged GPU: the card lists the first node holding a pod (it listed no node and
    read "No pod holds a GPU on this node" under a grid full of pods: the MIG pool's screenshot)."""
    from dashboard.loop import state_from_snapshot

    st = state_from_snapshot(loads_snapshot(BUSY_SECOND_NODE), simulated_metrics=False)
    v = GpusView(st)
    g = v.model.gpus()
    assert not g["over_share"].any() and not g["idle_allocated"].any()
    assert v.node_select.value == "n1" and list(v.node_table.value.index) == ["n1/1/busy-0"]


def test_pending_expected_start_sorts_by_time_not_by_its_text(state):  # noqa: F811
    """The expected-start cells read "~5 min", "~12 min", "~1.5 h", "> 24.0 h", "cannot start": sorted as text
    "~12 min" came before "~5 min". The column sorts by the hidden ``eta_order`` (seconds; past the horizon after
    every estimate; cannot start and no estimate last), through Tabulator's sorter of that column."""
    from dashboard.views.pending import ETA_SORTER, HIDDEN, NEVER_S, table_frame

    rows = [("q/never", math.inf, "cannot start on this cluster: no node has 16 GPUs"),
            ("q/twelve", 720.0, "starts in ~12 min (5 min–20 min)"),
            ("q/unknown", math.nan, "no estimate yet"),
            ("q/later", math.inf, "not within 24.0 h of forward simulation"),
            ("q/five", 300.0, "starts in ~5 min (2 min–9 min)"),
            ("q/hours", 5400.0, "starts in ~1.5 h (1 h–2 h)"),
            ("q/now", 0.0, "KAI would bind it this cycle")]
    frame = pd.DataFrame([{"job": j, "queue": "q", "wait_s": 60.0, "gpus_requested": 1.0, "reason": "", "message": "",
                           "eta": text, "eta_p50_s": p50, "next_cycle": "", "counterfactual": ""}
                          for j, p50, text in rows])
    df = table_frame(frame)
    assert "eta_order" in HIDDEN
    assert list(df.sort_values("eta_order").index) == ["q/now", "q/five", "q/twelve", "q/hours", "q/later",
                                                       "q/never", "q/unknown"]
    assert sorted(df["eta_short"]) != list(df.sort_values("eta_order")["eta_short"])  # the text order differs
    assert (df.loc["q/never", "eta_order"], df.loc["q/unknown", "eta_order"]) >= (NEVER_S, NEVER_S)
    view = PendingView(state)
    view.__panel__()
    columns = view.table.get_root().configuration["columns"]      # what the browser's Tabulator gets
    assert [c["sorter"] for c in columns if c["field"] == "eta"] == [ETA_SORTER]
    assert "eta_order" in ETA_SORTER.js_code and 'dir === "asc"' in ETA_SORTER.js_code
