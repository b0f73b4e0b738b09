"""Load, validate and save snapshot format v1 (YAML or JSON).

Validation collects every problem it finds and raises one :class:`SnapshotError` listing them all, each with
the path of the offending object and field (``jobs[train-a].tasks[train-a-0].gpu``). Unknown keys, wrong
units, negative quantities, dangling references and cycles are errors: nothing is silently dropped.

Quantities are numbers in the field's unit. Strings with a Kubernetes quantity suffix are accepted where the
unit is unambiguous (``memory_bytes: 64Gi``, ``cpu_millis: 4000m``); any other suffix is a wrong-unit error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from . import placement as _placement  # noqa: F401  registers strategies (fragaware) in PLACEMENT_STRATEGIES
from . import queue_tree, safe_io
from .errors import SnapshotError
from .model import (
    ACTIONS,
    GPU_DEVICE_ORDERS,
    PLACEMENT_STRATEGIES,
    RESOURCES,
    SELECTOR_OPERATORS,
    TAINT_EFFECTS,
    TASK_STATUSES,
    TOLERATION_OPERATORS,
    WAITING_FOR,
    ExternalPod,
    ExternalUsage,
    HostPort,
    Job,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    PlacementConfig,
    PodAffinityTerm,
    PodConstraints,
    Queue,
    QueueResource,
    Requirement,
    SchedulerConfig,
    Snapshot,
    SubGroup,
    Taint,
    Task,
    TaskUsage,
    Toleration,
    Topology,
    TopologyConstraint,
    TopologyLevel,
    DraClaim,
    is_gpu_device_class,
    mig_gpu_total,
)
from .model import MIG_PROFILE

VERSIONS = (1, 1.1, 1.2)
"""Snapshot format versions this kaidash reads. 1.1 = 1 + the fields KAI's predicates read (taints, pod
constraints, external pods, ConfigMaps), job/task UIDs and ``waiting_for``; 1.2 = 1.1 + topologies and jobs'
topology constraints. Files are written as the lowest version whose fields they use, so older kaidash
versions keep reading what they can."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_QUANTITY = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


