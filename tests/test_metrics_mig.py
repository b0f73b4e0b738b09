"""Per-MIG-instance DCGM series: the simulated exporter's format, the reader's per-instance usage and its
attribution to the pod on each instance, the parent GPU's series (never counted twice), and bad MIG labels.

Scenario and hand-derived numbers: ``tests/mig_scenario.py``.
"""

import logging

import numpy as np
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mig_scenario import A100_MIB, mig_snapshot
from scheduler.metrics import variants as V
from scheduler.metrics.dcgm import build_gpu_frame, samples_from_exposition, samples_from_vector
from scheduler.metrics.dcgm_mig import INSTANCE_COLUMNS
from scheduler.metrics.exporter import ExporterState, render_exposition, simulate_gpus, simulated_samples
from scheduler.metrics.mig import instance_cells, mig_layout, parse_profile
from scheduler.model import Node

CLASSIC = V.variant_for_exporter(V.EXPORTER_VARIANTS["classic"])
GIB = 1024.0


def exposition(snap, variant="classic"):
    return render_exposition(simulate_gpus(snap), V.EXPORTER_VARIANTS[variant])


def read(snap, text, variant=CLASSIC, **kw):
    info = {}
    frame = build_gpu_frame(snap, samples_from_exposition(text, variant), info=info, **kw)
    return frame, info


def series(text, name):
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


def task(snap, name):
    return next(t for _, t in snap.iter_tasks() if t.name.endswith("/" + name))


def cell(frame, node, index):
    return frame[(frame.node == node) & (frame.gpu_index == index)]


# ------------------------------------------------------------------------------------------ layout

def test_profiles():
    assert parse_profile("1g.10gb").slices == 1 and parse_profile("1g.10gb").memory_mib == 10 * GIB
    assert parse_profile("3g.40gb").slices == 3
    assert parse_profile("1g.10gb+me").memory_mib == 10 * GIB        # media-extension profiles are real ones
    for bad in ("", "7g", "MIG 1g.10gb", "0g.5gb", "1g.10GB", "whole"):
        assert parse_profile(bad) is None


def test_layout_packs_instances_by_slices_and_memory():
    node = Node(name="n", gpus=8, gpu_memory_mib=81920, mig={"1g.10gb": 4, "3g.40gb": 1})
    slots, whole = mig_layout(node)
    assert [(s.profile, s.gpu, s.instance_id, s.first_cell, s.width) for s in slots] == [
        ("1g.10gb", 0, 1, 0, 1), ("1g.10gb", 0, 2, 1, 1), ("1g.10gb", 0, 3, 2, 1), ("1g.10gb", 0, 4, 3, 1),
        ("3g.40gb", 0, 5, 4, 3)]
    assert whole == {7: 1}
    # the demo's 81,900 MiB A100: two 3g.40gb (2 x 40,960 MiB) no longer fit on one GPU
    slots, whole = mig_layout(Node(name="n", gpus=8, gpu_memory_mib=81900, mig={"3g.40gb": 2}))
    assert [(s.gpu, s.instance_id, s.first_cell) for s in slots] == [(0, 1, 0), (1, 1, 3)]
    assert whole == {6: 2, 7: 3}
    # seven 1g.10gb fill the 7 compute slices of one GPU
    slots, whole = mig_layout(Node(name="n", gpus=8, gpu_memory_mib=81920, mig={"1g.10gb": 7}))
    assert {s.gpu for s in slots} == {0} and whole == {7: 1}
    assert mig_layout(Node(name="n", gpus=2, gpu_memory_mib=100)) == ([], {0: 0, 1: 1})


def test_instance_cells_follow_gpu_then_instance_id_and_stop_at_an_unknown_width():
    assert instance_cells([(1, 1, 3), (0, 9, 1), (0, 2, 2)]) == {(0, 2): 0, (0, 9): 2, (1, 1): 3}
    assert instance_cells([(0, 1, 1), (0, 2, None), (0, 3, 1)]) == {(0, 1): 0}


# ------------------------------------------------------------------------------------------ exporter format

