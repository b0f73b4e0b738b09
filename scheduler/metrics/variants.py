"""The one mapping table between kaidash's canonical GPU fields and dcgm-exporter's naming variants.

dcgm-exporter has changed its names and units over time, and Prometheus changes labels when it scrapes:

* metric names: the legacy names (``DCGM_FI_DEV_FB_USED`` in MiB, ``DCGM_FI_DEV_GPU_UTIL`` in percent, ...)
  were renamed in dcgm-exporter 4.9.0 to DCGM 4.7's canonical field names, eleven of them with a new unit
  (``DCGM_FI_DEV_FB_USED_BYTES`` in bytes, ``DCGM_FI_DEV_GPU_UTIL_RATIO`` as a 0-1 ratio). Sources: the 4.9.0
  release notes and the DCGM field reference (docs.nvidia.com/datacenter/dcgm/latest/reference/
  dcgm-exporter-metrics.html); the legacy rows are NVIDIA/dcgm-exporter ``etc/default-counters.csv``.
* labels: ``Hostname`` became ``hostname`` (NVIDIA/dcgm-exporter#655, released in 4.6.0-4.8.3);
  ``--use-old-namespace`` gives ``uuid``/``pod_name``/``pod_namespace``/``container_name``; the driver label
  became ``DCGM_FI_SYSTEM_DRIVER_VERSION`` in 4.9.0; and Prometheus with ``honor_labels: false`` renames the
  exporter's ``pod``/``namespace``/``container`` to ``exported_pod``/... when the target carries its own.
* "not available": DCGM's blank sentinels (go-dcgm ``DCGM_FT_*_BLANK`` .. ``*_NOT_PERMISSIONED``). Current
  exporters skip them, older ones printed them (README: ``9223372036854775794``).

Everything that depends on those differences is data in this module: :data:`METRIC_PROFILES` (canonical
field -> metric name, scale to the canonical unit, help, type), :data:`LABEL_ALIASES` (canonical label ->
candidate names, in precedence order) and :data:`EXPORTER_VARIANTS` (what the simulated exporter emits).
Readers and the exporter look names up here; nothing else in the package spells a DCGM name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

# ------------------------------------------------------------------------------------------ canonical fields

FB_USED = "fb_used_mib"
FB_FREE = "fb_free_mib"
FB_RESERVED = "fb_reserved_mib"
FB_TOTAL = "fb_total_mib"
GPU_UTIL = "gpu_util"
GR_ENGINE_ACTIVE = "gr_engine_active"
DRAM_ACTIVE = "dram_active"
POWER = "power_w"
TEMP = "temp_c"
XID = "xid"

CANONICAL_FIELDS = (FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL, GPU_UTIL, GR_ENGINE_ACTIVE, DRAM_ACTIVE, POWER,
                    TEMP, XID)
"""Canonical GPU fields, all in kaidash units: memory in MiB, utilisation as a 0-1 ratio, W, degrees C."""

PER_POD_FIELDS = (FB_USED, GPU_UTIL)
"""Fields dcgm-exporter can report per pod (NVML per-process data, ``--kubernetes-virtual-gpus``)."""

MIB = 1024 * 1024


@dataclass(frozen=True)
class MetricSpec:
    """One exporter metric: its name, how to turn its value into the canonical unit, and how it is exposed.

    ``canonical = raw * scale``. ``integer`` says DCGM stores the field as an integer (the exporter prints it
    with ``%d``; doubles are printed with ``%f``). ``field_id`` is the DCGM field id (the exporter renders
    families in field-id order); ``default`` says the field is in that release's default counters.
    """

    name: str
    scale: float
    help: str
    integer: bool
    field_id: int
    default: bool = True
    type: str = "gauge"


def _spec(name, scale, help_, integer, field_id, default=True):
    return MetricSpec(name=name, scale=scale, help=help_, integer=integer, field_id=field_id, default=default)


METRIC_PROFILES: dict[str, dict[str, MetricSpec]] = {
    # dcgm-exporter up to 4.8.x (etc/default-counters.csv). FB_TOTAL is not a default counter there: total
    # memory is FB_USED + FB_FREE + FB_RESERVED.
    "legacy": {
        FB_USED: _spec("DCGM_FI_DEV_FB_USED", 1.0, "Framebuffer memory used (in MiB).", True, 252),
        FB_FREE: _spec("DCGM_FI_DEV_FB_FREE", 1.0, "Framebuffer memory free (in MiB).", True, 251),
        FB_RESERVED: _spec("DCGM_FI_DEV_FB_RESERVED", 1.0, "Framebuffer memory reserved (in MiB).", True, 253),
        FB_TOTAL: _spec("DCGM_FI_DEV_FB_TOTAL", 1.0, "Framebuffer memory total (in MiB).", True, 250,
                        default=False),
        GPU_UTIL: _spec("DCGM_FI_DEV_GPU_UTIL", 0.01, "GPU utilization (in %).", True, 203),
        GR_ENGINE_ACTIVE: _spec("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0,
                                "Ratio of time the graphics engine is active.", False, 1001),
        DRAM_ACTIVE: _spec("DCGM_FI_PROF_DRAM_ACTIVE", 1.0,
                           "Ratio of cycles the device memory interface is active sending or receiving data.",
                           False, 1005),
        POWER: _spec("DCGM_FI_DEV_POWER_USAGE", 1.0, "Power draw (in W).", False, 155),
        TEMP: _spec("DCGM_FI_DEV_GPU_TEMP", 1.0, "GPU temperature (in C).", True, 150),
        XID: _spec("DCGM_FI_DEV_XID_ERRORS", 1.0, "Value of the last XID error encountered.", True, 230),
    },
    # dcgm-exporter 4.9.0: DCGM 4.7 canonical names; memory in bytes, utilisation as a ratio.
    "dcgm-4.7": {
        FB_USED: _spec("DCGM_FI_DEV_FB_USED_BYTES", 1.0 / MIB, "Framebuffer memory used (in bytes).", True,
                       1627),
        FB_FREE: _spec("DCGM_FI_DEV_FB_FREE_BYTES", 1.0 / MIB, "Framebuffer memory free (in bytes).", True,
                       1626),
        FB_RESERVED: _spec("DCGM_FI_DEV_FB_RESERVED_BYTES", 1.0 / MIB, "Framebuffer memory reserved (in bytes).",
                           True, 1628),
        FB_TOTAL: _spec("DCGM_FI_DEV_FB_CAPACITY_BYTES", 1.0 / MIB, "Total framebuffer memory (in bytes).", True,
                        1625),
        GPU_UTIL: _spec("DCGM_FI_DEV_GPU_UTIL_RATIO", 1.0, "GPU utilization (ratio 0-1).", False, 1613),
        GR_ENGINE_ACTIVE: _spec("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 1.0,
                                "Ratio of time the graphics engine is active.", False, 1001),
        DRAM_ACTIVE: _spec("DCGM_FI_PROF_DRAM_UTIL_RATIO", 1.0,
                           "Ratio of cycles the device memory interface is active sending or receiving data.",
                           False, 1005),
        POWER: _spec("DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0, "Board power draw (in W).", False, 155),
        TEMP: _spec("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0, "GPU temperature (in C).", True, 150),
        XID: _spec("DCGM_FI_DEV_XID_ERROR", 1.0, "Value of the last XID error encountered.", True, 230),
    },
}
"""Canonical field -> :class:`MetricSpec`, per metric-name profile."""

LABEL_ALIASES: dict[str, tuple[str, ...]] = {
    "host": ("Hostname", "hostname"),
    "uuid": ("UUID", "uuid"),
    "gpu": ("gpu",),
    "model": ("modelName",),
    # exported_* first: when it exists, Prometheus renamed the exporter's label and the plain name is the
    # scrape target's own (the dcgm-exporter pod), not the workload. The --use-old-namespace names come next:
    # only dcgm-exporter writes them, while a plain ``pod`` may be the scrape target's.
    "pod": ("exported_pod", "pod_name", "pod"),
    "namespace": ("exported_namespace", "pod_namespace", "namespace"),
    "container": ("exported_container", "container_name", "container"),
    "pod_uid": ("exported_pod_uid", "pod_uid"),
    "vgpu": ("exported_vgpu", "vgpu"),
    # a MIG GPU instance's series (scheduler/metrics/mig.py): both labels or neither
    "mig_instance": ("GPU_I_ID",),
    "mig_profile": ("GPU_I_PROFILE",),
    "driver": ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"),
}
"""Canonical label -> the names it appears under, in precedence order."""

# go-dcgm dcgm_fields constants: BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED for each value type.
_INT32_BLANK = 2147483632
_INT64_BLANK = 9223372036854775792
_FP64_BLANK = 140737488355328.0
DCGM_SENTINELS = tuple(float(base + k) for base in (_INT32_BLANK, _INT64_BLANK, _FP64_BLANK) for k in range(4))
"""DCGM's "no value" markers, as floats (the INT64 four collapse to one float)."""

