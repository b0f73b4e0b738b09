"""GPU memory of pods on MIG instances in the GPUs view's slice table: entitled to their instance's memory (from
the profile name, ``1g.10gb`` → 10 GiB), using at most that, judged over share against it — never the whole
80 GB GPU the node reports. Both paths: slices from the snapshot's own usage, and slices from the simulated
dcgm-exporter's series (exposition parsed back, as the dashboard's metrics reader does: per-MIG-instance
series, ``GPU_I_PROFILE``/``GPU_I_ID``, placed on the instance's cells).

Cluster: ``a100-mig``, an A100 80 GB node of 8 GPU-equivalent cells: 4 × 1g.10gb (cells 0-3), 1 × 3g.40gb
(cells 4-6), cell 7 a whole GPU.
"""

import pytest

from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, samples_from_exposition
from scheduler.metrics.exporter import render_exposition, simulate_gpus
from scheduler.model import mig_cell_memory_mib, mig_memory_mib
from scheduler.snapshot_io import snapshot_from_dict
from scheduler.sources.synthetic import generate_scenario

from dashboard.frames import gpu_frame_from_slices, gpu_slices_frame, mig_cell_instances
from dashboard.views.gpus import slice_rows

GIB = 1024.0
A100_MIB = 81920


def _task(name, profile, index, used_mib, util=0.4):
    return {"name": f"serve/{name}", "mig": {profile: 1}, "node": "a100-mig", "status": "running",
            "gpu_index": index, "usage": {"gpu_memory_mib": used_mib, "gpu_util": util}}


def _snap():
    tasks = [_task("fits-0", "1g.10gb", [0], 7000), _task("fits-1", "1g.10gb", [1], 9500),
             _task("over-2", "1g.10gb", [2], 11000), _task("big-0", "3g.40gb", [4, 5, 6], 30000)]
    return snapshot_from_dict({
        "version": 1.2,
        "nodes": [{"name": "a100-mig", "gpus": 8, "gpu_memory_mib": A100_MIB, "cpu_millis": 64000,
                   "memory_bytes": "512Gi", "mig": {"1g.10gb": 4, "3g.40gb": 1},
                   "gpu_model": "NVIDIA-A100-SXM4-80GB"}],
        "queues": [{"name": "serve"}],
        "jobs": [{"name": t["name"].split("/")[1], "namespace": "serve", "queue": "serve", "min_available": 1,
                  "tasks": [t]} for t in tasks]})


def _dcgm_frame(snap):
    ev = V.EXPORTER_VARIANTS["classic"]
    text = render_exposition(simulate_gpus(snap), ev)
    return build_gpu_frame(snap, samples_from_exposition(text, V.variant_for_exporter(ev)))


@pytest.fixture(params=["snapshot", "dcgm"])
def slices(request):
    snap = _snap()
    frame = gpu_slices_frame(snap, _dcgm_frame(snap) if request.param == "dcgm" else None)
    return frame.set_index(["task", "gpu_index"])


def test_profile_memory():
    assert mig_memory_mib("1g.10gb") == 10 * GIB
    assert mig_memory_mib("7g.80gb") == 80 * GIB
    assert mig_memory_mib("whole") == 0.0
    assert mig_cell_memory_mib({"3g.40gb": 1}) == pytest.approx(40 * GIB / 3)
    assert mig_cell_memory_mib({"1g.10gb": 2, "2g.20gb": 1}) == pytest.approx(40 * GIB / 4)
    assert mig_cell_memory_mib({}) == 0.0


def test_1g_pod_is_entitled_to_its_instance_not_the_gpu(slices):
    row = slices.loc[("serve/fits-0", 0)]
    assert row["memory_share_mib"] == pytest.approx(10 * GIB)
    assert row["memory_used_mib"] == pytest.approx(7000)
    assert not row["over_share"]
    fits = slices.loc[("serve/fits-1", 1)]      # 9.3 GiB of 10: within, not flagged
    assert fits["memory_used_mib"] <= fits["memory_share_mib"] and not fits["over_share"]


def test_1g_pod_over_its_instance_is_flagged():
    """11,000 MiB on a 10 GiB instance is over share even though the GPU has 80 GB (the snapshot's own usage
    figure)."""
    snap = _snap()
    assert gpu_slices_frame(snap).set_index(["task", "gpu_index"]).loc[("serve/over-2", 2), "over_share"]


