"""KAI's topology objects → the snapshot: ``Topology`` CRDs (``kai.scheduler/v1alpha1``) and PodGroups'
``spec.topologyConstraint``.

A ``Topology`` is ``spec.levels: [{nodeLabel, alias?}]``, widest level first; a PodGroup's constraint is
``{topology, requiredTopologyLevel, preferredTopologyLevel}`` (``apis/scheduling/v2alpha2/podgroup_types.go``).
The labels the levels name are kept on the nodes (they are not among the scheduling prefixes kept anyway).
"""

from __future__ import annotations

from typing import Any, Optional

from ..model import Topology, TopologyConstraint, TopologyLevel
from .k8s_parse import BadField


def convert_topology(obj: Any) -> Topology:
    """One ``Topology`` object → :class:`Topology` (raises :class:`BadField`)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise BadField("metadata.name", "missing")
    spec = obj.get("spec")
    levels = spec.get("levels") if isinstance(spec, dict) else None
    if not isinstance(levels, list) or not levels:
        raise BadField("spec.levels", "a topology needs a list of levels")
    out = Topology(name=name)
    seen: set[str] = set()
    for i, lv in enumerate(levels):
        label = lv.get("nodeLabel") if isinstance(lv, dict) else None
        if not isinstance(label, str) or not label:
            raise BadField(f"spec.levels[{i}].nodeLabel", "each level needs a node label")
        if label in seen:
            raise BadField(f"spec.levels[{i}].nodeLabel", f"node label {label!r} appears on more than one level")
        seen.add(label)
        alias = lv.get("alias")
        out.levels.append(TopologyLevel(node_label=label, alias=alias if isinstance(alias, str) and alias else None))
    return out


def topology_constraint(spec: dict) -> Optional[TopologyConstraint]:
    """A PodGroup spec's ``topologyConstraint`` (None when it names no topology; raises :class:`BadField`)."""
    c = spec.get("topologyConstraint")
    if c is None:
        return None
    if not isinstance(c, dict):
        raise BadField("spec.topologyConstraint", f"expected an object, got {type(c).__name__}")
    values = {}
    for key in ("topology", "requiredTopologyLevel", "preferredTopologyLevel"):
        v = c.get(key)
        if v is not None and not isinstance(v, str):
            raise BadField(f"spec.topologyConstraint.{key}", f"expected a string, got {v!r}")
        values[key] = v or None
    if not values["topology"]:
        return None  # KAI: no topology name, no constraint
    return TopologyConstraint(topology=values["topology"], required_level=values["requiredTopologyLevel"],
                              preferred_level=values["preferredTopologyLevel"])


def level_labels(topologies: list[Topology]) -> set[str]:
    """The node labels the topologies' levels read."""
    return {lv.node_label for t in topologies for lv in t.levels}