class _Collector:
    """Accumulates ``(path, message)`` problems while a document is parsed."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SnapshotError(self.problems)


# ---------------------------------------------------------------------------------------------- scalars

def _number(value: Any, path: str, errs: _Collector, unit: str, *, allow_negative_one: bool = False,
            allow_negative: bool = False, integer: bool = False) -> Optional[float]:
    """Parse a quantity in ``unit`` (``devices``, ``millicores``, ``bytes``, ``MiB``, ``seconds``, ``count``)."""
    if isinstance(value, bool) or value is None:
        errs.add(path, f"expected a number of {unit}, got {value!r}")
        return None
    if isinstance(value, (int, float)):
        num = float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf  # no OverflowError
    elif isinstance(value, str):
        num = _parse_quantity_string(value, path, errs, unit)
        if num is None:
            return None
    else:
        errs.add(path, f"expected a number of {unit}, got {type(value).__name__} {value!r}")
        return None
    if math.isnan(num) or math.isinf(num):
        errs.add(path, f"expected a finite number of {unit}, got {value!r}")
        return None
    if num < 0 and not allow_negative and not (allow_negative_one and num == -1):
        hint = " (use -1 for unlimited)" if allow_negative_one else ""
        errs.add(path, f"negative quantity {value!r} {unit}{hint}")
        return None
    if integer and num != int(num):
        errs.add(path, f"expected a whole number of {unit}, got {value!r}")
        return None
    return num


def _parse_quantity_string(text: str, path: str, errs: _Collector, unit: str) -> Optional[float]:
    match = _QUANTITY.match(text)
    if not match:
        errs.add(path, f"expected a number of {unit}, got {text!r}")
        return None
    num, suffix = float(match.group(1)), match.group(2)
    if suffix == "":
        return num
    if unit == "bytes" and suffix in _BINARY:
        return num * _BINARY[suffix]
    if unit == "bytes" and suffix in _DECIMAL:
        return num * _DECIMAL[suffix]
    if unit == "millicores" and suffix == "m":
        return num
    if unit == "MiB" and suffix == "Mi":
        return num
    if unit == "MiB" and suffix == "Gi":
        return num * 1024
    if unit == "seconds" and suffix in ("s", "m", "h"):
        return num * {"s": 1, "m": 60, "h": 3600}[suffix]
    examples = {"bytes": "68719476736 or '64Gi'", "millicores": "4000 or '4000m'", "MiB": "81920 or '80Gi'",
                "devices": "1, 0.5", "seconds": "300 or '5m'", "count": "110"}
    errs.add(path, f"wrong unit {suffix!r}: this field is in {unit} (e.g. {examples.get(unit, unit)}), got {text!r}")
    return None


def _string(value: Any, path: str, errs: _Collector, *, choices=None, optional=False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str) or value == "":
        errs.add(path, f"expected a non-empty string, got {value!r}")
        return None
    if choices is not None and value not in choices:
        errs.add(path, f"{value!r} is not one of {', '.join(map(str, choices))}")
        return None
    return value


def _bool(value: Any, path: str, errs: _Collector) -> Optional[bool]:
    if not isinstance(value, bool):
        errs.add(path, f"expected true or false, got {value!r}")
        return None
    return value


def _mapping(value: Any, path: str, errs: _Collector) -> Optional[dict]:
    if not isinstance(value, dict):
        errs.add(path, f"expected a mapping, got {type(value).__name__}")
        return None
    return value


def _list(value: Any, path: str, errs: _Collector) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        errs.add(path, f"expected a list, got {type(value).__name__}")
        return []
    return value


def _check_keys(doc: dict, allowed: set[str], path: str, errs: _Collector, required=()) -> None:
    for key in doc:
        if key not in allowed:
            errs.add(f"{path}.{key}" if path else str(key), f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in doc:
            errs.add(f"{path}.{key}" if path else key, "required key is missing")


# ---------------------------------------------------------------------------------------------- objects

_Field = tuple[str, Callable[[Any, str, _Collector], Any]]


def _num(unit: str, **kw) -> Callable[[Any, str, _Collector], Any]:
    return lambda v, p, e: _number(v, p, e, unit, **kw)


def _parse_fields(doc: dict, spec: dict[str, Callable], path: str, errs: _Collector, required=()) -> dict:
    _check_keys(doc, set(spec), path, errs, required)
    out = {}
    for key, parse in spec.items():
        if key in doc:
            value = parse(doc[key], f"{path}.{key}", errs)
            if value is not None:
                out[key] = value
    return out


def _parse_config(doc: Any, errs: _Collector) -> SchedulerConfig:
    doc = _mapping(doc, "config", errs) or {}
    strategies = tuple(PLACEMENT_STRATEGIES)

    def placement(v, p, e):
        m = _mapping(v, p, e)
        if m is None:
            return None
        kw = _parse_fields(m, {"gpu": lambda x, pp, ee: _string(x, pp, ee, choices=strategies),
                               "cpu": lambda x, pp, ee: _string(x, pp, ee, choices=strategies)}, p, e)
        return PlacementConfig(**kw)

    def actions(v, p, e):
        items = _list(v, p, e) if not isinstance(v, str) else [a.strip() for a in v.split(",") if a.strip()]
        return [a for i, a in enumerate(items) if _string(a, f"{p}[{i}]", e, choices=ACTIONS)]

    spec = {
        "actions": actions,
        "placement": placement,
        "gpu_device_order": lambda v, p, e: _string(v, p, e, choices=GPU_DEVICE_ORDERS),
        "k_value": _num("count"),
        "stale_grace_period_s": _num("seconds", allow_negative=True),
        "allow_consolidating_reclaim": _bool,
        "max_consolidation_preemptees": _num("count", allow_negative_one=True, integer=True),
        "default_preempt_min_runtime_s": _num("seconds"),
        "default_reclaim_min_runtime_s": _num("seconds"),
        "reclaimer_saturation_multiplier": _num("count"),
        "min_runtime_resolve": lambda v, p, e: _string(v, p, e, choices=("lca", "queue")),
        "schedule_period_s": _num("seconds"),
        "use_scheduling_signatures": _bool,
    }
    kw = _parse_fields(doc, spec, "config", errs)
    if "max_consolidation_preemptees" in kw:
        kw["max_consolidation_preemptees"] = int(kw["max_consolidation_preemptees"])
    if "reclaimer_saturation_multiplier" in kw and kw["reclaimer_saturation_multiplier"] < 1:
        errs.add("config.reclaimer_saturation_multiplier", "must be >= 1 (KAI rejects smaller values)")
    return SchedulerConfig(**kw)


def _str_dict(v: Any, p: str, e: _Collector) -> Optional[dict]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    bad = [k for k, val in m.items() if not isinstance(k, str) or not isinstance(val, str)]
    for k in bad:
        e.add(f"{p}.{k}", f"keys and values must be strings, got {m[k]!r}")
    return None if bad else dict(m)


def _str_list(v: Any, p: str, e: _Collector) -> list[str]:
    out = []
    for i, item in enumerate(_list(v, p, e)):
        if isinstance(item, str):
            out.append(item)
        else:
            e.add(f"{p}[{i}]", f"expected a string, got {item!r}")
    return out


def _objects(v: Any, p: str, e: _Collector, parse: Callable) -> list:
    return [o for i, item in enumerate(_list(v, p, e)) if (o := parse(item, f"{p}[{i}]", e)) is not None]


def _optional_str(v, p, e):
    return "" if v is None else _string_or_empty(v, p, e)


def _string_or_empty(value: Any, path: str, errs: _Collector) -> Optional[str]:
    if not isinstance(value, str):
        errs.add(path, f"expected a string, got {value!r}")
        return None
    return value


def _parse_taint(v: Any, p: str, e: _Collector) -> Optional[Taint]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"key": _optional_str, "value": _optional_str,
                           "effect": lambda x, pp, ee: _string(x, pp, ee, choices=TAINT_EFFECTS)}, p, e,
                       required=("key", "effect"))
    return Taint(**kw) if "effect" in kw and "key" in kw else None


def _parse_toleration(v: Any, p: str, e: _Collector) -> Optional[Toleration]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"key": _optional_str, "value": _optional_str,
                           "operator": lambda x, pp, ee: _string(x, pp, ee, choices=TOLERATION_OPERATORS),
                           "effect": lambda x, pp, ee: "" if x in (None, "") else
                           _string(x, pp, ee, choices=TAINT_EFFECTS)}, p, e)
    return Toleration(**kw)


def _parse_requirement(v: Any, p: str, e: _Collector) -> Optional[Requirement]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"key": lambda x, pp, ee: _string(x, pp, ee),
                           "operator": lambda x, pp, ee: _string(x, pp, ee, choices=SELECTOR_OPERATORS),
                           "values": _str_list}, p, e, required=("key", "operator"))
    return Requirement(**kw) if "key" in kw and "operator" in kw else None


def _parse_node_term(v: Any, p: str, e: _Collector) -> Optional[NodeSelectorTerm]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"match_expressions": lambda x, pp, ee: _objects(x, pp, ee, _parse_requirement),
                           "match_fields": lambda x, pp, ee: _objects(x, pp, ee, _parse_requirement)}, p, e)
    return NodeSelectorTerm(**kw)


def _parse_selector(v: Any, p: str, e: _Collector) -> Optional[LabelSelector]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"match_labels": _str_dict,
                           "match_expressions": lambda x, pp, ee: _objects(x, pp, ee, _parse_requirement)}, p, e)
    return LabelSelector(**kw)


def _parse_affinity_term(v: Any, p: str, e: _Collector) -> Optional[PodAffinityTerm]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"selector": _parse_selector, "topology_key": lambda x, pp, ee: _string(x, pp, ee),
                           "namespaces": _str_list, "all_namespaces": _bool,
                           "weight": _num("count", integer=True)}, p, e, required=("topology_key",))
    if "topology_key" not in kw:
        return None
    kw.setdefault("selector", LabelSelector())
    if "weight" in kw:
        kw["weight"] = int(kw["weight"])
    return PodAffinityTerm(**kw)


def _parse_host_port(v: Any, p: str, e: _Collector) -> Optional[HostPort]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"port": _num("count", integer=True), "protocol": lambda x, pp, ee: _string(x, pp, ee),
                           "host_ip": _optional_str}, p, e, required=("port",))
    if "port" not in kw:
        return None
    kw["port"] = int(kw["port"])
    return HostPort(**kw)


def _terms(x, pp, ee):
    return _objects(x, pp, ee, _parse_affinity_term)


def _parse_constraints(v: Any, p: str, e: _Collector) -> Optional[PodConstraints]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"labels": _str_dict,
                           "tolerations": lambda x, pp, ee: _objects(x, pp, ee, _parse_toleration),
                           "node_selector": _str_dict,
                           "node_affinity": lambda x, pp, ee: _objects(x, pp, ee, _parse_node_term),
                           "pod_affinity": _terms, "pod_anti_affinity": _terms, "preferred_pod_affinity": _terms,
                           "preferred_pod_anti_affinity": _terms,
                           "host_ports": lambda x, pp, ee: _objects(x, pp, ee, _parse_host_port),
                           "config_maps": _str_list}, p, e)
    return PodConstraints(**kw)


def _parse_external_pod(v: Any, p: str, e: _Collector) -> Optional[ExternalPod]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"namespace": lambda x, pp, ee: _string(x, pp, ee), "labels": _str_dict,
                           "host_ports": lambda x, pp, ee: _objects(x, pp, ee, _parse_host_port),
                           "pod_anti_affinity": _terms}, p, e, required=("namespace",))
    return ExternalPod(**kw) if "namespace" in kw else None


def _parse_node(doc: Any, index: int, errs: _Collector) -> Optional[Node]:
    name = doc.get("name") if isinstance(doc, dict) else None
    path = f"nodes[{name}]" if isinstance(name, str) and name else f"nodes[{index}]"
    doc = _mapping(doc, path, errs)
    if doc is None:
        return None

    def labels(v, p, e):
        m = _mapping(v, p, e)
        if m is None:
            return None
        bad = [k for k, val in m.items() if not isinstance(k, str) or not isinstance(val, str)]
        for k in bad:
            e.add(f"{p}.{k}", f"label keys and values must be strings, got {m[k]!r}")
        return None if bad else dict(m)

    def external(v, p, e):
        m = _mapping(v, p, e)
        if m is None:
            return None
        kw = _parse_fields(m, {"gpus": _num("devices"), "cpu_millis": _num("millicores"),
                               "memory_bytes": _num("bytes"), "pods": _num("count", integer=True)}, p, e)
        if "pods" in kw:
            kw["pods"] = int(kw["pods"])
        return ExternalUsage(**kw)

    spec = {
        "name": lambda v, p, e: _string(v, p, e),
        "gpus": _num("devices", integer=True),
        "gpu_memory_mib": _num("MiB"),
        "gpu_model": lambda v, p, e: _string(v, p, e, optional=True),
        "cpu_millis": _num("millicores"),
        "memory_bytes": _num("bytes"),
        "pods": _num("count", integer=True),
        "labels": labels,
        "ready": _bool,
        "external": external,
        "unschedulable": _bool,
        "taints": lambda v, p, e: _objects(v, p, e, _parse_taint),
        "external_pods": lambda v, p, e: _objects(v, p, e, _parse_external_pod),
        "mig": _parse_mig,
        "dra_gpus": _num("devices", integer=True),
    }
    kw = _parse_fields(doc, spec, path, errs, required=("name",))
    if "name" not in kw:
        return None
    for key in ("gpus", "pods", "dra_gpus"):
        if key in kw:
            kw[key] = int(kw[key])
    if kw.get("mig") and mig_gpu_total(kw["mig"]) > kw.get("gpus", 0):
        errs.add(f"{path}.mig", f"MIG instances make {mig_gpu_total(kw['mig'])} GPU-equivalents, more than the node's "
                                f"gpus ({kw.get('gpus', 0)}, which include them)")
    if kw.get("dra_gpus") and kw["dra_gpus"] + mig_gpu_total(kw.get("mig") or {}) > kw.get("gpus", 0):
        errs.add(f"{path}.dra_gpus", f"{kw.get('dra_gpus', 0)} DRA GPU devices are more than the node's gpus "
                                     f"({kw.get('gpus', 0)}, which include them and any MIG instances)")
    # a DRA-only node need not carry the nvidia.com/gpu.memory label: only device-plugin GPUs are shared by memory
    if (kw.get("gpus", 0) - kw.get("dra_gpus", 0) > 0 and kw.get("gpu_memory_mib", 0) <= 0
            and "gpu_memory_mib" not in doc):
        errs.add(f"{path}.gpu_memory_mib", "required for a node with GPUs (MiB per device, e.g. 81920)")
    return Node(**kw)


def _parse_queue_resource(v: Any, path: str, errs: _Collector) -> Optional[QueueResource]:
    m = _mapping(v, path, errs)
    if m is None:
        return None
    unit = {"gpu": "devices", "cpu": "millicores", "memory": "bytes"}[path.rsplit(".", 1)[-1]]
    kw = _parse_fields(m, {"quota": _num(unit, allow_negative_one=True),
                           "limit": _num(unit, allow_negative_one=True),
                           "over_quota_weight": _num("count", allow_negative=True)}, path, errs)
    return QueueResource(**kw)


def _parse_queue(doc: Any, index: int, errs: _Collector) -> Optional[Queue]:
    name = doc.get("name") if isinstance(doc, dict) else None
    path = f"queues[{name}]" if isinstance(name, str) and name else f"queues[{index}]"
    doc = _mapping(doc, path, errs)
    if doc is None:
        return None
    spec = {
        "name": lambda v, p, e: _string(v, p, e),
        "display_name": lambda v, p, e: _string(v, p, e, optional=True),
        "parent": lambda v, p, e: _string(v, p, e, optional=True),
        "priority": _num("count", integer=True, allow_negative=True),
        "creation_time": _num("seconds", allow_negative=True),
        "gpu": _parse_queue_resource,
        "cpu": _parse_queue_resource,
        "memory": _parse_queue_resource,
        "preempt_min_runtime_s": _num("seconds"),
        "reclaim_min_runtime_s": _num("seconds"),
    }
    kw = _parse_fields(doc, spec, path, errs, required=("name",))
    if "name" not in kw:
        return None
    if "priority" in kw:
        kw["priority"] = int(kw["priority"])
    return Queue(**kw)


def _parse_task(doc: Any, job_path: str, index: int, errs: _Collector) -> Optional[Task]:
    name = doc.get("name") if isinstance(doc, dict) else None
    path = f"{job_path}.tasks[{name}]" if isinstance(name, str) and name else f"{job_path}.tasks[{index}]"
    doc = _mapping(doc, path, errs)
    if doc is None:
        return None

    def int_or_list(kind):
        def parse(v, p, e):
            items = v if isinstance(v, list) else [v]
            out = []
            for i, item in enumerate(items):
                ip = f"{p}[{i}]" if isinstance(v, list) else p
                if kind is int:
                    n = _number(item, ip, e, "count", integer=True)
                    if n is not None:
                        out.append(int(n))
                else:
                    s = _string(item, ip, e)
                    if s is not None:
                        out.append(s)
            return out
        return parse

    def usage(v, p, e):
        m = _mapping(v, p, e)
        if m is None:
            return None
        kw = _parse_fields(m, {"gpu_memory_mib": _num("MiB"), "gpu_util": _num("count")}, p, e)
        if kw.get("gpu_util", 0) > 1:
            e.add(f"{p}.gpu_util", f"utilisation is a ratio in [0, 1], got {kw['gpu_util']}")
        return TaskUsage(**kw)

    spec = {
        "name": lambda v, p, e: _string(v, p, e),
        "gpu": _num("devices"),
        "gpu_memory_mib": _num("MiB"),
        "gpu_devices": _num("count", integer=True),
        "cpu_millis": _num("millicores"),
        "memory_bytes": _num("bytes"),
        "status": lambda v, p, e: _string(v, p, e, choices=TASK_STATUSES),
        "node": lambda v, p, e: _string(v, p, e, optional=True),
        "gpu_group": int_or_list(str),
        "gpu_index": int_or_list(int),
        "subgroup": lambda v, p, e: _string(v, p, e, optional=True),
        "creation_time": _num("seconds", allow_negative=True),
        "usage": usage,
        "constraints": _parse_constraints,
        "uid": lambda v, p, e: _string(v, p, e, optional=True),
        "mig": lambda v, p, e: _parse_mig(v, p, e, minimum=1),
        "dra_claims": lambda v, p, e: _objects(v, p, e, _parse_dra_claim),
        "priority_class": _string_or_empty,
    }
    kw = _parse_fields(doc, spec, path, errs, required=("name",))
    if "name" not in kw:
        return None
    if kw.get("dra_claims"):
        devices = sum(c.gpus for c in kw["dra_claims"])
        if "gpu" not in kw:
            kw["gpu"] = float(devices)
        elif kw["gpu"] != devices:
            errs.add(f"{path}.gpu", f"a DRA pod's gpu is the devices its claims request ({devices}), got {kw['gpu']:g}")
        for other in ("mig", "gpu_memory_mib"):
            if other in kw:
                errs.add(f"{path}.dra_claims", f"give either dra_claims or {other}, not both")
    if kw.get("mig"):
        equiv = mig_gpu_total(kw["mig"])
        if "gpu" not in kw:
            kw["gpu"] = float(equiv)
        elif kw["gpu"] != equiv:
            errs.add(f"{path}.gpu", f"a MIG request's gpu is its GPU-equivalents ({equiv}), got {kw['gpu']:g}")
        if "gpu_memory_mib" in kw:
            errs.add(f"{path}.mig", "give either mig or gpu_memory_mib, not both")
    if "gpu_group" in kw:
        kw["gpu_groups"] = kw.pop("gpu_group")
    if "gpu_index" in kw:
        kw["gpu_indices"] = kw.pop("gpu_index")
    if "gpu_devices" in kw:
        kw["gpu_devices"] = int(kw["gpu_devices"])
        if kw["gpu_devices"] < 1:
            errs.add(f"{path}.gpu_devices", "must be at least 1")
    gpu = kw.get("gpu", 0.0)
    if "gpu" in kw and "gpu_memory_mib" in kw:
        errs.add(f"{path}.gpu_memory_mib", "give either gpu (devices) or gpu_memory_mib, not both")
    if gpu > 1 and gpu != int(gpu):
        errs.add(f"{path}.gpu", f"{gpu} devices: a request above 1 GPU must be whole (use gpu_devices for multi-device fractions)")
    if gpu >= 1 and kw.get("gpu_devices", 1) != 1:
        errs.add(f"{path}.gpu_devices", "only for fractional or gpu_memory_mib requests; whole GPUs use gpu: N")
    status = kw.get("status", "pending")
    if status in ("running", "binding", "releasing", "pipelined") and not kw.get("node"):
        errs.add(f"{path}.node", f"a {status} task must name its node")
    return Task(**kw)


def _parse_job(doc: Any, index: int, errs: _Collector) -> Optional[Job]:
    name = doc.get("name") if isinstance(doc, dict) else None
    path = f"jobs[{name}]" if isinstance(name, str) and name else f"jobs[{index}]"
    doc = _mapping(doc, path, errs)
    if doc is None:
        return None

    def subgroups(v, p, e):
        out = []
        for i, item in enumerate(_list(v, p, e)):
            m = _mapping(item, f"{p}[{i}]", e)
            if m is None:
                continue
            kw = _parse_fields(m, {"name": lambda x, pp, ee: _string(x, pp, ee),
                                   "min_available": _num("count", integer=True)}, f"{p}[{i}]", e, required=("name",))
            if "name" in kw:
                out.append(SubGroup(name=kw["name"], min_available=int(kw.get("min_available", 1))))
        return out

    spec = {
        "name": lambda v, p, e: _string(v, p, e),
        "namespace": lambda v, p, e: _string(v, p, e, optional=True),
        "queue": lambda v, p, e: _string(v, p, e),
        "priority": _num("count", integer=True, allow_negative=True),
        "preemptible": lambda v, p, e: None if v is None else _bool(v, p, e),
        "min_available": _num("count", integer=True),
        "subgroups": subgroups,
        "creation_time": _num("seconds", allow_negative=True),
        "last_start_time": _num("seconds", allow_negative=True),
        "stale_since": _num("seconds", allow_negative=True),
        "last_eviction_time": _num("seconds", allow_negative=True),
        "preemption_delay_s": _num("seconds"),
        "stale_grace_period_s": _num("seconds", allow_negative=True),
        "duration_s": _num("seconds"),
        "tasks": lambda v, p, e: _list(v, p, e),
        "waiting_for": lambda v, p, e: _string(v, p, e, choices=WAITING_FOR),
        "uid": lambda v, p, e: _string(v, p, e, optional=True),
        "topology": _parse_topology_constraint,
    }
    kw = _parse_fields(doc, spec, path, errs, required=("name", "queue"))
    if "name" not in kw:
        return None
    raw_tasks = kw.pop("tasks", [])
    tasks = [t for i, raw in enumerate(raw_tasks) if (t := _parse_task(raw, path, i, errs)) is not None]
    for key in ("priority", "min_available"):
        if key in kw:
            kw[key] = int(kw[key])
    kw.setdefault("queue", "")
    job = Job(tasks=tasks, **kw)
    if not tasks:
        errs.add(f"{path}.tasks", "a job needs at least one task")
    names = {sg.name for sg in job.subgroups}
    for t in tasks:
        if t.subgroup is not None and t.subgroup not in names:
            errs.add(f"{path}.tasks[{t.name}].subgroup", f"unknown subgroup {t.subgroup!r} (job declares: {sorted(names) or 'none'})")
    return job


def _parse_dra_claim(v: Any, p: str, e: _Collector) -> Optional[DraClaim]:
    """One DRA ResourceClaim of a task: ``{name, gpus, device_class, shared}``."""
    m = _mapping(v, p, e)
    if m is None:
        return None
    kw = _parse_fields(m, {"name": lambda x, pp, ee: _string(x, pp, ee), "gpus": _num("devices", integer=True),
                           "device_class": lambda x, pp, ee: _string(x, pp, ee), "shared": _bool,
                           "queue": lambda x, pp, ee: _string(x, pp, ee, optional=True), "missing": _bool},
                       p, e, required=("name",))
    if kw.get("missing"):
        kw.setdefault("gpus", 0)
        if kw["gpus"] != 0:
            e.add(f"{p}.gpus", "a missing claim requests nothing (gpus: 0)")
    elif "gpus" in kw:
        kw["gpus"] = int(kw["gpus"])
        if kw["gpus"] < 1:
            e.add(f"{p}.gpus", "a GPU claim requests at least 1 device")
    if "device_class" in kw and not is_gpu_device_class(kw["device_class"]):
        e.add(f"{p}.device_class", f"{kw['device_class']!r} is not a GPU DeviceClass (KAI counts only classes whose "
                                   "name contains 'gpu'; leave other claims out)")
    return DraClaim(**kw) if "name" in kw else None


def _parse_mig(v: Any, p: str, e: _Collector, minimum: int = 0) -> Optional[dict]:
    """``{profile: count}`` of MIG instances (profiles ``<G>g.<M>gb``)."""
    m = _mapping(v, p, e)
    if m is None:
        return None
    out = {}
    for prof, count in m.items():
        if not isinstance(prof, str) or not MIG_PROFILE.match(prof):
            e.add(f"{p}.{prof}", f"{prof!r} is not a MIG profile (<G>g.<M>gb, as in nvidia.com/mig-1g.10gb)")
            continue
        n = _number(count, f"{p}.{prof}", e, "count", integer=True)
        if n is None:
            continue
        if n < minimum:
            e.add(f"{p}.{prof}", f"must be at least {minimum}")
            continue
        out[prof] = int(n)
    return out


def _parse_topology_constraint(v: Any, p: str, e: _Collector) -> Optional[TopologyConstraint]:
    m = _mapping(v, p, e)
    if m is None:
        return None
    opt = lambda x, pp, ee: _string(x, pp, ee, optional=True)  # noqa: E731
    kw = _parse_fields(m, {"topology": lambda x, pp, ee: _string(x, pp, ee), "required_level": opt,
                           "preferred_level": opt}, p, e, required=("topology",))
    return TopologyConstraint(**kw) if "topology" in kw else None


def _parse_topology(v: Any, p: str, e: _Collector) -> Optional[Topology]:
    m = _mapping(v, p, e)
    if m is None:
        return None

    def level(x, pp, ee):
        lm = _mapping(x, pp, ee)
        if lm is None:
            return None
        kw = _parse_fields(lm, {"node_label": lambda y, q, r: _string(y, q, r),
                                "alias": lambda y, q, r: _string(y, q, r, optional=True)}, pp, ee,
                           required=("node_label",))
        return TopologyLevel(**kw) if "node_label" in kw else None

    kw = _parse_fields(m, {"name": lambda x, pp, ee: _string(x, pp, ee),
                           "levels": lambda x, pp, ee: _objects(x, pp, ee, level)}, p, e,
                       required=("name", "levels"))
    if "name" not in kw:
        return None
    topo = Topology(name=kw["name"], levels=kw.get("levels", []))
    if "levels" in m and not topo.levels:
        e.add(f"{p}.levels", "a topology needs at least one level")
    labels = [lv.node_label for lv in topo.levels]
    for lv in topo.levels:
        if labels.count(lv.node_label) > 1:
            e.add(f"{p}.levels", f"node label {lv.node_label!r} appears on more than one level")
            break
    return topo


def _topology_dict(t: Topology) -> dict:
    return {"name": t.name, "levels": [{"node_label": lv.node_label, **({"alias": lv.alias} if lv.alias else {})}
                                       for lv in t.levels]}


def _topology_constraint_dict(c: TopologyConstraint) -> dict:
    d: dict[str, Any] = {"topology": c.topology}
    if c.required_level:
        d["required_level"] = c.required_level
    if c.preferred_level:
        d["preferred_level"] = c.preferred_level
    return d


def _topologies_ok(topologies: Any) -> bool:
    """The direct check of ``Snapshot.topologies`` (small: checked through the parser)."""
    if type(topologies) is not list:
        return False
    return all(type(t) is Topology and _roundtrip_equal(_topology_dict(t), _parse_topology) for t in topologies)


def _check_topology_names(topologies: list[Topology], errs: _Collector) -> None:
    seen: set[str] = set()
    for t in topologies:
        if t.name in seen:
            errs.add(f"topologies[{t.name}].name", "duplicate topology name")
        seen.add(t.name)


# ---------------------------------------------------------------------------------------------- cross checks

def _cross_check(snap: Snapshot, errs: _Collector, placement: bool = True) -> None:
    """Checks across objects: duplicate names, references (parent and job queues, task nodes), leaf queues,
    cycles, and with ``placement`` the task-on-node checks that read node fields (GPUs, index range, memory)."""
    nodes = {}
    for n in snap.nodes:
        if n.name in nodes:
            errs.add(f"nodes[{n.name}].name", "duplicate node name")
        nodes[n.name] = n
    queues: dict[str, Queue] = {}
    for q in snap.queues:
        if q.name in queues:
            errs.add(f"queues[{q.name}].name", "duplicate queue name")
        queues[q.name] = q
    for q in snap.queues:
        if q.parent is not None and q.parent not in queues:
            errs.add(f"queues[{q.name}].parent", f"parent queue {q.parent!r} does not exist")
    # cycles and the depth limit, in one linear walk up the parents
    for name, message in queue_tree.tree_problems({name: q.parent for name, q in queues.items()}):
        errs.add(f"queues[{name}].parent", message)
    parents = {q.parent for q in snap.queues if q.parent}
    jobs_seen: set[str] = set()
    tasks_seen: set[str] = set()
    claims_seen: dict[str, tuple[str, DraClaim]] = {}
    for job in snap.jobs:
        jp = f"jobs[{job.name}]"
        if job.key in jobs_seen:
            errs.add(f"{jp}.name", f"duplicate job {job.key!r}")
        jobs_seen.add(job.key)
        if job.waiting_for:
            pass  # KAI does not consider the job: the queue it names may not exist
        elif job.queue and job.queue not in queues:
            errs.add(f"{jp}.queue", f"queue {job.queue!r} does not exist")
        elif job.queue in parents:
            errs.add(f"{jp}.queue", f"queue {job.queue!r} is not a leaf queue (it has child queues); jobs go in leaf queues")
        for t in job.tasks:
            tp = f"{jp}.tasks[{t.name}]"
            if t.name in tasks_seen:
                errs.add(f"{tp}.name", "duplicate task name (task names are unique in a snapshot)")
            tasks_seen.add(t.name)
            for c in t.dra_claims:
                _check_claim_shared(c, t.name, tp, claims_seen, errs)
            if t.node is not None and t.node not in nodes:
                errs.add(f"{tp}.node", f"task on unknown node {t.node!r}")
                continue
            if t.node is None or not placement:
                continue
            _check_placement(t, tp, nodes[t.node], errs)
    for qname, res in snap.usage.items():
        if qname not in queues:
            errs.add(f"usage.{qname}", f"usage for unknown queue {qname!r}")


def _check_claim_shared(c: DraClaim, task: str, tp: str, seen: dict, errs: _Collector) -> None:
    """A claim several tasks name must be a shared one with the same request in each."""
    first = seen.setdefault(c.name, (task, c))
    if first[0] == task:
        return
    other = first[1]
    if not (c.shared and other.shared):
        errs.add(f"{tp}.dra_claims[{c.name}].shared", f"claim {c.name!r} is also used by task {first[0]!r}: a claim "
                                                     "several pods use is a shared one (shared: true in each)")
    elif c.missing or other.missing:
        pass  # neither task sees the claim
    elif (c.gpus, c.device_class) != (other.gpus, other.device_class):
        errs.add(f"{tp}.dra_claims[{c.name}]", f"claim {c.name!r} requests {c.gpus} x {c.device_class} here but "
                                              f"{other.gpus} x {other.device_class} in task {first[0]!r}")


def _check_placement(t: Task, tp: str, node: Node, errs: _Collector) -> None:
    """The checks of a placed task against its node's fields (GPUs, device index range, GPU memory)."""
    if t.is_gpu and node.gpus == 0:
        errs.add(f"{tp}.node", f"GPU task placed on node {node.name!r} which has no GPUs")
    for i, gi in enumerate(t.gpu_indices):
        if not 0 <= gi < node.gpus:
            errs.add(f"{tp}.gpu_index", f"GPU index {gi} out of range for node {node.name!r} with {node.gpus} GPUs")
    if t.gpu_memory_mib is not None and node.gpu_memory_mib and t.gpu_memory_mib > node.gpu_memory_mib:
        errs.add(f"{tp}.gpu_memory_mib", f"{t.gpu_memory_mib:g} MiB exceeds node {node.name!r} GPU memory {node.gpu_memory_mib:g} MiB")


