"""The simulation job order (scheduler.actions.simulation._SimOrder, a specialised copy of KAI's hierarchical job
queue) against the generic JobsOrderByQueues, on seeded random queue trees, jobs and Allocated changes between
pops, with ties in queue keys (equal quotas, priorities, creation times) and in job resources."""

import random

import numpy as np
import pytest

from scheduler.actions.simulation import PendingJobs, _SimOrder, sim_job_order, sim_job_resources
from scheduler.ordering import JobsOrderByQueues, job_order_key, job_order_key_by_state
from tests._engine_helpers import session_from_yaml


class _Reference(JobsOrderByQueues):
    """The generic order built as _SimOrder builds itself: each leaf's jobs pushed together, leaves in index
    order, best job first; resources per job as given."""

    def __init__(self, session, jobs: list[int], res: dict):
        self._res = res
        super().__init__(session, [])
        by_leaf: dict[int, list[int]] = {}
        for j in jobs:
            by_leaf.setdefault(session.jobs[j].queue, []).append(j)
        for q in sorted(by_leaf):
            for j in sorted(by_leaf[q], key=lambda j: job_order_key(session, j)):
                self.push(j)

    def _job_resources(self, j: int):
        return self._res[j]


def _random_cluster(rng: random.Random) -> str:
    lines = ["nodes:"]
    for n in range(4):
        lines.append(f"  - {{name: n{n}, gpus: 8, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 256Gi}}")
    lines.append("queues:")
    leaves = []

    def add(name: str, parent, depth: int) -> None:
        quota = rng.choice([0, 2, 4, 8, -1])
        up = f"parent: {parent}, " if parent else ""
        lines.append(f"  - {{name: {name}, {up}priority: {rng.choice([100, 100, 200])}, "
                     f"creation_time: {rng.choice([1, 1, 2])}, gpu: {{quota: {quota}}}, cpu: {{quota: -1}}, "
                     f"memory: {{quota: -1}}}}")
        kids = rng.randint(1, 3) if depth < 2 and rng.random() < (0.85 if depth == 0 else 0.3) else 0
        for k in range(kids):
            add(f"{name}x{k}", name, depth + 1)
        if not kids:
            leaves.append(name)

    for k in range(rng.randint(1, 3)):   # top-level queues: a leaf now and then, a third level now and then
        add(f"t{k}", None, 0)
    lines.append("jobs:")
    free = {f"n{n}": list(range(8)) for n in range(4)}
    for k in range(rng.randint(4, 16)):
        q = rng.choice(leaves)
        gpus = rng.choice([1, 1, 2])
        prio = rng.choice([50, 50, 100])
        created = rng.choice([10, 10, 11, 12])
        nodes = [n for n, devs in free.items() if len(devs) >= gpus]
        if (k == 0 or rng.random() < 0.6) and nodes and k != 1:   # job 0 runs, job 1 is pending
            n = rng.choice(nodes)
            devs = [free[n].pop(0) for _ in range(gpus)]
            task = f"{{name: j{k}-0, gpu: {gpus}, status: running, node: {n}, gpu_index: {devs}}}"
        else:
            task = f"{{name: j{k}-0, gpu: {gpus}}}"
        lines.append(f"  - {{name: j{k}, queue: {q}, priority: {prio}, creation_time: {created}, tasks: [{task}]}}")
    return "\n".join(lines) + "\n"


def _pops(order, session, rng_seed: int, chains: bool) -> list:
    """Pop everything, changing the popped job's queue chain's Allocated after some pops (as a placement does)."""
    rng = random.Random(rng_seed)
    out = []
    while True:
        j = order.pop()
        out.append(j)
        if j is None:
            return out
        if chains and rng.random() < 0.7:
            amount = [float(rng.choice([0, 1, 2])), float(rng.choice([0, 1000])), 0.0]
            session.queues.add(session.jobs[j].queue, amount, False, rng.choice([1.0, 1.0, -1.0]))


@pytest.mark.parametrize("seed", range(200))
def test_sim_order_pops_as_the_generic_order(seed):
    rng = random.Random(seed)
    s = session_from_yaml(_random_cluster(rng))
    pending = PendingJobs(s)
    running = [j.index for j in s.jobs if not s.has_pending(j.index)]
    pend = [j.index for j in s.jobs if s.has_pending(j.index)]
    targets = [rng.choice(pend)] + rng.sample(running, rng.randint(1, len(running)))
    known = {j: sim_job_resources(s, j) for j in targets}
    # the generic order holds the targets and every pending job of the trees they are in
    roots = {s.queues.chains[s.jobs[j].queue][-1] for j in targets}
    others = [j for q, lst in pending.by_leaf.items() if pending.root[q] in roots for j in lst if j not in targets]
    res = dict(known)
    res.update({j: pending.resources_of(j) for j in others})
    before = [list(r) for r in s.queues.allocated_rows]
    new = _pops(_SimOrder(s, targets, dict(known), pending), s, seed, chains=True)
    s.queues.allocated_rows[:] = [list(r) for r in before]
    s.queues.version[:] = [v + 1000 for v in s.queues.version]
    ref = _pops(_Reference(s, targets + others, res), s, seed, chains=True)
    assert new == ref
    assert sorted(j for j in new if j is not None) == sorted(targets + others)


def test_sim_job_order_yields_every_target_once_in_queue_order():
    rng = random.Random(5)
    s = session_from_yaml(_random_cluster(rng))
    running = [j.index for j in s.jobs if not s.has_pending(j.index)]
    popped: list = []
    got = list(sim_job_order(s, running, {}, PendingJobs(s), popped))
    assert sorted(got) == sorted(running)
    assert [j for j in popped if j in running] == got[: len([j for j in popped if j in running])]


def test_queue_key_reads_the_rows_the_array_is_written_from():
    s = session_from_yaml(_random_cluster(random.Random(3)))
    qs = s.queues
    qs.add(0, np.array([1.0, 500.0, 2.0**30]), False)
    assert qs.allocated[0].tolist() == qs.allocated_rows[0]


@pytest.mark.parametrize("seed", range(20))
def test_memos_by_task_state_agree_with_fresh_values_across_scenarios(seed):
    """sim_tasks_to_allocate(by_state=True) and job_order_key_by_state keep their values per task-state tuple
    (scenarios evict and roll back, giving each job a new version): they must equal the values computed from
    scratch in every state."""
    from scheduler.actions.simulation import _sim_tasks_to_allocate, sim_tasks_to_allocate
    from scheduler.session import Statement

    rng = random.Random(seed)
    s = session_from_yaml(_random_cluster(rng))
    running = [i for i in range(len(s.status)) if s.status[i] == "running"]

    def check():
        for info in s.jobs:
            j = info.index
            assert sim_tasks_to_allocate(s, j, by_state=True) == _sim_tasks_to_allocate(s, j)
            fresh = (-info.priority, s._elastic_state(j), info.creation, info.job.name, info.key)
            assert job_order_key_by_state(s, j) == fresh
            assert job_order_key(s, j) == fresh

    check()
    for _ in range(6):
        stmt = Statement(s)
        for i in rng.sample(running, rng.randint(1, len(running))):
            stmt.evict(i, "reclaim")
        check()
        pending = [i for i in range(len(s.status)) if s.status[i] == "pending"]
        for i in rng.sample(pending, rng.randint(0, len(pending))):
            stmt.pipeline(i, rng.randrange(s.nodes.n))   # statuses change, the evicted set does not
        check()
        stmt.discard()
        check()
