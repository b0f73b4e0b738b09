"""The per-GPU frame: slices from the snapshot, reservation pod -> group -> fractional pods, flags.

DCGM samples are taken straight from the simulated exporter's exposition (no Prometheus); expected numbers
are derived by hand from tests/metrics_scenario.py.
"""

import hashlib

import numpy as np
import pandas as pd
import pytest

from metrics_scenario import metrics_snapshot
from scheduler.metrics import variants as V
from scheduler.metrics.allocation import slices
from scheduler.metrics.dcgm import FRAME_COLUMNS, build_gpu_frame, gpu_summary, samples_from_exposition
from scheduler.metrics.exporter import ExporterState, render_exposition, simulate_gpus, simulated_samples

CLASSIC = V.variant_for_exporter(V.EXPORTER_VARIANTS["classic"])


def frame_for(snap, variant="classic", per_pod=False, text=None, frame_snap=None, **kw):
    ev = V.EXPORTER_VARIANTS[variant]
    text = text if text is not None else render_exposition(simulate_gpus(snap), ev, per_pod=per_pod)
    return build_gpu_frame(frame_snap or snap, samples_from_exposition(text, V.variant_for_exporter(ev)), **kw)


def rows(frame, node, gpu):
    return frame[(frame.node == node) & (frame.gpu_index == gpu)].set_index("task", drop=False)


def test_slices_from_snapshot():
    sl = slices(metrics_snapshot()).set_index(["task", "gpu_index"])
    assert len(sl.loc["llm-pretrain-0"]) == 8 and set(sl.loc["llm-pretrain-0"]["share"]) == {1.0}
    assert sl.loc[("chat-api-0", 1)][["share", "alloc_memory_mib"]].tolist() == [0.5, 11500.0]
    # gpu_memory_mib 8000 on a 23000 MiB GPU: ceil(34.78...) / 100 = 0.35; placed through its group
    assert sl.loc[("embedder-0", 1)][["share", "alloc_memory_mib"]].tolist() == [0.35, 8000.0]
    multi = sl.loc["multi-0"]
    assert sorted(multi.index) == [2, 3] and set(multi["share"]) == {0.25} and set(multi["alloc_memory_mib"]) == {
        5750.0}
    assert "vision-sweep-0" not in sl.index.get_level_values(0)  # pending: holds nothing


def test_frame_columns_and_one_row_per_gpu_slice():
    f = frame_for(metrics_snapshot())
    assert list(f.columns) == FRAME_COLUMNS
    # 20 GPUs; l4-0 GPU 1 has two slices -> 21 rows; every GPU present once or more
    assert len(f) == 21
    assert f[["node", "gpu_index"]].drop_duplicates().shape[0] == 20
    assert f["has_metrics"].all()


def test_shared_gpu_split_in_proportion_to_share_when_only_gpu_memory_is_known():
    f = rows(frame_for(metrics_snapshot()), "l4-0", 1)
    assert set(f.index) == {"chat-api-0", "embedder-0"}
    assert set(f["attribution"]) == {"proportional"}
    assert set(f["dcgm_pod"]) == {"kai-resource-reservation/gpu-reservation-l4-0-"
                                  + hashlib.sha256(b"l4-0/grp-l4-1").hexdigest()[:5]}
    assert f.loc["chat-api-0", "used_memory_mib"] == pytest.approx(20000 * 0.5 / 0.85)
    assert f.loc["embedder-0", "used_memory_mib"] == pytest.approx(20000 * 0.35 / 0.85)
    # 20000 MiB used > 19500 allocated: every pod on the GPU is over its proportional share
    assert f["over_share"].all()
    assert f.loc["chat-api-0", "memory_used_mib"] == 20000 and f.loc["chat-api-0", "gpu_util"] == pytest.approx(0.5)
    assert f.loc["chat-api-0", "memory_total_mib"] == 23000  # used + free + reserved