def job_placement_problems(job: Job, nodes: dict[str, Node]) -> list[tuple[str, str]]:
    """The task-on-node problems of one (valid) job against ``nodes`` by name: what the cross checks with
    ``placement`` report for its tasks (tasks on unknown nodes are a reference problem, not checked here)."""
    errs = _Collector()
    jp = f"jobs[{job.name}]"
    for t in job.tasks:
        node = nodes.get(t.node) if t.node is not None else None
        if node is not None:
            _check_placement(t, f"{jp}.tasks[{t.name}]", node, errs)
    return errs.problems


def _parse_usage(doc: Any, errs: _Collector) -> dict[str, dict[str, float]]:
    m = _mapping(doc, "usage", errs)
    if m is None:
        return {}
    out = {}
    for q, res in m.items():
        r = _mapping(res, f"usage.{q}", errs)
        if r is None:
            continue
        kw = _parse_fields(r, {k: _num("count") for k in RESOURCES}, f"usage.{q}", errs)
        out[str(q)] = {k: float(kw.get(k, 0.0)) for k in RESOURCES}
    return out


# ---------------------------------------------------------------------------------------------- public API

TOP_LEVEL_KEYS = {"version", "time", "config", "nodes", "queues", "jobs", "usage", "config_maps", "topologies"}


