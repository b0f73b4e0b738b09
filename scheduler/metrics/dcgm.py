"""DCGM series -> the per-GPU frame: who holds which slice of each GPU and how much of it they really use.

Pure functions, no I/O: :func:`samples_from_vector` (a Prometheus instant-query result) and
:func:`samples_from_exposition` (an exporter's ``/metrics`` text) both produce *samples*, one row per series
in canonical units; :func:`build_gpu_frame` joins them to a snapshot.

Attribution rules (see docs/metrics.md "Attribution"):

1. A GPU's device value for a field comes from its series without pod labels if there is one, else from the
   series credited to a KAI reservation pod, else from the pod-labelled series (dcgm-exporter's exclusive mode
   labels the device series with the one pod holding it).
2. Per-pod values: when a GPU has both an unlabelled ``FB_USED``/``GPU_UTIL`` series and pod-labelled ones,
   the pod-labelled ones are NVML per-process values (``--kubernetes-virtual-gpus``): each pod gets its own
   number, ``attribution = "exporter"``.
3. A whole-GPU slice whose pod is the pod the exporter credited gets the device's value,
   ``attribution = "exporter"``.
4. Otherwise (a shared GPU credited to the reservation pod, or a GPU whose pod labels are missing) used memory
   is split across the GPU's slices in proportion to their share, ``attribution = "proportional"``.

Reservation pod -> GPU -> ``runai-gpu-group`` -> fractional tasks: the reservation pod's series gives the
device index; its group comes from ``reservation_groups`` (pod name -> group, from the pod's
``runai-gpu-group`` label, supplied by a kube source) or from a deterministic reservation-pod name; fractional
tasks that know their group but not their index are placed on that device.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

import numpy as np
import pandas as pd

from ..model import Snapshot
from . import variants as V
from .dcgm_mig import MAX_PROBLEMS, label_problem, split_mig
from .gpu_flags import flag_frame, window_max_series
from .allocation import (
    RESERVATION_NAMESPACE,
    RESERVATION_POD_PREFIX,
    gpu_inventory,
    reservation_group_index,
    slices,
)

log = logging.getLogger(__name__)

GpuKey = tuple[str, int]

SAMPLE_COLUMNS = ["host", "gpu_index", "uuid", "model", "field", "value", "pod", "namespace", "container",
                  "pod_uid", "mig"]
"""Columns every sample frame has; ``mig`` is a MIG instance's ``GPU_I_ID`` ("" for a whole GPU)."""

MIG_PROFILE_COLUMN = "mig_profile"
"""An optional sample column: the instance's ``GPU_I_PROFILE`` (the parsers add it; absent = no MIG series)."""

FRAME_COLUMNS = [
    "node", "gpu_index", "device", "uuid", "model", "gpu_group", "task", "pod", "namespace", "job", "queue",
    "status", "fractional", "share", "alloc_memory_mib", "used_memory_mib", "pod_util", "attribution", "dcgm_pod",
    "memory_total_mib", "memory_used_mib", "memory_free_mib", "memory_reserved_mib", "gpu_util",
    "gr_engine_active", "dram_active", "power_w", "temp_c", "xid", "has_metrics",
    "device_source", "over_share", "idle_allocated", "unallocated_in_use", "holder_unknown", "evidence",
]
"""Columns of the per-GPU frame: one row per (GPU, slice); a GPU with no slice has one row with ``task`` NaN.

Units: memory in MiB, utilisation as a 0-1 ratio, power in W, temperature in degrees C; ``xid`` is the last
XID error code (0 = none). ``used_memory_mib``/``pod_util`` are the slice's own; ``memory_*``/``gpu_util``/...
are the whole GPU's. ``attribution`` says how ``used_memory_mib`` was obtained: ``exporter`` or
``proportional``. ``gpu_index`` is the grid's cell (a GPU-equivalent on MIG nodes); ``device`` names the device as
dcgm-exporter numbers it (:func:`device_column`).
"""

_DEVICE_FIELDS = {V.FB_USED: "memory_used_mib", V.FB_FREE: "memory_free_mib", V.FB_RESERVED: "memory_reserved_mib",
                  V.FB_TOTAL: "memory_total_mib", V.GPU_UTIL: "gpu_util", V.GR_ENGINE_ACTIVE: "gr_engine_active",
                  V.DRAM_ACTIVE: "dram_active", V.POWER: "power_w", V.TEMP: "temp_c", V.XID: "xid"}


