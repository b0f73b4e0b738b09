"""A simulated dcgm-exporter: DCGM-format ``/metrics`` for a snapshot's GPUs, from its tasks' ``usage``.

The exposition reproduces dcgm-exporter's (``internal/pkg/rendermetrics/render_metrics.go``; ecosystem.md
§3.3/§3.5): one ``# HELP``/``# TYPE`` pair per family, families in DCGM field-id order, and per GPU the labels
``gpu, UUID, pci_bus_id, device, modelName, Hostname, <label-type fields>, <kubernetes attributes>`` with the
last two groups each in sorted key order (Go templates range over maps sorted). Integer DCGM fields print as
``%d``, doubles as ``%f``. Names, label names and units follow an :class:`~.variants.ExporterVariant`.

Pod attribution is dcgm-exporter's (§3.4): a GPU held by one whole-GPU pod is labelled with that pod; a GPU
shared by KAI fractional pods is labelled with KAI's reservation pod (``kai-resource-reservation``); an idle
GPU has no pod labels. With ``per_pod=True`` the exporter behaves like ``--kubernetes-virtual-gpus`` with
NVML per-process data (PR #594): ``FB_USED`` and ``GPU_UTIL`` get the unlabelled device-level series plus
one series per pod with that pod's own value (and ``pod_uid``); every other family is repeated once per pod
with the whole-GPU value.

MIG nodes (``Node.mig``) are emitted as dcgm-exporter's default ``--devices f`` prints them: a GPU with MIG
instances has only per-instance series, labelled ``GPU_I_PROFILE``/``GPU_I_ID`` between ``modelName`` and the
host (``render_metrics.go``) and with the pod holding the instance; the instances sit on physical GPUs as
:func:`~.mig.mig_layout` packs them, and the node's whole GPUs are numbered after them (values:
:class:`SimInstance`).

Simulated values per GPU (documented so tests can derive them by hand):
memory used = sum of the holders' ``usage.gpu_memory_mib`` (per device), capped at total - reserved;
reserved = min(total, :data:`RESERVED_MIB`); free = total - used - reserved; utilisation =
min(1, sum of the holders' ``usage.gpu_util``); graphics-engine activity = utilisation; DRAM activity =
utilisation / 2; power = idle + utilisation * (max - idle) watts for the model (:data:`POWER_RANGE_W`);
temperature = 30 + 40 * utilisation degrees C; XID = 0. ``overrides`` replace any of these per GPU.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import numpy as np

from ..model import Node, Snapshot, mig_gpu_total
from . import variants as V
from .mig import INSTANCE_LABEL, PROFILE_LABEL, mig_layout
from .allocation import (
    HOLDING_STATUSES,
    RESERVATION_CONTAINER,
    RESERVATION_NAMESPACE,
    gpu_uuid,
    group_indices_from_tasks,
    pod_uid,
    reservation_pod_name,
    task_pod,
)

RESERVED_MIB = 512.0
"""GPU memory the driver reserves (FB_RESERVED) in the simulation, per GPU."""

POWER_RANGE_W = {"H100": (70.0, 700.0), "H200": (70.0, 700.0), "A100": (50.0, 400.0), "L4": (16.0, 72.0),
                 "L40": (35.0, 300.0), "V100": (40.0, 300.0), "T4": (10.0, 70.0)}
DEFAULT_POWER_RANGE_W = (50.0, 300.0)
WORKLOAD_CONTAINER = "main"
DRIVER_VERSION = "550.54.15"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GpuKey = tuple[str, int]


@dataclass
class SimPod:
    """A pod the simulated exporter labels a series with."""

    namespace: str
    pod: str
    container: str
    uid: Optional[str] = None
    vgpu: Optional[str] = None
    fb_used_mib: float = 0.0
    util: float = 0.0


@dataclass
class SimInstance:
    """One simulated MIG instance (:func:`~.mig.mig_layout`): its parent GPU, id, profile, cells and pod.

    ``values`` are the instance's own: used = its pod's ``usage.gpu_memory_mib`` capped at the instance's memory
    (a pod on two instances: its usage split by their memory), free = memory - used, reserved 0, graphics-engine
    activity = min(1, the pod's ``gpu_util``), DRAM activity = half of it. No ``GPU_UTIL`` (NVML reports no
    utilisation for MIG instances) and no power, temperature or XID (device fields: the simulation leaves them
    to the parent GPU, which dcgm-exporter's default ``--devices f`` does not print on a MIG GPU).
    """

    node: str
    gpu: int
    uuid: str
    model_name: str
    instance_id: int
    profile: str
    memory_mib: float
    first_cell: int
    width: int
    pod: Optional[SimPod] = None
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class SimGpu:
    """One simulated GPU-equivalent cell of the snapshot: identity, canonical values, the pod it is credited to,
    and its sharing pods.

    ``gpu_label`` is the physical GPU index the exposition labels it with (the cell index except on MIG
    nodes, :func:`~.mig.mig_layout`); ``mig`` is the MIG instance covering the cell, whose series replace the
    cell's own in the exposition. ``values``/``credited`` stay the per-cell view (a MIG pod's usage spread over
    its cells), which :func:`simulated_samples` does not use for MIG cells.
    """

    node: str
    index: int
    uuid: str
    model_name: str
    pci_bus_id: str
    values: dict[str, float]
    credited: Optional[SimPod] = None
    sharers: list[SimPod] = field(default_factory=list)
    gpu_label: Optional[int] = field(default=None, repr=False)
    mig: Optional[SimInstance] = field(default=None, repr=False)

    @property
    def label_index(self) -> int:
        return self.index if self.gpu_label is None else self.gpu_label


def model_name(gpu_model: Optional[str]) -> str:
    """DCGM's ``modelName`` for a node's GPU model: the device name NVML reports, e.g. "NVIDIA A100-SXM4-80GB". A
    model taken from GPU feature discovery's ``nvidia.com/gpu.product`` label already carries the vendor, with a
    hyphen where NVML has a space ("NVIDIA-A100-SXM4-80GB"); a short model ("H100") gets the vendor prefixed."""
    if not gpu_model:
        return "NVIDIA GPU"
    if gpu_model[:7].upper() in ("NVIDIA-", "NVIDIA ", "NVIDIA_"):
        return "NVIDIA " + gpu_model[7:]
    return gpu_model if gpu_model.upper() == "NVIDIA" else f"NVIDIA {gpu_model}"


def _power_range(model: Optional[str]) -> tuple[float, float]:
    for key, rng in POWER_RANGE_W.items():
        if model and key.lower() in model.lower():
            return rng
    return DEFAULT_POWER_RANGE_W


# Identity strings are pure functions of names: cached across ticks (bounded, pods come and go).
_gpu_uuid = lru_cache(maxsize=1 << 17)(gpu_uuid)
_pod_uid = lru_cache(maxsize=1 << 18)(pod_uid)
_reservation_pod_name = lru_cache(maxsize=1 << 16)(reservation_pod_name)


@lru_cache(maxsize=256)
def _pci_bus_id(index: int) -> str:
    return f"00000000:{(0x18 + 0x20 * index) % 256:02X}:00.0"


@dataclass
class _Holder:
    """One task on one GPU device (a row of :func:`~.allocation.slices`, the columns the exporter reads)."""

    task: str
    namespace: str
    pod: str
    fractional: bool
    group: Optional[str]
    fb_used_mib: float
    util: float


class SimFrame:
    """Every simulated GPU as columns: what :func:`simulate_gpus` computes, before any per-GPU object exists.

    ``fb_sum`` / ``util_sum`` add the holders' usage per GPU (in holder order, as a sum over the holders
    would); the canonical fields are derived from them with numpy. GPUs with an override keep a Python values
    dict (:attr:`overridden`) with the exact values (and types) the per-GPU rules give, overrides applied.
    """

    def __init__(self, snapshot: Snapshot, overrides: Optional[dict[GpuKey, dict[str, float]]] = None):
        overrides = overrides or {}
        nodes = snapshot.nodes
        self.node = [n.name for n in nodes for _ in range(n.gpus)]
        self.index = [i for n in nodes for i in range(n.gpus)]
        first = np.cumsum([0] + [n.gpus for n in nodes]).tolist()
        n_gpus = first[-1]
        self.n = n_gpus
        self.model_name = []
        total = np.zeros(n_gpus)
        idle_w = np.zeros(n_gpus)
        max_w = np.zeros(n_gpus)
        rows_of: dict[str, list[int]] = {}
        for k, node in enumerate(nodes):
            a, b = first[k], first[k + 1]
            self.model_name.extend([model_name(node.gpu_model)] * (b - a))
            total[a:b] = float(node.gpu_memory_mib)
            idle_w[a:b], max_w[a:b] = _power_range(node.gpu_model)
            rows_of.setdefault(node.name, []).append(a)  # a repeated name sees the same holders, as before
        self.holders: list[list[_Holder]] = [[] for _ in range(n_gpus)]
        gpu_of_holder: list[int] = []
        for node_name, index, holder in _holders(snapshot):
            for a in rows_of.get(node_name, ()):
                row = a + index
                if 0 <= index and row < n_gpus and self.node[row] == node_name and self.index[row] == index:
                    self.holders[row].append(holder)
                    gpu_of_holder.append(row)
        holder_list = [h for hs in self.holders for h in hs]
        order = np.argsort(np.array(gpu_of_holder, dtype=np.int64), kind="stable")
        fb = np.array([h.fb_used_mib for h in holder_list], dtype=float)
        ut = np.array([h.util for h in holder_list], dtype=float)
        rows = np.array(gpu_of_holder, dtype=np.int64)[order]
        self.fb_sum = np.bincount(rows, weights=fb, minlength=n_gpus) if n_gpus else np.zeros(0)
        self.util_sum = np.bincount(rows, weights=ut, minlength=n_gpus) if n_gpus else np.zeros(0)
        self.total = total
        self.reserved = np.minimum(total, RESERVED_MIB)
        used = np.minimum(np.maximum(total - self.reserved, 0.0), self.fb_sum)
        util = np.minimum(1.0, self.util_sum)
        self.columns: dict[str, np.ndarray] = {
            V.FB_USED: used, V.FB_RESERVED: self.reserved, V.FB_FREE: total - used - self.reserved,
            V.FB_TOTAL: total, V.GPU_UTIL: util, V.GR_ENGINE_ACTIVE: util, V.DRAM_ACTIVE: util / 2,
            V.POWER: idle_w + util * (max_w - idle_w), V.TEMP: 30 + 40 * util, V.XID: np.zeros(n_gpus)}
        self.idle_w, self.max_w = idle_w, max_w
        self.gpu_label = list(self.index)
        self.instance_of: dict[int, SimInstance] = {}
        self.instances: list[SimInstance] = []
        mig_nodes = [(first[k], n) for k, n in enumerate(nodes) if n.mig]
        if mig_nodes:
            self._place_instances(snapshot, mig_nodes)
        self.overridden: dict[int, dict[str, float]] = {}
        if overrides:
            for row in range(n_gpus):
                extra = overrides.get((self.node[row], self.index[row]))
                if extra is not None:
                    values = self.values(row)
                    values.update(extra)
                    self.overridden[row] = values

    def _place_instances(self, snapshot: Snapshot, mig_nodes: list[tuple[int, Node]]) -> None:
        """MIG nodes' instances (:func:`~.mig.mig_layout`), their pods, and the physical GPU index of each cell."""
        tasks = _mig_tasks(snapshot, {n.name for _, n in mig_nodes})
        for a, node in mig_nodes:
            slots, whole = mig_layout(node)
            for cell, physical in whole.items():
                if cell < node.gpus:
                    self.gpu_label[a + cell] = physical
            instances = []
            for slot in slots:
                if slot.first_cell + slot.width > node.gpus:
                    break
                inst = SimInstance(node.name, slot.gpu, _gpu_uuid(node.name, slot.gpu), self.model_name[a],
                                   slot.instance_id, slot.profile, slot.memory_mib, slot.first_cell, slot.width)
                instances.append(inst)
                for c in range(slot.first_cell, slot.first_cell + slot.width):
                    self.gpu_label[a + c] = slot.gpu
                    self.instance_of[a + c] = inst
            _assign_instances(instances, tasks.get(node.name, []))
            self.instances.extend(instances)

    def values(self, row: int) -> dict[str, float]:
        """The per-GPU values dict, exactly as the per-GPU rules build it (a GPU without holders has the
        integer zeros a sum over no holders gives)."""
        if row in self.overridden:
            return dict(self.overridden[row])
        has = bool(self.holders[row])
        total, reserved = float(self.total[row]), float(self.reserved[row])
        fb_sum = float(self.fb_sum[row]) if has else 0
        util_sum = float(self.util_sum[row]) if has else 0
        used = min(max(total - reserved, 0.0), fb_sum)
        util = min(1.0, util_sum)
        idle_w, max_w = float(self.idle_w[row]), float(self.max_w[row])
        return {V.FB_USED: used, V.FB_RESERVED: reserved, V.FB_FREE: total - used - reserved, V.FB_TOTAL: total,
                V.GPU_UTIL: util, V.GR_ENGINE_ACTIVE: util, V.DRAM_ACTIVE: util / 2,
                V.POWER: idle_w + util * (max_w - idle_w), V.TEMP: 30 + 40 * util, V.XID: 0.0}

    def uuid(self, row: int) -> str:
        return _gpu_uuid(self.node[row], self.gpu_label[row])

    def sharers(self, row: int) -> list[SimPod]:
        return [SimPod(namespace=h.namespace, pod=h.pod, container=WORKLOAD_CONTAINER,
                       uid=_pod_uid(h.namespace, h.pod), vgpu=str(k) if h.fractional else None,
                       fb_used_mib=h.fb_used_mib, util=h.util)
                for k, h in enumerate(self.holders[row])]

    def credited(self, row: int, sharers: Optional[list[SimPod]] = None) -> Optional[SimPod]:
        """dcgm-exporter's pod for the GPU: KAI's reservation pod when shared, the holder when whole."""
        holders = self.holders[row]
        if any(h.fractional for h in holders):
            group = next((h.group for h in holders if h.group), None) or self.uuid(row)
            return SimPod(RESERVATION_NAMESPACE, _reservation_pod_name(self.node[row], group),
                          RESERVATION_CONTAINER)
        if holders:
            return (sharers or self.sharers(row))[0]
        return None

    def gpus(self) -> list[SimGpu]:
        """One :class:`SimGpu` per GPU."""
        out = []
        for row in range(self.n):
            sharers = self.sharers(row)
            out.append(SimGpu(node=self.node[row], index=self.index[row], uuid=self.uuid(row),
                              model_name=self.model_name[row], pci_bus_id=_pci_bus_id(self.gpu_label[row]),
                              values=self.values(row), credited=self.credited(row, sharers), sharers=sharers,
                              gpu_label=self.gpu_label[row], mig=self.instance_of.get(row)))
        return out


