"""Topology-aware gangs (KAI's topology plugin): hand-derived scenarios, snapshot 1.2, zip import / export, why-pending.

The cluster below: zone a holds racks a1 (n1, n2) and a2 (n3, n4), zone b holds rack b1 (n5, n6); 8 GPUs per
node. ``busy`` holds 4 GPUs on n1 and 8 on n5, so racks have 12 (a1), 16 (a2) and 8 (b1) free GPUs and nodes
n1 4, n2 8, n3 8, n4 8, n5 0, n6 8. Bin-packing alone fills n1 first.
"""

import copy

import numpy as np
import pytest
import yaml

from scheduler.engine import run_session
from scheduler.errors import SnapshotError
from scheduler.explain import explain_pending
from scheduler.fairshare import compute_fair_share
from scheduler.placement import topology
from scheduler.session import Session
from scheduler.snapshot_io import loads_snapshot, snapshot_from_dict, snapshot_to_dict, validate
from scheduler.sources.kai_export import export_kai_document, write_kai_zip
from scheduler.sources.kai_snapshot import load_kai_snapshot

ZONE, RACK, HOST = "topology.kubernetes.io/zone", "example.com/rack", "kubernetes.io/hostname"
RACKS = {"n1": ("a", "a1"), "n2": ("a", "a1"), "n3": ("a", "a2"), "n4": ("a", "a2"), "n5": ("b", "b1"),
         "n6": ("b", "b1")}


def _doc(*jobs: dict, topologies=None) -> dict:
    nodes = [{"name": n, "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000, "memory_bytes": "512Gi",
              "labels": {ZONE: z, RACK: r, HOST: n}} for n, (z, r) in RACKS.items()]
    busy = {"name": "busy", "queue": "team", "priority": 125,
            "tasks": [{"name": "busy-0", "gpu": 4, "status": "running", "node": "n1"},
                      {"name": "busy-1", "gpu": 8, "status": "running", "node": "n5"}]}
    topo = [{"name": "net", "levels": [{"node_label": ZONE, "alias": "zone"}, {"node_label": RACK, "alias": "rack"},
                                       {"node_label": HOST}]}]
    return {"version": 1.2, "topologies": topo if topologies is None else topologies, "nodes": nodes,
            "queues": [{"name": "team", "gpu": {"quota": -1}}], "jobs": [busy, *jobs]}


def _gang(n: int, gpu: float, constraint=None, name="train", **extra) -> dict:
    job = {"name": name, "queue": "team", "min_available": n,
           "tasks": [{"name": f"{name}-{k}", "gpu": gpu} for k in range(n)], **extra}
    if constraint is not None:
        job["topology"] = constraint
    return job


def _placed(result, job="train") -> list:
    return [t.node for j in result.snapshot.jobs if j.name == job for t in j.tasks]


def _run(*jobs, **kw):
    return run_session(snapshot_from_dict(_doc(*jobs, **kw)))


def test_without_a_constraint_binpack_spreads_the_gang_over_racks():
    assert _placed(_run(_gang(4, 4))) == ["n1", "n2", "n2", "n3"]


def test_required_rack_places_the_whole_gang_in_the_one_rack_that_holds_it():
    # per-node copies of a 4-GPU pod: a1 1 + 2 = 3, a2 2 + 2 = 4, b1 0 + 2 = 2 -> only a2 holds 4 pods
    r = _run(_gang(4, 4, {"topology": "net", "required_level": "rack"}))
    assert _placed(r) == ["n3", "n3", "n4", "n4"]
    assert r.jobs["train"].reason is None


def test_required_level_may_be_named_by_its_label():
    r = _run(_gang(4, 4, {"topology": "net", "required_level": RACK}))
    assert _placed(r) == ["n3", "n3", "n4", "n4"]


def test_no_rack_holds_the_gang_it_waits_with_numbers_and_why_pending():
    snap = snapshot_from_dict(_doc(_gang(5, 4, {"topology": "net", "required_level": "rack"})))
    r = run_session(snap)
    d = r.jobs["train"]
    assert _placed(r) == [None] * 5
    assert d.reason == "PodSchedulingErrors"
    assert d.message == f"topology net, requirement {RACK} couldn't be satisfied for job <default/train>"
    assert d.details["need_gpus"] == 20 and d.details["largest_free_gpus"] == 16
    assert d.details["largest_domain"] == "a.a2" and d.details["level"] == "rack"
    assert "node-group a.a1 can allocate only 3 of 5 required pods" in d.details["node_groups"]
    [exp] = explain_pending(snap, r, jobs=["train"])
    assert exp.counterfactual.kind == "topology"
    assert exp.message.startswith("no rack with 20 free GPUs; largest 16 (a.a2)")


