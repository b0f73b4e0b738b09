"""MIG instance series -> per-instance usage, and the GPU-equivalent cells of the per-GPU frame they fill.

dcgm-exporter's default ``--devices f`` watches, per GPU, either the GPU or, when it has MIG instances, only its
instances (NVIDIA/dcgm-exporter ``internal/pkg/devicemonitoring/device_monitoring.go``
``monitorAllGPUInstances``); with ``--devices g`` plus instances (``-d g,i``) a MIG GPU has both. An instance
series carries ``GPU_I_PROFILE``/``GPU_I_ID`` and, with pod attribution on, the pod holding the instance
(``internal/pkg/transformation/kubernetes.go`` maps ``nvidia.com/mig-*`` devices to ``<gpu>-<GPU_I_ID>``).
kaidash reads them as follows (docs/metrics.md "MIG instances"):

* an instance's usage is its own (:data:`INSTANCE_COLUMNS`, one row per node, physical GPU and instance id);
* a whole-GPU series of a GPU that has instance series is the parent's total, over the same memory the
  instances report, and its pod labels are not trustworthy (dcgm-exporter also keys each MIG pod under its
  MIG device id without the ``MIG-`` prefix, one pod per key): it is dropped and counted, never attributed (no
  double counting);
* instances sit on the snapshot's GPU-equivalent cells in :func:`~.mig.instance_cells` order; each cell of an
  instance gets the instance's memory figures divided by its width and its activity ratios as they are, and
  the instance's pod as the pod credited, so a MIG pod's slices get their instance's used memory, split over
  the cells it spans (the attribution of a whole GPU: ``exporter``);
* the whole GPUs of a MIG node are numbered after the instances' cells: physical index ``p`` goes to cell
  ``mig cells + (p - MIG GPUs below p)``.

Only nodes the snapshot gives MIG instances (``Node.mig``) are read this way; instance series on another node
are dropped with a warning naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ..model import Node, mig_gpu_total
from . import variants as V
from .mig import INSTANCE_LABEL, PROFILE_LABEL, instance_cells, parse_profile

INSTANCE_COLUMNS = ["node", "gpu_index", "instance_id", "profile", "uuid", "model", "pod", "namespace", "container",
                    "first_cell", "width", "fb_used_mib", "fb_free_mib", "fb_reserved_mib", "fb_total_mib",
                    "gpu_util", "gr_engine_active", "dram_active"]
"""Per-instance usage (``info["mig_instances"]``): ``gpu_index`` is the physical GPU (the ``gpu`` label),
``first_cell``/``width`` the snapshot cells the instance spans (NaN when not placed), memory in MiB, ratios 0-1;
``fb_total_mib`` is reported or used + free + reserved. ``gpu_util`` is NaN unless the exporter reports it for
instances (NVML does not)."""

_INSTANCE_FIELDS = {V.FB_USED: "fb_used_mib", V.FB_FREE: "fb_free_mib", V.FB_RESERVED: "fb_reserved_mib",
                    V.FB_TOTAL: "fb_total_mib", V.GPU_UTIL: "gpu_util", V.GR_ENGINE_ACTIVE: "gr_engine_active",
                    V.DRAM_ACTIVE: "dram_active"}
_SPLIT_FIELDS = {"fb_used_mib": "memory_used_mib", "fb_free_mib": "memory_free_mib",
                 "fb_reserved_mib": "memory_reserved_mib", "fb_total_mib": "memory_total_mib"}
_RATIO_FIELDS = {"gr_engine_active": "gr_engine_active", "dram_active": "dram_active"}

MAX_PROBLEMS = 20
"""Label problems kept per read (the count of all of them is in ``info``)."""


def label_problem(metric: str, host: str, gpu: str, labels: dict, k_mig: str, k_prof: str) -> Optional[str]:
    """Why a series' MIG labels are unusable (None when they are fine or absent). Both must be present, the id
    a number; a profile kaidash does not know is a warning only (:func:`split_mig` keeps the series)."""
    mig, prof = labels.get(k_mig, ""), labels.get(k_prof, "")
    name = f'{metric}{{host="{host}",gpu="{gpu}",{INSTANCE_LABEL}="{mig}",{PROFILE_LABEL}="{prof}"}}'
    if mig and not prof:
        return f"series {name}: label {INSTANCE_LABEL} without {PROFILE_LABEL}; series skipped"
    if prof and not mig:
        return f"series {name}: label {PROFILE_LABEL} without {INSTANCE_LABEL}; series skipped"
    if mig and not mig.isdigit():
        return f"series {name}: label {INSTANCE_LABEL} is not an instance number; series skipped"
    return None


@dataclass
class MigSplit:
    """What :func:`split_mig` makes of a node-mapped sample frame."""

    whole: pd.DataFrame
    """Samples of whole GPUs, MIG nodes' ones re-indexed to their cells, MIG parents' series removed."""
    instances: pd.DataFrame
    """:data:`INSTANCE_COLUMNS`."""
    cells: pd.DataFrame
    """Device values per instance cell: ``node``, ``gpu_index`` (cell) and the per-GPU frame's device columns."""
    pod_cells: dict = field(default_factory=dict)
    """``(node, namespace, pod) -> [cell, ...]`` of the instances dcgm-exporter labelled with the pod."""
    remap: dict = field(default_factory=dict)
    """``(node, physical index) -> cell`` for whole GPUs of MIG nodes; MIG parents map to None."""
    instance_cells: dict = field(default_factory=dict)
    """``(node, physical index, instance id) -> [cell, ...]`` of every placed instance."""

    def device_names(self) -> dict:
        """``(node, cell) -> name`` of the device a cell of a node with instance series is on, as dcgm-exporter and
        ``nvidia-smi`` number it: ``GPU 0 MIG instance 3 (1g.10gb)`` for an instance's cells, ``GPU 1`` for a
        whole GPU (its cell index is not its device index); cells of other nodes are not named here."""
        names: dict = {}
        for (node, physical), cell in self.remap.items():
            if cell is not None:
                names[(node, cell)] = f"GPU {physical}"
        placed = self.instances[self.instances["first_cell"].notna()] if len(self.instances) else self.instances
        for node, gpu, iid, profile in zip(placed["node"], placed["gpu_index"], placed["instance_id"],
                                           placed["profile"]):
            for cell in self.instance_cells.get((node, int(gpu), int(iid)), ()):
                names[(node, cell)] = f"GPU {int(gpu)} MIG instance {int(iid)} ({profile})"
        return names

    def remap_idle(self, idle: Optional[dict], idle_instances: Optional[dict] = None) -> Optional[dict]:
        """An idle window keyed by physical GPU re-keyed by cell (MIG parents dropped: their window mixes
        instances), plus each instance's window (``(node, gpu, instance id) -> max``) on its cells."""
        if not self.remap and not self.instance_cells:
            return idle
        out = {}
        for (node, index), value in (idle or {}).items():
            cell = self.remap.get((node, index), index)
            if cell is not None:
                out[(node, cell)] = value
        for key, value in (idle_instances or {}).items():
            for cell in self.instance_cells.get(key, ()):
                out[(key[0], cell)] = value
        return out