def _holders(snapshot: Snapshot):
    """``(node, gpu_index, _Holder)`` for every task on every GPU device it holds, in task order: the rows of
    :func:`~.allocation.slices` (same statuses, device count, index resolution through GPU groups, -1 when
    unknown), without building a DataFrame."""
    known = group_indices_from_tasks(snapshot)
    usage = {t.name: t.usage for _, t in snapshot.iter_tasks()}
    for job, task in snapshot.iter_tasks():
        if task.status not in HOLDING_STATUSES or not task.is_gpu or not task.node:
            continue
        namespace, pod = task_pod(job, task)
        fractional = task.is_fractional
        devices = int(task.gpu) if not fractional else max(task.gpu_devices, 1)
        u = usage.get(task.name)
        fb, util = (float(u.gpu_memory_mib), float(u.gpu_util)) if u else (0.0, 0.0)
        if task.mig:   # a MIG pod's usage is its instance's: spread over the GPU-equivalents the instance spans
            fb /= max(1, mig_gpu_total(task.mig))
        groups, indices = task.gpu_groups, task.gpu_indices
        for d in range(devices):
            group = groups[d] if d < len(groups) else None
            if d < len(indices):
                index = indices[d]
            elif group is not None and (task.node, group) in known:
                index = known[(task.node, group)]
            else:
                index = -1
            yield task.node, index, _Holder(task.name, namespace, pod, fractional, group, fb, util)


