"""Flags on the per-GPU frame, each with the evidence behind it (a sentence an on-call engineer can check).

Pure functions over the frame :func:`scheduler.metrics.dcgm.build_gpu_frame` builds. Flags are judged per
device and hold for whole and shared GPUs alike:

* ``over_share``: the slice uses more memory than it was allocated (+ tolerance);
* ``idle_allocated``: the device holds slices and its utilisation stayed below the threshold for the whole
  idle window;
* ``unallocated_in_use``: no slice holds the device, no pod on its node holds a device of unknown index, and
  memory or utilisation says it is in use;
* ``holder_unknown``: no slice holds the device, it is in use, and a pod on its node holds GPUs whose index
  no evidence gives (``device_source = "unknown"``): the device may be that pod's, so it is not called
  unallocated.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

FLAG_COLUMNS = ["over_share", "idle_allocated", "unallocated_in_use", "holder_unknown"]

SOURCE_TEXT = {"snapshot": "recorded on the pod (KAI objects)", "reservation": "KAI GPU group / reservation pod",
               "dcgm": "dcgm-exporter pod label", "unknown": "unknown"}


def _fmt(value: float, unit: str = "") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.0f}{unit}"


def _pct(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * 100:.1f} %"


def flag_frame(frame: pd.DataFrame, window_max: pd.Series, *, idle_util_threshold: float,
               in_use_memory_mib: float, over_share_tolerance_mib: float) -> pd.DataFrame:
    """Set :data:`FLAG_COLUMNS` and ``evidence`` on ``frame`` (modified and returned).

    ``window_max``: per row, the device's maximum utilisation over a fully covered idle window (NaN when
    not known: never flagged idle). The evidence names a row's device by its ``device`` column where that is set
    (a MIG node's cells: ``GPU 0 MIG instance 3 (1g.10gb)``), else as ``GPU <gpu_index>``.
    """
    has_task = frame["task"].notna()
    key = [frame["node"], frame["gpu_index"]]
    allocated = has_task.groupby(key).transform("sum") > 0
    known_device = frame["gpu_index"] >= 0
    unknown_on_node = (has_task & ~known_device).groupby(frame["node"]).transform("sum") > 0
    util_now = frame["gpu_util"].fillna(frame["gr_engine_active"])
    in_use = (frame["memory_used_mib"] > in_use_memory_mib) | (util_now >= idle_util_threshold)
    limit = frame["alloc_memory_mib"] + over_share_tolerance_mib
    frame["over_share"] = has_task & known_device & (frame["used_memory_mib"] > limit)
    frame["idle_allocated"] = allocated & known_device & (window_max < idle_util_threshold)
    free_busy = ~allocated & known_device & in_use
    frame["unallocated_in_use"] = free_busy & ~unknown_on_node
    frame["holder_unknown"] = free_busy & unknown_on_node
    for col in FLAG_COLUMNS:
        frame[col] = frame[col].fillna(False).astype(bool)
    frame["evidence"] = _evidence(frame, window_max, idle_util_threshold)
    return frame


def _unknown_holders(frame: pd.DataFrame) -> dict[str, str]:
    """node -> "ns/pod (n GPUs), ..." for slices whose device is unknown."""
    unknown = frame[frame["task"].notna() & (frame["gpu_index"] < 0)]
    out: dict[str, str] = {}
    for node, part in unknown.groupby("node", sort=False):
        counts = (part["namespace"] + "/" + part["pod"]).value_counts(sort=False)
        out[node] = ", ".join(f"{p} ({n} GPU{'s' if n > 1 else ''})" for p, n in counts.items())
    return out


def _evidence(frame: pd.DataFrame, window_max: pd.Series, threshold: float) -> pd.Series:
    """One sentence per flagged row (empty for the others); built for flagged rows only."""
    out = pd.Series("", index=frame.index, dtype="object")
    flagged = frame[frame[FLAG_COLUMNS].any(axis=1) | (frame["task"].notna() & (frame["gpu_index"] < 0))]
    if flagged.empty:
        return out
    holders = _unknown_holders(frame)
    tasks_on = (frame[frame["task"].notna()].groupby(["node", "gpu_index"])["task"]
                .agg(lambda s: ", ".join(map(str, s))).to_dict())
    texts = []
    for i, row in flagged.iterrows():
        where = f"{row.node} {getattr(row, 'device', '') or f'GPU {row.gpu_index}'}"
        parts = []
        if row.over_share:
            parts.append(f"over share: {row.namespace}/{row.pod} uses {_fmt(row.used_memory_mib, ' MiB')} of {where}, "
                         f"allocated {_fmt(row.alloc_memory_mib, ' MiB')} ({row.attribution}; device from "
                         f"{SOURCE_TEXT.get(row.device_source, row.device_source)})")
        if row.idle_allocated:
            parts.append(f"idle allocated: {where} held by {tasks_on.get((row.node, row.gpu_index), '?')}; "
                         f"utilisation at most {_pct(window_max[i])} over the idle window (< {_pct(threshold)})")
        if row.unallocated_in_use:
            parts.append(f"unallocated in use: no pod holds {where} and every GPU pod on {row.node} has a known "
                         f"device; {_fmt(row.memory_used_mib, ' MiB')} used, utilisation {_pct(row.gpu_util)}"
                         + (f"; DCGM credits {row.dcgm_pod}" if isinstance(row.dcgm_pod, str) else ""))
        if row.holder_unknown:
            parts.append(f"in use, holder unknown: {where} ({_fmt(row.memory_used_mib, ' MiB')} used, utilisation "
                         f"{_pct(row.gpu_util)}) may belong to {holders.get(row.node, '?')}, whose device index no "
                         f"evidence gives")
        if isinstance(row.task, str) and row.gpu_index < 0:
            parts.append(f"held, device unknown: {row.namespace}/{row.pod} holds a GPU on {row.node}; neither KAI's "
                         f"objects nor dcgm-exporter's pod labels say which")
        texts.append("; ".join(parts))
    out.loc[flagged.index] = texts
    return out


def window_max_series(frame: pd.DataFrame, idle_max_util: Optional[dict]) -> pd.Series:
    """Per row of ``frame``, the device's maximum utilisation over the idle window (NaN when unknown)."""
    idle = idle_max_util or {}
    return pd.Series([idle.get((n, int(i)), np.nan) for n, i in zip(frame["node"], frame["gpu_index"])],
                     index=frame.index, dtype="float64")