def test_gpus_enough_but_not_in_pod_sized_pieces_is_said():
    # 3 pods of 6 GPUs = 18: rack a2 has 16 free, zone a 28 but its racks fit 1 + 2 pods at most; required zone b
    snap = snapshot_from_dict(_doc(_gang(3, 6, {"topology": "net", "required_level": "zone"})))
    r = run_session(snap)
    # zone a: n2, n3, n4 each fit one 6-GPU pod -> 3 pods; zone b: n6 only -> 1. Zone a holds the gang.
    assert sorted(_placed(r)) == ["n2", "n3", "n4"]
    snap = snapshot_from_dict(_doc(_gang(4, 6, {"topology": "net", "required_level": "zone"})))
    r = run_session(snap)
    [exp] = explain_pending(snap, r, jobs=["train"])
    assert exp.message.startswith("no zone with 24 free GPUs; largest 28 (a), where only 3 of the 4 pods fit")


def test_preferred_rack_within_required_zone_fills_the_preferred_rack_first():
    # 5 × 4 GPUs: no rack holds it, zone a does (3 + 4 pods). Node scores from the sorted racks: zones by
    # ratio 20/free, highest first: b (20/8) then a (20/28); racks in a: a1 (20/12) then a2 (20/16). Order
    # b1, a1, a2 -> scores floor(10 k/3) = 3, 6, 10: a2's nodes first, then n1 (bin-packing in a1).
    r = _run(_gang(5, 4, {"topology": "net", "required_level": "zone", "preferred_level": "rack"}))
    assert _placed(r) == ["n3", "n3", "n4", "n4", "n1"]


def test_preferred_only_places_in_one_rack_when_one_holds_the_gang():
    r = _run(_gang(4, 4, {"topology": "net", "preferred_level": "rack"}))
    assert _placed(r) == ["n3", "n3", "n4", "n4"]


def test_preferred_only_still_places_across_racks_when_none_holds_it():
    # 6 × 4 GPUs: no rack holds it (3, 4, 2 pods), zone a does (7): racks ordered b1, a1, a2 as above, so a2's
    # nodes score highest, then a1's (n1 first: bin-packing)
    r = _run(_gang(6, 4, {"topology": "net", "preferred_level": "rack"}))
    assert _placed(r) == ["n3", "n3", "n4", "n4", "n1", "n2"]
    assert r.jobs["train"].reason is None


def test_unknown_topology_and_unknown_level_keep_the_job_pending():
    r = _run(_gang(1, 1, {"topology": "nope", "required_level": "rack"}))
    assert r.jobs["train"].message == "Requested topology nope does not exist"
    r = _run(_gang(1, 1, {"topology": "net", "required_level": "row"}))
    assert "does not contain a level with this name" in r.jobs["train"].message
    assert _placed(r) == [None]


def test_running_pods_pin_the_rest_of_an_elastic_job_to_their_rack():
    # one pod runs on n6 (rack b1, 4 GPUs left there); the pending 6-GPU pod cannot go to a2 with 16 free
    job = {"name": "train", "queue": "team", "min_available": 1, "topology": {"topology": "net", "required_level": "rack"},
           "tasks": [{"name": "train-0", "gpu": 4, "status": "running", "node": "n6"},
                     {"name": "train-1", "gpu": 6}]}
    r = _run(job)
    assert _placed(r) == ["n6", None]
    job["tasks"][1]["gpu"] = 4
    assert _placed(_run(job)) == ["n6", "n6"]


def test_nodes_without_the_level_labels_are_not_used():
    doc = _doc(_gang(2, 8, {"topology": "net", "preferred_level": "rack"}))
    doc["nodes"].append({"name": "n0", "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000,
                         "memory_bytes": "512Gi"})
    r = run_session(snapshot_from_dict(doc))
    assert "n0" not in _placed(r)
    r = run_session(snapshot_from_dict(_doc(_gang(2, 8))))
    assert _placed(r) == ["n2", "n3"]


def test_a_required_level_above_the_members_common_domain_holds_nothing_as_in_kai():
    # Only n5 and n6 carry every level's label (zone b, rack b1): the lowest domain common to the member nodes is
    # rack b1 (no preferred level, so KAI walks down while every member agrees). KAI sums free resources only
    # inside that domain's subtree (plugins/topology/job_filtering.go subSetNodesFn: calcSubTreeFreeResources /
    # calcTreeAllocatable on the common domain), so the required zone b above it keeps a zero free vector and
    # fits no chunk that requests anything; the job waits although n6 has 8 GPUs free.
    doc = _doc(_gang(1, 1, {"topology": "net", "required_level": "zone"}))
    for node in doc["nodes"]:
        if node["name"] not in ("n5", "n6"):
            del node["labels"][RACK]
    r = run_session(snapshot_from_dict(doc))
    assert _placed(r) == [None]
    assert r.jobs["train"].message == (f"topology net, requirement {ZONE} couldn't be satisfied for job "
                                       "<default/train>")
    # the required level at or below the common domain is unaffected: rack b1 holds the pod on n6
    doc = _doc(_gang(1, 1, {"topology": "net", "required_level": "rack"}))
    for node in doc["nodes"]:
        if node["name"] not in ("n5", "n6"):
            del node["labels"][RACK]
    assert _placed(run_session(snapshot_from_dict(doc))) == ["n6"]
    # with members in two zones the common domain is the root: a zone holds the pod as before (b, the fuller)
    assert _placed(_run(_gang(1, 1, {"topology": "net", "required_level": "zone"}))) == ["n6"]