BLANK_INT64 = _INT64_BLANK
NOT_SUPPORTED_INT64 = _INT64_BLANK + 2
BLANK_FP64 = _FP64_BLANK


def is_sentinel(value: float) -> bool:
    """True for a DCGM "not available" value (blank / not found / not supported / not permissioned) or NaN."""
    if value is None:
        return True
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return True
    return value in DCGM_SENTINELS or value >= float(_INT64_BLANK)


def sentinel_mask(values: np.ndarray) -> np.ndarray:
    """Vectorised :func:`is_sentinel` over a float array."""
    values = np.asarray(values, dtype="float64")
    return ~np.isfinite(values) | np.isin(values, DCGM_SENTINELS) | (values >= float(_INT64_BLANK))


# ------------------------------------------------------------------------------------------ exporter variants

@dataclass(frozen=True)
class ExporterVariant:
    """What one dcgm-exporter release/configuration emits: metric profile and label names."""

    name: str
    profile: str
    host_label: str
    uuid_label: str
    driver_label: str
    old_namespace: bool = False
    description: str = ""

    @property
    def metrics(self) -> dict[str, MetricSpec]:
        return METRIC_PROFILES[self.profile]

    @property
    def attribute_labels(self) -> dict[str, str]:
        """Canonical pod attribute (``pod``, ``namespace``, ``container``) -> the label name emitted."""
        if self.old_namespace:
            return {"pod": "pod_name", "namespace": "pod_namespace", "container": "container_name"}
        return {"pod": "pod", "namespace": "namespace", "container": "container"}