def test_per_pod_exporter_values_are_used_when_present():
    f = rows(frame_for(metrics_snapshot(), per_pod=True), "l4-0", 1)
    assert set(f["attribution"]) == {"exporter"}
    assert f.loc["chat-api-0", ["used_memory_mib", "pod_util"]].tolist() == pytest.approx([13000, 0.3])
    assert f.loc["embedder-0", ["used_memory_mib", "pod_util"]].tolist() == pytest.approx([7000, 0.2])
    assert bool(f.loc["chat-api-0", "over_share"]) is True   # 13000 > 11500
    assert bool(f.loc["embedder-0", "over_share"]) is False  # 7000 <= 8000
    assert f.loc["chat-api-0", "memory_used_mib"] == 20000   # the device-level series, not a pod's


def test_whole_gpu_pod_gets_the_device_value():
    f = frame_for(metrics_snapshot())
    r = rows(f, "h100-0", 3).iloc[0]
    assert (r.task, r.attribution, r.used_memory_mib, r.share, r.alloc_memory_mib) == (
        "llm-pretrain-0", "exporter", 60000, 1.0, 81920)
    assert r.pod_util == pytest.approx(0.9) and r.dcgm_pod == "default/llm-pretrain-0"
    assert not r.over_share


def test_multi_device_fraction_one_slice_per_device():
    f = frame_for(metrics_snapshot())
    for gpu in (2, 3):
        r = rows(f, "l4-0", gpu).iloc[0]
        assert (r.task, r.share, r.alloc_memory_mib, r.used_memory_mib, r.attribution) == (
            "multi-0", 0.25, 5750, 2000, "proportional")
        assert r.gpu_util == pytest.approx(0.1)


def test_reservation_pod_places_tasks_that_only_know_their_group():
    snap = metrics_snapshot()
    text = render_exposition(simulate_gpus(snap), "classic")
    blind = metrics_snapshot()
    blind.job_map()["chat-api"].tasks[0].gpu_indices = []  # now neither fractional task knows its device
    f = frame_for(blind, text=text)
    r = rows(f, "l4-0", 1)
    assert set(r.index) == {"chat-api-0", "embedder-0"}
    assert (f["gpu_index"] >= 0).all()


def test_explicit_reservation_group_mapping_from_the_kube_source():
    snap = metrics_snapshot()
    name = "gpu-reservation-l4-0-" + hashlib.sha256(b"l4-0/grp-l4-1").hexdigest()[:5]
    text = render_exposition(simulate_gpus(snap), "classic").replace(name, "gpu-reservation-l4-0-x7k2p")
    blind = metrics_snapshot()
    blind.job_map()["chat-api"].tasks[0].gpu_indices = []
    unresolved = frame_for(blind, text=text)
    lost = unresolved[unresolved.task.isin(["chat-api-0", "embedder-0"])]
    assert set(lost["gpu_index"]) == {-1} and lost["attribution"].isna().all()
    f = frame_for(blind, text=text, reservation_groups={"gpu-reservation-l4-0-x7k2p": "grp-l4-1"})
    assert set(rows(f, "l4-0", 1).index) == {"chat-api-0", "embedder-0"}


def test_missing_pod_labels_fall_back_to_proportional():
    snap = metrics_snapshot()
    text = render_exposition(simulate_gpus(snap), "classic").replace(
        ',container="main",namespace="default",pod="llm-pretrain-0"', "")
    r = rows(frame_for(snap, text=text), "h100-0", 0).iloc[0]
    assert r.attribution == "proportional" and r.used_memory_mib == 60000 and pd.isna(r.dcgm_pod)


def test_flags_idle_allocated_and_unallocated_in_use():
    snap = metrics_snapshot()
    state = ExporterState(variant="classic")
    state.update(snap, overrides={("h100-1", 7): {V.FB_USED: 5000, V.FB_FREE: 81920 - 5000 - 512,
                                                  V.GPU_UTIL: 0.4}})
    idle = {("h100-1", 0): 0.0, ("h100-0", 0): 0.9, ("h100-1", 4): 0.0}
    f = build_gpu_frame(snap, samples_from_exposition(state.render(), CLASSIC), idle)
    summary = gpu_summary(f).set_index(["node", "gpu_index"])
    assert summary.loc[("h100-1", 0), "idle_allocated"]          # allocated, max util 0 over the window
    assert not summary.loc[("h100-0", 0), "idle_allocated"]      # busy
    assert not summary.loc[("h100-1", 4), "idle_allocated"]      # idle but nothing allocated
    assert not summary.loc[("h100-1", 1), "idle_allocated"]      # no window evidence
    assert summary.loc[("h100-1", 7), "unallocated_in_use"]
    assert not summary.loc[("h100-1", 4), "unallocated_in_use"]
    assert summary["unallocated_in_use"].sum() == 1
    assert summary.loc[("l4-0", 1), "allocated_share"] == pytest.approx(0.85)
    assert summary.loc[("l4-0", 1), "slices"] == 2


