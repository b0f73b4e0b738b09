"""The GPUs view's grid geometry and its slice table's rows, on the demo with its extension pools and on small
snapshots: node labels sit clear of every outline drawn around cells (KAI's next-cycle binds around a GPU or a
whole node, MIG instances, flagged GPUs) at the scale the grid is drawn; the slice table's rows have one key each
(a pod on two GPUs has two rows), and picking a row outlines its GPU in the grid, as clicking a GPU picks its
rows."""

import pandas as pd
import pytest

from dashboard.loop import state_from_snapshot
from dashboard.models import Selection
from scheduler.snapshot_io import loads_snapshot
from scheduler.sources.synthetic import generate_scenario

from test_dashboard_views import TWO_POOLS

pn = pytest.importorskip("panel")

from dashboard.app import configure_panel  # noqa: E402
from dashboard.views import GpusView  # noqa: E402
from dashboard.views import gpus as G  # noqa: E402

configure_panel()

MIN_CLEARANCE_PX = 1.5


@pytest.fixture(scope="module")
def demo_state():
    return state_from_snapshot(generate_scenario(seed=7, nodes=64, extensions=True).snapshot, "demo with extensions")


def _outlines(view):
    """Every outline box drawn around cells, with its line width: next-cycle binds (around a GPU or a node), MIG
    instances, flagged GPUs."""
    out = []
    ov = view.sources["overlay"].data
    out += [(x0, x1, y0, y1, 2.0) for x0, x1, y0, y1 in zip(ov["x0"], ov["x1"], ov["y0"], ov["y1"])]
    mig = view.sources["mig"].data
    out += [(x0, x1, y0, y1, 1.5) for x0, x1, y0, y1 in zip(mig["x0"], mig["x1"], mig["y0"], mig["y1"])]
    dev = view.sources["devices"].data
    out += [(x0, x1, y0, y1, lw) for x0, x1, y0, y1, lw in zip(dev["x0"], dev["x1"], dev["y0"], dev["y1"], dev["lw"])
            if lw > 1]
    return out


def _label_collisions(view):
    """Labels whose drawn box (the font's line box above its baseline) comes within MIN_CLEARANCE_PX of an
    outline's line, at the grid's vertical scale (the figure's height over its y range, less its borders)."""
    fig = view.fig
    py = (fig.height - 2 * fig.min_border) / (fig.y_range.end - fig.y_range.start)
    _, _, _, g_max = view._layout_cache[1]
    lab = view.sources["labels"].data
    hits = []
    for x, y, text in zip(lab["x"], lab["y"], lab["text"]):
        lo, hi = y * py, y * py + G.LABEL_HEIGHT_PX
        for x0, x1, y0, y1, lw in _outlines(view):
            if x1 < x or x0 > x + g_max + 1:          # another node's block across
                continue
            top, bottom = y1 * py + lw / 2, y0 * py - lw / 2
            if not (hi + MIN_CLEARANCE_PX <= bottom or lo - MIN_CLEARANCE_PX >= top):
                hits.append((text, (x0, x1, y0, y1)))
    return hits


def test_node_labels_sit_clear_of_every_outline(demo_state):
    """The demo's whole page (KAI's next-cycle binds outline h100-nv-013 and others whole, a GPU of a100-40-003,
    MIG instances, over-share GPUs) and its 4-node MIG pool (the largest scale): no label within 1.5 px of an
    outline. The node outline reached 0.05 units above the label's baseline and crossed its text."""
    view = GpusView(demo_state)
    assert len(view.sources["overlay"].data["x0"]) >= 2 and len(view.sources["mig"].data["x0"])
    assert any(x1 - x0 > 2 for x0, x1 in zip(view.sources["overlay"].data["x0"], view.sources["overlay"].data["x1"]))
    assert _label_collisions(view) == []
    view.pool.value = "a100-mig"
    assert len(view.sources["labels"].data["text"]) == 4
    assert _label_collisions(view) == []


def test_label_clearance_holds_at_every_scale_the_grid_uses():
    for px in (G.PX_PER_UNIT[0], 27.0, G.PX_PER_UNIT[1]):
        below, above = G.label_clearance_px(px)
        assert below >= MIN_CLEARANCE_PX and above >= MIN_CLEARANCE_PX, px
    assert G.grid_px((0, 1000)) == G.PX_PER_UNIT[0] and G.grid_px((0, 5)) == G.PX_PER_UNIT[1]