def snapshot_from_dict(doc: Any) -> Snapshot:
    """Validate a parsed document and build a :class:`Snapshot`; raises :class:`SnapshotError`."""
    errs = _Collector()
    if not isinstance(doc, dict):
        raise SnapshotError("(document)", f"expected a mapping at the top level, got {type(doc).__name__}")
    _check_keys(doc, TOP_LEVEL_KEYS, "", errs)
    version = doc.get("version", 1)
    if isinstance(version, bool) or version not in VERSIONS:
        errs.add("version", f"unsupported snapshot version {version!r} (this kaidash reads versions "
                            f"{', '.join(map(str, VERSIONS))})")
    time = _number(doc.get("time", 0), "time", errs, "seconds", allow_negative=True) if "time" in doc else 0.0
    config = _parse_config(doc.get("config", {}), errs)
    nodes = [n for i, d in enumerate(_list(doc.get("nodes"), "nodes", errs)) if (n := _parse_node(d, i, errs))]
    queues = [q for i, d in enumerate(_list(doc.get("queues"), "queues", errs)) if (q := _parse_queue(d, i, errs))]
    jobs = [j for i, d in enumerate(_list(doc.get("jobs"), "jobs", errs)) if (j := _parse_job(d, i, errs))]
    usage = _parse_usage(doc["usage"], errs) if "usage" in doc else {}
    config_maps = _str_list(doc["config_maps"], "config_maps", errs) if doc.get("config_maps") is not None else None
    topologies = _objects(doc.get("topologies"), "topologies", errs, _parse_topology)
    _check_topology_names(topologies, errs)
    snap = Snapshot(nodes=nodes, queues=queues, jobs=jobs, config=config, time=time or 0.0, usage=usage,
                    config_maps=config_maps, topologies=topologies)
    _cross_check(snap, errs)
    errs.raise_if_any()
    return snap