def test_exporter_reports_an_instance_full_not_over():
    """Through the simulated dcgm-exporter the same pod reads 10,240 MiB: a real instance cannot hold more than
    its memory (its pod gets out-of-memory instead), so its series says full, and full is not over share."""
    snap = _snap()
    row = gpu_slices_frame(snap, _dcgm_frame(snap)).set_index(["task", "gpu_index"]).loc[("serve/over-2", 2)]
    assert row["memory_used_mib"] == pytest.approx(10 * GIB)
    assert not row["over_share"]


def test_multi_cell_instance_spreads_its_memory_over_its_cells(slices):
    rows = slices.loc["serve/big-0"]
    assert list(rows.index) == [4, 5, 6]
    assert rows["memory_share_mib"].sum() == pytest.approx(40 * GIB)
    assert rows["memory_used_mib"].sum() == pytest.approx(30000)
    assert not rows["over_share"].any()


def test_table_rows_in_gib_within_the_instance():
    snap = _snap()
    for frame in (None, _dcgm_frame(snap)):
        slices = gpu_slices_frame(snap, frame)
        table = slice_rows(slices, "a100-mig").set_index("gpu_index")
        assert table.loc[0, "memory_share_gib"] == pytest.approx(10.0)
        assert table.loc[0, "memory_used_gib"] <= 10.0
        gpus = gpu_frame_from_slices(snap, slices, frame)
        # only the 1g pod at 11,000 MiB, from the snapshot's usage; its instance's series caps it at 10 GiB
        assert gpus["over_share"].sum() == (1 if frame is None else 0)


def test_demo_mig_pool_within_instances():
    """The demo's MIG pool (what docs/screenshots/gpus-mig.png shows): every pod within its instance's memory,
    none flagged over share, on both paths."""
    snap = generate_scenario(seed=7, nodes=64, extensions=True).snapshot
    mig_tasks = {t.name: t for _, t in snap.iter_tasks() if t.mig and t.node}
    assert mig_tasks
    for t in mig_tasks.values():
        assert t.usage.gpu_memory_mib <= sum(mig_memory_mib(p) * c for p, c in t.mig.items())
    for frame in (None, _dcgm_frame(snap)):
        slices = gpu_slices_frame(snap, frame)
        mig = slices[slices["task"].isin(mig_tasks)]
        assert len(mig) == sum(int(t.gpu) for t in mig_tasks.values())
        assert (mig["memory_used_mib"] <= mig["memory_share_mib"]).all()
        assert (mig["memory_share_mib"] <= 40 * GIB / 3 + 1e-6).all()    # no 80 GB entitlement on a slice
        assert not mig["over_share"].any()


def test_table_reads_one_row_per_instance_with_its_whole_memory():
    """The 3g.40gb pod is one row of 40 GiB on cells 4-6 (it read as three rows of 13.33 GiB), on both paths;
    the 1g.10gb pods one row each of 10 GiB; every row its own key."""
    snap = _snap()
    for frame in (None, _dcgm_frame(snap)):
        rows = slice_rows(gpu_slices_frame(snap, frame), "a100-mig").set_index("task")
        assert sorted(rows.index) == ["serve/big-0", "serve/fits-0", "serve/fits-1", "serve/over-2"]
        big = rows.loc["serve/big-0"]
        assert big["mig"] == "3g.40gb" and big["gpu_index"] == 4 and big["cells"] == [4, 5, 6]
        assert big["memory_share_gib"] == pytest.approx(40.0)
        assert big["memory_used_gib"] == pytest.approx(30000 / GIB, abs=0.01)
        assert big["share"] == pytest.approx(3.0) and not big["over_share"]
        assert rows.loc["serve/fits-0", "mig"] == "1g.10gb"
        assert rows.loc["serve/fits-0", "memory_share_gib"] == pytest.approx(10.0)
        if frame is None:   # the snapshot's usage: 11,000 MiB on a 10 GiB instance is over its share
            assert rows.loc["serve/over-2", "over_share"]
        else:               # an instance's DCGM series cannot report more than its memory: it reads full
            assert rows.loc["serve/over-2", "memory_used_gib"] == pytest.approx(10.0, abs=0.01)
        assert rows["key"].is_unique and rows.loc["serve/big-0", "key"] == "a100-mig/4/serve/big-0"