def test_plan_orders_domains_narrowest_level_first_and_fullest_first():
    snap = snapshot_from_dict(_doc(_gang(2, 4, {"topology": "net", "required_level": "zone",
                                                "preferred_level": "rack"})))
    s = Session(snap, compute_fair_share(snap))
    j = next(k for k in range(len(s.jobs)) if s.jobs[k].key == "train")
    p = topology.plan(s, j, s.tasks_to_allocate(j))
    # racks fitting 2 × 4 GPUs: a1 (8/12), a2 (8/16), b1 (8/8): zones b (8/8) before a (8/28); in a, a1 first;
    # then the zones, in the same order
    assert p.domains == ["b.b1", "a.a1", "a.a2", "b", "a"]
    names = s.nodes.names
    assert [names[k] for k in np.nonzero(p.mask(0))[0]] == ["n5", "n6"]
    assert p.subset(0)[1] is None  # inside one preferred-level domain every node scores the same
    bonus = p.subset(3)[1]           # zone b: racks ordered b1, a1, a2 -> 3, 6, 10 (× 100,000)
    assert bonus[names.index("n5")] == 3e5 and bonus[names.index("n1")] == 6e5 and bonus[names.index("n3")] == 1e6


def test_snapshot_12_round_trip_and_validation():
    doc = _doc(_gang(2, 1, {"topology": "net", "required_level": "rack", "preferred_level": HOST}))
    snap = snapshot_from_dict(doc)
    out = snapshot_to_dict(snap)
    assert out["version"] == 1.2
    assert out["topologies"] == doc["topologies"]
    assert snapshot_from_dict(out) == snap
    validate(snap)
    plain = copy.deepcopy(doc)
    plain.pop("topologies")
    plain["jobs"] = plain["jobs"][:1]
    assert snapshot_to_dict(snapshot_from_dict(plain))["version"] == 1
    bad = copy.deepcopy(doc)
    bad["topologies"].append({"name": "net", "levels": [{"node_label": "x"}, {"node_label": "x"}]})
    bad["jobs"][1]["topology"] = {"required_level": "rack"}
    with pytest.raises(SnapshotError) as err:
        snapshot_from_dict(bad)
    text = str(err.value)
    assert "topologies[net].name: duplicate topology name" in text
    assert "node label 'x' appears on more than one level" in text
    assert "jobs[train].topology.topology: required key is missing" in text


def test_version_1_1_files_still_read_without_topologies():
    doc = _doc()
    doc["version"] = 1.1
    doc.pop("topologies")
    assert loads_snapshot(yaml.safe_dump(doc)).topologies == []


def test_kai_zip_export_and_import_carry_topologies_and_constraints(tmp_path):
    doc = _doc(_gang(4, 4, {"topology": "net", "required_level": "rack"}, namespace="ml"))
    for t in doc["jobs"][1]["tasks"]:
        t["name"] = f"ml/{t['name']}"
    snap = snapshot_from_dict(doc)
    kai = export_kai_document(snap)["rawObjects"]
    assert kai["topologies"][0]["spec"]["levels"][1] == {"nodeLabel": RACK, "alias": "rack"}
    pg = next(g for g in kai["podGroups"] if g["metadata"]["name"] == "train")
    assert pg["spec"]["topologyConstraint"] == {"topology": "net", "requiredTopologyLevel": "rack"}
    write_kai_zip(snap, tmp_path / "t.zip")
    back = load_kai_snapshot(tmp_path / "t.zip")
    assert back.topologies == snap.topologies
    assert back.job_map()["ml/train"].topology == snap.job_map()["ml/train"].topology
    assert back.node_map()["n3"].labels[RACK] == "a2"  # a level's label is kept although no prefix keeps it
    assert _placed(run_session(back)) == ["n3", "n3", "n4", "n4"]


def test_incremental_domain_sums_equal_a_fresh_count_after_a_session():
    from bench.engine_scale import SIZES, make_cluster, with_topology
    from scheduler.actions.allocate import allocate

    snap = with_topology(make_cluster(**dict(SIZES["small"], nodes=40, pending_jobs=200)), rack_nodes=4)
    s = Session(snap, compute_fair_share(snap))
    allocate(s)
    index = s.topology_index()
    assert len(index._tracked) >= 3  # free resources + one per request shape seen
    placed = sum(1 for st in s.status if st in ("binding", "pipelined"))
    assert placed > 100
    for key, tracked in index._tracked.items():
        before = tracked.get(s.nodes).copy()  # brought up to date incrementally
        tracked.pos = -1  # force the full count
        assert np.array_equal(tracked.get(s.nodes), before), key
