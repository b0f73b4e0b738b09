"""Why-pending explanations and their counterfactual searches.

The counterfactual searches re-run an engine on modified snapshot copies. These tests drive them with a small,
transparent capacity model (``toy_engine``: pending jobs start in creation order when the cluster has enough
free GPUs and the queue limit allows) so that every expected number can be worked out by hand; scenario tests
against the real engine (scheduler.engine) follow.
"""

from dataclasses import replace

import pytest

from scheduler.decisions import JobDecision, ScheduleResult, TaskDecision
from scheduler.explain import explain_pending, tasks_to_place
from scheduler.model import Job, Node, PodConstraints, Queue, QueueResource, Snapshot, Task


def node(name, gpus=8):
    return Node(name=name, gpus=gpus, gpu_memory_mib=81920, cpu_millis=128000, memory_bytes=2**40)


def running(name, queue, gpus, node_name, devices, priority=50, start=0.0):
    return Job(name=name, queue=queue, priority=priority, last_start_time=start, creation_time=start,
               tasks=[Task(f"{name}-0", gpu=gpus, status="running", node=node_name, gpu_indices=list(devices))])


def pending(name, queue, gpus, created=100.0, width=1):
    return Job(name=name, queue=queue, creation_time=created, min_available=width,
               tasks=[Task(f"{name}-{i}", gpu=gpus) for i in range(width)])