TWO_INSTANCES = {
    "version": 1.2,
    "nodes": [{"name": "mig-a", "gpus": 8, "gpu_memory_mib": A100_MIB, "cpu_millis": 64000, "memory_bytes": "512Gi",
               "mig": {"1g.10gb": 2, "2g.20gb": 1}, "gpu_model": "NVIDIA-A100-SXM4-80GB"}],
    "queues": [{"name": "serve"}],
    "jobs": [{"name": "pair", "namespace": "serve", "queue": "serve", "min_available": 1,
              "tasks": [{"name": "serve/pair-0", "mig": {"1g.10gb": 2}, "node": "mig-a", "status": "running",
                         "gpu_index": [0, 1], "usage": {"gpu_memory_mib": 15000, "gpu_util": 0.5}}]},
             {"name": "mid", "namespace": "serve", "queue": "serve", "min_available": 1,
              "tasks": [{"name": "serve/mid-0", "mig": {"2g.20gb": 1}, "node": "mig-a", "status": "running",
                         "gpu_index": [2, 3], "usage": {"gpu_memory_mib": 12000, "gpu_util": 0.5}}]}]}


def test_a_pod_on_two_instances_has_a_row_for_each():
    snap = snapshot_from_dict(TWO_INSTANCES)
    rows = slice_rows(gpu_slices_frame(snap), "mig-a")
    assert list(rows["key"]) == ["mig-a/0/serve/pair-0", "mig-a/1/serve/pair-0", "mig-a/2/serve/mid-0"]
    assert list(rows["mig"]) == ["1g.10gb", "1g.10gb", "2g.20gb"]
    assert list(rows["cells"]) == [[0], [1], [2, 3]]
    assert list(rows["memory_share_gib"]) == pytest.approx([10.0, 10.0, 20.0])
    assert rows["memory_used_gib"].sum() == pytest.approx((15000 + 12000) / GIB, abs=0.02)


def test_cells_are_numbered_by_instance_in_profile_order():
    assert mig_cell_instances({"3g.40gb": 1, "1g.10gb": 1}, [4, 5, 6, 7]) == [("3g.40gb", 0)] * 3 + [("1g.10gb", 1)]
    assert mig_cell_instances({"1g.10gb": 2}, [0, 1]) == [("1g.10gb", 0), ("1g.10gb", 1)]
    assert mig_cell_instances({"1g.10gb": 1}, [0, 1]) == [("1g.10gb", 0), ("1g.10gb", 0)]   # more cells: the last
    assert mig_cell_instances({}, [0]) == [("", -1)]


def test_view_colours_every_cell_and_a_picked_instance_outlines_them():
    """The grid keeps one slice per cell the 3g.40gb spans (coloured by its queue); its one row in the table,
    picked, outlines all three cells."""
    from dashboard.loop import state_from_snapshot
    from dashboard.models import Selection
    from dashboard.views import GpusView

    view = GpusView(state_from_snapshot(_snap(), simulated_metrics=False), Selection(node="a100-mig"))
    held = view.sources["held"].data
    assert sorted(int(g) for t, g in zip(held["task"], held["gpu"]) if t == "serve/big-0") == [4, 5, 6]
    table = view.node_table.value
    assert "mig" not in view.node_table.hidden_columns
    assert list(table.index).count("a100-mig/4/serve/big-0") == 1 and len(table) == 4
    view.node_table.selection = [list(table.index).index("a100-mig/4/serve/big-0")]
    dev = view.sources["devices"].data
    assert sorted(int(dev["gpu"][i]) for i in view.sources["devices"].selected.indices) == [4, 5, 6]


def test_grid_hover_names_the_device_where_instance_series_say_which():
    """The grid's hover ("node / GPU") names the device as ``nvidia-smi`` does once dcgm-exporter's instance
    series say which (cell 1 = GPU 0's instance 2, cell 7 = physical GPU 1); from the snapshot alone a MIG
    node's cell is a GPU-equivalent ("cell 7"), never a guessed device number."""
    from dashboard.views.gpus import grid_sources

    snap = _snap()
    for frame, want in ((_dcgm_frame(snap), {1: "GPU 0 MIG instance 2 (1g.10gb)", 4: "GPU 0 MIG instance 5 (3g.40gb)",
                                             6: "GPU 0 MIG instance 5 (3g.40gb)", 7: "GPU 1"}),
                        (None, {1: "cell 1", 4: "cell 4", 7: "cell 7"})):
        slices = gpu_slices_frame(snap, frame)
        gpus = gpu_frame_from_slices(snap, slices, frame)
        layers, _ = grid_sources(gpus, slices, ["a100-mig"], "queue", {"serve": "#123456"})
        device = dict(zip(layers["devices"]["gpu"].tolist(), layers["devices"]["device"].tolist()))
        assert {k: device[k] for k in want} == want