def _mig_tasks(snapshot: Snapshot, node_names: set[str]) -> dict[str, list[tuple[str, str, object]]]:
    """``node -> [(namespace, pod, task)]`` of the MIG pods holding instances on ``node_names``, in task order."""
    out: dict[str, list] = {}
    for job, task in snapshot.iter_tasks():
        if task.mig and task.node in node_names and task.status in HOLDING_STATUSES:
            out.setdefault(task.node, []).append((*task_pod(job, task), task))
    return out


def _assign_instances(instances: list[SimInstance], tasks: list[tuple[str, str, object]]) -> None:
    """Give each MIG pod the instances it asked for (``Task.mig``): first the ones starting at a cell it records
    (``gpu_indices``), then any free one of the profile; then set every instance's values (:class:`SimInstance`)."""
    free = list(instances)
    mine: dict[int, list[SimInstance]] = {}
    for recorded_only in (True, False):
        for k, (_, _, task) in enumerate(tasks):
            have = mine.setdefault(k, [])
            missing = Counter(task.mig) - Counter(i.profile for i in have)
            for profile in missing.elements():
                pick = next((i for i in free if i.profile == profile
                             and (not recorded_only or i.first_cell in task.gpu_indices)), None)
                if pick is not None:
                    free.remove(pick)
                    have.append(pick)
    for k, (namespace, pod, task) in enumerate(tasks):
        total = sum(i.memory_mib for i in mine[k]) or 1.0
        u = task.usage
        used, util = (u.gpu_memory_mib, u.gpu_util) if u else (0.0, 0.0)
        for inst in mine[k]:
            inst.pod = SimPod(namespace, pod, WORKLOAD_CONTAINER, uid=_pod_uid(namespace, pod))
            inst.values = _instance_values(inst.memory_mib, used * inst.memory_mib / total, util)
    for inst in free:
        inst.values = _instance_values(inst.memory_mib, 0.0, 0.0)