def validate(snapshot: Snapshot) -> None:
    """Re-validate an in-memory snapshot (e.g. one built by a source or edited by what-if).

    Raises :class:`SnapshotError` with exactly the problems (same paths, messages and order) that saving and
    re-loading the snapshot would report (:func:`validate_roundtrip`), without the round trip: see
    :func:`snapshot_problems`.
    """
    problems = snapshot_problems(snapshot)
    if problems:
        raise SnapshotError(problems)


def validate_roundtrip(snapshot: Snapshot) -> None:
    """Validate by a full ``snapshot_to_dict`` → ``snapshot_from_dict`` round trip (the reference for
    :func:`validate`; about ten times slower on a large cluster)."""
    snapshot_from_dict(snapshot_to_dict(snapshot))


def snapshot_problems(snapshot: Snapshot) -> list[tuple[str, str]]:
    """Every ``(path, message)`` problem of an in-memory snapshot, as the round trip would report them.

    Each object is checked directly; only an object that fails the direct check (any field of the wrong type
    or out of range) is converted to its document form and parsed, which yields the round trip's exact
    messages and the value the cross-object checks then see. The cross-object checks run on the objects as the
    loader would have built them.
    """
    errs = _Collector()
    _number(_clean(snapshot.time), "time", errs, "seconds", allow_negative=True)
    _parse_config(_config_dict(snapshot.config), errs)
    nodes = [c for i, n in enumerate(snapshot.nodes) if (c := node_checked(n, i, errs)) is not None]
    queues = [c for i, q in enumerate(snapshot.queues) if (c := queue_checked(q, i, errs)) is not None]
    jobs = [c for i, j in enumerate(snapshot.jobs) if (c := job_checked(j, i, errs)) is not None]
    usage = _parse_usage(_usage_dict(snapshot.usage), errs) if snapshot.usage else {}
    if snapshot.topologies:
        topologies = snapshot.topologies if _topologies_ok(snapshot.topologies) else _objects(
            [_topology_dict(t) for t in snapshot.topologies], "topologies", errs, _parse_topology)
        _check_topology_names(topologies, errs)
    _cross_check(Snapshot(nodes=nodes, queues=queues, jobs=jobs, usage=usage), errs)
    return errs.problems