class ToyEngine:
    """Cluster-wide capacity model standing in for the engine; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, snap: Snapshot) -> ScheduleResult:
        self.calls += 1
        free = sum(n.gpus for n in snap.nodes if n.ready)
        used: dict[str, float] = {}
        for job in snap.jobs:
            for t in job.tasks:
                if t.status == "running":
                    free -= t.gpu
                    used[job.queue] = used.get(job.queue, 0.0) + t.gpu
        limits = {q.name: q.gpu.limit for q in snap.queues}
        jobs, tasks = {}, {}
        for job in sorted(snap.jobs, key=lambda j: (j.creation_time, j.key)):
            if all(t.status == "running" for t in job.tasks):
                jobs[job.key] = JobDecision("running")
                continue
            need = sum(t.gpu for t in job.tasks if t.status == "pending")
            limit = limits[job.queue]
            if limit != -1 and used.get(job.queue, 0.0) + need > limit:
                jobs[job.key] = JobDecision("pending", "OverLimit", "over limit")
            elif need <= free:
                free -= need
                used[job.queue] = used.get(job.queue, 0.0) + need
                jobs[job.key] = JobDecision("binding")
                tasks.update({t.name: TaskDecision("binding", node="n1") for t in job.tasks})
            else:
                jobs[job.key] = JobDecision("pending", "NotEnoughResources", "0/2 nodes fit")
        return ScheduleResult(fair_share={}, tasks=tasks, jobs=jobs, snapshot=snap)


def release_scenario():
    # 8 GPUs. Queue D runs d1 (2 GPUs, started at 10), d2 (1 GPU, started 20), d3 (4 GPUs, priority 100);
    # queue Q runs 1 GPU and waits for p (2 GPUs). Nothing is free.
    # Fair share (quota 0, weight 1 each): requests Q 3, D 7 -> shares 4/4: Q takes 3, D 4, then D the last 1: D=5.
    return Snapshot(nodes=[node("n1", 4), node("n2", 4)],
                    queues=[Queue("D"), Queue("Q")],
                    jobs=[running("d1", "D", 2, "n1", [0, 1], start=10), running("d2", "D", 1, "n1", [2], start=20),
                          running("d3", "D", 4, "n2", [0, 1, 2, 3], priority=100, start=5),
                          running("q1", "Q", 1, "n1", [3]), pending("p", "Q", 2)])


def test_release_finds_smallest_release_from_most_over_fair_share_queue():
    # D holds 7 > fair share 5 (the only queue over). Victim order: priority 50 first, younger first: d2, d1, d3.
    # Releasing all -> p starts; prefix search: [d2, d1] frees 3 (enough), [d2] frees 1 (not) -> [d2, d1];
    # minimising: without d2, releasing d1 alone frees 2 -> enough. Answer: D releases 2 GPUs (d1).
    snap = release_scenario()
    engine = ToyEngine()
    result = engine(snap)
    [exp] = explain_pending(snap, result, run=engine)
    assert (exp.job, exp.queue, exp.reason) == ("p", "Q", "NotEnoughResources")
    cf = exp.counterfactual
    assert cf.kind == "release" and cf.verified
    assert cf.queue == "D" and cf.jobs == ["d1"] and cf.amount == 2
    assert cf.message == ("would start if queue D released 2 GPUs (d1); D holds 7 GPUs against a fair share "
                          "of 5 GPUs")
    assert exp.numbers["job_requested"]["gpu"] == 2
    assert snap.job_map()["d1"].tasks[0].status == "running"  # input untouched


def test_over_limit_names_the_excess_and_verifies_a_raised_limit():
    # Queue L: limit 3 GPUs, 2 allocated, job needs 2 -> over by 1; raising the limit to 4 lets it start.
    snap = Snapshot(nodes=[node("n1")], queues=[Queue("L", gpu=QueueResource(0, 3, 1))],
                    jobs=[running("l1", "L", 2, "n1", [0, 1]), pending("lp", "L", 2)])
    engine = ToyEngine()
    [exp] = explain_pending(snap, engine(snap), run=engine)
    assert exp.reason == "OverLimit"
    cf = exp.counterfactual
    assert (cf.kind, cf.queue, cf.amount, cf.verified) == ("raise_limit", "L", 1.0, True)
    assert cf.message == ("over the queue limit by 1 GPU: queue L gpu limit 3 GPUs, 2 GPUs allocated, job needs "
                          "2 GPUs; with the limit raised to 4 GPUs it would start")


def test_request_larger_than_any_node_needs_no_engine_run():
    snap = Snapshot(nodes=[node("n1"), node("n2")], queues=[Queue("q")], jobs=[pending("big", "q", 16)])
    result = ScheduleResult(fair_share={}, tasks={}, snapshot=snap,
                            jobs={"big": JobDecision("pending", "NotEnoughResources", "0/2 nodes fit")})
    engine = ToyEngine()
    [exp] = explain_pending(snap, result, run=engine)
    assert exp.counterfactual.kind == "larger_node"
    assert exp.counterfactual.message.startswith("needs 16 whole GPUs on one node; the largest Ready node has 8")
    assert engine.calls == 0


def test_fragmented_free_gpus_reported_when_search_budget_is_spent():
    # Each 8-GPU node has 5 GPUs used: 3 free on each, 6 in total; a 4-GPU task fits on neither.
    # With a zero budget no counterfactual re-run happens and the cheap shape check answers.
    snap = Snapshot(nodes=[node("n1"), node("n2")], queues=[Queue("a"), Queue("b")],
                    jobs=[running("r1", "a", 5, "n1", range(5)), running("r2", "a", 5, "n2", range(5)),
                          pending("four", "b", 4)])
    result = ScheduleResult(fair_share={}, tasks={}, snapshot=snap,
                            jobs={"r1": JobDecision("running"), "r2": JobDecision("running"),
                                  "four": JobDecision("pending", "NotEnoughResources", "0/2 nodes fit")})
    engine = ToyEngine()
    [exp] = explain_pending(snap, result, run=engine, budget_ms_per_job=0)
    assert engine.calls == 0
    cf = exp.counterfactual
    assert cf.kind == "fragmented" and cf.node == "n1" and cf.amount == 1
    assert cf.message == ("needs 4 whole GPUs on one node; largest free block is 3 on node n1 "
                          "(6 whole GPUs free in total, the job needs 4)")


def test_pipelined_job_needs_no_change_and_order_is_by_queue_then_job():
    snap = Snapshot(nodes=[node("n1")], queues=[Queue("a"), Queue("b")],
                    jobs=[pending("z", "a", 1), pending("y", "b", 1), pending("x", "b", 1)])
    result = ScheduleResult(fair_share={}, tasks={}, snapshot=snap, jobs={
        "y": JobDecision("pending", "NotEnoughResources"), "z": JobDecision("pipelined", "Pipelined"),
        "x": JobDecision("pending", "NotEnoughResources")})
    exps = explain_pending(snap, result, run=ToyEngine(), budget_ms_per_job=0, jobs=["z", "x", "y"])
    assert [e.job for e in exps] == ["z", "x", "y"]
    assert exps[0].counterfactual.kind == "none" and "being released" in exps[0].counterfactual.message
    assert exps[0].to_dict()["counterfactual"]["kind"] == "none"


def test_tasks_to_place_is_the_gang_remainder():
    job = Job(name="g", queue="q", min_available=3, tasks=[
        Task("g-0", gpu=1, status="running", node="n1"), Task("g-1", gpu=1, creation_time=2),
        Task("g-2", gpu=1, creation_time=1), Task("g-3", gpu=1, creation_time=3)])
    assert [t.name for t in tasks_to_place(job)] == ["g-2", "g-1"]


# ---------------------------------------------------------------------------------------------- real engine

def gpu_only(name, queue, gpus, *, status="pending", node_name=None, devices=(), priority=50, start=0.0,
             created=100.0):
    """A one-task job asking for GPUs only (no CPU or memory, so only GPU quota/limit checks apply)."""
    task = Task(f"{name}-0", gpu=gpus, status=status, node=node_name, gpu_indices=list(devices))
    return Job(name=name, queue=queue, priority=priority, creation_time=created,
               last_start_time=start if status == "running" else None, tasks=[task])


def engine_explain(snap):
    from scheduler.engine import run_session

    return explain_pending(snap, run_session(snap), budget_ms_per_job=5000)


def test_engine_over_limit():
    # Queue L: limit 3 GPUs, 2 allocated, the job needs 2 -> KAI OverLimit, over by 1; at limit 4 it starts
    # (6 GPUs of the node are free).
    snap = Snapshot(nodes=[node("n1")], queues=[Queue("L", gpu=QueueResource(0, 3, 1))],
                    jobs=[gpu_only("l1", "L", 2, status="running", node_name="n1", devices=[0, 1]),
                          gpu_only("lp", "L", 2)])
    [exp] = engine_explain(snap)
    assert exp.reason == "OverLimit"
    cf = exp.counterfactual
    assert (cf.kind, cf.queue, cf.resource, cf.amount, cf.verified) == ("raise_limit", "L", "gpu", 1.0, True)
    assert cf.message.startswith("over the queue limit by 1 GPU: queue L gpu limit 3 GPUs, 2 GPUs allocated, "
                                 "job needs 2 GPUs; with the limit raised to 4 GPUs it would start")


def test_engine_non_preemptible_over_quota():
    # Non-preemptible (priority 125) job of 3 GPUs in a queue with GPU quota 2 and nothing non-preemptible
    # running: 0 + 3 > 2 -> over quota by 1; with quota 3 it starts.
    snap = Snapshot(nodes=[node("n1")], queues=[Queue("N", gpu=QueueResource(2, -1, 1))],
                    jobs=[gpu_only("np", "N", 3, priority=125)])
    [exp] = engine_explain(snap)
    assert exp.reason == "NonPreemptibleOverQuota"
    cf = exp.counterfactual
    assert (cf.kind, cf.queue, cf.amount, cf.verified) == ("raise_quota", "N", 1.0, True)
    assert "with the quota raised to 3 GPUs it would start" in cf.message


def test_engine_release_from_over_fair_share_queue():
    # One 4-GPU node. Queue D runs non-preemptible jobs d1 (2 GPUs, started 10), d2 (1 GPU, started 20),
    # d3 (1 GPU, started 5): nothing free, and reclaim could not take them. Q waits for p (2 GPUs).
    # Fair share (quota 0, weight 1): requests D 4, Q 2 -> shares 2/2 -> Q 2, D 2; D holds 4 > 2.
    # Victim order (same priority, younger first): d2, d1, d3. Prefix search -> [d2, d1]; minimising -> d1
    # alone frees devices 0-1 -> p fits. Answer: D releases 2 GPUs (d1).
    snap = Snapshot(nodes=[node("n1", 4)], queues=[Queue("D"), Queue("Q")],
                    jobs=[gpu_only("d1", "D", 2, status="running", node_name="n1", devices=[0, 1], priority=125, start=10),
                          gpu_only("d2", "D", 1, status="running", node_name="n1", devices=[2], priority=125, start=20),
                          gpu_only("d3", "D", 1, status="running", node_name="n1", devices=[3], priority=125, start=5),
                          gpu_only("p", "Q", 2)])
    [exp] = engine_explain(snap)
    assert exp.job == "p"
    cf = exp.counterfactual
    assert (cf.kind, cf.queue, cf.jobs, cf.amount, cf.verified) == ("release", "D", ["d1"], 2.0, True)
    assert cf.message == "would start if queue D released 2 GPUs (d1); D holds 4 GPUs against a fair share of 2 GPUs"


def test_engine_full_cluster_needs_a_node():
    # Queue A (quota 4) fills the only 4-GPU node with a non-preemptible job: it is at its fair share, so there is
    # no queue to release from and nothing is fragmented (no GPU free). One more such node lets B's job start.
    snap = Snapshot(nodes=[node("n1", 4)], queues=[Queue("A", gpu=QueueResource(4, -1, 1)), Queue("B")],
                    jobs=[gpu_only("a", "A", 4, status="running", node_name="n1", devices=range(4), priority=125),
                          gpu_only("b", "B", 4)])
    [exp] = engine_explain(snap)
    cf = exp.counterfactual
    assert (cf.kind, cf.amount, cf.verified) == ("add_nodes", 1.0, True)
    assert cf.message == "would start with 1 more node like n1 in pool gpu (+4 GPUs)"


def test_engine_request_larger_than_any_node():
    snap = Snapshot(nodes=[node("n1"), node("n2")], queues=[Queue("q")], jobs=[gpu_only("big", "q", 16)])
    [exp] = engine_explain(snap)
    assert exp.counterfactual.kind == "larger_node" and not exp.counterfactual.verified


def test_constraints_no_node_passes_explains_taints_and_selector_without_a_search():
    """Issue 13: a pod whose tolerations / node selector no schedulable node passes gets a ``constraints``
    counterfactual with the node counts per check (the engine's own fit error names them too)."""
    from scheduler.engine import run_session
    from scheduler.model import PodConstraints, Taint, Toleration

    tainted = [Node(f"gpu-{i}", gpus=8, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=2**38,
                    labels={"zone": "a"}, taints=[Taint("nvidia.com/gpu", "NoSchedule", "present")]) for i in range(3)]
    other = Node("gpu-b", gpus=8, gpu_memory_mib=81920, cpu_millis=64000, memory_bytes=2**38, labels={"zone": "b"})
    picky = PodConstraints(node_selector={"zone": "a"}, tolerations=[Toleration("dedicated", "Exists")])
    snap = Snapshot(nodes=tainted + [other], queues=[Queue("q", gpu=QueueResource(8, -1, 1))],
                    jobs=[Job("j", "q", tasks=[Task("j-0", gpu=1, constraints=picky)])])
    result = run_session(snap, ["allocate"])
    assert "3 had untolerated taints" in result.jobs["j"].message
    assert "1 didn't match Pod's node affinity/selector" in result.jobs["j"].message
    calls = []
    (exp,) = explain_pending(snap, result, run=lambda s: calls.append(s) or run_session(s))
    assert exp.counterfactual.kind == "constraints" and not calls
    assert exp.numbers["nodes_failing_constraints"] == {"node affinity/selector": 1, "taints": 3}
    assert "nvidia.com/gpu=present:NoSchedule" in exp.counterfactual.message


def test_pods_awaiting_the_pod_grouper_are_explained_as_such():
    from scheduler.engine import run_session

    snap = Snapshot(nodes=[node("n1")], queues=[Queue("q", gpu=QueueResource(8, -1, 1))],
                    jobs=[Job("nb-0", "q", waiting_for="pod-grouper", tasks=[Task("nb-0", gpu=1)])])
    result = run_session(snap, ["allocate"])
    assert result.jobs["nb-0"].reason == "AwaitingPodGrouper" and result.tasks["nb-0"].status == "pending"
    (exp,) = explain_pending(snap, result)
    assert exp.counterfactual.kind == "pod_grouper" and "pod-grouper" in exp.message


class ProbeClock:
    """A clock for the explainer's budget that moves only when the engine runs (``ms_per_run`` per re-run), so a
    budget is a number of engine runs whatever the machine's load."""

    def __init__(self, ms_per_run: float = 10.0):
        from scheduler.engine import run_session

        self.now, self.runs, self.ms, self._engine = 0.0, 0, ms_per_run, run_session

    def __call__(self) -> float:
        return self.now

    def run(self, snap):
        self.runs += 1
        self.now += self.ms / 1000
        return self._engine(snap)


def pool_node(name, pool):
    return Node(name=name, gpus=8, gpu_memory_mib=81920, cpu_millis=128000, memory_bytes=2**40,
                labels={"kai.scheduler/node-pool": pool})


ONLY_POOL_A = PodConstraints(node_selector={"kai.scheduler/node-pool": "a"})


def split_pools_scenario(a_nodes=2):
    """Pool "a" (``a_nodes`` nodes) runs queue D's 8-GPU jobs a1 (started 1), a2 (started 2), ...; pool "b" (4
    nodes) runs D's 32 one-GPU jobs, all younger. Queue Q's gang of 2 x 8 GPUs may only use pool a. Everything is full.
    Fair share (quota 0, weight 1): requests Q 16, D 48 of 48 -> Q 16, D 32; D holds 48: the donor."""
    nodes = [pool_node(f"a{i}", "a") for i in range(a_nodes)] + [pool_node(f"b{i}", "b") for i in range(4)]
    jobs = [gpu_only(f"a{i + 1}", "D", 8, status="running", node_name=f"a{i}", devices=range(8), priority=125,
                     start=1 + i) for i in range(a_nodes)]
    jobs += [gpu_only(f"b{n}-{d}", "D", 1, status="running", node_name=f"b{n}", devices=[d], priority=125,
                      start=10 + 8 * n + d) for n in range(4) for d in range(8)]
    gang = Job(name="gang", queue="Q", creation_time=100.0, min_available=2,
               tasks=[Task(f"gang-{i}", gpu=8, constraints=ONLY_POOL_A) for i in range(2)])
    return Snapshot(nodes=nodes, queues=[Queue("D"), Queue("Q")], jobs=jobs + [gang])


def test_release_targets_the_nodes_the_gang_can_use_within_the_budget():
    # KAI's victim order (same priority, younger first) puts D's 32 one-GPU jobs on pool b before a1 and a2,
    # so the prefix of that order that starts the gang is all 34 jobs, and one-by-one minimising needs 34 more
    # engine runs: within 20 runs it used to end at "D released 35 GPUs (21 jobs)". Aimed at the nodes the gang
    # may use, the proposal is a1 and a2, verified by one engine run and proven minimal by two more.
    from scheduler.engine import run_session

    snap = split_pools_scenario()
    clock = ProbeClock(10.0)
    [exp] = explain_pending(snap, run_session(snap), budget_ms_per_job=200.0, run=clock.run, clock=clock)
    cf = exp.counterfactual
    assert (cf.kind, cf.queue, sorted(cf.jobs), cf.amount, cf.verified, cf.minimal) == (
        "release", "D", ["a1", "a2"], 16.0, True, True)
    assert cf.message == "would start if queue D released 16 GPUs (a2, a1); D holds 48 GPUs against a fair share of 32 GPUs"
    assert clock.runs == 3


def test_release_says_when_the_budget_left_the_set_unproven():
    # The same cluster with the budget for a single engine run: the node-targeted set is verified, but no job
    # of it was tried without, so the message says the set is not proven the smallest.
    from scheduler.engine import run_session

    snap = split_pools_scenario()
    clock = ProbeClock(10.0)
    [exp] = explain_pending(snap, run_session(snap), budget_ms_per_job=15.0, run=clock.run, clock=clock)
    cf = exp.counterfactual
    assert (cf.kind, sorted(cf.jobs), cf.verified, cf.minimal) == ("release", ["a1", "a2"], True, False)
    assert cf.message.endswith("; not proven the smallest set: the search stopped at its time budget")


def test_release_names_the_waiting_jobs_that_take_the_room_first():
    # Pool a has three nodes (D's a1, a2, a3) and Q's one-pod job "first", created earlier and also bound to pool a,
    # waits too. Room for the gang alone (a3, a2 released) goes to "first" in the engine's re-run: the explainer
    # learns that from the re-run, asks for room for both (all three), verifies it and says who takes part of it.
    from scheduler.engine import run_session

    snap = split_pools_scenario(a_nodes=3)
    first = Job(name="first", queue="Q", creation_time=50.0, tasks=[Task("first-0", gpu=8, constraints=ONLY_POOL_A)])
    snap = replace(snap, jobs=snap.jobs + [first])
    [exp] = explain_pending(snap, run_session(snap), budget_ms_per_job=5000, jobs=["gang"])
    cf = exp.counterfactual
    assert (cf.kind, cf.jobs, cf.amount, cf.verified, cf.minimal) == ("release", ["a3", "a2", "a1"], 24.0, True, True)
    assert cf.message == ("would start if queue D released 24 GPUs (a3, a2, a1); D holds 56 GPUs against a fair share "
                          "of 32 GPUs; part of the room goes to first, waiting ahead of it")
