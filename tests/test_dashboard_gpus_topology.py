"""The GPUs view on the demo's snapshot-1.2 pools: grouping by a topology level, a pending gang's best domain,
MIG instances drawn over their cells, DRA pods marked in the hover and the slice table."""

import pytest

from dashboard import frames as F
from dashboard.loop import state_from_snapshot
from dashboard.models import GpusModel
from scheduler.sources.synthetic import generate_scenario
from scheduler.sources.synthetic_extensions import RACK

pn = pytest.importorskip("panel")

from dashboard.app import configure_panel  # noqa: E402
from dashboard.views import GpusView  # noqa: E402

configure_panel()


@pytest.fixture(scope="module")
def snap():
    return generate_scenario(seed=7, nodes=64, extensions=True).snapshot


@pytest.fixture(scope="module")
def state(snap):
    return state_from_snapshot(snap, "demo with extensions")


def test_model_groups_nodes_by_rack_and_finds_the_best_rack(state, snap):
    m = GpusModel(state)
    assert m.group_levels() == ["zone", "block", "rack"]
    plain = m.selected_nodes()
    m.group_by = "rack"
    grouped = m.selected_nodes()
    assert sorted(grouped) == sorted(plain) and grouped != plain
    labels = snap.node_map()
    racks = [labels[n].labels[RACK] for n in grouped if RACK in labels[n].labels]
    assert racks == sorted(racks) and grouped[:len(racks)] == [n for n in grouped if RACK in labels[n].labels]
    dom = m.domains().set_index("domain")
    assert len(dom) == 8 and set(dom["gpus"]) == {16}
    assert dom.loc["rack-a1x", "free_gpus"] == 0
    assert dom.loc["rack-b2x", "free_gpus"] == 8 and dom.loc["rack-b1x", "free_gpus"] == 4
    gangs = m.pending_gangs().set_index("job")
    assert list(gangs.index) == ["llm/llm-train-nv-10"]      # the 8-GPU one is binding, no longer pending
    assert gangs.loc["llm/llm-train-nv-10", "best_domain"] == "rack-b2x"
    assert gangs.loc["llm/llm-train-nv-10", "best_free"] == 8 and not gangs.loc["llm/llm-train-nv-10", "fits"]


def test_free_gpus_leave_out_mig_cells(snap):
    g = F.gpu_frame_from_slices(snap, F.gpu_slices_frame(snap))
    free = F.free_whole_gpus(snap, g)
    # a100-mig-003: one 7g.80gb instance (cells 0-6, idle) and one whole GPU: 1 free whole GPU, not 8
    assert free["a100-mig-003"] == 1


def test_view_group_select_labels_and_gang_line(state):
    view = GpusView(state)
    assert view.group.visible and list(view.group.options) == ["none", "zone", "block", "rack"]
    view.group.value = "rack"
    labels = list(view.sources["labels"].data["text"])
    assert labels[0].startswith("rack-a1x · h100-nv-")
    text = view.topology.object
    assert "Grouped by rack" in text and "rack-b2x</b> 8/16 free" in text
    assert "llm/llm-train-nv-10</b> needs 16 GPUs in one rack" in text
    assert "no rack with 16 free GPUs; largest 8" in text
    view.group.value = "none"
    assert not view.model.group_by and "Grouped by" not in view.topology.object
    assert not any(t.startswith("rack-") for t in view.sources["labels"].data["text"])


def test_view_draws_mig_instances_and_labels_mig_nodes(state):
    view = GpusView(state)
    view.pool.value = "a100-mig"
    mig = view.sources["mig"].data
    texts = list(mig["text"])
    assert texts.count("1g") == 8 and texts.count("3g.40gb") == 2 and texts.count("2g.20gb") == 3
    assert texts.count("7g.80gb") == 1
    widths = [round(b - a) for a, b in zip(mig["x0"], mig["x1"])]
    assert sorted(set(widths)) == [1, 2, 3, 7]
    labels = list(view.sources["labels"].data["text"])
    assert "a100-mig-000 · MIG 1g×7" in labels and "a100-mig-002 · MIG 2g×3 1g×1" in labels
    dev = view.sources["devices"].data
    cells = {(n, g): m for n, g, m in zip(dev["node"], dev["gpu"], dev["mig"])}
    assert cells[("a100-mig-001", 5)].startswith("3g.40gb (instance 2")
    assert cells[("a100-mig-001", 6)] == ""          # the node's whole GPUs beside its instances
    assert "a cell is one GPU-equivalent" in view.summary.object
    view.pool.value = "h100-nv"
    assert not len(view.sources["mig"].data["x0"]) and "GPU-equivalent" not in view.summary.object


def test_view_marks_dra_pods_in_hover_and_slice_table(state):
    view = GpusView(state)
    view.pool.value = "gb200-dra"
    held = view.sources["held"].data
    dra = {t: d for t, d in zip(held["task"], held["dra"])}
    assert dra["inference/inference-serve-dra-02-0"] == "DRA: inference/shared-gpu (shared)"
    assert dra["inference/inference-serve-dra-00-0"].startswith("DRA: inference/serve-dra-00-0-gpu-")
    tips = [t for tool in view.fig.tools for t in (getattr(tool, "tooltips", None) or [])]
    assert ("GPUs via", "@dra") in tips
    view.selection.node = "gb200-dra-001"
    table = view.node_table.value
    assert set(table["dra"]) == {"DRA: inference/shared-gpu (shared)"}
    assert view.node_table.hidden_columns == ["mig"]             # the DRA column shows where it says something
    # device-plugin pods elsewhere carry no DRA mark
    view.pool.value = ""
    view.selection.node = "h100-nv-000"
    assert set(view.node_table.value["dra"]) == {""}
    assert view.node_table.hidden_columns == ["mig", "dra"]      # and only there


def test_settings_view_offers_demo_extensions_and_shows_the_flag(state):
    from dashboard.views.settings import SettingsView

    view = SettingsView(state)
    assert "--demo-extensions" not in view.command_line()
    view.options.demo_extensions = True
    assert view.command_line().startswith("kaidash serve --seed") and "--demo-extensions" in view.command_line()


def test_topology_html_says_whether_the_best_domain_has_room():
    import pandas as pd

    from dashboard.views.gpus import topology_html

    gangs = pd.DataFrame([["q/a", "q", "rack", 8.0, "r1", 8, True], ["q/b", "q", "rack", 16.0, "r1", 8, False],
                          ["q/c", "q", "zone", 4.0, "", 0, False]], columns=F.GANG_COLUMNS)
    text = topology_html(pd.DataFrame(columns=F.TOPOLOGY_COLUMNS), gangs, "")
    assert "<b>q/a</b> needs 8 GPUs in one rack: best rack <b>r1</b> (8 free): enough free GPUs there" in text
    assert "no rack with 16 free GPUs; largest 8" in text
    assert "no node carries the zone label" in text and "Grouped by" not in text