def _instance_values(memory_mib: float, fb_used_mib: float, util: float) -> dict[str, float]:
    used = min(float(fb_used_mib), memory_mib)
    active = min(1.0, float(util))
    return {V.FB_USED: used, V.FB_RESERVED: 0.0, V.FB_FREE: memory_mib - used, V.FB_TOTAL: memory_mib,
            V.GR_ENGINE_ACTIVE: active, V.DRAM_ACTIVE: active / 2}


def simulate_gpus(snapshot: Snapshot, overrides: Optional[dict[GpuKey, dict[str, float]]] = None) -> list[SimGpu]:
    """The simulated exporter's view of every GPU in ``snapshot`` (see the module docstring for the rules)."""
    return SimFrame(snapshot, overrides).gpus()


# ------------------------------------------------------------------------------------------ exposition

def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(canonical: float, spec: V.MetricSpec) -> str:
    if V.is_sentinel(canonical):  # a DCGM blank goes out raw, as older exporters printed it
        return f"{int(canonical)}" if spec.integer else f"{canonical:f}"
    raw = canonical / spec.scale
    return f"{int(round(raw))}" if spec.integer else f"{raw:f}"


def _format_column(column: np.ndarray, spec: V.MetricSpec) -> list[str]:
    """:func:`_format_value` over a column (numpy's rint rounds half to even, as Python's round does)."""
    sentinel = V.sentinel_mask(column)
    raw = column / spec.scale
    if spec.integer:
        texts = list(map(str, np.rint(np.where(sentinel, 0.0, raw)).astype(np.int64).tolist()))
    else:
        texts = ["%f" % x for x in raw.tolist()]
    for row in np.nonzero(sentinel)[0].tolist():
        texts[row] = _format_value(float(column[row]), spec)
    return texts