def empty_frame() -> pd.DataFrame:
    """A frame with :data:`FRAME_COLUMNS` and no rows."""
    return pd.DataFrame({c: pd.Series(dtype="object") for c in FRAME_COLUMNS})


# ------------------------------------------------------------------------------------------ samples

def _name_index(variant: V.DetectedVariant) -> dict[str, tuple[str, float]]:
    return {spec.name: (field, spec.scale) for field, spec in variant.metrics.items()}


def _sample_rows(items: Iterable[tuple[str, dict, float]], variant: V.DetectedVariant) -> pd.DataFrame:
    names = _name_index(variant)
    keys = [variant.label(c) or "\0absent" for c in
            ("host", "gpu", "uuid", "model", "pod", "namespace", "container", "pod_uid", "mig_instance",
             "mig_profile")]
    k_host, k_gpu, k_uuid, k_model, k_pod, k_ns, k_cont, k_uid, k_mig, k_prof = keys
    rows = []
    append = rows.append
    problems: list[str] = []
    n_problems = 0
    for metric, labels, raw in items:
        hit = names.get(metric)
        if hit is None:
            continue
        gpu = labels.get(k_gpu, "")
        host = labels.get(k_host, "")
        if not gpu.isdigit() or not host:
            continue
        mig, prof = labels.get(k_mig, ""), labels.get(k_prof, "")
        if mig or prof:
            problem = label_problem(metric, host, gpu, labels, k_mig, k_prof)
            if problem is not None:
                n_problems += 1
                if len(problems) < MAX_PROBLEMS:
                    problems.append(problem)
                continue
        append((host, int(gpu), labels.get(k_uuid, ""), labels.get(k_model, ""), hit[0], raw,
                labels.get(k_pod, ""), labels.get(k_ns, ""), labels.get(k_cont, ""), labels.get(k_uid, ""),
                mig, prof, hit[1]))
    frame = pd.DataFrame(rows, columns=SAMPLE_COLUMNS + [MIG_PROFILE_COLUMN, "scale"]).astype(
        {"gpu_index": "int64", "value": "float64", "scale": "float64"})
    raw = frame["value"].to_numpy()
    frame["value"] = np.where(V.sentinel_mask(raw), np.nan, raw * frame["scale"].to_numpy())
    frame = frame.drop(columns=["scale"])
    frame.attrs["label_problems"] = problems          # read by build_gpu_frame (info["mig_problems"])
    frame.attrs["label_problem_count"] = n_problems
    return frame


