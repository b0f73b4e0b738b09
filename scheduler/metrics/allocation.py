"""Who holds which slice of each GPU, from a snapshot alone; and the names dcgm-exporter would give them.

A *slice* is one task on one GPU device: a whole-GPU task on 4 devices has 4 slices of share 1; a fractional
task with ``gpu_devices: 2`` has 2 slices of its per-device fraction. Shares use KAI's rules
(``Task.gpus_on``: a ``gpu_memory_mib`` request becomes a fraction of the node's GPU memory rounded up to 0.01).

Pod identity: dcgm-exporter labels series with the pod's name and namespace. A task named ``ns/pod`` (the
kube source's convention) is pod ``pod`` in ``ns``; any other task name is the pod name in its job's namespace
(``default`` when the job has none).

KAI credits a shared GPU to a *reservation pod* in namespace ``kai-resource-reservation`` whose name starts with
``gpu-reservation`` and which carries the label ``runai-gpu-group=<group>``
(kai-semantics.md §e.4; KAI ``pkg/binder/binding/resourcereservation/resource_reservation.go``). Older KAI
releases named it ``gpu-reservation-<node>-<5 random chars>``, newer ones
``gpu-reservation-<hex(sha256(node + "/" + group))[:16]>``. The simulated exporter uses
``gpu-reservation-<node>-<hex(sha256(node + "/" + group))[:5]>`` so both the name shape users see and a
deterministic join are kept; :func:`reservation_group_index` recognises either deterministic form.
"""

from __future__ import annotations

import hashlib
import uuid as _uuid
from typing import Optional

import pandas as pd

from ..model import Job, Node, Snapshot, Task, mig_cell_memory_mib

RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_POD_PREFIX = "gpu-reservation"
RESERVATION_CONTAINER = "resource-reservation"
GPU_GROUP_LABEL = "runai-gpu-group"

HOLDING_STATUSES = frozenset({"running", "binding", "releasing"})
"""Task statuses that hold a GPU device (a pipelined task does not hold it yet)."""

SLICE_COLUMNS = ["node", "gpu_index", "gpu_group", "task", "pod", "namespace", "job", "queue", "status",
                 "fractional", "share", "alloc_memory_mib", "device_source"]

DEVICE_SOURCES = ("snapshot", "reservation", "dcgm", "unknown")
"""How a slice's device index is known (``device_source``): ``snapshot`` = recorded on the task (from KAI's
objects: the reservation pod a fractional pod names, or a snapshot file); ``reservation`` = through the task's
GPU group and KAI's reservation pod (its DCGM series or another task of the group); ``dcgm`` = dcgm-exporter
labelled the device with the pod (whole GPUs); ``unknown`` = the task holds a device whose index no evidence
gives (``gpu_index = -1``, never a guess)."""

_UUID_NAMESPACE = _uuid.UUID("6f1d3c1e-6b8a-4f5e-9a51-6b61696461c5")


def gpu_uuid(node: str, index: int) -> str:
    """Deterministic GPU UUID for a simulated GPU (``GPU-xxxxxxxx-...``), from node name and index."""
    return f"GPU-{_uuid.uuid5(_UUID_NAMESPACE, f'{node}/{index}')}"


def pod_uid(namespace: str, pod: str) -> str:
    """Deterministic pod UID for a simulated pod."""
    return str(_uuid.uuid5(_UUID_NAMESPACE, f"pod/{namespace}/{pod}"))


def reservation_pod_name(node: str, group: str) -> str:
    """Name of the simulated KAI reservation pod that holds GPU group ``group`` on ``node``."""
    digest = hashlib.sha256(f"{node}/{group}".encode()).hexdigest()
    return f"{RESERVATION_POD_PREFIX}-{node}-{digest[:5]}"


def _kai_reservation_pod_name(node: str, group: str) -> str:
    digest = hashlib.sha256(f"{node}/{group}".encode()).hexdigest()
    return f"{RESERVATION_POD_PREFIX}-{digest[:16]}"


def is_reservation_pod(namespace: Optional[str], pod: Optional[str]) -> bool:
    """True for a KAI GPU reservation pod (by name prefix; namespace checked when known)."""
    if not pod or not pod.startswith(RESERVATION_POD_PREFIX):
        return False
    return not namespace or namespace == RESERVATION_NAMESPACE


def task_pod(job: Job, task: Task) -> tuple[str, str]:
    """``(namespace, pod)`` under which dcgm-exporter would label ``task``."""
    if "/" in task.name:
        namespace, pod = task.name.split("/", 1)
        return namespace, pod
    return job.namespace or "default", task.name


