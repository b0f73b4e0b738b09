"""MIG instances as dcgm-exporter names them, and where they sit in a snapshot's GPU-equivalent cells.

dcgm-exporter labels a series of a MIG GPU instance with the parent GPU's labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``) plus ``GPU_I_PROFILE`` (the instance's profile, DCGM's
``DCGM_FI_DEV_NAME`` of the instance, e.g. ``1g.10gb``) and ``GPU_I_ID`` (NVML's GPU instance id); both labels
are written together or not at all (NVIDIA/dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``,
``internal/pkg/collector/gpu_collector.go``).

A snapshot counts a MIG instance as G GPU-equivalents (KAI's quota counting, ``model.mig_gpus``): a MIG node's
``gpus`` are cells, its instances first (in ``Node.mig`` order, G cells each), then its whole GPUs. Neither
Kubernetes nor KAI says which physical GPU holds which instance. :func:`mig_layout` is the one model of it
kaidash uses: instances packed in ``Node.mig`` order onto physical GPUs of :data:`GPU_SLICES` compute slices and
the node's GPU memory, whole GPUs numbered after them. The simulated exporter emits that layout; the reader
places instances it reads on cells in the same order (:func:`instance_cells`), so a demo pod's recorded cells
and its instance agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..model import Node, mig_gpus, mig_memory_mib

PROFILE_LABEL = "GPU_I_PROFILE"
INSTANCE_LABEL = "GPU_I_ID"

GPU_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200: ``7g.*`` is the whole GPU)."""

_SUFFIXES = re.compile(r"^(?:\+[a-z0-9]+)*$")
"""What may follow ``<G>g.<M>gb`` in dcgm-exporter's profile label: ``+me``-style options."""


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile: ``<G>g.<M>gb`` with optional ``+me``-style suffixes (``1g.10gb+me``)."""

    name: str
    slices: int
    memory_mib: float


def parse_profile(name: str) -> Optional[Profile]:
    """The profile ``name`` stands for, or None for a string that is not one (``"7g"``, ``"MIG 1g"``)."""
    base, plus, options = (name or "").partition("+")
    slices = mig_gpus(base)   # the snapshot's reading of <G>g.<M>gb (model.MIG_PROFILE), 0 when it is not one
    if slices < 1 or not _SUFFIXES.match(plus + options):
        return None
    return Profile(name=name, slices=slices, memory_mib=mig_memory_mib(base))


@dataclass(frozen=True)
class MigSlot:
    """One MIG instance of a node in :func:`mig_layout`: its physical GPU and instance id, and its cells."""

    profile: str
    gpu: int
    instance_id: int
    first_cell: int
    width: int
    memory_mib: float


def mig_layout(node: Node) -> tuple[list[MigSlot], dict[int, int]]:
    """``(instances, whole)`` for ``node``: its MIG instances on physical GPUs, and cell -> physical GPU index of
    each whole GPU.

    Instances are taken in ``node.mig`` order and packed first-fit onto the current physical GPU while its
    compute slices (:data:`GPU_SLICES`) and memory (``node.gpu_memory_mib``) last, else onto a new one; ids
    count from 1 on each GPU. Whole GPUs (cells after the instances' cells) get the physical indices after the
    MIG GPUs. A node without MIG instances maps every cell to itself.
    """
    slots: list[MigSlot] = []
    gpu, used_slices, used_mib, next_id, cell = -1, GPU_SLICES, float("inf"), 1, 0
    for name, count in node.mig.items():
        prof = parse_profile(name)
        if prof is None:
            continue
        for _ in range(count):
            fits = (used_slices + prof.slices <= GPU_SLICES
                    and used_mib + prof.memory_mib <= max(node.gpu_memory_mib, prof.memory_mib))
            if not fits:
                gpu, used_slices, used_mib, next_id = gpu + 1, 0, 0.0, 1
            slots.append(MigSlot(name, gpu, next_id, cell, prof.slices, prof.memory_mib))
            used_slices += prof.slices
            used_mib += prof.memory_mib
            next_id += 1
            cell += prof.slices
    first_whole = gpu + 1
    whole = {c: first_whole + (c - cell) for c in range(cell, max(node.gpus, cell))}
    return slots, whole


def instance_cells(keys: list[tuple[int, int, Optional[int]]]) -> dict[tuple[int, int], int]:
    """``(gpu, instance_id) -> first cell`` for one node's instances ``(gpu, instance_id, width)``: sorted by
    physical GPU then instance id, consecutive from cell 0 (:func:`mig_layout`'s order). An instance of unknown
    width (an unknown profile) gets no cell and ends the placement: later cells would be guesses."""
    out: dict[tuple[int, int], int] = {}
    cell = 0
    for gpu, instance_id, width in sorted(keys, key=lambda k: (k[0], k[1])):
        if not width:
            break
        out[(gpu, instance_id)] = cell
        cell += width
    return out


__all__ = ["PROFILE_LABEL", "INSTANCE_LABEL", "GPU_SLICES", "Profile", "parse_profile", "MigSlot", "mig_layout",
           "instance_cells"]