TWO_GPU_POD = """
version: 1
time: 1000
nodes:
  - {name: n0, gpus: 4, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi}
  - {name: n1, gpus: 4, gpu_memory_mib: 80000, cpu_millis: 8000, memory_bytes: 64Gi}
queues: [{name: q, gpu: {quota: -1}, cpu: {quota: -1}, memory: {quota: -1}}]
jobs:
  - {name: pair, queue: q, tasks: [{name: pair-0, gpu: 2, status: running, node: n0, gpu_index: [1, 3],
      usage: {gpu_memory_mib: 60000, gpu_util: 0.9}}]}
  - {name: solo, queue: q, tasks: [{name: solo-0, gpu: 1, status: running, node: n1, gpu_index: 2,
      usage: {gpu_memory_mib: 60000, gpu_util: 0.9}}]}
"""


def _picked_gpus(view):
    dev = view.sources["devices"].data
    return [(str(dev["node"][i]), int(dev["gpu"][i])) for i in view.sources["devices"].selected.indices]


def test_a_two_gpu_pod_has_two_rows_with_their_own_keys():
    view = GpusView(state_from_snapshot(loads_snapshot(TWO_GPU_POD), simulated_metrics=False), Selection(node="n0"))
    table = view.node_table.value
    assert list(table.index) == ["n0/1/pair-0", "n0/3/pair-0"]
    assert list(table["gpu_index"]) == [1, 3]
    rows = G.slice_rows(view.model.slices(), "n0")
    assert rows["key"].is_unique


def test_picking_a_row_outlines_its_gpu_and_clicking_a_gpu_picks_its_row():
    view = GpusView(state_from_snapshot(loads_snapshot(TWO_GPU_POD), simulated_metrics=False), Selection(node="n0"))
    view.node_table.selection = [1]
    assert _picked_gpus(view) == [("n0", 3)]
    view.node_table.selection = [0]
    assert _picked_gpus(view) == [("n0", 1)]
    view.node_table.selection = []
    assert _picked_gpus(view) == []
    # a click on a GPU of another node: that node's rows, the clicked GPU's row picked
    dev = view.sources["devices"].data
    view.sources["devices"].selected.indices = [list(zip(dev["node"], dev["gpu"])).index(("n1", 2))]
    assert view.selection.node == "n1" and list(view.node_table.value.index) == ["n1/2/solo-0"]
    assert view.node_table.selection == [0] and _picked_gpus(view) == [("n1", 2)]
    # another node picked in the select: nothing of n1 stays picked
    view.node_select.value = "n0"
    assert view.node_table.selection == [] and _picked_gpus(view) == []


def test_keys_tell_apart_a_pods_devices_no_evidence_gives():
    rows = G.slice_rows(pd.DataFrame({
        "node": ["n0", "n0", "n0"], "gpu_index": [-1, -1, 2], "task": ["a-0", "a-0", "b-0"],
        "memory_share_mib": [1024.0] * 3, "memory_used_mib": [0.0] * 3, "mig_profile": [""] * 3,
        "mig_instance": [-1] * 3}), "n0")
    assert list(rows["key"]) == ["n0/?/a-0", "n0/?/a-0#2", "n0/2/b-0"]




def test_a_picked_gpu_stays_itself_when_a_filter_moves_the_grid():
    """The pink outline follows the GPU, not its position in the grid's data: i0's GPU 1 is the 4th device with
    both pools shown and the 2nd with only its pool; the index picked before would outline nothing or another
    GPU."""
    view = GpusView(state_from_snapshot(loads_snapshot(TWO_POOLS), simulated_metrics=False), Selection(node="i0"))
    view.node_table.selection = [0]
    assert _picked_gpus(view) == [("i0", 1)] and view.sources["devices"].selected.indices == [3]
    view.pool.value = "infer"
    assert _picked_gpus(view) == [("i0", 1)] and view.sources["devices"].selected.indices == [1]
    view.pool.value = ""
    assert _picked_gpus(view) == [("i0", 1)]


