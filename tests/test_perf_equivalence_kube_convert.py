"""The incremental converter gives, after every watch event, what a fresh conversion of the same objects gives.

A small cluster of API-shaped objects (tests/kai_objects.py) goes through seeded random event sequences: pods,
nodes, pod groups, bind requests, reservation pods, queues and priority classes added, modified (new dict, new
resourceVersion, as a watch delivers them) and deleted, bad objects among them, relists that re-deliver the
same versions in another order, and resource types becoming unreadable. After each event the incremental
result must equal a fresh :func:`convert` (snapshot document, warnings in order, KAI conditions, external pod
count).
"""

import copy
import random

import pytest

import kai_objects as K
from scheduler.snapshot_io import snapshot_to_dict
from scheduler.sources.k8s_convert import RESOURCE_KINDS, IncrementalConverter, RawObjects, convert

_rv = iter(range(10**6, 10**7))


def key(obj):
    meta = obj["metadata"]
    return f"{meta.get('namespace') or ''}/{meta['name']}"


def cluster() -> dict:
    c = {r: {} for r in ("nodes", "pods", "priorityclasses", "queues", "podgroups", "bindrequests")}
    for obj in K.kai_priority_classes():
        c["priorityclasses"][key(obj)] = obj
    for obj in (K.queue("root", gpu={"quota": 8, "limit": -1, "overQuotaWeight": 1}),
                K.queue("team-a", parent="root", gpu={"quota": 4}), K.queue("team-b", parent="root"),
                K.queue("lost", parent="nobody")):
        c["queues"][key(obj)] = obj
    for obj in (K.node("n0"), K.node("n1", gpus=4, gpu_memory="23034", product="NVIDIA-L4"),
                K.node("n2", gpu_memory=None), K.node("cpu0", gpus=0)):
        c["nodes"][key(obj)] = obj
    for i in range(8):
        ns, q = ("team-a", "team-a") if i % 2 else ("team-b", "team-b")
        c["podgroups"][f"{ns}/pg{i}"] = K.pod_group(f"pg{i}", ns, queue=q, min_member=1 + i % 3,
                                                     priority_class=["train", "build", None][i % 3])
        for k in range(1 + i % 3):
            node = ["n0", "n1", None, "n2"][(i + k) % 4]
            c["pods"][f"{ns}/p{i}-{k}"] = K.pod(f"p{i}-{k}", ns, gpu=1, node=node, queue=q, pod_group=f"pg{i}")
    c["pods"]["team-a/frac-0"] = K.pod("frac-0", "team-a", node="n1", pod_group="pg1",
                                       annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": "g1"})
    c["pods"]["kai-resource-reservation/res-g1"] = K.reservation_pod("n1", "g1", 2)
    c["pods"]["team-b/bare"] = K.pod("bare", "team-b", gpu=1, queue="team-b")
    c["pods"]["kube-system/ds-n0"] = K.pod("ds-n0", "kube-system", cpu="100m", node="n0", scheduler="default-scheduler")
    c["bindrequests"]["team-b/p2-0-bind"] = K.bind_request("p2-0", "team-b", "n0")
    return c


def bumped(obj):
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(next(_rv))
    return new


def random_event(c: dict, rng: random.Random, step: int) -> None:
    kind = rng.choice(["pod", "pod", "pod", "node", "podgroup", "bind", "reservation", "queue", "pc", "relist"])
    if kind == "pod":
        action = rng.choice(["modify", "modify", "delete", "add"])
        if action == "add" or not c["pods"]:
            ns, i = rng.choice(["team-a", "team-b"]), rng.randrange(10)
            name = f"new{step}"
            c["pods"][f"{ns}/{name}"] = K.pod(name, ns, gpu=rng.choice([None, 1, 2]), queue=ns,
                                              node=rng.choice([None, "n0", "n1", "n3", "cpu0"]),
                                              pod_group=rng.choice([None, f"pg{i}", "ghost"]))
            return
        k = rng.choice(sorted(c["pods"]))
        if action == "delete":
            del c["pods"][k]
            return
        obj = bumped(c["pods"][k])
        change = rng.choice(["phase", "node", "bad", "deleting", "fraction"])
        if change == "phase":
            obj["status"]["phase"] = rng.choice(["Running", "Pending", "Succeeded", "Failed", "Unknown"])
        elif change == "node":
            obj["spec"]["nodeName"] = rng.choice(["n0", "n1", "n2", "n9", "cpu0"])
        elif change == "bad":
            obj["metadata"].setdefault("annotations", {})["gpu-fraction"] = rng.choice(["abc", "0.25", "2"])
        elif change == "deleting":
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
        else:
            obj["metadata"].setdefault("labels", {})["runai-gpu-group"] = rng.choice(["g1", "g2"])
        c["pods"][k] = obj
    elif kind == "node":
        action = rng.choice(["modify", "modify", "delete", "add"])
        if action == "add":
            name = rng.choice(["n3", "n9", "n0"])
            c["nodes"][f"/{name}"] = K.node(name, gpus=rng.choice([0, 2, 8]))
            return
        if not c["nodes"]:
            return
        k = rng.choice(sorted(c["nodes"]))
        if action == "delete":
            del c["nodes"][k]
            return
        obj = bumped(c["nodes"][k])
        labels = obj["metadata"]["labels"]
        change = rng.choice(["gpus", "memory", "ready", "cpu"])
        if change == "gpus":
            obj["status"]["allocatable"]["nvidia.com/gpu"] = str(rng.choice([0, 1, 4, 8]))
        elif change == "memory":
            labels["nvidia.com/gpu.memory"] = rng.choice(["1000", "81559", "garbage"])
        elif change == "ready":
            obj["status"]["conditions"][-1]["status"] = rng.choice(["True", "False"])
        else:
            obj["status"]["allocatable"]["cpu"] = rng.choice(["64", "1e400", "bad"])
        c["nodes"][k] = obj
    elif kind == "podgroup":
        k = rng.choice(sorted(c["podgroups"]) + ["add"])
        if k == "add":
            ns, i = rng.choice(["team-a", "team-b"]), rng.randrange(12)
            c["podgroups"][f"{ns}/pg{i}"] = K.pod_group(f"pg{i}", ns, queue=rng.choice(["team-a", "root", "x"]))
        elif rng.random() < 0.3:
            del c["podgroups"][k]
        else:
            obj = bumped(c["podgroups"][k])
            obj["spec"][rng.choice(["minMember", "queue", "priorityClassName"])] = rng.choice(
                [1, 3, "team-a", "team-b", "root", "build", "inference", -1])
            c["podgroups"][k] = obj
    elif kind == "bind":
        pods = sorted(k for k in c["pods"] if not k.startswith(("kube-system", "kai-resource")))
        if not pods:
            return
        ns, name = rng.choice(pods).split("/")
        bind = K.bind_request(name, ns, rng.choice(["n0", "n1", "n9"]), phase=rng.choice(["Pending", "Failed"]))
        if rng.random() < 0.3 and c["bindrequests"]:
            del c["bindrequests"][rng.choice(sorted(c["bindrequests"]))]
        else:
            c["bindrequests"][key(bind)] = bind
    elif kind == "reservation":
        group = rng.choice(["g1", "g2"])
        res = K.reservation_pod(rng.choice(["n1", "n0"]), group, rng.choice([0, 1, 2]))
        res["metadata"]["annotations"]["run.ai/reserve_for_gpu_index"] = rng.choice(["0", "3", "x", "1"])
        c["pods"][key(res)] = res
    elif kind == "queue":
        k = rng.choice(sorted(c["queues"]) + ["add"])
        if k == "add":
            q = K.queue(rng.choice(["team-c", "root2"]), parent=rng.choice([None, "root", "team-a"]))
            c["queues"][key(q)] = q
        elif rng.random() < 0.25:
            del c["queues"][k]
        else:
            obj = bumped(c["queues"][k])
            obj["spec"]["resources"]["gpu"] = {"quota": rng.choice([1, 2, "bad"])}
            c["queues"][k] = obj
    elif kind == "pc":
        pc = K.priority_class(rng.choice(["train", "build", "custom"]), rng.choice([10, 50, 200]),
                              global_default=rng.random() < 0.3)
        c["priorityclasses"][key(pc)] = pc
    else:  # a relist: the same versions again as new dicts, in another order
        resource = rng.choice(["pods", "nodes", "podgroups"])
        items = [(k, copy.deepcopy(v)) for k, v in c[resource].items()]
        rng.shuffle(items)
        c[resource] = dict(items)


def canonical(conv):
    return (snapshot_to_dict(conv.snapshot), [tuple(vars(w).values()) for w in conv.warnings],
            conv.scheduling_conditions, conv.external_pods)


@pytest.mark.parametrize("seed", range(6))
def test_every_event_gives_what_a_fresh_conversion_gives(seed):
    rng = random.Random(seed)
    c = cluster()
    inc = IncrementalConverter()
    for step in range(60):
        available = set(RESOURCE_KINDS)
        if rng.random() < 0.1:
            available -= {rng.choice(["queues", "podgroups"])}
        got = inc.convert(c, time=step, available=available)
        want = convert(RawObjects(**{r: list(objs.values()) for r, objs in c.items()}), time=step,
                       available=available)
        assert canonical(got) == canonical(want), f"seed {seed} step {step}"
        random_event(c, rng, step)


def test_a_pod_event_rebuilds_only_its_job():
    c = cluster()
    inc = IncrementalConverter()
    before = {j.key: j for j in inc.convert(c).snapshot.jobs}
    obj = bumped(c["pods"]["team-a/p1-0"])
    obj["status"]["phase"] = "Succeeded"
    c["pods"]["team-a/p1-0"] = obj
    after = {j.key: j for j in inc.convert(c).snapshot.jobs}
    assert after.keys() == before.keys()
    assert after["team-a/pg1"] is not before["team-a/pg1"]
    assert [t.status for t in after["team-a/pg1"].tasks if t.name == "team-a/p1-0"] == ["succeeded"]
    assert all(after[k] is before[k] for k in before if k != "team-a/pg1")


def test_same_version_redelivered_is_not_reconverted():
    c = cluster()
    inc = IncrementalConverter()
    first = inc.convert(c).snapshot
    c["pods"] = {k: copy.deepcopy(v) for k, v in c["pods"].items()}  # a relist: new dicts, same versions
    second = inc.convert(c).snapshot
    assert [id(j) for j in second.jobs] == [id(j) for j in first.jobs]


def test_a_node_event_rebuilds_the_jobs_on_that_node():
    c = cluster()
    inc = IncrementalConverter()
    before = {j.key: j for j in inc.convert(c).snapshot.jobs}
    on_n2 = {k for k, j in before.items() if any(t.node == "n2" for t in j.tasks)}
    assert on_n2
    obj = bumped(c["nodes"]["/n2"])
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # GPU pods on it are no longer placeable
    c["nodes"]["/n2"] = obj
    conv = inc.convert(c)
    after = {j.key: j for j in conv.snapshot.jobs}
    assert all(k not in after or after[k] is not before[k] for k in on_n2)
    assert any(w.field == "spec.nodeName" and "advertises no GPUs" in w.message for w in conv.warnings)


def test_duplicate_pods_in_a_list_still_take_the_full_check_and_prune():
    pod = K.pod("x-0", "team-a", gpu=1, node="n0", queue="team-a", pod_group="x")
    raw = RawObjects(nodes=[K.node("n0")], queues=[K.queue("team-a")], podgroups=[K.pod_group("x")],
                     pods=[pod, dict(pod)], priorityclasses=K.kai_priority_classes())
    conv = IncrementalConverter().convert(raw)
    assert conv.snapshot.jobs == []
    assert [w.message for w in conv.warnings] == [
        "rejected by snapshot validation: jobs[x].tasks[team-a/x-0].name: duplicate task name (task names are "
        "unique in a snapshot)"]