def _attributes(variant: V.ExporterVariant, pod: SimPod, with_uid: bool) -> list[tuple[str, str]]:
    names = variant.attribute_labels
    attrs = [(names["container"], pod.container), (names["namespace"], pod.namespace), (names["pod"], pod.pod)]
    if with_uid and pod.uid:
        attrs.append(("pod_uid", pod.uid))
    if pod.vgpu is not None:
        attrs.append(("vgpu", pod.vgpu))
    return sorted(attrs)


def _attribute_text(variant: V.ExporterVariant, pod: SimPod, with_uid: bool) -> str:
    """The pod's labels as exposition text (cached: the same pods recur every tick)."""
    return _attribute_text_cached(variant, pod.namespace, pod.pod, pod.container, pod.uid, pod.vgpu, with_uid)


@lru_cache(maxsize=1 << 18)
def _attribute_text_cached(variant, namespace, pod, container, uid, vgpu, with_uid) -> str:
    sim = SimPod(namespace=namespace, pod=pod, container=container, uid=uid, vgpu=vgpu)
    return ",".join(f'{k}="{_escape(v)}"' for k, v in _attributes(variant, sim, with_uid))


@lru_cache(maxsize=1 << 17)
def _fixed_labels(variant: V.ExporterVariant, driver_version: str, node: str, index: int, uuid: str,
                  model_name: str, instance: Optional[tuple[str, int]] = None, pci_bus_id: Optional[str] = None) -> str:
    """The labels before the pod's: a GPU's, and ``GPU_I_PROFILE``/``GPU_I_ID`` for a MIG instance
    (``instance = (profile, id)``) between ``modelName`` and the host, as dcgm-exporter's template orders them."""
    mig = f'{PROFILE_LABEL}="{_escape(instance[0])}",{INSTANCE_LABEL}="{instance[1]}",' if instance else ""
    return (f'gpu="{index}",{variant.uuid_label}="{uuid}",pci_bus_id="{pci_bus_id or _pci_bus_id(index)}",'
            f'device="nvidia{index}",modelName="{_escape(model_name)}",{mig}'
            f'{variant.host_label}="{_escape(node)}",{variant.driver_label}="{driver_version}"')