def samples_from_vector(result: list[dict], variant: V.DetectedVariant) -> pd.DataFrame:
    """Samples from a Prometheus instant-vector result (``[{"metric": {...}, "value": [ts, "v"]}, ...]``)."""
    def items():
        for series in result:
            labels = series.get("metric", {})
            try:
                raw = float(series["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            yield labels.get("__name__", ""), labels, raw
    return _sample_rows(items(), variant)


def samples_from_exposition(text: str, variant: V.DetectedVariant) -> pd.DataFrame:
    """Samples parsed straight from exporter exposition text (no Prometheus in between)."""
    from prometheus_client.parser import text_string_to_metric_families

    def items():
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                yield s.name, s.labels, s.value
    return _sample_rows(items(), variant)


# ------------------------------------------------------------------------------------------ joining

def _match_hosts(hosts: Iterable[str], node_names: Iterable[str]) -> dict[str, str]:
    """DCGM host label -> snapshot node name: exact, then case-insensitive short name (``n1.example`` -> n1)."""
    nodes = list(node_names)
    exact = set(nodes)
    short = {n.split(".")[0].lower(): n for n in nodes}
    out = {}
    for host in hosts:
        if host in exact:
            out[host] = host
        elif host.split(".")[0].lower() in short:
            out[host] = short[host.split(".")[0].lower()]
    return out


def _reservation_group_indices(snapshot: Snapshot, samples: pd.DataFrame,
                               reservation_groups: Optional[dict[str, str]]) -> dict[GpuKey, int]:
    """``(node, gpu_group) -> gpu_index`` learnt from reservation pods' series."""
    res = samples[samples["is_reservation"]].drop_duplicates(["node", "gpu_index", "pod"])
    if res.empty:
        return {}
    groups_by_node: dict[str, list[str]] = {}
    for _, task in snapshot.iter_tasks():
        if task.node:
            groups_by_node.setdefault(task.node, []).extend(task.gpu_groups)
    out = {}
    for row in res.itertuples(index=False):
        group = (reservation_groups or {}).get(row.pod) or (reservation_groups or {}).get(
            f"{row.namespace}/{row.pod}")
        if group is None:
            group = reservation_group_index(row.node, row.pod, groups_by_node.get(row.node, []))
        if group is not None:
            out[(row.node, group)] = int(row.gpu_index)
    return out


def _pod_devices(samples: pd.DataFrame) -> dict[tuple[str, str, str], list[int]]:
    """``(node, namespace, pod) -> sorted device indices`` dcgm-exporter labelled with the pod (reservation
    pods excluded: they stand for a GPU group, not for the pods sharing it)."""
    own = samples[samples["has_pod"] & ~samples["is_reservation"]]
    if own.empty:
        return {}
    pairs = own[["node", "namespace", "pod", "gpu_index"]].drop_duplicates().sort_values("gpu_index", kind="stable")
    out: dict[tuple[str, str, str], list[int]] = {}
    for key in zip(pairs["node"].tolist(), pairs["namespace"].tolist(), pairs["pod"].tolist(),
                   pairs["gpu_index"].tolist()):
        out.setdefault(key[:3], []).append(int(key[3]))
    return out


def build_gpu_frame(snapshot: Snapshot, samples: pd.DataFrame, idle_max_util: Optional[dict[GpuKey, float]] = None,
                    *, reservation_groups: Optional[dict[str, str]] = None, idle_util_threshold: float = 0.05,
                    in_use_memory_mib: float = 256.0, over_share_tolerance_mib: float = 0.0,
                    info: Optional[dict] = None,
                    idle_instance_util: Optional[dict[tuple[str, int, int], float]] = None) -> pd.DataFrame:
    """The per-GPU frame (:data:`FRAME_COLUMNS`) for ``snapshot`` from DCGM ``samples``.

    ``idle_max_util`` maps a GPU to its maximum utilisation over a window the data fully covers (GPUs
    missing from it are never flagged idle); ``idle_instance_util`` the same per MIG instance, keyed
    ``(node, physical gpu, instance id)``. Flags: ``over_share`` = the slice uses more memory than it was
    allocated (+ tolerance; KAI does not isolate, so neighbours risk OOM); ``idle_allocated`` = the GPU holds
    slices but its utilisation stayed below ``idle_util_threshold`` for the window; ``unallocated_in_use`` =
    no slice, yet memory used above ``in_use_memory_mib`` or utilisation at or above the threshold.
    MIG instance series (``GPU_I_ID``/``GPU_I_PROFILE``) fill the cells their instances span on MIG nodes
    (:mod:`.dcgm_mig`). ``info``, when given, receives counts of series dropped (``unknown_host_series``,
    ``mig_parent_series``), ``mig_series``, the per-instance usage ``mig_instances``
    (:data:`~.dcgm_mig.INSTANCE_COLUMNS`) and ``mig_problems`` (messages naming each unusable series).
    """
    inv = gpu_inventory(snapshot, with_uuid=False).rename(columns={"memory_total_mib": "memory_total_mib_snapshot"})
    info = info if info is not None else {}
    s = samples.copy()
    if MIG_PROFILE_COLUMN not in s.columns:
        s[MIG_PROFILE_COLUMN] = ""
    host_map = _match_hosts(s["host"].unique(), (n.name for n in snapshot.nodes))
    s["node"] = s["host"].map(host_map)
    info["unknown_host_series"] = int(s["node"].isna().sum())
    problems = list(samples.attrs.get("label_problems", ()))
    parsed_problems = int(samples.attrs.get("label_problem_count", len(problems)))
    mig = split_mig(s[s["node"].notna()], snapshot.node_map(), info, problems)
    info["mig_instances"] = mig.instances
    info["mig_problem_count"] = parsed_problems + len(problems) - len(samples.attrs.get("label_problems", ()))
    info["mig_problems"] = problems[:MAX_PROBLEMS]
    _log_problems(problems)
    s = mig.whole.copy()
    s["has_pod"] = s["pod"] != ""
    s["is_reservation"] = (s["pod"].str.startswith(RESERVATION_POD_PREFIX)
                           & s["namespace"].isin(["", RESERVATION_NAMESPACE]))  # = allocation.is_reservation_pod
    s["priority"] = np.where(~s["has_pod"], 0, np.where(s["is_reservation"], 1, 2))

    # 1. device values (one stable sort by priority serves the device values, the identity and the credit)
    ordered = s.sort_values("priority", kind="stable")
    dev = (ordered.drop_duplicates(["node", "gpu_index", "field"])
           .pivot(index=["node", "gpu_index"], columns="field", values="value")
           .rename(columns=_DEVICE_FIELDS))
    for col in _DEVICE_FIELDS.values():
        if col not in dev.columns:
            dev[col] = np.nan
    dev = dev[list(_DEVICE_FIELDS.values())]
    dev["has_metrics"] = True
    first = ordered.drop_duplicates(["node", "gpu_index"])
    ident = first.set_index(["node", "gpu_index"])[["uuid", "model"]].rename(columns={"model": "dcgm_model"})
    credited = ordered[ordered["has_pod"]].drop_duplicates(["node", "gpu_index"])
    credited = (credited.assign(dcgm_pod=credited["namespace"] + "/" + credited["pod"])
                .set_index(["node", "gpu_index"])[["dcgm_pod"]])
    per_gpu = dev.join(ident, how="left").join(credited, how="left").reset_index()  # all keyed by GPU
    if len(mig.cells):   # MIG instances' cells: the instance's figures, its pod credited
        per_gpu = pd.concat([per_gpu, mig.cells.assign(has_metrics=True)], ignore_index=True).drop_duplicates(
            ["node", "gpu_index"], keep="last")

    # 2. per-pod values (per-process mode): pod-labelled FB_USED/GPU_UTIL next to an unlabelled series
    unlabelled = s.loc[~s["has_pod"], ["node", "gpu_index", "field"]].drop_duplicates()
    pp = s[s["has_pod"] & ~s["is_reservation"] & s["field"].isin(V.PER_POD_FIELDS)]
    pp = pp.merge(unlabelled, on=["node", "gpu_index", "field"])
    if len(pp):
        per_pod = (pp.drop_duplicates(["node", "gpu_index", "namespace", "pod", "field"])
                   .pivot(index=["node", "gpu_index", "namespace", "pod"], columns="field", values="value")
                   .rename(columns={V.FB_USED: "pod_memory_used_mib", V.GPU_UTIL: "pod_util"}))
        for col in ("pod_memory_used_mib", "pod_util"):
            if col not in per_pod.columns:
                per_pod[col] = np.nan
        per_pod = per_pod[["pod_memory_used_mib", "pod_util"]].reset_index()
    else:
        per_pod = None                # exclusive mode: no per-pod series at all (the common case)

    # 3. slices: reservation pods resolve devices of fractional tasks that only know their group, the pod
    #    labels dcgm-exporter puts on a device resolve whole-GPU tasks (Kubernetes objects never say which)
    sl = slices(snapshot, _reservation_group_indices(snapshot, s, reservation_groups),
                {**_pod_devices(s), **mig.pod_cells})
    frame = inv.merge(sl, on=["node", "gpu_index"], how="outer")
    frame = frame.merge(per_gpu, on=["node", "gpu_index"], how="left")
    if per_pod is not None:
        frame = frame.merge(per_pod, on=["node", "gpu_index", "namespace", "pod"], how="left")
    else:
        frame["pod_memory_used_mib"] = np.nan
        frame["pod_util"] = np.nan

    frame["model"] = frame["dcgm_model"].where(frame["dcgm_model"].notna() & (frame["dcgm_model"] != ""),
                                               frame["model"])
    frame["has_metrics"] = frame["has_metrics"].eq(True)
    total_from_parts = frame["memory_used_mib"] + frame["memory_free_mib"] + frame["memory_reserved_mib"].fillna(0)
    frame["memory_total_mib"] = (frame["memory_total_mib"].fillna(total_from_parts)
                                 .fillna(frame["memory_total_mib_snapshot"]))

    # 4. attribution
    has_task = frame["task"].notna()
    key = [frame["node"], frame["gpu_index"]]
    n_slices = has_task.groupby(key).transform("sum")
    share_sum = frame["share"].where(has_task, 0.0).groupby(key).transform("sum")
    own_pod = frame["namespace"] + "/" + frame["pod"]
    exclusive = has_task & (n_slices == 1) & ~frame["fractional"].eq(True) & (frame["dcgm_pod"] == own_pod)
    per_pod_known = has_task & frame["pod_memory_used_mib"].notna()
    proportional = has_task & ~per_pod_known & ~exclusive & frame["memory_used_mib"].notna() & (share_sum > 0)
    frame["used_memory_mib"] = np.select(
        [per_pod_known, exclusive, proportional],
        [frame["pod_memory_used_mib"], frame["memory_used_mib"],
         frame["memory_used_mib"] * frame["share"] / share_sum.where(share_sum > 0, 1.0)],
        default=np.nan)
    frame["pod_util"] = frame["pod_util"].where(per_pod_known, frame["gpu_util"].where(exclusive))
    frame["attribution"] = np.select([per_pod_known | exclusive, proportional], ["exporter", "proportional"],
                                     default=None)

    # 5. flags, with their evidence (gpu_flags)
    idle_by_cell = mig.remap_idle(idle_max_util, idle_instance_util)   # keyed by physical GPU and instance
    frame["device"] = device_column(frame, mig.device_names(), {n.name for n in snapshot.nodes if n.mig})
    frame = flag_frame(frame, window_max_series(frame, idle_by_cell), idle_util_threshold=idle_util_threshold,
                       in_use_memory_mib=in_use_memory_mib, over_share_tolerance_mib=over_share_tolerance_mib)
    frame["has_metrics"] = frame["has_metrics"].fillna(False).astype(bool)
    frame = frame.sort_values(["node", "gpu_index", "task"], na_position="first", kind="stable")
    return frame[FRAME_COLUMNS].reset_index(drop=True)


def device_column(frame: pd.DataFrame, names: dict, mig_nodes: set) -> np.ndarray:
    """Per row, the device as dcgm-exporter and ``nvidia-smi`` number it: ``names`` (a MIG node's cells, from
    its instance series: ``GPU 0 MIG instance 2 (1g.10gb)``, ``GPU 1``), else ``GPU <gpu_index>``; empty where
    it is not known (a device no evidence gives, a MIG node's cell without instance series)."""
    index = frame["gpu_index"].to_numpy()
    on_mig = frame["node"].isin(mig_nodes).to_numpy()
    out = np.where((index >= 0) & ~on_mig, "GPU " + pd.Series(index, dtype="int64").astype(str).to_numpy(object),
                   "").astype(object)
    nodes = frame["node"].to_numpy(object)
    for row in np.nonzero(on_mig)[0].tolist():
        out[row] = names.get((nodes[row], int(index[row])), "")
    return out


_logged_problems: dict[str, None] = {}


def _log_problems(problems: list[str]) -> None:
    """Warn once per distinct problem (a reader re-reads the same bad series every tick)."""
    for message in problems:
        if message not in _logged_problems:
            if len(_logged_problems) > 1000:
                _logged_problems.clear()
            _logged_problems[message] = None
            log.warning("DCGM: %s", message)


def gpu_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU: allocated share, slice count, memory/utilisation, and any flag raised on it
    (``gpu_index = -1`` rows: GPUs held on that node whose device is unknown)."""
    if frame.empty:
        return pd.DataFrame(columns=["node", "gpu_index", "slices", "allocated_share", "memory_used_mib",
                                     "gpu_util", "over_share", "idle_allocated", "unallocated_in_use",
                                     "holder_unknown"])
    g = frame.groupby(["node", "gpu_index"], sort=True)
    return pd.DataFrame({
        "slices": g["task"].count(),
        "allocated_share": g["share"].sum(min_count=1).fillna(0.0),
        "memory_used_mib": g["memory_used_mib"].first(),
        "gpu_util": g["gpu_util"].first(),
        "over_share": g["over_share"].any(),
        "idle_allocated": g["idle_allocated"].any(),
        "unallocated_in_use": g["unallocated_in_use"].any(),
        "holder_unknown": g["holder_unknown"].any(),
    }).reset_index()