def cross_check_problems(snapshot: Snapshot, placement: bool = True) -> list[tuple[str, str]]:
    """Only the cross-object problems of a snapshot whose objects are each valid (see :func:`node_checked`):
    duplicate names, references, leaf queues, cycles; ``placement=False`` skips the task-on-node field checks
    (a caller that checked each job against its nodes already, e.g. the kube source)."""
    errs = _Collector()
    _cross_check(snapshot, errs, placement)
    return errs.problems


# ---------------------------------------------------------------------------------------------- direct checks
# Predicates that say "the round trip would find nothing wrong with this object and would load it back with
# the same values the cross checks read". They are deliberately strict (exact types): anything unusual takes
# the exact path (document form + parser) instead, so the messages are always the parser's own.

_BIG = float(2**1023)  # _number turns larger integers into inf


def _nonneg(v: Any) -> bool:
    t = type(v)
    return (t is float or t is int) and 0 <= v < _BIG


def _finite(v: Any) -> bool:
    t = type(v)
    return (t is float or t is int) and -_BIG < v < _BIG


def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v < _BIG


def _whole(v: Any) -> bool:
    return type(v) is int and -_BIG < v < _BIG


def _quota(v: Any) -> bool:
    return _nonneg(v) or ((type(v) is float or type(v) is int) and v == -1)


def _name(v: Any) -> bool:
    return type(v) is str and v != ""


def _opt_name(v: Any) -> bool:
    """None, or a non-empty string (an empty one is dropped by the round trip, so it takes the exact path)."""
    return v is None or (type(v) is str and v != "")


_STATUSES = frozenset(TASK_STATUSES)
_PLACED = frozenset({"running", "binding", "releasing", "pipelined"})


def _node_ok(n: Node) -> bool:
    if not (_name(n.name) and _count(n.gpus) and _count(n.pods) and _nonneg(n.cpu_millis)
            and _nonneg(n.memory_bytes)):
        return False
    if (n.gpus or n.gpu_memory_mib) and not _nonneg(n.gpu_memory_mib):
        return False
    if n.gpu_model and type(n.gpu_model) is not str:
        return False
    if type(n.external) is not ExternalUsage:
        return False
    labels = n.labels
    if labels and not (type(labels) is dict
                       and all(type(k) is str and type(v) is str for k, v in labels.items())):
        return False
    ext = n.external
    if (ext.gpus or ext.cpu_millis or ext.memory_bytes or ext.pods) and not (
            _nonneg(ext.gpus) and _nonneg(ext.cpu_millis) and _nonneg(ext.memory_bytes) and _count(ext.pods)):
        return False
    if type(n.unschedulable) is not bool or type(n.taints) is not list or type(n.external_pods) is not list:
        return False
    if (n.mig or n.dra_gpus) and not (type(n.mig) is dict and _roundtrip_equal(_node_dict(n), lambda d, pp, e: _parse_node(d, 0, e))):
        return False
    if n.taints and not all(type(t) is Taint and type(t.key) is str and type(t.value) is str
                            and t.effect in TAINT_EFFECTS for t in n.taints):
        return False
    return not n.external_pods or _roundtrip_equal(_node_extras(n), _parse_node_extras)


def _queue_ok(q: Queue) -> bool:
    if not (_name(q.name) and _opt_name(q.parent) and _whole(q.priority) and _finite(q.creation_time)):
        return False
    if q.display_name and type(q.display_name) is not str:
        return False
    for r in (q.gpu, q.cpu, q.memory):
        if type(r) is not QueueResource or not (_quota(r.quota) and _quota(r.limit) and _finite(r.over_quota_weight)):
            return False
    return ((q.preempt_min_runtime_s is None or _nonneg(q.preempt_min_runtime_s))
            and (q.reclaim_min_runtime_s is None or _nonneg(q.reclaim_min_runtime_s)))


def _task_ok(t: Task, subgroups: set) -> bool:
    gpu, mem = t.gpu, t.gpu_memory_mib
    if not (_name(t.name) and _nonneg(gpu) and _nonneg(t.cpu_millis) and _nonneg(t.memory_bytes)):
        return False
    dev = t.gpu_devices
    if dev != 1 and not (_count(dev) and dev >= 1):
        return False
    if mem is not None:
        if not _nonneg(mem):
            return False
    elif gpu > 1 and gpu != int(gpu) or gpu >= 1 and dev != 1:
        return False
    status, node = t.status, t.node
    if type(status) is not str or status not in _STATUSES or not _opt_name(node):
        return False
    if node is None and status in _PLACED:
        return False
    groups, indices = t.gpu_groups, t.gpu_indices
    if type(groups) is not list or type(indices) is not list:
        return False
    for g in groups:
        if type(g) is not str or not g:
            return False
    for i in indices:
        if type(i) is not int or not 0 <= i < _BIG:
            return False
    sub = t.subgroup
    if sub is not None and (type(sub) is not str or sub not in subgroups):
        return False
    if t.creation_time is not None and not _finite(t.creation_time):
        return False
    if not _opt_name(t.uid):
        return False
    u = t.usage
    if u is not None and not (type(u) is TaskUsage and _nonneg(u.gpu_memory_mib) and _nonneg(u.gpu_util)
                              and u.gpu_util <= 1):
        return False
    if (t.mig or t.dra_claims) and not (type(t.mig) is dict and type(t.dra_claims) is list and all(
            type(c) is DraClaim for c in t.dra_claims) and _roundtrip_equal(_task_dict(t), lambda d, pp, e: _parse_task(d, "", 0, e))):
        return False
    c = t.constraints
    return c is None or (type(c) is PodConstraints and _roundtrip_equal(_constraints_dict(c), _parse_constraints))


