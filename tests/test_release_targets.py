"""The node-targeted release proposal (``scheduler.release_targets``) on hand-built clusters: which running jobs
to release so that a waiting job's pods fit, by a device-level model, before the explainer verifies it."""

from scheduler.model import Job, Node, PodConstraints, Snapshot, Task
from scheduler.release_targets import pod_demand, targeted_release


def node(name, pool="a", gpus=8, mem=81920):
    return Node(name=name, gpus=gpus, gpu_memory_mib=mem, cpu_millis=128000, memory_bytes=2**40,
                labels={"kai.scheduler/node-pool": pool})


def running(name, where: dict[str, list[int]], gpu=1.0):
    """A job with one pod per node of ``where`` on those devices (``gpu`` per device)."""
    tasks = [Task(f"{name}-{i}", gpu=gpu * len(devs) if gpu >= 1 else gpu, status="running", node=n,
                  gpu_indices=devs) for i, (n, devs) in enumerate(where.items())]
    return Job(name=name, queue="D", tasks=tasks)


def keys(jobs):
    return [j.key for j in jobs] if jobs is not None else None


def test_pods_go_where_the_fewest_gpus_must_go_and_only_on_nodes_they_may_use():
    # n1 (pool a): 6 GPUs of x (6 devices) and 2 of y; n2 (pool a): 8 of z; n3 (pool b): empty but not usable.
    # A 2-GPU pod of pool a: y alone frees 2 devices on n1 (cost 2) -- better than x (6) or z (8).
    nodes = [node("n1"), node("n2"), node("n3", pool="b")]
    jobs = [running("x", {"n1": [0, 1, 2, 3, 4, 5]}), running("y", {"n1": [6, 7]}),
            running("z", {"n2": list(range(8))})]
    snap = Snapshot(nodes=nodes, queues=[], jobs=jobs)
    pod = Task("p-0", gpu=2, constraints=PodConstraints(node_selector={"kai.scheduler/node-pool": "a"}))
    demand = pod_demand(pod, nodes)
    assert sorted(demand.shares) == ["n1", "n2"]                       # not pool b
    assert keys(targeted_release(snap, [demand], jobs)) == ["y"]
    # a second such pod: y's room goes to the first, then x (6 GPUs) on n1 beats z (8): x and y, 8 GPUs; but x
    # alone frees 6 devices, room for both pods: one job, fewer GPUs
    second = pod_demand(Task("p-1", gpu=2, constraints=pod.constraints), nodes)
    assert keys(targeted_release(snap, [demand, second], jobs)) == ["x"]
    # without x: y then z (10 GPUs), but z alone empties n2 for both (8)
    assert keys(targeted_release(snap, [demand, second], [j for j in jobs if j.name != "x"])) == ["z"]


def test_one_job_spanning_the_nodes_replaces_several_small_ones():
    # Two 8-GPU pods. n1 and n2 each hold four 2-GPU jobs (8 jobs, 16 GPUs); n3 and n4 hold one 16-GPU gang.
    # Per pod the cheapest node costs 8 GPUs either way (four jobs on n1, or the gang, 16, for one pod: more),
    # so the greedy set is the eight small jobs; the gang alone frees as many GPUs in one job: it is proposed.
    nodes = [node(f"n{i}") for i in range(1, 5)]
    small = [running(f"s{n}{k}", {f"n{n}": [2 * k, 2 * k + 1]}) for n in (1, 2) for k in range(4)]
    gang = running("gang", {"n3": list(range(8)), "n4": list(range(8))})
    snap = Snapshot(nodes=nodes, queues=[], jobs=small + [gang])
    pods = [pod_demand(Task(f"p-{i}", gpu=8), nodes) for i in range(2)]
    assert keys(targeted_release(snap, pods, small + [gang])) == ["gang"]
    assert len(targeted_release(snap, pods, small)) == 8               # without the gang: the small ones


def test_a_shared_gpu_pod_needs_room_on_one_device_and_none_when_nothing_can_make_it():
    # Device 0: f1 uses 0.75. Device 1: f2 0.5 and another queue's pod 0.5 (not a candidate).
    nodes = [node("n1", gpus=2)]
    f1, f2 = running("f1", {"n1": [0]}, gpu=0.75), running("f2", {"n1": [1]}, gpu=0.5)
    other = Job(name="other", queue="E", tasks=[Task("o-0", gpu=0.5, status="running", node="n1", gpu_indices=[1])])
    snap = Snapshot(nodes=nodes, queues=[], jobs=[f1, f2, other])
    half = pod_demand(Task("p-0", gpu=0.5), nodes)
    assert keys(targeted_release(snap, [half], [f1, f2])) == ["f2"]      # 0.5 freed beats 0.75
    whole = pod_demand(Task("w-0", gpu=1), nodes)
    assert keys(targeted_release(snap, [whole], [f1, f2])) == ["f1"]     # only device 0 can be emptied
    assert targeted_release(snap, [pod_demand(Task("b-0", gpu=2), nodes)], [f1, f2]) is None  # "other" stays