def test_exporter_emits_instance_series_in_dcgm_exporter_format():
    text = exposition(mig_snapshot())
    fb = series(text, "DCGM_FI_DEV_FB_USED")
    mig = [s for s in fb if s.labels.get("Hostname") == "a100-mig" and "GPU_I_ID" in s.labels]
    assert [(s.labels["gpu"], s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"], s.labels.get("pod"), s.value)
            for s in mig] == [("0", "1", "1g.10gb", "small-0", 7000), ("0", "2", "1g.10gb", "small-1", 9000),
                              ("0", "3", "1g.10gb", None, 0), ("0", "4", "1g.10gb", None, 0),
                              ("0", "5", "3g.40gb", "big-0", 30000)]
    # labels in the template's order: GPU labels, then GPU_I_PROFILE, GPU_I_ID, then the host, driver and pod
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_FB_USED{") and 'GPU_I_ID="1"' in ln)
    names = [kv.split("=")[0] for kv in line[line.index("{") + 1:line.index("}")].split(",")]
    assert names == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
                     "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    # the MIG GPU has no whole-GPU series (dcgm-exporter's default --devices f); the whole GPU is physical 1
    whole = [s for s in fb if s.labels.get("Hostname") == "a100-mig" and "GPU_I_ID" not in s.labels]
    assert [(s.labels["gpu"], s.labels.get("pod"), s.value) for s in whole] == [("1", "whole-0", 50000)]
    # NVML reports no utilisation for MIG instances: GPU_UTIL only for whole GPUs; activity per instance
    assert all("GPU_I_ID" not in s.labels for s in series(text, "DCGM_FI_DEV_GPU_UTIL"))
    gr = {s.labels["GPU_I_ID"]: s.value for s in series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
          if "GPU_I_ID" in s.labels}
    assert gr == {"1": 0.4, "2": 0.0, "3": 0.0, "4": 0.0, "5": 0.6}
    free = {s.labels["GPU_I_ID"]: s.value for s in series(text, "DCGM_FI_DEV_FB_FREE") if "GPU_I_ID" in s.labels}
    assert free == {"1": 10240 - 7000, "2": 10240 - 9000, "3": 10240, "4": 10240, "5": 40960 - 30000}


def test_state_render_and_list_render_agree_for_mig():
    snap = mig_snapshot()
    for variant in ("classic", "4.9.0", "old-namespace"):
        for per_pod in (False, True):
            assert ExporterState(snap, variant=variant, per_pod=per_pod).render() == render_exposition(
                simulate_gpus(snap), V.EXPORTER_VARIANTS[variant], per_pod=per_pod)


def test_used_memory_is_capped_at_the_instance_and_a_pod_on_two_instances_is_split_by_memory():
    snap = mig_snapshot()
    small = task(snap, "small-0")
    small.usage.gpu_memory_mib = 12000                                  # more than a 1g.10gb can hold
    big = task(snap, "big-0")
    big.mig, big.gpu, big.gpu_indices = {"1g.10gb": 2}, 2.0, [2, 3]      # the two free 1g instances instead
    big.usage.gpu_memory_mib = 16000
    text = exposition(snap)
    fb = {s.labels["GPU_I_ID"]: (s.labels.get("pod"), s.value) for s in series(text, "DCGM_FI_DEV_FB_USED")
          if "GPU_I_ID" in s.labels}
    assert fb["1"] == ("small-0", 10240)
    assert fb["3"] == ("big-0", 8000) and fb["4"] == ("big-0", 8000)
    assert fb["5"] == (None, 0)
    frame, _ = read(snap, text)
    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc["serve/big-0", "used_memory_mib"].to_dict() == {2: 8000, 3: 8000}


# ------------------------------------------------------------------------------------------ reader

def test_each_mig_pod_gets_its_instances_used_memory():
    snap = mig_snapshot()
    frame, info = read(snap, exposition(snap))
    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc[("serve/small-0", 0), "used_memory_mib"] == 7000
    assert pods.loc[("serve/small-1", 1), "used_memory_mib"] == 9000
    assert pods.loc[("serve/small-0", 0), "alloc_memory_mib"] == 10 * GIB
    big = pods.loc["serve/big-0"]
    assert list(big.index) == [4, 5, 6] and (big["used_memory_mib"] == 10000).all()
    assert big["alloc_memory_mib"].sum() == pytest.approx(40 * GIB)
    assert set(pods.loc[["serve/small-0", "serve/small-1", "serve/big-0"], "attribution"]) == {"exporter"}
    assert pods.loc[("serve/big-0", 4), "pod_util"] == pytest.approx(0.6)   # the instance's activity
    assert pods.loc[("serve/small-0", 0), "dcgm_pod"] == "serve/small-0"
    assert set(pods.loc[["serve/small-0", "serve/big-0"], "device_source"]) == {"dcgm"}
    # the whole GPU of the MIG node (physical 1) is cell 7, with its own pod
    assert pods.loc[("train/whole-0", 7), "used_memory_mib"] == 50000
    assert pods.loc[("train/whole-0", 7), "memory_total_mib"] == A100_MIB
    assert pods.loc[("train/h100-job-0", 1), "used_memory_mib"] == 60000
    # free instances: their cells have metrics and no holder
    free = cell(frame, "a100-mig", 2).iloc[0]
    assert pd.isna(free.task) and free.has_metrics and free.memory_used_mib == 0
    assert free.memory_total_mib == 10 * GIB
    assert not frame.over_share.any()

    inst = info["mig_instances"]
    assert list(inst.columns) == INSTANCE_COLUMNS and len(inst) == 5
    row = inst.set_index("instance_id").loc[5]
    assert (row.node, row.gpu_index, row.profile, row.pod, row.namespace) == ("a100-mig", 0, "3g.40gb", "big-0",
                                                                               "serve")
    assert (row.first_cell, row.width, row.fb_used_mib, row.fb_total_mib) == (4, 3, 30000, 40 * GIB)
    assert np.isnan(row.gpu_util) and row.gr_engine_active == pytest.approx(0.6)
    assert info["mig_series"] == len(inst) * 5       # FB_FREE, FB_USED, FB_RESERVED, GR_ENGINE, DRAM per instance
    assert info["mig_parent_series"] == 0 and info["mig_problem_count"] == 0


@pytest.mark.parametrize("variant", ["hostname", "4.9.0", "old-namespace"])
def test_every_naming_variant_reads_the_same(variant):
    snap = mig_snapshot()
    classic, _ = read(snap, exposition(snap))
    other, info = read(snap, exposition(snap, variant), V.variant_for_exporter(V.EXPORTER_VARIANTS[variant]))
    cols = ["node", "gpu_index", "task", "used_memory_mib", "attribution", "memory_used_mib", "dcgm_pod"]
    pd.testing.assert_frame_equal(classic[cols], other[cols])
    assert len(info["mig_instances"]) == 5


def test_parent_gpu_series_is_not_counted_twice():
    """With ``-d g`` and instances watched, a MIG GPU also has whole-GPU series: the sum over its instances,
    possibly labelled with one of the MIG pods (dcgm-exporter also keys MIG pods under a device-id key)."""
    snap = mig_snapshot()
    text = exposition(snap)
    frame, _ = read(snap, text)
    parent = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-p",Hostname="a100-mig",pod="small-0",namespace="serve",'
              'container="main"} 46000\n'
              'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-p",Hostname="a100-mig",pod="small-0",namespace="serve",'
              'container="main"} 80\n')
    with_parent, info = read(snap, text + parent)
    assert info["mig_parent_series"] == 2
    pd.testing.assert_frame_equal(frame, with_parent)
    pods = with_parent[with_parent.task.notna()].set_index("task")
    assert pods.loc["serve/small-0", "used_memory_mib"] == 7000      # not 46000, not 7000 + anything


def test_exported_pod_labels_after_prometheus_renamed_them():
    """Prometheus with honor_labels false: exported_pod/exported_namespace on instance series, ``pod`` = the
    dcgm-exporter pod."""
    snap = mig_snapshot()
    vector = []
    for fam in text_string_to_metric_families(exposition(snap, "hostname")):
        for s in fam.samples:
            labels = {("exported_" + k if k in ("pod", "namespace", "container") else k): v
                      for k, v in s.labels.items()}
            labels.update({"__name__": s.name, "pod": "dcgm-exporter-x", "namespace": "gpu-operator"})
            vector.append({"metric": labels, "value": [0, str(s.value)]})
    names = {v["metric"]["__name__"] for v in vector}
    variant = V.detect_variant(names, {k for v in vector for k in v["metric"]})
    info = {}
    frame = build_gpu_frame(snap, samples_from_vector(vector, variant), info=info)
    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc[("serve/small-1", 1), "used_memory_mib"] == 9000
    assert pods.loc[("serve/big-0", 5), "dcgm_pod"] == "serve/big-0"
    assert set(info["mig_instances"]["pod"]) == {"small-0", "small-1", "big-0", ""}


def test_whole_gpus_of_a_mig_node_map_to_cells_whatever_the_mig_gpus_index():
    """Real nodes need not put MIG GPUs first: instances on physical GPU 1, whole GPU physical 0 -> cell 7."""
    snap = mig_snapshot()
    text = exposition(snap)
    swapped = (text.replace('gpu="0"', 'gpu="X"').replace('gpu="1"', 'gpu="0"').replace('gpu="X"', 'gpu="1"'))
    frame, info = read(snap, swapped)
    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc[("train/whole-0", 7), "used_memory_mib"] == 50000
    assert pods.loc[("serve/small-0", 0), "used_memory_mib"] == 7000
    assert set(info["mig_instances"]["gpu_index"]) == {1}


def test_idle_window_keyed_by_physical_gpu_goes_to_the_right_cell():
    snap = mig_snapshot()
    task(snap, "whole-0").usage.gpu_util = 0.0
    text = exposition(snap)
    # physical GPU 1 (the whole GPU, cell 7) idle all window; the MIG parent's window is dropped
    frame, _ = read(snap, text, idle_max_util={("a100-mig", 1): 0.0, ("a100-mig", 0): 0.0})
    flagged = frame.loc[frame.idle_allocated, ["node", "gpu_index"]].drop_duplicates()
    assert flagged.values.tolist() == [["a100-mig", 7]]


def test_idle_window_per_mig_instance_goes_to_its_cells():
    """An instance's own window (graphics-engine activity, keyed by node, physical GPU and instance id) judges
    the cells it spans; small-1 (cell 1) held and idle, big-0 (cells 4-6) held and busy, id 3 (cell 2) free."""
    snap = mig_snapshot()
    idle = {("a100-mig", 0, 2): 0.0, ("a100-mig", 0, 5): 0.6, ("a100-mig", 0, 3): 0.0}
    frame, _ = read(snap, exposition(snap), idle_instance_util=idle)
    flagged = frame.loc[frame.idle_allocated, ["node", "gpu_index", "task"]]
    assert flagged.values.tolist() == [["a100-mig", 1, "serve/small-1"]]
    assert "utilisation at most 0.0 %" in frame.loc[flagged.index[0], "evidence"]
    never, _ = read(snap, exposition(snap))
    assert not never.idle_allocated.any()                 # no window: never judged idle


def test_evidence_names_the_device_as_dcgm_exporter_numbers_it():
    """A flag on a MIG node names the physical GPU and the instance id (what ``nvidia-smi`` and dcgm-exporter's
    ``gpu``/``GPU_I_ID`` labels show), not the grid cell: small-1 is instance 2 of GPU 0 (cell 1), whole-0 is
    physical GPU 1 (cell 7). Other nodes keep ``GPU <index>``."""
    snap = mig_snapshot()
    task(snap, "whole-0").usage.gpu_util = 0.0
    task(snap, "h100-job-0").usage.gpu_util = 0.0
    idle = {("a100-mig", 1): 0.0, ("h100-0", 0): 0.0, ("h100-0", 1): 0.0}
    frame, _ = read(snap, exposition(snap), idle_max_util=idle, idle_instance_util={("a100-mig", 0, 2): 0.0})
    evidence = frame.set_index(["node", "gpu_index"])["evidence"]
    assert evidence[("a100-mig", 1)].startswith("idle allocated: a100-mig GPU 0 MIG instance 2 (1g.10gb) held by "
                                                "serve/small-1;")
    assert evidence[("a100-mig", 7)].startswith("idle allocated: a100-mig GPU 1 held by train/whole-0;")
    assert evidence[("h100-0", 1)].startswith("idle allocated: h100-0 GPU 1 held by train/h100-job-0;")
    # the same when the node puts its MIG GPU second: whole GPU 0 sits on cell 7, the instances on GPU 1
    text = exposition(snap)
    swapped = text.replace('gpu="0"', 'gpu="X"').replace('gpu="1"', 'gpu="0"').replace('gpu="X"', 'gpu="1"')
    frame, _ = read(snap, swapped, idle_max_util={("a100-mig", 0): 0.0},
                    idle_instance_util={("a100-mig", 1, 2): 0.0})
    evidence = frame.set_index(["node", "gpu_index"])["evidence"]
    assert "a100-mig GPU 1 MIG instance 2 (1g.10gb) held by serve/small-1" in evidence[("a100-mig", 1)]
    assert "a100-mig GPU 0 held by train/whole-0" in evidence[("a100-mig", 7)]


def test_live_loop_reads_mig_nodes_per_instance_as_a_scrape_would():
    """The dashboard's simulated metrics (``dashboard.loop.MetricsReader``, no text in between) give the frame a
    Prometheus scrape of the exporter gives: MIG nodes per instance, the idle window keyed by physical GPU and
    instance, the evidence naming GPU 0's instance 2 and physical GPU 1."""
    from dashboard.loop import MetricsReader

    snap = mig_snapshot()
    task(snap, "whole-0").usage.gpu_util = 0.0
    task(snap, "small-1").usage.gpu_util = 0.0
    reader = MetricsReader()
    for _ in range(reader.idle_window_ticks):
        frame, _ = reader.frame(snap)
    h100 = {("h100-0", i): (0.8 if i < 2 else 0.0) for i in range(8)}
    instances = {("a100-mig", 0, i): u for i, u in [(1, 0.4), (2, 0.0), (3, 0.0), (4, 0.0), (5, 0.6)]}
    scraped, _ = read(snap, ExporterState(snap).render(), idle_max_util={("a100-mig", 1): 0.0, **h100},
                      idle_instance_util=instances)
    pd.testing.assert_frame_equal(frame, scraped)
    flagged = frame[frame.idle_allocated].set_index("gpu_index")["evidence"]
    assert list(flagged.index) == [1, 7]
    assert "GPU 0 MIG instance 2 (1g.10gb) held by serve/small-1" in flagged[1]
    assert "GPU 1 held by train/whole-0" in flagged[7]


def test_simulated_samples_give_the_same_frame_as_parsing():
    snap = mig_snapshot()
    state = ExporterState(snap)
    parsed = build_gpu_frame(snap, samples_from_exposition(state.render(), CLASSIC))
    direct = build_gpu_frame(snap, simulated_samples(state.gpus()))
    pd.testing.assert_frame_equal(parsed, direct)


# ------------------------------------------------------------------------------------------ bad input

def test_bad_mig_labels_are_named_and_the_rest_still_reads(caplog):
    snap = mig_snapshot()
    text = exposition(snap)
    bad = (
        # instance id without a profile (a relabel dropped it)
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_ID="9",Hostname="a100-mig"} 100\n'
        # profile without an id
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",Hostname="a100-mig"} 100\n'
        # an id that is no number
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="x",Hostname="a100-mig"} 1\n')
    with caplog.at_level(logging.WARNING, logger="scheduler.metrics.dcgm"):
        frame, info = read(snap, text + bad)
    problems = info["mig_problems"]
    assert info["mig_problem_count"] == 3 and len(problems) == 3
    assert "DCGM_FI_DEV_FB_USED" in problems[0] and 'GPU_I_ID="9"' in problems[0]
    assert "label GPU_I_ID without GPU_I_PROFILE" in problems[0]
    assert "label GPU_I_PROFILE without GPU_I_ID" in problems[1]
    assert "GPU_I_ID is not an instance number" in problems[2]
    assert all(p in caplog.text for p in problems)
    good, _ = read(snap, text)
    pd.testing.assert_frame_equal(frame, good)            # the bad series changed nothing else