def _instance_line(spec: V.MetricSpec, canonical: str, inst: SimInstance, variant: V.ExporterVariant,
                   driver_version: str) -> Optional[str]:
    """A MIG instance's series of one family (None for a field the instance does not report)."""
    value = inst.values.get(canonical)
    if value is None:
        return None
    labels = _fixed_labels(variant, driver_version, inst.node, inst.gpu, inst.uuid, inst.model_name,
                           (inst.profile, inst.instance_id))
    if inst.pod is not None:
        labels += "," + _attribute_text(variant, inst.pod, False)
    return f"{spec.name}{{{labels}}} {_format_value(value, spec)}"


def render_exposition(gpus: "list[SimGpu] | SimFrame", variant: V.ExporterVariant | str = V.DEFAULT_EXPORTER_VARIANT,
                      per_pod: bool = False, driver_version: str = DRIVER_VERSION) -> str:
    """dcgm-exporter's text exposition for ``gpus`` (a list of :class:`SimGpu`, or a :class:`SimFrame`) in
    ``variant`` naming."""
    if isinstance(variant, str):
        variant = V.EXPORTER_VARIANTS[variant]
    if isinstance(gpus, SimFrame):
        return _render_frame(gpus, variant, per_pod, driver_version)
    families = sorted(((f, s) for f, s in variant.metrics.items() if s.default), key=lambda fs: fs[1].field_id)
    lines: list[str] = []
    for canonical, spec in families:
        lines.append(f"# HELP {spec.name} {spec.help}")
        lines.append(f"# TYPE {spec.name} {spec.type}")
        for gpu in gpus:
            if gpu.mig is not None:  # a MIG cell: its instance's series, once, at the instance's first cell
                line = _instance_line(spec, canonical, gpu.mig, variant, driver_version) \
                    if gpu.index == gpu.mig.first_cell else None
                if line is not None:
                    lines.append(line)
                continue
            value = gpu.values.get(canonical)
            if value is None:  # current exporters skip a field DCGM has no value for
                continue
            fixed = _fixed_labels(variant, driver_version, gpu.node, gpu.label_index, gpu.uuid, gpu.model_name,
                                  None, gpu.pci_bus_id)
            text = _format_value(value, spec)
            if per_pod and gpu.sharers:
                per_process = canonical in V.PER_POD_FIELDS
                if per_process:
                    lines.append(f"{spec.name}{{{fixed}}} {text}")
                for pod in gpu.sharers:
                    own = text
                    if per_process:
                        own = _format_value(pod.fb_used_mib if canonical == V.FB_USED else pod.util, spec)
                    attrs = ",".join(f'{k}="{_escape(v)}"' for k, v in _attributes(variant, pod, per_process))
                    lines.append(f"{spec.name}{{{fixed},{attrs}}} {own}")
            elif gpu.credited is not None:
                attrs = ",".join(f'{k}="{_escape(v)}"' for k, v in _attributes(variant, gpu.credited, False))
                lines.append(f"{spec.name}{{{fixed},{attrs}}} {text}")
            else:
                lines.append(f"{spec.name}{{{fixed}}} {text}")
    return "\n".join(lines) + "\n"