def _job_ok(j: Job) -> bool:
    if not (_name(j.name) and _opt_name(j.namespace) and _name(j.queue) and _whole(j.priority)
            and _count(j.min_available) and _finite(j.creation_time)):
        return False
    if j.preemptible is not None and type(j.preemptible) is not bool:
        return False
    if not _opt_name(j.uid) or not (j.waiting_for is None or j.waiting_for in WAITING_FOR):
        return False
    c = j.topology
    if c is not None and not (type(c) is TopologyConstraint and _name(c.topology) and _opt_name(c.required_level)
                              and _opt_name(c.preferred_level)):
        return False
    for value in (j.last_start_time, j.stale_since, j.last_eviction_time, j.stale_grace_period_s):
        if value is not None and not _finite(value):
            return False
    for value in (j.preemption_delay_s, j.duration_s):
        if value is not None and not _nonneg(value):
            return False
    subgroups, tasks = j.subgroups, j.tasks
    if type(subgroups) is not list or type(tasks) is not list:
        return False
    names = set()
    for sg in subgroups:
        if type(sg) is not SubGroup or not _name(sg.name) or not _count(sg.min_available):
            return False
        names.add(sg.name)
    if not tasks:
        return False
    for t in tasks:
        if type(t) is not Task or not _task_ok(t, names):
            return False
    return True


def _roundtrip_equal(doc: dict, parse: Callable) -> bool:
    """Whether the document form of a nested object parses without problems (constraints are rare and small:
    checking them through the parser keeps one definition of what is valid)."""
    errs = _Collector()
    parse(doc, "", errs)
    return not errs.problems


def _parse_node_extras(doc: Any, p: str, e: _Collector) -> None:
    _objects(doc.get("external_pods"), "external_pods", e, _parse_external_pod)


def _node_extras(n: Node) -> dict:
    return {"external_pods": [_external_pod_dict(x) for x in n.external_pods]}


def node_checked(node: Node, index: int, errs: _Collector) -> Optional[Node]:
    """``node`` if it is valid on its own; else its problems go to ``errs`` and the node as the loader would
    build it (None if it would be dropped) is returned. ``index`` is its position (paths of unnamed nodes)."""
    if type(node) is Node and _node_ok(node):
        return node
    return _parse_node(_node_dict(node), index, errs)


def queue_checked(queue: Queue, index: int, errs: _Collector) -> Optional[Queue]:
    """Like :func:`node_checked`, for a queue."""
    if type(queue) is Queue and _queue_ok(queue):
        return queue
    return _parse_queue(_queue_dict(queue), index, errs)


def job_checked(job: Job, index: int, errs: _Collector) -> Optional[Job]:
    """Like :func:`node_checked`, for a job and its tasks."""
    if type(job) is Job and _job_ok(job):
        return job
    return _parse_job(_job_dict(job), index, errs)


def object_problems(obj: Any, index: int = 0) -> list[tuple[str, str]]:
    """Problems of one :class:`Node`, :class:`Queue` or :class:`Job` on its own (no cross-object checks)."""
    errs = _Collector()
    check = {Node: node_checked, Queue: queue_checked, Job: job_checked}[type(obj)]
    check(obj, index, errs)
    return errs.problems


def _clean(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _queue_resource_dict(r: QueueResource) -> dict:
    return {"quota": _clean(r.quota), "limit": _clean(r.limit), "over_quota_weight": _clean(r.over_quota_weight)}


def snapshot_to_dict(snap: Snapshot) -> dict:
    """The snapshot as a plain document, omitting fields at their defaults where readable; version 1.1 when it
    uses a field of 1.1 (see :data:`VERSIONS`), else 1."""
    config = _config_dict(snap.config)
    out: dict[str, Any] = {"version": 1, "time": _clean(snap.time)}
    if config:
        out["config"] = config
    out["nodes"] = [_node_dict(n) for n in snap.nodes]
    out["queues"] = [_queue_dict(q) for q in snap.queues]
    out["jobs"] = [_job_dict(j) for j in snap.jobs]
    if snap.usage:
        out["usage"] = _usage_dict(snap.usage)
    if snap.config_maps is not None:
        out["config_maps"] = list(snap.config_maps)
    if snap.topologies:
        out["topologies"] = [_topology_dict(t) for t in snap.topologies]
    if ("topologies" in out
            or any("topology" in j or any("mig" in t or "dra_claims" in t or "priority_class" in t for t in j["tasks"])
                   for j in out["jobs"])
            or any("mig" in n or "dra_gpus" in n for n in out["nodes"])):
        out["version"] = 1.2
    elif _uses_v11(out):
        out["version"] = 1.1
    return out


V11_KEYS = {"node": {"unschedulable", "taints", "external_pods"}, "job": {"waiting_for", "uid"},
            "task": {"constraints", "uid"}}


def _uses_v11(doc: dict) -> bool:
    if "config_maps" in doc:
        return True
    if any(V11_KEYS["node"] & n.keys() for n in doc["nodes"]):
        return True
    return any(V11_KEYS["job"] & j.keys() or any(V11_KEYS["task"] & t.keys() for t in j["tasks"])
               for j in doc["jobs"])


def requirement_to_dict(r: Requirement) -> dict:
    """A node-selector or label-selector requirement as the snapshot (and Kubernetes) writes it."""
    d: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        d["values"] = list(r.values)
    return d


def _selector_dict(s: LabelSelector) -> dict:
    d: dict[str, Any] = {}
    if s.match_labels:
        d["match_labels"] = dict(s.match_labels)
    if s.match_expressions:
        d["match_expressions"] = [requirement_to_dict(r) for r in s.match_expressions]
    return d


def _term_dict(t: PodAffinityTerm) -> dict:
    d: dict[str, Any] = {"selector": _selector_dict(t.selector), "topology_key": t.topology_key}
    if t.namespaces:
        d["namespaces"] = list(t.namespaces)
    if t.all_namespaces:
        d["all_namespaces"] = True
    if t.weight:
        d["weight"] = t.weight
    return d


def _host_port_dict(h: HostPort) -> dict:
    d: dict[str, Any] = {"port": h.port, "protocol": h.protocol}
    if h.host_ip:
        d["host_ip"] = h.host_ip
    return d


def _constraints_dict(c: PodConstraints) -> dict:
    d: dict[str, Any] = {}
    if c.labels:
        d["labels"] = dict(c.labels)
    if c.tolerations:
        d["tolerations"] = [{k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value),
                                                ("effect", t.effect)) if v} for t in c.tolerations]
    if c.node_selector:
        d["node_selector"] = dict(c.node_selector)
    if c.node_affinity:
        d["node_affinity"] = [{k: v for k, v in (("match_expressions", [requirement_to_dict(r) for r in
                                                                         t.match_expressions]),
                                                  ("match_fields", [requirement_to_dict(r) for r in t.match_fields]))
                               if v} for t in c.node_affinity]
    for key in ("pod_affinity", "pod_anti_affinity", "preferred_pod_affinity", "preferred_pod_anti_affinity"):
        terms = getattr(c, key)
        if terms:
            d[key] = [_term_dict(t) for t in terms]
    if c.host_ports:
        d["host_ports"] = [_host_port_dict(h) for h in c.host_ports]
    if c.config_maps:
        d["config_maps"] = list(c.config_maps)
    return d


