"""Topology for the KAI differential test's random clusters (``python -m bench.kai_diff --topology``).

Applied to a generated ``snapshot.json`` document after :mod:`bench.kai_diff_gen` built it, with its own random
stream, so the clusters without ``--topology`` stay exactly what they were for every seed. It adds:

- rack labels (``kai-diff/rack``: 1-4 nodes per rack inside each zone, a few nodes without one) and a block
  label for some clusters (``kai-diff/block``, 1-3 racks per block);
- one ``Topology`` object, zone → (block →) rack → hostname, with aliases on some levels;
- ``spec.topologyConstraint`` on about half the PodGroups: a required level (rack, block, zone or none) and a
  preferred level at or below it (or none), named by label or by alias; a few name a topology that does not
  exist.
"""

from __future__ import annotations

import random
import uuid

RACK = "kai-diff/rack"
BLOCK = "kai-diff/block"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
TOPOLOGY_NAME = "cluster-topology"


def add_topology(doc: dict, seed: int) -> dict:
    """``doc`` with racks, a Topology and PodGroup topology constraints (see the module doc); modified in place."""
    rng = random.Random(seed * 7919 + 17)
    raw = doc["rawObjects"]
    with_block = rng.random() < 0.5
    by_zone: dict[str, list[dict]] = {}
    for node in sorted(raw["nodes"], key=lambda n: n["metadata"]["name"]):
        labels = node["metadata"].setdefault("labels", {})
        by_zone.setdefault(labels.get(ZONE, ""), []).append(node)
    for zone, nodes in by_zone.items():
        rng.shuffle(nodes)
        rack, block, left, racks_left = 0, 0, 0, rng.randint(1, 3)
        for node in nodes:
            if left == 0:
                rack += 1
                left = rng.randint(1, 4)
                racks_left -= 1
                if racks_left < 0:
                    block += 1
                    racks_left = rng.randint(0, 2)
            left -= 1
            if rng.random() < 0.05:
                continue  # no rack label: not part of the topology
            labels = node["metadata"]["labels"]
            labels[RACK] = f"{zone}-r{rack}"
            if with_block:
                labels[BLOCK] = f"{zone}-b{block}"
    levels = [{"nodeLabel": ZONE, "alias": "zone"}]
    if with_block:
        levels.append({"nodeLabel": BLOCK, "alias": "block"})
    levels += [{"nodeLabel": RACK, "alias": "rack"}, {"nodeLabel": HOST}]
    raw["topologies"] = [{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
                          "metadata": {"name": TOPOLOGY_NAME, "uid": str(uuid.UUID(int=rng.getrandbits(128))),
                                       "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
                          "spec": {"levels": levels}}]
    names = [lv["nodeLabel"] for lv in levels]
    for group in raw["podGroups"]:
        if rng.random() >= 0.5:
            continue
        req_index = rng.choice([None, None, 0] + list(range(1, len(names) - 1)))
        low = 0 if req_index is None else req_index
        pref_index = rng.choice([None] + list(range(low, len(names))))
        if req_index is None and pref_index is None:
            req_index = len(names) - 2  # rack
        constraint = {"topology": TOPOLOGY_NAME if rng.random() > 0.03 else "no-such-topology"}
        for key, idx in (("requiredTopologyLevel", req_index), ("preferredTopologyLevel", pref_index)):
            if idx is None:
                continue
            alias = levels[idx].get("alias")
            constraint[key] = alias if alias and rng.random() < 0.5 else names[idx]
        group["spec"]["topologyConstraint"] = constraint
    return doc