def _render_frame(frame: SimFrame, variant: V.ExporterVariant, per_pod: bool, driver_version: str) -> str:
    """:func:`render_exposition` straight from the columns: the label text of each GPU is built once per
    render (and cached across ticks), values are formatted a column at a time."""
    families = sorted(((f, s) for f, s in variant.metrics.items() if s.default), key=lambda fs: fs[1].field_id)
    fixed = [_fixed_labels(variant, driver_version, frame.node[r], frame.gpu_label[r], frame.uuid(r),
                           frame.model_name[r]) for r in range(frame.n)]
    # exclusive-mode label per GPU: fixed labels plus the credited pod's attributes
    labels = list(fixed)
    sharer_attrs: dict[int, list[tuple[str, str]]] = {}  # per-pod mode: (attrs without uid, attrs with uid)
    sharers_of: dict[int, list[SimPod]] = {}
    for row in range(frame.n):
        if not frame.holders[row]:
            continue
        sharers = frame.sharers(row)
        if per_pod:
            sharers_of[row] = sharers
            sharer_attrs[row] = [(_attribute_text(variant, p, False), _attribute_text(variant, p, True))
                                 for p in sharers]
        else:
            credited = frame.credited(row, sharers)
            labels[row] = f"{fixed[row]},{_attribute_text(variant, credited, False)}"
    overridden = frame.overridden
    lines: list[str] = []
    for canonical, spec in families:
        name = spec.name
        lines.append(f"# HELP {name} {spec.help}")
        lines.append(f"# TYPE {name} {spec.type}")
        column = frame.columns.get(canonical)
        texts = _format_column(column, spec) if column is not None else [None] * frame.n
        for row, values in overridden.items():
            value = values.get(canonical)
            texts[row] = None if value is None else _format_value(value, spec)
        instance_lines = {row: (_instance_line(spec, canonical, inst, variant, driver_version)
                                if frame.index[row] == inst.first_cell else None)
                          for row, inst in frame.instance_of.items()}
        if instance_lines:  # MIG cells: their instance's series in place of their own (few nodes: a plain loop)
            for row in instance_lines:
                texts[row] = None
            if not per_pod:
                prefix = name + "{"
                for row, (label, text) in enumerate(zip(labels, texts)):
                    line = instance_lines.get(row) if text is None else f"{prefix}{label}}} {text}"
                    if line is not None:
                        lines.append(line)
                continue
        if not per_pod:
            prefix = name + "{"
            lines.extend([f"{prefix}{label}}} {text}" for label, text in zip(labels, texts) if text is not None])
            continue
        per_process = canonical in V.PER_POD_FIELDS
        for row in range(frame.n):
            text = texts[row]
            if text is None:
                if instance_lines.get(row) is not None:
                    lines.append(instance_lines[row])
                continue
            attrs = sharer_attrs.get(row)
            if not attrs:
                lines.append(f"{name}{{{fixed[row]}}} {text}")
                continue
            if per_process:
                lines.append(f"{name}{{{fixed[row]}}} {text}")
                for pod, (_, with_uid) in zip(sharers_of[row], attrs):
                    own = _format_value(pod.fb_used_mib if canonical == V.FB_USED else pod.util, spec)
                    lines.append(f"{name}{{{fixed[row]},{with_uid}}} {own}")
            else:
                for without_uid, _ in attrs:
                    lines.append(f"{name}{{{fixed[row]},{without_uid}}} {text}")
    return "\n".join(lines) + "\n"