def test_over_share_tolerance():
    f = rows(frame_for(metrics_snapshot(), per_pod=True, over_share_tolerance_mib=1500), "l4-0", 1)
    assert not f["over_share"].any()  # 13000 <= 11500 + 1500


def test_4_9_0_bytes_and_ratios_come_back_in_mib_and_ratio():
    f = frame_for(metrics_snapshot(), variant="4.9.0")
    r = rows(f, "l4-0", 1).iloc[0]
    assert r.memory_used_mib == pytest.approx(20000) and r.memory_total_mib == pytest.approx(23000)
    assert r.gpu_util == pytest.approx(0.5)
    classic = frame_for(metrics_snapshot())
    cols = ["memory_used_mib", "memory_free_mib", "gpu_util", "power_w", "temp_c", "used_memory_mib"]
    np.testing.assert_allclose(f[cols].to_numpy(dtype=float), classic[cols].to_numpy(dtype=float))


def test_sentinel_becomes_missing_and_unknown_hosts_and_mig_are_counted():
    snap = metrics_snapshot()
    state = ExporterState(variant="classic")
    state.update(snap, overrides={("h100-1", 5): {V.TEMP: V.NOT_SUPPORTED_INT64}})
    text = state.render()
    extra = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-x",Hostname="ghost-node"} 100\n'
             'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-y",GPU_I_PROFILE="1g.10gb",GPU_I_ID="3",Hostname="h100-1"} 7\n')
    info = {}
    f = build_gpu_frame(snap, samples_from_exposition(text + extra, CLASSIC), info=info)
    assert np.isnan(rows(f, "h100-1", 5).iloc[0].temp_c)
    assert rows(f, "h100-1", 4).iloc[0].temp_c == 30
    assert info["unknown_host_series"] == 1 and info["mig_series"] == 1
    # h100-1 has no MIG instances in the snapshot: the instance series is skipped, with a warning naming the node
    assert info["mig_problem_count"] == 1 and "node h100-1" in info["mig_problems"][0]
    assert info["mig_instances"].empty
    assert rows(f, "h100-1", 0).iloc[0].memory_used_mib == 0  # the MIG series did not leak into GPU 0


def test_fqdn_hostname_matches_node_name():
    snap = metrics_snapshot()
    text = render_exposition(simulate_gpus(snap), "classic").replace('Hostname="h100-0"',
                                                                     'Hostname="h100-0.cluster.example"')
    r = rows(frame_for(snap, text=text), "h100-0", 1).iloc[0]
    assert r.has_metrics and r.memory_used_mib == 60000


def test_no_samples_gives_allocation_only_frame():
    snap = metrics_snapshot()
    f = build_gpu_frame(snap, samples_from_exposition("", CLASSIC))
    assert len(f) == 21 and not f["has_metrics"].any()
    assert f["used_memory_mib"].isna().all() and not f[["over_share", "idle_allocated"]].any().any()


def test_simulated_samples_shortcut_gives_the_same_frame_as_parsing_the_exposition():
    snap = metrics_snapshot()
    state = ExporterState(variant="4.9.0")  # 4.9.0 emits every canonical field, FB capacity included
    state.update(snap, overrides={("h100-1", 5): {V.TEMP: V.NOT_SUPPORTED_INT64}})
    parsed = build_gpu_frame(snap, samples_from_exposition(state.render(), V.variant_for_exporter(state.variant)))
    direct = build_gpu_frame(snap, simulated_samples(state.gpus()))
    pd.testing.assert_frame_equal(direct, parsed, check_exact=False, rtol=1e-9)
