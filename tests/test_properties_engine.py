"""Property-based tests of the engine (scheduler.engine) on random valid clusters (tests/strategies.py).

Whatever the cluster, one session and several cycles:

- never crash, never mutate their input, and give the same decisions twice;
- never put more than 100 % of a GPU, or more CPU, memory or pods than a node has, on a node (counting what
  occupies it now: running, binding, releasing; and what will once releases finish: running, binding,
  pipelined);
- place every GPU task on as many named devices as it asks for;
- keep gangs whole: a job that gets new tasks ends with at least ``min_available`` active tasks, and a job
  that loses tasks keeps none or at least ``min_available``; every task taken off a node is in ``evicted``;
- respect queue limits: a queue (or ancestor) whose allocation of a resource grew ends within its limit;
- give no queue a fair share more than 1 above what it requests (KAI's last division phase hands out
  min(1, remaining) without re-checking the request), or above its limit.

Expected quantities are recomputed here from the snapshot's own tasks (units of design.md), not read back from
the engine's accounting.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.engine import advance, run_cycles, run_session
from scheduler.model import Snapshot, Task
from scheduler.snapshot_io import loads_snapshot, snapshot_to_dict
from strategies import snapshots

EPS = 1e-6
NOW_STATUSES = {"running", "binding", "releasing"}          # occupying the node at this moment
FUTURE_STATUSES = {"running", "binding", "pipelined"}       # occupying it once releases complete
ALLOCATED = {"running", "binding", "pipelined"}             # counted in a queue's Allocated after a session
ACTIVE_ALLOCATED = {"running", "binding", "pipelined"}      # KAI ActiveAllocated
ACTIVE_USED = ACTIVE_ALLOCATED | {"releasing"}              # KAI ActiveUsed: what satisfies a gang (IsGangSatisfied)
GONE = {"succeeded", "failed"}


def _share_per_device(task: Task, node_gpu_memory_mib: float) -> float:
    """The part of one device a task holds. A shared GPU is filled by memory (KAI tracks shared GPUs in MiB,
    a fraction being that part of the device's memory), so a GPU-memory request holds exactly its MiB: the
    0.01 rounding of memory_to_fraction is for queue accounting only."""
    if task.gpu_memory_mib is not None:
        return task.gpu_memory_mib / node_gpu_memory_mib
    return 1.0 if task.gpu >= 1 else task.gpu


def _devices(task: Task) -> int:
    return int(task.gpu) if task.gpu >= 1 else task.gpu_devices


def _task_amount(task: Task, resource: str, nodes) -> float:
    if resource == "cpu":
        return task.cpu_millis
    if resource == "memory":
        return task.memory_bytes
    return task.gpus_on(nodes[task.node].gpu_memory_mib)


# ---------------------------------------------------------------------------------------------- invariants

def node_problems(snap: Snapshot) -> list[str]:
    """Over-committed devices and nodes, and placed GPU tasks without their devices.

    Now (running, binding, releasing) every device holds at most 100 %. After releases (running, binding,
    pipelined) the node's GPUs are counted as KAI counts them: what running and binding tasks hold plus what
    pipelined tasks will take fits the node's devices. (KAI gives a pipelined task no device until it binds;
    the engine's gpu_index for it is a forecast, checked by :func:`pipelined_index_collisions`.)

    KAI binds a fraction that opens a new shared GPU on a device still being released when its node-level
    check passes (gpu_sharing/gpuSharing.go); the reservation pod then waits in the kubelet for the device.
    Such a fraction is counted after releases only, as a pipelined one is.
    """
    problems = []
    nodes = snap.node_map()
    releasing_devices = {(t.node, i) for _, t in snap.iter_tasks() if t.status == "releasing" for i in t.gpu_indices}
    for statuses, when in ((NOW_STATUSES, "now"), (FUTURE_STATUSES, "after releases")):
        device = defaultdict(float)
        host = defaultdict(lambda: [0.0, 0.0, 0, 0])  # CPU, memory, pods, whole GPUs
        shared_devices = defaultdict(set)
        for _, t in snap.iter_tasks():
            if t.status not in statuses or t.node is None:
                continue
            if when == "now" and t.status == "binding" and t.is_fractional \
                    and any((t.node, i) in releasing_devices for i in t.gpu_indices):
                continue
            node = nodes[t.node]
            used = host[t.node]
            used[0] += t.cpu_millis
            used[1] += t.memory_bytes
            used[2] += 1
            if not t.is_gpu:
                continue
            if t.is_fractional:  # a shared device counts once however full it is
                shared_devices[t.node].update(t.gpu_indices)
            else:
                used[3] += _devices(t)
            if len(t.gpu_indices) != _devices(t):
                problems.append(f"{t.name} ({t.status}) on {t.node}: gpu_index {t.gpu_indices} for {_devices(t)} devices")
            if when == "now":
                for i in t.gpu_indices:
                    device[(t.node, i)] += _share_per_device(t, node.gpu_memory_mib)
        for (n, i), used in device.items():
            if used > 1 + EPS:
                problems.append(f"{when}: GPU {n}[{i}] is {used:.2%} allocated")
        for n, (cpu, mem, pods, whole) in host.items():
            node = nodes[n]
            if cpu > node.cpu_millis + EPS or mem > node.memory_bytes + EPS or pods > node.pods:
                problems.append(f"{when}: node {n} holds {cpu:g} m CPU, {mem:g} B, {pods} pods "
                                f"of {node.cpu_millis:g}, {node.memory_bytes:g}, {node.pods}")
            if whole + len(shared_devices[n]) > node.gpus:
                problems.append(f"{when}: node {n} holds {whole} whole and {len(shared_devices[n])} shared GPUs "
                                f"of {node.gpus}")
    return problems


def pipelined_index_collisions(snap: Snapshot) -> list[str]:
    """Devices that a pipelined whole-GPU task is reported on together with another task after releases."""
    holders = defaultdict(list)
    for _, t in snap.iter_tasks():
        if t.status in FUTURE_STATUSES and t.node is not None:
            for i in t.gpu_indices:
                holders[(t.node, i)].append(t)
    out = []
    for (n, i), tasks in sorted(holders.items()):
        if len(tasks) > 1 and any(t.status == "pipelined" and not t.is_fractional for t in tasks):
            out.append(f"GPU {n}[{i}] is reported for {sorted(t.name for t in tasks)}")
    return out


def _count(tasks, statuses, subgroup=None) -> int:
    return sum(t.status in statuses and (subgroup is None or t.subgroup == subgroup) for t in tasks)


def gang_problems(before: Snapshot, after: Snapshot, evicted_names: set[str]) -> list[str]:
    problems = []
    old_jobs = before.job_map()
    for job in after.jobs:
        old = old_jobs[job.key]
        old_status = {t.name: t.status for t in old.tasks}
        gained = [t.name for t in job.tasks if t.status in ACTIVE_ALLOCATED and old_status[t.name] not in ACTIVE_ALLOCATED]
        lost = [t.name for t in job.tasks if old_status[t.name] in {"running", "binding"} and t.status not in ACTIVE_ALLOCATED]
        # A job's gangs: each declared sub-group, or the whole job when it declares none (docs/engine.md: with
        # sub-groups, KAI's minSubGroup is unset and every sub-group is required; min_available is not used).
        gangs = [(f"sub-group {sg.name}", sg.name, sg.min_available) for sg in job.subgroups] or [("job", None, job.min_available)]
        for what, subgroup, minimum in gangs:
            # KAI's IsGangSatisfied counts ActiveUsed tasks (releasing ones included).
            used = _count(job.tasks, ACTIVE_USED, subgroup)
            if gained and used < minimum:
                problems.append(f"job {job.key} got {gained} but its {what} has {used} active tasks < min_available {minimum}")
            kept = _count(job.tasks, ACTIVE_ALLOCATED, subgroup)
            if lost and 0 < kept < minimum:
                problems.append(f"job {job.key} lost {lost} and its {what} is left with {kept} < min_available {minimum}")
        for name in lost:
            if name not in evicted_names:
                problems.append(f"task {name} left its node without an eviction")
    return problems


def _subtree_allocated(snap: Snapshot) -> dict[str, dict[str, float]]:
    parent = {q.name: q.parent for q in snap.queues}
    nodes = snap.node_map()
    out = {q.name: {"gpu": 0.0, "cpu": 0.0, "memory": 0.0} for q in snap.queues}
    for job, t in snap.iter_tasks():
        if t.status not in ALLOCATED or t.node is None:
            continue
        q = job.queue
        while q is not None:
            for r in out[q]:
                out[q][r] += _task_amount(t, r, nodes)
            q = parent[q]
    return out


def limit_problems(before: Snapshot, after: Snapshot) -> list[str]:
    old, new = _subtree_allocated(before), _subtree_allocated(after)
    problems = []
    for q in after.queues:
        for r in ("gpu", "cpu", "memory"):
            limit = q.resource(r).limit
            grew = new[q.name][r] > old[q.name][r] + EPS
            if limit >= 0 and grew and new[q.name][r] > limit * (1 + EPS) + EPS:
                problems.append(f"queue {q.name} {r}: allocated grew {old[q.name][r]:g} -> {new[q.name][r]:g} over limit {limit:g}")
    return problems


def _request_upper_bound(snap: Snapshot) -> dict[str, dict[str, float]]:
    """Everything the queue's live tasks ask for (GPU memory counted against the smallest GPU): >= requested."""
    parent = {q.name: q.parent for q in snap.queues}
    gpu_mems = [n.gpu_memory_mib for n in snap.nodes if n.gpus]
    smallest = min(gpu_mems) if gpu_mems else 0.0
    out = {q.name: {"gpu": 0.0, "cpu": 0.0, "memory": 0.0} for q in snap.queues}
    for job, t in snap.iter_tasks():
        if t.status in GONE:
            continue
        gpu = t.gpus_on(smallest) if t.gpu_memory_mib is not None else (t.gpu if t.gpu >= 1 else t.gpu * t.gpu_devices)
        gpu = max(gpu, t.gpu_devices if t.gpu_memory_mib is not None else 0.0)
        q = job.queue
        while q is not None:
            out[q]["gpu"] += gpu
            out[q]["cpu"] += t.cpu_millis
            out[q]["memory"] += t.memory_bytes
            q = parent[q]
    return out


def fair_share_problems(snap: Snapshot, result) -> list[str]:
    bound = _request_upper_bound(snap)
    problems = []
    for q in snap.queues:
        for r in ("gpu", "cpu", "memory"):
            share = result.fair_share[q.name][r]
            requested = result.queue_stats[q.name][r]["requested"]
            limit = q.resource(r).limit
            if share < -EPS:
                problems.append(f"queue {q.name} {r}: negative fair share {share:g}")
            # KAI's last division phase (resource_division.go: divideRemainingResource) hands a queue with a
            # rounded-off leftover min(1, remaining) without re-checking its request: at most 1 over it
            if share > requested * (1 + EPS) + 1 + EPS:
                problems.append(f"queue {q.name} {r}: fair share {share:g} more than 1 above requested {requested:g}")
            if requested > bound[q.name][r] * (1 + EPS) + EPS:
                problems.append(f"queue {q.name} {r}: requested {requested:g} above what its tasks ask {bound[q.name][r]:g}")
            if limit >= 0 and share > limit * (1 + EPS) + EPS:
                problems.append(f"queue {q.name} {r}: fair share {share:g} above limit {limit:g}")
    return problems


def _check_all(before: Snapshot, result) -> None:
    after = result.snapshot
    evicted = {e.task for e in result.evicted}
    problems = (node_problems(after) + gang_problems(before, after, evicted) + limit_problems(before, after)
                + fair_share_problems(before, result))
    if problems:
        placed = [f"  {t.name}: {t.status} on {t.node} gpu_index={t.gpu_indices} gpu_group={t.gpu_groups}"
                  for _, t in after.iter_tasks() if t.node]
        raise AssertionError("\n".join(problems + ["after the session:"] + placed))


# ---------------------------------------------------------------------------------------------- known bugs

SPREAD_ONTO_RELEASING = """
config: {gpu_device_order: spread}
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 16384, cpu_millis: 4000, memory_bytes: 16Gi, pods: 4}]
queues: [{name: q0}]
jobs:
- {name: old, queue: q0, tasks: [{name: old-0, gpu: 1, status: releasing, node: n0, gpu_index: 0}]}
- {name: new, queue: q0, tasks: [{name: new-0, gpu: 0.25}]}
- {name: shared, queue: q0, tasks: [{name: shared-0, gpu: 0.25, status: running, node: n0, gpu_index: 1, gpu_group: g1}]}
"""


def test_a_fraction_opening_a_gpu_that_is_still_releasing_is_bound_as_kai_binds_it():
    """Spread prefers the releasing (empty once released) GPU 0 over GPU 1's group; the node has room for the
    fraction (its other GPU is shared), so KAI binds it there (gpu_sharing/gpuSharing.go, checked with KAI's
    snapshot-tool) and the reservation pod waits in the kubelet for the device."""
    snap = loads_snapshot(SPREAD_ONTO_RELEASING)
    result = run_session(snap)
    decision = result.tasks["new-0"]
    assert (decision.status, decision.gpu_indices) == ("binding", [0])
    assert node_problems(result.snapshot) == []


CONSOLIDATION_INDEX = """
nodes:
- {name: n3, gpus: 2, gpu_memory_mib: 24576, cpu_millis: 4000, memory_bytes: 29Gi, pods: 6}
- {name: n4, gpus: 2, gpu_memory_mib: 16384, cpu_millis: 4000, memory_bytes: 29Gi, pods: 4}
queues: [{name: q0}]
jobs:
- {name: j0, queue: q0, tasks: [{name: j0-t0}]}
- {name: j1, queue: q0, preemptible: false, tasks: [{name: j1-t0}]}
- {name: j2, queue: q0, subgroups: [{name: leader}, {name: workers}], tasks: [
    {name: j2-t0, subgroup: leader}, {name: j2-t1, gpu: 1, memory_bytes: 29Gi, subgroup: workers}]}
- {name: j3, queue: q0, subgroups: [{name: leader}, {name: workers}], tasks: [
    {name: j3-t0, subgroup: leader}, {name: j3-t1, gpu_memory_mib: 20480, memory_bytes: 1Gi, subgroup: workers}]}
- {name: j4, queue: q0, min_available: 4, tasks: [{name: j4-t0}, {name: j4-t1}, {name: j4-t2}, {name: j4-t3, gpu: 1}]}
"""


def test_a_pipelined_whole_gpu_is_reported_on_a_device_of_its_own():
    """Consolidation evicts j4 and j2 (KAI's snapshot-tool decides the same), pipelines j2-t1 (one whole GPU)
    onto n4, whose device 0 j4-t3 was releasing, then un-evicts j4-t3 onto device 0: j2-t1 must be reported on
    device 1, not on device 0 with j4-t3. j3-t1's shared GPU is pipelined onto n3's releasing device 0."""
    result = run_session(loads_snapshot(CONSOLIDATION_INDEX))
    assert result.tasks["j3-t1"].gpu_indices == [0]
    assert (result.tasks["j4-t3"].status, result.tasks["j4-t3"].node, result.tasks["j4-t3"].gpu_indices) \
        == ("binding", "n4", [0])
    assert (result.tasks["j2-t1"].status, result.tasks["j2-t1"].node, result.tasks["j2-t1"].gpu_indices) \
        == ("pipelined", "n4", [1])
    assert node_problems(result.snapshot) == []
    assert pipelined_index_collisions(result.snapshot) == []


# ---------------------------------------------------------------------------------------------- tests

@settings(max_examples=100)
@given(snapshots())
def test_generated_clusters_satisfy_the_invariants_before_scheduling(snap):
    """The strategy's own promise (placed tasks within capacity), so failures below are the engine's."""
    assert node_problems(snap) == []


@settings(max_examples=150)
@given(snapshots())
def test_one_session_keeps_every_invariant(snap):
    before = snapshot_to_dict(snap)
    result = run_session(snap)
    assert snapshot_to_dict(snap) == before, "run_session mutated its input"
    assert set(result.tasks) == {t.name for _, t in snap.iter_tasks()}
    assert set(result.jobs) == {j.key for j in snap.jobs}
    _check_all(snap, result)


@settings(max_examples=60)
@given(snapshots(), st.integers(2, 4))
def test_every_cycle_keeps_every_invariant(snap, cycles):
    """Cycle by cycle with KAI's between-cycle transitions; run_cycles ends where the cycle-by-cycle run ends."""
    before = snapshot_to_dict(snap)
    current = snap
    for _ in range(cycles):
        result = run_session(current)
        _check_all(current, result)
        current = advance(result.snapshot)
    final = run_cycles(snap, cycles)
    assert snapshot_to_dict(snap) == before, "run_cycles mutated its input"
    assert snapshot_to_dict(final.snapshot) == snapshot_to_dict(result.snapshot)


@settings(max_examples=50)
@given(snapshots())
def test_the_same_snapshot_gives_the_same_decisions(snap):
    first = run_session(snap).to_contract()
    second = run_session(snap).to_contract()
    first.pop("timings_ms")
    second.pop("timings_ms")
    assert first == second


# ---------------------------------------------------------------------------------------------- the checkers

CLUSTER = """
nodes: [{name: n0, gpus: 2, gpu_memory_mib: 40960, cpu_millis: 8000, memory_bytes: 64Gi, pods: 3}]
queues: [{name: top, gpu: {quota: 1, limit: 1}}, {name: leaf, parent: top}]
jobs:
  - {name: a, queue: leaf, min_available: 2, tasks: [
      {name: a0, gpu: 0.75, cpu_millis: 1000, memory_bytes: 1Gi, status: running, node: n0, gpu_index: 0},
      {name: a1, gpu: 0.75, cpu_millis: 1000, memory_bytes: 1Gi}]}
  - {name: b, queue: leaf, tasks: [{name: b0, gpu: 1, cpu_millis: 1000, memory_bytes: 1Gi}]}
"""


def _place(snap, task, status, node=None, index=None):
    out = snap.copy()
    for _, t in out.iter_tasks():
        if t.name == task:
            t.status, t.node = status, node
            t.gpu_indices = [] if index is None else [index]
    return out


def test_node_checker_flags_a_gpu_over_100_percent_and_a_missing_device():
    before = loads_snapshot(CLUSTER)
    assert node_problems(before) == []
    assert node_problems(_place(before, "a1", "binding", "n0", 0)) == ["now: GPU n0[0] is 150.00% allocated"]
    # Pipelined onto a releasing share: fine now and after the release.
    releasing = _place(before, "a0", "releasing", "n0", 0)
    assert node_problems(_place(releasing, "a1", "pipelined", "n0", 0)) == []
    # Three whole GPUs' worth after releases on a 2-GPU node.
    crowded = _place(_place(before, "b0", "binding", "n0", 1), "a1", "pipelined", "n0", 1)
    crowded.jobs[0].tasks[1].gpu = 1.0
    assert "after releases: node n0 holds 2 whole and 1 shared GPUs of 2" in node_problems(crowded)
    assert node_problems(_place(before, "b0", "binding", "n0")) == [
        "b0 (binding) on n0: gpu_index [] for 1 devices", "b0 (binding) on n0: gpu_index [] for 1 devices"]


def test_node_checker_flags_cpu_memory_and_pod_overcommit():
    snap = loads_snapshot(CLUSTER.replace("cpu_millis: 8000", "cpu_millis: 1500"))
    problems = node_problems(_place(snap, "a1", "binding", "n0", 1))
    assert problems and all("node n0 holds 2000 m CPU" in p for p in problems)


def test_gang_checker_flags_half_gangs_and_silent_evictions():
    before = loads_snapshot(CLUSTER)
    half = _place(_place(before, "a0", "pending"), "a1", "binding", "n0", 1)
    assert gang_problems(before, half, evicted_names={"a0"}) == [
        "job a got ['a1'] but its job has 1 active tasks < min_available 2",
        "job a lost ['a0'] and its job is left with 1 < min_available 2"]
    whole = _place(before, "a1", "binding", "n0", 1)
    assert gang_problems(before, whole, set()) == []
    gone = _place(before, "a0", "releasing", "n0", 0)
    assert gang_problems(before, gone, set()) == ["task a0 left its node without an eviction"]
    assert gang_problems(before, gone, {"a0"}) == []


def test_limit_checker_flags_growth_past_a_limit_on_the_queue_or_an_ancestor():
    before = loads_snapshot(CLUSTER)
    over = _place(before, "b0", "binding", "n0", 1)  # top: 0.75 -> 1.75 GPUs, limit 1
    assert limit_problems(before, over) == ["queue top gpu: allocated grew 0.75 -> 1.75 over limit 1"]
    assert limit_problems(over, over) == []  # already over and not growing: not the engine's doing


def test_fair_share_checker_flags_shares_above_request_or_limit():
    snap = loads_snapshot(CLUSTER)
    stats = {q: {r: {"requested": 1.0} for r in ("gpu", "cpu", "memory")} for q in ("top", "leaf")}
    fair = {q: {"gpu": 0.5, "cpu": 0.0, "memory": 0.0} for q in ("top", "leaf")}
    ok = SimpleNamespace(fair_share=fair, queue_stats=stats)
    assert fair_share_problems(snap, ok) == []
    fair["leaf"]["gpu"] = 1.5                     # within KAI's last-phase overshoot of at most 1
    fair["top"]["gpu"] = 1.25
    assert fair_share_problems(snap, ok) == ["queue top gpu: fair share 1.25 above limit 1"]
    fair["leaf"]["gpu"] = 2.5
    assert fair_share_problems(snap, ok) == ["queue top gpu: fair share 1.25 above limit 1",
                                             "queue leaf gpu: fair share 2.5 more than 1 above requested 1"]