def simulated_samples(gpus: list[SimGpu]):
    """DCGM samples (:data:`~.dcgm.SAMPLE_COLUMNS`, canonical units) straight from simulated GPUs.

    What :func:`~.dcgm.samples_from_exposition` gives for this exporter's exclusive-mode exposition (every
    field, including ``fb_total_mib``; MIG cells as their instances' series), without rendering and parsing ten
    series per GPU on every tick.
    """
    import pandas as pd

    from .dcgm import MIG_PROFILE_COLUMN, SAMPLE_COLUMNS

    rows = []
    for g in gpus:
        if g.mig is not None and g.index != g.mig.first_cell:
            continue
        inst = g.mig
        pod = inst.pod if inst is not None else g.credited
        ns, name, container = (pod.namespace, pod.pod, pod.container) if pod else ("", "", "")
        index, uuid, values = (inst.gpu, inst.uuid, inst.values) if inst else (g.label_index, g.uuid, g.values)
        mig, profile = (str(inst.instance_id), inst.profile) if inst else ("", "")
        for field_name, value in values.items():
            v = np.nan if value is None or V.is_sentinel(value) else float(value)
            rows.append((g.node, index, uuid, g.model_name, field_name, v, name, ns, container, "", mig, profile))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS + [MIG_PROFILE_COLUMN]).astype(
        {"gpu_index": "int64", "value": "float64"})


# ------------------------------------------------------------------------------------------ live state + server

class ExporterState:
    """The exporter's current values; the live loop calls :meth:`update` each tick, the server :meth:`render`.

    Thread-safe: an update builds the new exposition text completely, then swaps it in under a lock, so a
    scrape sees either the previous tick or the new one, never a mix.
    """

    def __init__(self, snapshot: Optional[Snapshot] = None, variant: str = V.DEFAULT_EXPORTER_VARIANT,
                 per_pod: bool = False):
        if variant not in V.EXPORTER_VARIANTS:
            raise ValueError(f"unknown exporter variant {variant!r} (known: {', '.join(V.EXPORTER_VARIANTS)})")
        self._lock = threading.Lock()
        self._variant = V.EXPORTER_VARIANTS[variant]
        self._per_pod = per_pod
        self._gpus: Optional[list[SimGpu]] = []
        self._frame: Optional[SimFrame] = None
        self._text = render_exposition([], self._variant, per_pod)
        self.updates = 0
        if snapshot is not None:
            self.update(snapshot)

    @property
    def variant(self) -> V.ExporterVariant:
        return self._variant

    def update(self, snapshot: Snapshot, overrides: Optional[dict[GpuKey, dict[str, float]]] = None) -> None:
        """Recompute every GPU from ``snapshot`` (a new tick): columns, then the text; the per-GPU
        :class:`SimGpu` objects are only made if :meth:`gpus` asks for them."""
        frame = SimFrame(snapshot, overrides)
        text = render_exposition(frame, self._variant, self._per_pod)
        with self._lock:
            self._frame, self._gpus, self._text = frame, None, text
            self.updates += 1

    def gpus(self) -> list[SimGpu]:
        """The GPUs of the last update (what the exporter currently reports)."""
        with self._lock:
            if self._gpus is None:
                self._gpus = self._frame.gpus() if self._frame is not None else []
            return list(self._gpus)

    def instances(self) -> list[SimInstance]:
        """The MIG instances of the last update (:class:`SimInstance`, their pods and values)."""
        with self._lock:
            return list(self._frame.instances) if self._frame is not None else []

    def render(self) -> str:
        """The current ``/metrics`` body."""
        with self._lock:
            return self._text


def _handler_for(state: ExporterState):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = state.render().encode(), CONTENT_TYPE, 200
            elif path in ("/", "/health"):
                body, ctype, code = b"kaidash simulated dcgm-exporter: see /metrics\n", "text/plain", 200
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - silence per-request logging
            pass

    return Handler


class ExporterServer:
    """``/metrics`` over HTTP for an :class:`ExporterState`, served from a daemon thread.

    ``port=0`` picks a free port; :attr:`port` and :attr:`url` tell which after :meth:`start`.
    """

    def __init__(self, state: ExporterState, host: str = "127.0.0.1", port: int = 0):
        self.state = state
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(state))
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None
        self._served = False

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> "ExporterServer":
        self._served = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kaidash-exporter", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (the standalone command); returns after :meth:`stop` or an interrupt."""
        self._served = True
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket (safe to call more than once, or before serving)."""
        if self._served:
            self._httpd.shutdown()  # waits for serve_forever to return; it never returns if never started
            self._served = False
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ExporterServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
