"""What KAI's predicates read from Kubernetes objects: node taints and conditions, pod tolerations, node selector,
required node affinity, inter-pod (anti-)affinity, host ports and required ConfigMaps (snapshot format v1.1).

Pure parsers of one object each, raising :class:`~scheduler.sources.k8s_parse.BadField` with the field path; the
converter (:mod:`scheduler.sources.k8s_convert`) turns that into a warning for the one object at fault. The rules
follow the kube-scheduler plugins KAI runs (``pkg/scheduler/k8s_internal/predicates``: NodeAffinity,
TaintToleration, NodePorts, InterPodAffinity) and KAI's own ConfigMap predicate (``config_maps.go``: ConfigMaps
mounted through a volume or referenced by ``env`` / ``envFrom`` and not optional, except the shared-GPU
ConfigMaps named by the ``runai/shared-gpu-configmap`` annotation).
"""

from __future__ import annotations

from typing import Any, Optional

from ..model import (SELECTOR_OPERATORS, TAINT_EFFECTS, HostPort, LabelSelector, NodeSelectorTerm, PodAffinityTerm,
                     PodConstraints, Requirement, Taint, Toleration)
from .k8s_parse import BadField, as_list as _list, as_mapping as _map

PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
"""Node conditions that make KAI's node condition predicate fail unless their status is ``False``."""

SHARED_GPU_CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"