def _per_device_share(task: Task, node: Optional[Node]) -> tuple[float, float]:
    """``(share of one device, allocated MiB on one device)`` for a task on ``node``."""
    node_mem = node.gpu_memory_mib if node else 0.0
    if task.mig:   # a MIG pod is entitled to its instance's memory, not the whole GPU's
        return 1.0, mig_cell_memory_mib(task.mig)
    if task.gpu_memory_mib is not None:
        share = task.gpus_on(node_mem) / max(task.gpu_devices, 1)
        return share, float(task.gpu_memory_mib)
    if task.gpu >= 1:
        return 1.0, float(node_mem)
    return float(task.gpu), float(task.gpu) * node_mem


def gpu_inventory(snapshot: Snapshot, with_uuid: bool = True) -> pd.DataFrame:
    """One row per GPU device in the snapshot: node, gpu_index, [uuid (simulated),] model, memory_total_mib."""
    rows = [(n.name, i, n.gpu_model, float(n.gpu_memory_mib)) for n in snapshot.nodes for i in range(n.gpus)]
    frame = pd.DataFrame(rows, columns=["node", "gpu_index", "model", "memory_total_mib"])
    if with_uuid:
        frame.insert(2, "uuid", [gpu_uuid(n, i) for n, i in zip(frame["node"], frame["gpu_index"])])
    return frame


def group_indices_from_tasks(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """``(node, gpu_group) -> gpu_index`` as recorded by tasks that carry both."""
    out: dict[tuple[str, str], int] = {}
    for _, task in snapshot.iter_tasks():
        if task.node:
            for group, index in zip(task.gpu_groups, task.gpu_indices):
                out.setdefault((task.node, group), index)
    return out


def reservation_group_index(node: str, pod: str, groups_on_node: list[str]) -> Optional[str]:
    """The GPU group whose deterministic reservation-pod name (ours or current KAI's) is ``pod``, if any."""
    for group in groups_on_node:
        if pod in (reservation_pod_name(node, group), _kai_reservation_pod_name(node, group)):
            return group
    return None


def slices(snapshot: Snapshot, group_index: Optional[dict[tuple[str, str], int]] = None,
           pod_devices: Optional[dict[tuple[str, str, str], list[int]]] = None) -> pd.DataFrame:
    """One row per (task, GPU device) for every task holding a GPU (see :data:`HOLDING_STATUSES`).

    Device evidence, best first (``device_source``, :data:`DEVICE_SOURCES`):

    * whole-GPU tasks: ``pod_devices`` (``(node, namespace, pod) -> [gpu_index, ...]``, the devices
      dcgm-exporter labelled with the pod), else the task's recorded ``gpu_indices``;
    * fractional tasks: the recorded ``gpu_indices``, else their GPU group resolved by ``group_index``
      (``(node, gpu_group) -> gpu_index``, from the reservation pod's DCGM series) or by another task of the
      group that records its index.

    A slice whose device stays unknown gets ``gpu_index = -1`` and ``device_source = "unknown"``.
    """
    nodes = snapshot.node_map()
    known = dict(group_indices_from_tasks(snapshot))
    if group_index:
        known.update(group_index)
    labelled = pod_devices or {}
    rows = []
    for job, task in snapshot.iter_tasks():
        if task.status not in HOLDING_STATUSES or not task.is_gpu or not task.node:
            continue
        node = nodes.get(task.node)
        share, mem = _per_device_share(task, node)
        namespace, pod = task_pod(job, task)
        fractional = task.is_fractional
        devices = int(task.gpu) if not fractional else max(task.gpu_devices, 1)
        from_dcgm = [] if fractional else labelled.get((task.node, namespace, pod), [])
        for d in range(devices):
            group = task.gpu_groups[d] if d < len(task.gpu_groups) else None
            if d < len(from_dcgm):
                index, source = from_dcgm[d], "dcgm"
            elif not from_dcgm and d < len(task.gpu_indices):
                index, source = task.gpu_indices[d], "snapshot"
            elif group is not None and (task.node, group) in known:
                index, source = known[(task.node, group)], "reservation"
            else:
                index, source = -1, "unknown"
            rows.append((task.node, index, group, task.name, pod, namespace, job.key, job.queue, task.status,
                         fractional, share, mem, source))
    frame = pd.DataFrame(rows, columns=SLICE_COLUMNS)
    return frame.astype({"gpu_index": "int64", "share": "float64", "alloc_memory_mib": "float64"})
