"""What the GPUs of one snapshot cost per hour, and how much of it is waste: per queue and cluster-wide.

Categories (GPU devices × the model's price per GPU-hour):

| category | scope | what it counts |
|---|---|---|
| ``capacity`` | cluster | every GPU of a Ready node |
| ``allocated`` | queue | GPUs held by the queue's running/binding pods (fractions as their share) |
| ``idle_allocated`` | queue | the part of ``allocated`` on GPUs whose utilisation stays under 5 % (DCGM's flag over its idle window, or the pods' recorded usage) |
| ``stranded`` | cluster | free GPU capacity on Ready nodes that no pending pod shape can use (too few whole GPUs on the node, a free fraction smaller than any pending fraction, no CPU/memory left beside it); 0 when no GPU pod is pending |
| ``free`` | cluster | the rest of the free capacity: some pending shape fits there, or nothing is pending |
| ``unavailable`` | cluster | GPUs of not-Ready nodes |
| ``unused_quota`` | queue | GPU quota (deserved) a leaf queue holds but does not use: max(0, deserved − allocated), at the cluster's mean price |

``capacity = allocated + stranded + free`` on Ready nodes (up to other schedulers' pods). ``idle_allocated`` is
part of ``allocated``; ``unused_quota`` overlaps the others (another queue may be borrowing it), so the
categories are not to be added up.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd

from ..model import ALLOCATED_STATUSES, Node, Snapshot, memory_to_fraction
from ..whatif import gpu_occupancy
from .prices import GpuPrices

CATEGORIES = ("capacity", "allocated", "idle_allocated", "stranded", "free", "unavailable", "unused_quota")
WASTE = ("idle_allocated", "stranded", "unused_quota")
"""The three waste categories the dashboard and alerts report."""
RATE_COLUMNS = ["category", "queue", "gpu_model", "gpus", "cost_per_h"]
IDLE_UTIL = 0.05
"""Utilisation under which an allocated GPU counts as idle (the per-GPU frame's ``idle_allocated`` threshold)."""
_EPS = 1e-9


@dataclass
class CostRates:
    """Cost per hour of one snapshot: ``frame`` has one row per (category, queue, GPU model), columns
    :data:`RATE_COLUMNS` (``queue`` is ``""`` for cluster-wide categories). ``idle_basis`` says where idleness
    came from: ``dcgm`` (the per-GPU frame), ``usage`` (pods' recorded usage) or ``none`` (unknown: 0)."""

    time: float
    frame: pd.DataFrame
    currency: str = "USD"
    idle_basis: str = "none"
    notes: list[str] = field(default_factory=list)

    def total(self, category: str, queue: Optional[str] = None) -> float:
        """Cost per hour of ``category`` (cluster-wide, or for one queue)."""
        f = self.frame[self.frame["category"] == category]
        if queue is not None:
            f = f[f["queue"] == queue]
        return float(f["cost_per_h"].sum())

    def gpus(self, category: str, queue: Optional[str] = None) -> float:
        """GPU devices in ``category`` (cluster-wide, or for one queue)."""
        f = self.frame[self.frame["category"] == category]
        if queue is not None:
            f = f[f["queue"] == queue]
        return float(f["gpus"].sum())

    def cluster(self) -> dict[str, float]:
        """``{category: cost per hour}`` over the whole cluster (every category, 0 when empty)."""
        sums = self.frame.groupby("category")["cost_per_h"].sum()
        return {c: float(sums.get(c, 0.0)) for c in CATEGORIES}

    def per_queue(self) -> pd.DataFrame:
        """Queue × queue-scoped category (``allocated``, ``idle_allocated``, ``unused_quota``), cost per hour."""
        f = self.frame[self.frame["queue"] != ""]
        table = f.pivot_table(index="queue", columns="category", values="cost_per_h", aggfunc="sum", fill_value=0.0)
        for c in ("allocated", "idle_allocated", "unused_quota"):
            if c not in table:
                table[c] = 0.0
        return table[["allocated", "idle_allocated", "unused_quota"]]

    def per_model(self) -> pd.DataFrame:
        """GPU model × category: GPUs and cost per hour."""
        return self.frame.groupby(["gpu_model", "category"], as_index=False)[["gpus", "cost_per_h"]].sum()

    def to_csv(self, path_or_buf=None) -> Optional[str]:
        """The rows as CSV (with ``time`` and ``currency`` columns)."""
        out = self.frame.assign(time=self.time, currency=self.currency)
        return out.to_csv(path_or_buf, index=False)


# ------------------------------------------------------------------------------------------ building blocks

def allocated_gpus(snapshot: Snapshot) -> dict[tuple[str, str], float]:
    """``{(queue, gpu model): GPUs}`` held by running/binding pods."""
    nodes = snapshot.node_map()
    out: dict[tuple[str, str], float] = defaultdict(float)
    for job, task in snapshot.iter_tasks():
        if task.status in ALLOCATED_STATUSES and task.is_gpu and task.node in nodes:
            node = nodes[task.node]
            out[(job.queue, _model(node))] += task.device_share(node.gpu_memory_mib) * task.devices_held
    return dict(out)


def idle_gpus_from_frame(frame: pd.DataFrame, snapshot: Snapshot) -> dict[tuple[str, str], float]:
    """``{(queue, gpu model): GPUs}`` on GPUs the per-GPU DCGM frame flags ``idle_allocated``."""
    if frame is None or frame.empty:
        return {}
    nodes = snapshot.node_map()
    f = frame[frame["idle_allocated"].astype(bool) & frame["task"].notna()]
    out: dict[tuple[str, str], float] = defaultdict(float)
    for node, queue, share in zip(f["node"], f["queue"], f["share"].astype(float)):
        out[(str(queue), _model(nodes.get(node)))] += share
    return dict(out)


def idle_gpus_from_usage(snapshot: Snapshot, threshold: float = IDLE_UTIL) -> Optional[dict[tuple[str, str], float]]:
    """``{(queue, gpu model): GPUs}`` on devices whose pods' recorded utilisation sums under ``threshold``
    (the simulated dcgm-exporter's rule: a GPU's utilisation is the capped sum of its pods'). None when no
    pod records usage."""
    nodes = snapshot.node_map()
    util: dict[tuple, float] = defaultdict(float)
    holders: dict[tuple, list[tuple[str, str, float]]] = defaultdict(list)
    seen = False
    for job, task in snapshot.iter_tasks():
        if task.status not in ALLOCATED_STATUSES or not task.is_gpu or task.node not in nodes:
            continue
        node = nodes[task.node]
        share = task.device_share(node.gpu_memory_mib)
        n = task.devices_held
        if task.gpu_indices:
            devices = [(task.node, i) for i in task.gpu_indices[:n]]
        elif task.gpu_groups:
            devices = [(task.node, "group", g) for g in task.gpu_groups[:n]]
        else:
            devices = [(task.node, "task", task.name, k) for k in range(n)]
        u = task.usage.gpu_util if task.usage is not None else math.nan
        seen = seen or task.usage is not None
        for d in devices:
            util[d] += 0.0 if math.isnan(u) else u
            if math.isnan(u):
                util[d] = math.inf          # unknown usage: never call the device idle
            holders[d].append((job.queue, _model(node), share))
    if not seen:
        return None
    out: dict[tuple[str, str], float] = defaultdict(float)
    for d, u in util.items():
        if min(1.0, u) < threshold:
            for queue, model, share in holders[d]:
                out[(queue, model)] += share
    return dict(out)


def _host_free(snapshot: Snapshot) -> dict[str, tuple[float, float, int]]:
    """Per node: free CPU millis, memory bytes and pod slots (allocatable − other schedulers − our pods)."""
    used = defaultdict(lambda: [0.0, 0.0, 0])
    for _, t in snapshot.iter_tasks():
        if t.node and t.status in ("running", "binding", "releasing", "pipelined"):
            u = used[t.node]
            u[0] += t.cpu_millis
            u[1] += t.memory_bytes
            u[2] += 1
    return {n.name: (n.cpu_millis - n.external.cpu_millis - used[n.name][0],
                     n.memory_bytes - n.external.memory_bytes - used[n.name][1],
                     n.pods - n.external.pods - used[n.name][2]) for n in snapshot.nodes}


def pending_shapes(snapshot: Snapshot) -> list[tuple[str, float, int, float, float]]:
    """Distinct pending GPU pod shapes: ``(kind, value, devices, cpu_millis, memory_bytes)``, kind ``whole``
    (value = GPUs), ``fraction`` (of a device) or ``memory`` (MiB per device)."""
    shapes = set()
    for _, t in snapshot.iter_tasks():
        if t.status != "pending" or not t.is_gpu:
            continue
        if t.gpu_memory_mib is not None:
            shape = ("memory", float(t.gpu_memory_mib), max(1, t.gpu_devices))
        elif t.gpu >= 1:
            shape = ("whole", float(math.ceil(t.gpu)), 1)
        else:
            shape = ("fraction", round(float(t.gpu), 6), max(1, t.gpu_devices))
        shapes.add(shape + (float(t.cpu_millis), float(t.memory_bytes)))
    return sorted(shapes)


def stranded_gpus(snapshot: Snapshot) -> pd.DataFrame:
    """Per Ready GPU node: free GPUs, and the part of them no pending shape can use.

    Columns ``node``, ``gpu_model``, ``free_gpus`` (fully free devices + free fractions of shared ones),
    ``stranded_gpus``, ``why`` (empty when nothing is stranded).
    A fully free device is usable when some pending shape fits on the node (enough free whole devices or a free
    device for a fraction, and the CPU, memory and pod slot beside it); a shared device's free fraction is usable
    when some pending fractional shape fits in it (same host check).
    """
    occ = gpu_occupancy(snapshot)
    host = _host_free(snapshot)
    shapes = pending_shapes(snapshot)
    rows = []
    for node in snapshot.nodes:
        if not node.ready or node.gpus <= 0:
            continue
        devices = occ.get(node.name, [])
        whole = sum(1 for u in devices if u <= _EPS)
        partial = [1.0 - u for u in devices if _EPS < u < 1.0 - _EPS]
        free = whole + sum(partial)
        if free <= _EPS:
            rows.append((node.name, _model(node), 0.0, 0.0, ""))
            continue
        if not shapes:
            rows.append((node.name, _model(node), free, 0.0, "no pending GPU pod"))
            continue
        cpu, mem, pods = host[node.name]
        fits_host = [s for s in shapes if s[3] <= cpu + _EPS and s[4] <= mem + _EPS and pods >= 1]
        whole_usable = False
        fractions = []
        for kind, value, n, _, _ in fits_host:
            if kind == "whole":
                whole_usable = whole_usable or whole >= value
                continue
            need = value if kind == "fraction" else memory_to_fraction(value, node.gpu_memory_mib)
            if need > 1.0 + _EPS:
                continue
            if whole + sum(1 for g in partial if g >= need - _EPS) >= n:
                fractions.append((need, n))
                whole_usable = whole_usable or whole >= 1
        stranded_whole = 0.0 if whole_usable else float(whole)
        stranded_parts = sum(g for g in partial if not any(need <= g + _EPS for need, _ in fractions))
        why = []
        if stranded_whole > _EPS:
            why.append("no pending shape fits the free GPUs")
        if stranded_parts > _EPS:
            why.append("free fractions smaller than any pending fraction")
        stranded, why = stranded_whole + stranded_parts, "; ".join(why)
        rows.append((node.name, _model(node), free, stranded, why))
    return pd.DataFrame(rows, columns=["node", "gpu_model", "free_gpus", "stranded_gpus", "why"])


def unused_quota_gpus(snapshot: Snapshot) -> dict[str, float]:
    """Per leaf queue with a GPU quota: max(0, deserved − allocated GPUs)."""
    allocated: dict[str, float] = defaultdict(float)
    for (queue, _), gpus in allocated_gpus(snapshot).items():
        allocated[queue] += gpus
    return {q.name: max(0.0, q.gpu.quota - allocated[q.name]) for q in snapshot.leaf_queues() if q.gpu.quota > 0}


def mean_price(snapshot: Snapshot, prices: GpuPrices) -> float:
    """Capacity-weighted mean price per GPU-hour over Ready GPU nodes (the price of quota, which names no model)."""
    gpus = [(n.gpus, prices.price(n.gpu_model)) for n in snapshot.nodes if n.ready and n.gpus > 0]
    total = sum(g for g, _ in gpus)
    return sum(g * p for g, p in gpus) / total if total else prices.default_gpu_hour


def _model(node: Optional[Node]) -> str:
    return (node.gpu_model or node.pool) if node is not None else "unknown"


# ------------------------------------------------------------------------------------------ the report

def cost_rates(snapshot: Snapshot, prices: Optional[GpuPrices] = None, gpu_frame: Optional[pd.DataFrame] = None,
               *, idle_util: float = IDLE_UTIL) -> CostRates:
    """Cost per hour of ``snapshot`` by category (see the module doc), per queue and GPU model.

    ``gpu_frame``: the per-GPU DCGM frame (:func:`scheduler.metrics.dcgm.build_gpu_frame`); its
    ``idle_allocated`` flag decides idleness. Without it, the pods' recorded ``usage`` is used when present (a
    simulated cluster), judged at this instant.
    """
    prices = prices or GpuPrices()
    rows: list[tuple[str, str, str, float, float]] = []
    notes: list[str] = []

    def add(category: str, queue: str, model: str, gpus: float, price: float) -> None:
        if gpus > _EPS:
            rows.append((category, queue, model, float(gpus), float(gpus) * price))

    for node in snapshot.nodes:
        if node.gpus > 0:
            add("capacity" if node.ready else "unavailable", "", _model(node), node.gpus, prices.price(node.gpu_model))
    by_model = {_model(n): n.gpu_model for n in snapshot.nodes}
    for (queue, model), gpus in sorted(allocated_gpus(snapshot).items()):
        add("allocated", queue, model, gpus, prices.price(by_model.get(model)))
    if gpu_frame is not None and len(gpu_frame):
        idle, basis = idle_gpus_from_frame(gpu_frame, snapshot), "dcgm"
    else:
        idle, basis = idle_gpus_from_usage(snapshot, idle_util), "usage"
        if idle is None:
            idle, basis = {}, "none"
            notes.append("no GPU utilisation (no DCGM frame, no recorded usage): idle_allocated is 0")
    for (queue, model), gpus in sorted(idle.items()):
        add("idle_allocated", queue, model, gpus, prices.price(by_model.get(model)))
    stranded = stranded_gpus(snapshot)
    for model, f in stranded.groupby("gpu_model"):
        price = prices.price(by_model.get(model))
        add("stranded", "", model, f["stranded_gpus"].sum(), price)
        add("free", "", model, (f["free_gpus"] - f["stranded_gpus"]).sum(), price)
    quota_price = mean_price(snapshot, prices)
    for queue, gpus in sorted(unused_quota_gpus(snapshot).items()):
        add("unused_quota", queue, "(quota)", gpus, quota_price)
    frame = pd.DataFrame(rows, columns=RATE_COLUMNS)
    return CostRates(time=float(snapshot.time), frame=frame, currency=prices.currency, idle_basis=basis, notes=notes)


def cost_summary(rates: CostRates, hours: float = 24.0) -> dict[str, Any]:
    """``{category: cost over hours at this rate}`` plus ``currency``: a quick "per day at this rate"."""
    return {**{c: v * hours for c, v in rates.cluster().items()}, "currency": rates.currency, "hours": hours}


__all__ = ["CostRates", "cost_rates", "cost_summary", "stranded_gpus", "pending_shapes", "allocated_gpus",
           "idle_gpus_from_frame", "idle_gpus_from_usage", "unused_quota_gpus", "mean_price", "CATEGORIES", "WASTE",
           "RATE_COLUMNS", "IDLE_UTIL"]