def empty_instances() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in INSTANCE_COLUMNS})


def split_mig(s: pd.DataFrame, nodes: dict[str, Node], info: dict, problems: list[str]) -> MigSplit:
    """Split samples ``s`` (with a ``node`` column; ``mig`` = ``GPU_I_ID``, ``mig_profile``) into whole-GPU
    samples, per-instance usage and the instance cells (see the module docstring). Counts go to ``info``
    (``mig_series``, ``mig_parent_series``, ``mig_unplaced_instances``), warnings to ``problems``."""
    is_mig = (s["mig"] != "").to_numpy()
    info["mig_series"] = int(is_mig.sum())
    if not is_mig.any():
        return MigSplit(whole=s, instances=empty_instances(), cells=pd.DataFrame())
    mig_nodes = {n for n, node in nodes.items() if node.mig}
    on_mig_node = s["node"].isin(mig_nodes).to_numpy()
    stray = s[is_mig & ~on_mig_node]
    for node in sorted(stray["node"].unique()):
        problems.append(f"node {node}: {int((stray['node'] == node).sum())} MIG instance series "
                        f"({PROFILE_LABEL}/{INSTANCE_LABEL}) but the snapshot has no MIG instances on it; skipped")
    inst = s[is_mig & on_mig_node]
    whole = s[~is_mig]
    if inst.empty:
        return MigSplit(whole=whole, instances=empty_instances(), cells=pd.DataFrame())

    instances = _instance_frame(inst, problems)
    parents = set(zip(instances["node"], instances["gpu_index"]))
    keys = pd.MultiIndex.from_arrays([whole["node"], whole["gpu_index"]])
    is_parent = keys.isin(list(parents)) if parents else np.zeros(len(whole), bool)
    info["mig_parent_series"] = int(is_parent.sum())
    whole = whole[~is_parent].copy()
    remap = _whole_gpu_cells(whole, instances, nodes, parents)
    if remap:
        on = whole["node"].isin({node for node, _ in remap}).to_numpy()
        keys = zip(whole["node"].to_numpy()[on].tolist(), whole["gpu_index"].to_numpy()[on].tolist())
        index = whole["gpu_index"].to_numpy().copy()
        index[on] = [remap[k] for k in keys]
        whole["gpu_index"] = index
    for key in parents:
        remap[key] = None
    info["mig_unplaced_instances"] = int(instances["first_cell"].isna().sum())
    placed = instances[instances["first_cell"].notna()]
    cells_of = {(n, int(g), int(i)): list(range(int(c), int(c) + int(w))) for n, g, i, c, w in
                zip(placed["node"], placed["gpu_index"], placed["instance_id"], placed["first_cell"], placed["width"])}
    return MigSplit(whole=whole, instances=instances, cells=_cell_values(instances),
                    pod_cells=_pod_cells(instances), remap=remap, instance_cells=cells_of)