def _external_pod_dict(x: ExternalPod) -> dict:
    d: dict[str, Any] = {"namespace": x.namespace}
    if x.labels:
        d["labels"] = dict(x.labels)
    if x.host_ports:
        d["host_ports"] = [_host_port_dict(h) for h in x.host_ports]
    if x.pod_anti_affinity:
        d["pod_anti_affinity"] = [_term_dict(t) for t in x.pod_anti_affinity]
    return d


def _config_dict(cfg: SchedulerConfig) -> dict:
    defaults = SchedulerConfig()
    config = {}
    for f in fields(SchedulerConfig):
        value = getattr(cfg, f.name)
        if f.name == "placement":
            value = {"gpu": value.gpu, "cpu": value.cpu}
            default = {"gpu": defaults.placement.gpu, "cpu": defaults.placement.cpu}
        else:
            default = getattr(defaults, f.name)
        if value != default:
            config[f.name] = _clean(value) if not isinstance(value, list) else list(value)
    return config


def _node_dict(n: Node) -> dict:
    d: dict[str, Any] = {"name": n.name, "gpus": n.gpus}
    if n.gpus or n.gpu_memory_mib:
        d["gpu_memory_mib"] = _clean(n.gpu_memory_mib)
    if n.gpu_model:
        d["gpu_model"] = n.gpu_model
    d.update(cpu_millis=_clean(n.cpu_millis), memory_bytes=_clean(n.memory_bytes), pods=n.pods)
    if n.labels:
        d["labels"] = dict(n.labels)
    if not n.ready:
        d["ready"] = False
    ext = n.external
    if ext.gpus or ext.cpu_millis or ext.memory_bytes or ext.pods:
        d["external"] = {"gpus": _clean(ext.gpus), "cpu_millis": _clean(ext.cpu_millis),
                         "memory_bytes": _clean(ext.memory_bytes), "pods": ext.pods}
    if n.unschedulable:
        d["unschedulable"] = True
    if n.taints:
        d["taints"] = [{k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect)) if v or k == "key"}
                       for t in n.taints]
    if n.external_pods:
        d["external_pods"] = [_external_pod_dict(x) for x in n.external_pods]
    if n.mig:
        d["mig"] = dict(n.mig)
    if n.dra_gpus:
        d["dra_gpus"] = n.dra_gpus
    return d


def _queue_dict(q: Queue) -> dict:
    d: dict[str, Any] = {"name": q.name}
    if q.display_name:
        d["display_name"] = q.display_name
    if q.parent:
        d["parent"] = q.parent
    d.update(priority=q.priority, creation_time=_clean(q.creation_time))
    for r in RESOURCES:
        d[r] = _queue_resource_dict(q.resource(r))
    if q.preempt_min_runtime_s is not None:
        d["preempt_min_runtime_s"] = _clean(q.preempt_min_runtime_s)
    if q.reclaim_min_runtime_s is not None:
        d["reclaim_min_runtime_s"] = _clean(q.reclaim_min_runtime_s)
    return d


def _usage_dict(usage: dict) -> dict:
    return {q: {r: _clean(v) for r, v in res.items()} for q, res in usage.items()}


def _job_dict(j: Job) -> dict:
    d: dict[str, Any] = {"name": j.name}
    if j.namespace:
        d["namespace"] = j.namespace
    d.update(queue=j.queue, priority=j.priority)
    if j.preemptible is not None:
        d["preemptible"] = j.preemptible
    d["min_available"] = j.min_available
    if j.subgroups:
        d["subgroups"] = [{"name": s.name, "min_available": s.min_available} for s in j.subgroups]
    d["creation_time"] = _clean(j.creation_time)
    for key in ("last_start_time", "stale_since", "last_eviction_time", "preemption_delay_s",
                "stale_grace_period_s", "duration_s"):
        value = getattr(j, key)
        if value is not None:
            d[key] = _clean(value)
    if j.waiting_for:
        d["waiting_for"] = j.waiting_for
    if j.uid:
        d["uid"] = j.uid
    if j.topology is not None:
        d["topology"] = _topology_constraint_dict(j.topology)
    d["tasks"] = [_task_dict(t) for t in j.tasks]
    return d


def _task_dict(t: Task) -> dict:
    d: dict[str, Any] = {"name": t.name}
    if t.gpu_memory_mib is not None:
        d["gpu_memory_mib"] = _clean(t.gpu_memory_mib)
    elif t.gpu:
        d["gpu"] = _clean(t.gpu)
    if t.gpu_devices != 1:
        d["gpu_devices"] = t.gpu_devices
    d.update(cpu_millis=_clean(t.cpu_millis), memory_bytes=_clean(t.memory_bytes), status=t.status)
    if t.node:
        d["node"] = t.node
    if t.gpu_groups:
        d["gpu_group"] = t.gpu_groups[0] if len(t.gpu_groups) == 1 else list(t.gpu_groups)
    if t.gpu_indices:
        d["gpu_index"] = t.gpu_indices[0] if len(t.gpu_indices) == 1 else list(t.gpu_indices)
    if t.subgroup:
        d["subgroup"] = t.subgroup
    if t.creation_time is not None:
        d["creation_time"] = _clean(t.creation_time)
    if t.usage is not None:
        d["usage"] = {"gpu_memory_mib": _clean(t.usage.gpu_memory_mib), "gpu_util": _clean(t.usage.gpu_util)}
    if t.constraints is not None:
        d["constraints"] = _constraints_dict(t.constraints)
    if t.uid:
        d["uid"] = t.uid
    if t.mig:
        d["mig"] = dict(t.mig)
    if t.dra_claims:
        d["dra_claims"] = [_dra_claim_dict(c) for c in t.dra_claims]
    if t.priority_class is not None:
        d["priority_class"] = t.priority_class
    return d


def _dra_claim_dict(c: DraClaim) -> dict:
    d: dict[str, Any] = {"name": c.name, "gpus": c.gpus, "device_class": c.device_class}
    if c.shared:
        d["shared"] = True
    if c.queue:
        d["queue"] = c.queue
    if c.missing:
        d["missing"] = True
    return d


def load_snapshot(path: str | Path) -> Snapshot:
    """Load a snapshot from a ``.yaml``/``.yml``/``.json`` file, or a KAI ``/get-snapshot`` ``.zip``.

    Read through :mod:`scheduler.safe_io` (a regular file within the input limits). Raises
    :class:`SnapshotError` naming the file, and the object and field, on any problem.
    """
    path = Path(path)
    if path.suffix == ".zip":
        from .sources.kai_snapshot import load_kai_snapshot  # imported lazily: optional source

        return load_kai_snapshot(path)
    text = safe_io.read_text(path)
    return loads_snapshot(text, name=str(path), fmt="json" if path.suffix == ".json" else "yaml")


def loads_snapshot(text: str, name: str = "(text)", fmt: str = "yaml") -> Snapshot:
    """Parse snapshot text (YAML is a superset of JSON, so ``yaml`` reads both), within the nesting and
    YAML alias limits of :mod:`scheduler.safe_io`."""
    doc = safe_io.parse_document(text, name, fmt)
    if doc is None:
        raise SnapshotError(name, "empty document")
    try:
        return snapshot_from_dict(doc)
    except SnapshotError as exc:
        raise SnapshotError([(f"{name}: {p}", m) for p, m in exc.problems]) from None


def dumps_snapshot(snap: Snapshot, fmt: str = "yaml") -> str:
    """Serialise to YAML or JSON text."""
    doc = snapshot_to_dict(snap)
    if fmt == "json":
        return json.dumps(doc, indent=1)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


def save_snapshot(snap: Snapshot, path: str | Path) -> None:
    """Write a snapshot; the format follows the extension (``.json`` or YAML)."""
    path = Path(path)
    safe_io.write_text(path, dumps_snapshot(snap, "json" if path.suffix == ".json" else "yaml"))