def test_a_label_too_long_for_its_block_is_cut_with_its_whole_text_in_the_hover(demo_state):
    """At 1280 px "a100-mig-002 · MIG 2g×3 1g×1" ran into the next node's label: on the demo's whole page (7
    nodes a row) every label fits its block at the narrowest window, the cut one ends in "…" and its whole
    text is the hover; the 4-node MIG pool has room for it whole."""
    view = GpusView(demo_state)
    lab = view.sources["labels"].data
    _, _, _, g_max = view._layout_cache[1]
    xr = (view.fig.x_range.start, view.fig.x_range.end)
    block_px = (g_max + 1) * G.GRID_MIN_WIDTH_PX / (xr[1] - xr[0])
    assert all(len(t) * G.LABEL_CHAR_PX <= block_px - 6 for t in lab["text"])
    cut = dict(zip(lab["full"], lab["text"]))["a100-mig-002 · MIG 2g×3 1g×1"]
    assert cut.endswith("…") and "a100-mig-002 · MIG 2g×3 1g×1".startswith(cut[:-1])
    assert [t for t in lab["full"] if t.startswith("h100-nv-013")] == [t for t in lab["text"]
                                                                       if t.startswith("h100-nv-013")]
    tips = [t for tool in view.fig.tools for t in (getattr(tool, "tooltips", None) or [])]
    assert ("node", "@full") in tips
    view.pool.value = "a100-mig"
    assert "a100-mig-002 · MIG 2g×3 1g×1" in view.sources["labels"].data["text"]


def test_fit_label_keeps_the_start():
    assert G.fit_label("h100-nv-013", 20) == "h100-nv-013"
    assert G.fit_label("rack-b2x · h100-nv-013 · MIG 1g×7", 24) == "rack-b2x · h100-nv-013…"
    assert len(G.fit_label("x" * 40, 25)) == 25


def test_slices_of_a_gpu_shared_past_one_stay_inside_their_cell(demo_state):
    """gb200-dra-001's GPU 0 is held whole by two pods sharing one DRA claim: their slices (share 1 each) stacked
    to twice the cell's height, over the node's label. Drawn, they split the cell; the hover keeps share 1."""
    view = GpusView(demo_state)
    view.pool.value = "gb200-dra"
    dev, held = view.sources["devices"].data, view.sources["held"].data
    top = {(n, int(g)): y1 for n, g, y1 in zip(dev["node"], dev["gpu"], dev["y1"])}
    shared = [(y0, y1, s) for n, g, y0, y1, s in zip(held["node"], held["gpu"], held["y0"], held["y1"], held["share"])
              if (n, int(g)) == ("gb200-dra-001", 0)]
    assert len(shared) == 2 and all(s == 1.0 for _, _, s in shared)
    assert all(y1 <= top[(n, int(g))] for n, g, y1 in zip(held["node"], held["gpu"], held["y1"]))
    lo, hi = sorted(shared)
    assert lo[1] <= hi[0]                                        # one above the other, not overlapping


def test_mig_instance_names_fit_their_instance_at_1280(demo_state):
    """Two cells of the demo's whole page hold "2g" at 1280 px (the three 2g.20gb names of a100-mig-002 ran into
    each other), three cells the whole "3g.40gb"; the 4-node MIG pool has room for every whole name."""
    view = GpusView(demo_state)
    mig = view.sources["mig"].data
    names = dict(zip(zip(mig["x0"], mig["text"]), [round(b - a) for a, b in zip(mig["x0"], mig["x1"])]))
    texts = [t for _, t in names]
    assert texts.count("2g") == 3 and texts.count("3g.40gb") == 2 and "2g.20gb" not in texts
    xr = (view.fig.x_range.start, view.fig.x_range.end)
    cell_px = G.GRID_MIN_WIDTH_PX / (xr[1] - xr[0])
    char_px = G.LABEL_CHAR_PX * G.MIG_FONT_PX / G.LABEL_FONT_PX
    assert all(len(t) * char_px <= w * cell_px - 4 for (_, t), w in names.items())
    view.pool.value = "a100-mig"
    assert list(view.sources["mig"].data["text"]).count("2g.20gb") == 3