def _instance_frame(inst: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """One row per (node, physical GPU, instance id): identity from its first series, fields pivoted."""
    keys = ["node", "gpu_index", "mig"]
    first = inst.drop_duplicates(keys).set_index(keys)[["mig_profile", "uuid", "model", "pod", "namespace",
                                                        "container"]]
    values = (inst.drop_duplicates(keys + ["field"]).pivot(index=keys, columns="field", values="value")
              .rename(columns=_INSTANCE_FIELDS))
    out = first.join(values).reset_index().rename(columns={"mig": "instance_id", "mig_profile": "profile"})
    for col in _INSTANCE_FIELDS.values():
        if col not in out.columns:
            out[col] = np.nan
    out["instance_id"] = out["instance_id"].astype("int64")
    out["fb_total_mib"] = out["fb_total_mib"].fillna(out["fb_used_mib"] + out["fb_free_mib"]
                                                     + out["fb_reserved_mib"].fillna(0))
    widths = []
    for row in out.itertuples(index=False):
        prof = parse_profile(row.profile)
        if prof is None:
            problems.append(f'MIG instance {row.node} gpu {row.gpu_index} {INSTANCE_LABEL}="{row.instance_id}": '
                            f'unknown {PROFILE_LABEL} "{row.profile}" (expected <G>g.<M>gb); its usage is kept '
                            f"but not placed on the node's GPU cells")
        widths.append(prof.slices if prof else np.nan)
    out["width"] = widths
    out = out.sort_values(["node", "gpu_index", "instance_id"], kind="stable").reset_index(drop=True)
    first_cell = {}
    for node, rows in out.groupby("node", sort=False):
        cells = instance_cells([(int(g), int(i), None if np.isnan(w) else int(w))
                                for g, i, w in zip(rows["gpu_index"], rows["instance_id"], rows["width"])])
        for g, i in zip(rows["gpu_index"], rows["instance_id"]):
            first_cell[(node, int(g), int(i))] = cells.get((int(g), int(i)), np.nan)
    out["first_cell"] = [first_cell[(n, int(g), int(i))] for n, g, i in
                         zip(out["node"], out["gpu_index"], out["instance_id"])]
    return out[INSTANCE_COLUMNS]


def _whole_gpu_cells(whole: pd.DataFrame, instances: pd.DataFrame, nodes: dict[str, Node],
                     parents: set) -> dict:
    """``(node, physical) -> cell`` for whole GPUs of the nodes with instance series."""
    mig_gpus: dict[str, list[int]] = {}
    for node, g in parents:
        mig_gpus.setdefault(node, []).append(g)
    keys = whole.loc[whole["node"].isin(mig_gpus), ["node", "gpu_index"]].drop_duplicates()
    out = {}
    for node, g in zip(keys["node"].tolist(), keys["gpu_index"].tolist()):
        out[(node, g)] = mig_gpu_total(nodes[node].mig) + g - sum(1 for m in mig_gpus[node] if m < g)
    return out


def _cell_values(instances: pd.DataFrame) -> pd.DataFrame:
    """Per instance cell: the instance's memory divided by its width, its ratios, identity and pod."""
    placed = instances[instances["first_cell"].notna()]
    if placed.empty:
        return pd.DataFrame()
    width = placed["width"].astype("int64").to_numpy()
    rep = placed.loc[placed.index.repeat(width)].reset_index(drop=True)
    offsets = np.concatenate([np.arange(w) for w in width])
    cells = pd.DataFrame({"node": rep["node"], "gpu_index": rep["first_cell"].astype("int64") + offsets})
    w = rep["width"].astype(float)
    for src, dst in _SPLIT_FIELDS.items():
        cells[dst] = rep[src].astype(float) / w
    for src, dst in _RATIO_FIELDS.items():
        cells[dst] = rep[src].astype(float)
    # NVML gives no utilisation for an instance: its graphics-engine activity stands in for gpu_util
    cells["gpu_util"] = rep["gpu_util"].astype(float).fillna(rep["gr_engine_active"].astype(float))
    cells["uuid"], cells["dcgm_model"] = rep["uuid"], rep["model"]
    has_pod = rep["pod"] != ""
    cells["dcgm_pod"] = (rep["namespace"] + "/" + rep["pod"]).where(has_pod, np.nan)
    return cells


def _pod_cells(instances: pd.DataFrame) -> dict:
    out: dict = {}
    placed = instances[instances["first_cell"].notna() & (instances["pod"] != "")]
    for row in placed.itertuples(index=False):
        out.setdefault((row.node, row.namespace, row.pod), []).extend(
            range(int(row.first_cell), int(row.first_cell) + int(row.width)))
    return {k: sorted(v) for k, v in out.items()}


__all__ = ["INSTANCE_COLUMNS", "MAX_PROBLEMS", "MigSplit", "empty_instances", "label_problem", "split_mig"]