def _str(value: Any, fld: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadField(fld, f"expected a string, got {value!r}")
    return value


def _str_map(value: Any, fld: str) -> dict[str, str]:
    m = _map(value, fld)
    for k, v in m.items():
        if not isinstance(v, str):
            raise BadField(f"{fld}.{k}", f"expected a string, got {v!r}")
    return dict(m)


# ---------------------------------------------------------------------------------------------- nodes

def node_readiness(status: dict) -> tuple[bool, list[str]]:
    """KAI's ``CheckNodeConditionPredicate`` on the conditions alone: ``(ok, reasons)``. A node without a
    Ready condition passes (KAI checks the conditions it finds)."""
    reasons = []
    for cond in status.get("conditions") or []:
        if not isinstance(cond, dict):
            continue
        kind, value = cond.get("type"), cond.get("status")
        if kind == "Ready" and value != "True":
            reasons.append("node has NotReady condition")
        elif kind in PRESSURE_CONDITIONS and value != "False":
            reasons.append(f"node has {kind} condition")
    return not reasons, reasons


def node_taints(spec: dict) -> list[Taint]:
    """``spec.taints`` as :class:`Taint` objects."""
    out = []
    for i, t in enumerate(_list(spec.get("taints"), "spec.taints")):
        fld = f"spec.taints[{i}]"
        t = _map(t, fld)
        key = _str(t.get("key"), f"{fld}.key")
        effect = _str(t.get("effect"), f"{fld}.effect")
        if effect not in TAINT_EFFECTS:
            raise BadField(f"{fld}.effect", f"expected one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        out.append(Taint(key=key, effect=effect, value=_str(t.get("value"), f"{fld}.value")))
    return out


# ---------------------------------------------------------------------------------------------- pods

def _requirement(r: Any, fld: str) -> Requirement:
    r = _map(r, fld)
    op = _str(r.get("operator"), f"{fld}.operator")
    if op not in SELECTOR_OPERATORS:
        raise BadField(f"{fld}.operator", f"expected one of {', '.join(SELECTOR_OPERATORS)}, got {op!r}")
    values = [_str(v, f"{fld}.values[{k}]") for k, v in enumerate(_list(r.get("values"), f"{fld}.values"))]
    return Requirement(key=_str(r.get("key"), f"{fld}.key"), operator=op, values=values)


def label_selector(sel: Any, fld: str) -> LabelSelector:
    sel = _map(sel, fld)
    return LabelSelector(match_labels=_str_map(sel.get("matchLabels"), f"{fld}.matchLabels"),
                         match_expressions=[_requirement(r, f"{fld}.matchExpressions[{k}]") for k, r in
                                            enumerate(_list(sel.get("matchExpressions"), f"{fld}.matchExpressions"))])


def _affinity_term(term: Any, fld: str, weight: int = 0) -> PodAffinityTerm:
    term = _map(term, fld)
    key = _str(term.get("topologyKey"), f"{fld}.topologyKey")
    if not key:
        raise BadField(f"{fld}.topologyKey", "required")
    ns_sel = term.get("namespaceSelector")
    namespaces = [_str(n, f"{fld}.namespaces[{k}]") for k, n in enumerate(_list(term.get("namespaces"),
                                                                              f"{fld}.namespaces"))]
    all_namespaces = False
    if ns_sel is not None:
        sel = label_selector(ns_sel, f"{fld}.namespaceSelector")
        if sel.match_labels or sel.match_expressions:
            raise BadField(f"{fld}.namespaceSelector", "namespace label selectors are not supported (namespaces "
                                                       "are not in the snapshot); only {} (all namespaces)")
        all_namespaces = True
    return PodAffinityTerm(selector=label_selector(term.get("labelSelector"), f"{fld}.labelSelector"),
                           topology_key=key, namespaces=namespaces or None, all_namespaces=all_namespaces,
                           weight=weight)


def _affinity_terms(block: dict, fld: str) -> tuple[list[PodAffinityTerm], list[PodAffinityTerm]]:
    required = [_affinity_term(t, f"{fld}.requiredDuringSchedulingIgnoredDuringExecution[{k}]")
                for k, t in enumerate(_list(block.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                            f"{fld}.requiredDuringSchedulingIgnoredDuringExecution"))]
    preferred = []
    for k, w in enumerate(_list(block.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                f"{fld}.preferredDuringSchedulingIgnoredDuringExecution")):
        wf = f"{fld}.preferredDuringSchedulingIgnoredDuringExecution[{k}]"
        w = _map(w, wf)
        weight = w.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise BadField(f"{wf}.weight", f"expected a whole number 1-100, got {weight!r}")
        preferred.append(_affinity_term(w.get("podAffinityTerm"), f"{wf}.podAffinityTerm", weight))
    return required, preferred


def _node_affinity(affinity: dict) -> list[NodeSelectorTerm]:
    fld = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    na = _map(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    req = _map(na.get("requiredDuringSchedulingIgnoredDuringExecution"), fld)
    terms = []
    for k, term in enumerate(_list(req.get("nodeSelectorTerms"), f"{fld}.nodeSelectorTerms")):
        tf = f"{fld}.nodeSelectorTerms[{k}]"
        term = _map(term, tf)
        terms.append(NodeSelectorTerm(
            match_expressions=[_requirement(r, f"{tf}.matchExpressions[{j}]") for j, r in
                               enumerate(_list(term.get("matchExpressions"), f"{tf}.matchExpressions"))],
            match_fields=[_requirement(r, f"{tf}.matchFields[{j}]") for j, r in
                          enumerate(_list(term.get("matchFields"), f"{tf}.matchFields"))]))
    return terms


def _tolerations(spec: dict) -> list[Toleration]:
    out = []
    for i, t in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        fld = f"spec.tolerations[{i}]"
        t = _map(t, fld)
        op = _str(t.get("operator"), f"{fld}.operator", "Equal") or "Equal"
        if op not in ("Equal", "Exists"):
            raise BadField(f"{fld}.operator", f"expected Equal or Exists, got {op!r}")
        effect = _str(t.get("effect"), f"{fld}.effect")
        if effect and effect not in TAINT_EFFECTS:
            raise BadField(f"{fld}.effect", f"expected one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        out.append(Toleration(key=_str(t.get("key"), f"{fld}.key"), operator=op,
                              value=_str(t.get("value"), f"{fld}.value"), effect=effect))
    return out


def _containers(spec: dict) -> list[tuple[str, dict]]:
    out = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
            out.append((f"spec.{key}[{i}]", _map(c, f"spec.{key}[{i}]")))
    return out


def host_ports(spec: dict, containers: Optional[list[tuple[str, dict]]] = None) -> list[HostPort]:
    """Host ports of the pod's containers (init containers included, as kube-scheduler's NodePorts reads)."""
    out = []
    for fld, c in containers if containers is not None else _containers(spec):
        if fld.startswith("spec.ephemeralContainers"):
            continue
        for j, p in enumerate(_list(c.get("ports"), f"{fld}.ports")):
            pf = f"{fld}.ports[{j}]"
            p = _map(p, pf)
            port = p.get("hostPort")
            if port in (None, 0):
                continue
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise BadField(f"{pf}.hostPort", f"expected a port number, got {port!r}")
            out.append(HostPort(port=port, protocol=_str(p.get("protocol"), f"{pf}.protocol", "TCP") or "TCP",
                                host_ip=_str(p.get("hostIP"), f"{pf}.hostIP")))
    return out


def _optional(ref: dict) -> bool:
    return ref.get("optional") is True


def required_config_maps(spec: dict, annotations: dict[str, str],
                         containers: Optional[list[tuple[str, dict]]] = None) -> list[str]:
    """Names of the ConfigMaps the pod cannot start without (KAI ``getAllRequiredConfigMapNames``), sorted."""
    if containers is None:
        containers = _containers(spec)
    mounted = set()
    for fld, c in containers:
        for m in _list(c.get("volumeMounts"), f"{fld}.volumeMounts"):
            if isinstance(m, dict) and isinstance(m.get("name"), str):
                mounted.add(m["name"])
    names: set[str] = set()
    for i, v in enumerate(_list(spec.get("volumes"), "spec.volumes")):
        v = _map(v, f"spec.volumes[{i}]")
        if v.get("name") not in mounted:
            continue
        cm = v.get("configMap")
        if isinstance(cm, dict) and not _optional(cm) and isinstance(cm.get("name"), str):
            names.add(cm["name"])
        projected = v.get("projected")
        if isinstance(projected, dict):
            for src in _list(projected.get("sources"), f"spec.volumes[{i}].projected.sources"):
                cm = src.get("configMap") if isinstance(src, dict) else None
                if isinstance(cm, dict) and not _optional(cm) and isinstance(cm.get("name"), str):
                    names.add(cm["name"])
    for fld, c in containers:
        for e in _list(c.get("env"), f"{fld}.env"):
            ref = ((e or {}).get("valueFrom") or {}).get("configMapKeyRef") if isinstance(e, dict) else None
            if isinstance(ref, dict) and not _optional(ref) and isinstance(ref.get("name"), str):
                names.add(ref["name"])
        for e in _list(c.get("envFrom"), f"{fld}.envFrom"):
            ref = e.get("configMapRef") if isinstance(e, dict) else None
            if isinstance(ref, dict) and not _optional(ref) and isinstance(ref.get("name"), str):
                names.add(ref["name"])
    prefix = annotations.get(SHARED_GPU_CONFIGMAP_ANNOTATION)
    if prefix:
        names = {n for n in names if not n.startswith(prefix)}
    return sorted(names)


IGNORED_POD_LABELS = ("kai.scheduler/", "runai-gpu-group", "runai/queue", "pod-template-hash",
                      "controller-revision-hash", "batch.kubernetes.io/controller-uid", "controller-uid")
"""Pod labels that no inter-pod affinity selector sensibly reads: not kept in the snapshot."""


def pod_constraints(spec: dict, labels: dict[str, str], annotations: dict[str, str]) -> Optional[PodConstraints]:
    """What KAI's predicates read from one pod (None when the pod has none of it)."""
    containers = _containers(spec)
    affinity = _map(spec.get("affinity"), "spec.affinity")
    pa, pa_pref = _affinity_terms(_map(affinity.get("podAffinity"), "spec.affinity.podAffinity"),
                                  "spec.affinity.podAffinity")
    anti, anti_pref = _affinity_terms(_map(affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity"),
                                      "spec.affinity.podAntiAffinity")
    c = PodConstraints(
        labels={k: v for k, v in labels.items() if not k.startswith(IGNORED_POD_LABELS)},
        tolerations=_tolerations(spec),
        node_selector=_str_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        node_affinity=_node_affinity(affinity),
        pod_affinity=pa, pod_anti_affinity=anti, preferred_pod_affinity=pa_pref, preferred_pod_anti_affinity=anti_pref,
        host_ports=host_ports(spec, containers),
        config_maps=required_config_maps(spec, annotations, containers))
    if not (c.labels or c.tolerations or c.node_selector or c.node_affinity or c.pod_affinity or c.pod_anti_affinity
            or c.preferred_pod_affinity or c.preferred_pod_anti_affinity or c.host_ports or c.config_maps):
        return None
    return c


def selector_label_keys(c: Optional[PodConstraints]) -> tuple[set[str], set[str]]:
    """``(node label keys, pod label keys)`` a pod's constraints read: the node keys of its node selector, node
    affinity and topology keys; the pod keys of its inter-pod (anti-)affinity selectors."""
    node_keys: set[str] = set()
    pod_keys: set[str] = set()
    if c is None:
        return node_keys, pod_keys
    node_keys.update(c.node_selector)
    for term in c.node_affinity:
        node_keys.update(r.key for r in term.match_expressions)
    for term in (*c.pod_affinity, *c.pod_anti_affinity, *c.preferred_pod_affinity, *c.preferred_pod_anti_affinity):
        node_keys.add(term.topology_key)
        pod_keys.update(term.selector.match_labels)
        pod_keys.update(r.key for r in term.selector.match_expressions)
    return node_keys, pod_keys