EXPORTER_VARIANTS: dict[str, ExporterVariant] = {
    "classic": ExporterVariant("classic", "legacy", "Hostname", "UUID", "DCGM_FI_DRIVER_VERSION",
                               description="dcgm-exporter <= 4.5.3-4.8.2: legacy names, Hostname label"),
    "hostname": ExporterVariant("hostname", "legacy", "hostname", "UUID", "DCGM_FI_DRIVER_VERSION",
                                description="4.6.0-4.8.3 to 4.8.4: legacy names, lowercase hostname label"),
    "old-namespace": ExporterVariant("old-namespace", "legacy", "Hostname", "uuid", "DCGM_FI_DRIVER_VERSION",
                                     old_namespace=True,
                                     description="--use-old-namespace: uuid, pod_name, pod_namespace, "
                                                 "container_name"),
    "4.9.0": ExporterVariant("4.9.0", "dcgm-4.7", "hostname", "UUID", "DCGM_FI_SYSTEM_DRIVER_VERSION",
                             description="dcgm-exporter 4.9.0: DCGM 4.7 names, bytes and ratios"),
}
"""Variants the simulated exporter can emit (``kaidash exporter --variant``)."""

DEFAULT_EXPORTER_VARIANT = "classic"


# ------------------------------------------------------------------------------------------ detection

@dataclass(frozen=True)
class DetectedVariant:
    """What a Prometheus server holds: the metric profile and the label name used for each canonical label."""

    profile: str
    labels: dict

    @property
    def metrics(self) -> dict[str, MetricSpec]:
        return METRIC_PROFILES[self.profile]

    def label(self, canonical: str) -> Optional[str]:
        return self.labels.get(canonical)

    def describe(self) -> str:
        names = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if v)
        return f"{self.profile} ({names})"


def detect_variant(metric_names: Iterable[str], label_names: Iterable[str]) -> DetectedVariant:
    """Pick the metric profile with the most names present, and the first alias present for each label.

    ``metric_names`` are the DCGM metric names the server has; ``label_names`` the label names on them.
    Ties (including no DCGM metric at all) go to the legacy profile.
    """
    names = set(metric_names)
    present = set(label_names)
    best, best_hits = "legacy", -1
    for profile, fields in METRIC_PROFILES.items():
        hits = sum(1 for spec in fields.values() if spec.name in names)
        if hits > best_hits:
            best, best_hits = profile, hits
    labels = {}
    for canonical, aliases in LABEL_ALIASES.items():
        # a label with a single name (gpu, modelName, GPU_I_ID, GPU_I_PROFILE) keeps it even when no series has it yet
        labels[canonical] = next((a for a in aliases if a in present), aliases[0] if len(aliases) == 1 else None)
    return DetectedVariant(profile=best, labels=labels)


def variant_for_exporter(variant: ExporterVariant) -> DetectedVariant:
    """The :class:`DetectedVariant` a reader sees when Prometheus scrapes ``variant`` keeping its labels."""
    present = {variant.host_label, variant.uuid_label, "gpu", "modelName", variant.driver_label, "pod_uid", "vgpu",
               *variant.attribute_labels.values()}
    return detect_variant((s.name for s in variant.metrics.values()), present)


def all_metric_names() -> list[str]:
    """Every DCGM metric name of every profile (for one regex query that works on any server)."""
    return sorted({spec.name for fields in METRIC_PROFILES.values() for spec in fields.values()})
