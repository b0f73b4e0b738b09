"""KAI skips the inter-pod affinity filter for the rest of a session once its PreFilter said Skip for a pod.

kube-scheduler's InterPodAffinity PreFilter returns Skip for a pod with no required (anti-)affinity term of its own
while no placed pod's required anti-affinity term matches it; KAI runs it each time it tries to place the pod and,
on Skip, records the pod in ``skipPredicates`` for the session (``plugins/predicates/predicates.go``), never
clearing it. A pod tried before an anti-affinity pod was placed near it is therefore later placed beside that pod,
where an identical pod tried only afterwards is refused (KAI at d5bc503 on kai_diff_gen seed 5024: team-a/job-010-4
pipelined onto h100-02 in zone-a beside team-a/job-031-0, whose required anti-affinity excludes app=web pods from its
zone, with "Skipping predicate PodAffinity" in its log)."""

from scheduler.fairshare import compute_fair_share
from scheduler.model import (Job, LabelSelector, Node, PodAffinityTerm, PodConstraints, Queue, QueueResource,
                             Requirement, Snapshot, Task)
from scheduler.actions.allocate import allocate
from scheduler.session import Session, Statement

ZONE = "topology.kubernetes.io/zone"


def _session(web_gpus: int = 1) -> Session:
    nodes = [Node(name=f"a{k}", gpus=8, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=2**38,
                  labels={ZONE: "zone-a"}) for k in (1, 2)]
    web = PodConstraints(labels={"app": "web"})
    no_web = PodConstraints(labels={"app": "db"}, pod_anti_affinity=[PodAffinityTerm(
        selector=LabelSelector(match_expressions=[Requirement("app", "In", ["web"])]), topology_key=ZONE)])
    jobs = [Job(name=name, queue="q", creation_time=k, tasks=[Task(f"{name}-0", gpu=g, cpu_millis=1000,
                                                                   memory_bytes=2**30, constraints=c)])
            for k, (name, g, c) in enumerate([("early", web_gpus, web), ("late", web_gpus, web), ("db", 1, no_web)])]
    snap = Snapshot(nodes=nodes, queues=[Queue("q", creation_time=1, gpu=QueueResource(16, -1, 1))], jobs=jobs,
                    time=100)
    return Session(snap, compute_fair_share(snap))


def test_a_pod_tried_before_the_anti_affinity_pod_came_keeps_skipping_the_filter():
    s = _session()
    early, late, db = (s.task_index[f"{n}-0"] for n in ("early", "late", "db"))
    assert s.best_node(early) >= 0        # tried while no anti-affinity pod is placed: KAI's PreFilter says Skip
    stmt = Statement(s)
    assert s.place(stmt, db, s.nodes.index["a1"])   # now a pod that keeps app=web out of zone-a
    a2 = s.nodes.index["a2"]
    assert not s.fit(late).fits[a2]       # a pod tried only now is refused in the zone
    assert s.best_node(late) < 0
    assert s.fit(early).fits[a2]          # the early one skips the filter for the rest of the session
    assert s.best_node(early) >= 0


def test_without_an_earlier_try_both_pods_are_refused():
    s = _session()
    early, late, db = (s.task_index[f"{n}-0"] for n in ("early", "late", "db"))
    stmt = Statement(s)
    assert s.place(stmt, db, s.nodes.index["a1"])
    assert s.best_node(early) < 0 and s.best_node(late) < 0



def test_a_pod_answered_from_allocates_fits_nowhere_cache_is_marked_too():
    """allocate answers ``late`` (the shape ``early`` just failed with) from its fits-nowhere cache; KAI tries it
    anyway and its PreFilter marks it, so once the anti-affinity pod is placed neither is held to the filter."""
    s = _session(web_gpus=9)   # more than a node holds: early fits nowhere, late is answered from the cache
    early, late, db = (s.task_index[f"{n}-0"] for n in ("early", "late", "db"))
    searched, search = [], s.best_node
    s.best_node = lambda i, *a, **k: searched.append(i) or search(i, *a, **k)
    allocate(s)
    assert s.status[early] == s.status[late] == "pending"
    assert late not in searched and early in searched   # late's answer came from the cache
    assert s.status[db] == "binding" and s.predicates.anti_pods == 1
    assert {early, late} <= s.predicates.filter_skipped
    assert "pod anti-affinity" not in s.predicates.dynamic(late)
    fresh = _session(web_gpus=9)      # the same pod not tried before db was placed is held to it
    late = fresh.task_index["late-0"]
    assert fresh.place(Statement(fresh), fresh.task_index["db-0"], fresh.nodes.index["a1"])
    assert "pod anti-affinity" in fresh.predicates.dynamic(late)