def test_unknown_profile_is_kept_as_usage_but_not_placed():
    snap = mig_snapshot()
    text = exposition(snap).replace('GPU_I_PROFILE="3g.40gb"', 'GPU_I_PROFILE="3g.forty"')
    frame, info = read(snap, text)
    assert info["mig_problem_count"] == 1
    (problem,) = info["mig_problems"]
    assert 'GPU_I_ID="5"' in problem and 'unknown GPU_I_PROFILE "3g.forty"' in problem and "a100-mig" in problem
    inst = info["mig_instances"].set_index("instance_id")
    assert inst.loc[5, "fb_used_mib"] == 30000 and np.isnan(inst.loc[5, "first_cell"])
    assert info["mig_unplaced_instances"] == 1
    pods = frame[frame.task.notna()].set_index(["task", "gpu_index"])
    assert pods.loc[("serve/small-0", 0), "used_memory_mib"] == 7000      # the rest still reads
    assert pods.loc[("train/whole-0", 7), "used_memory_mib"] == 50000
    assert pods.loc["serve/big-0"]["used_memory_mib"].isna().all()       # no guess for the unplaced instance


def test_instance_series_on_a_node_without_mig_are_skipped_with_a_warning():
    snap = mig_snapshot()
    extra = 'DCGM_FI_DEV_FB_USED{gpu="3",UUID="GPU-h",GPU_I_PROFILE="1g.10gb",GPU_I_ID="1",Hostname="h100-0"} 5\n'
    frame, info = read(snap, exposition(snap) + extra)
    assert "node h100-0" in info["mig_problems"][0]
    assert cell(frame, "h100-0", 3).iloc[0].memory_used_mib == 0
    assert set(info["mig_instances"]["node"]) == {"a100-mig"}
