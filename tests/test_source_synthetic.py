"""Synthetic scenarios: reproducible, valid, consistent placement, and a busy realistic cluster at t=0."""

from collections import defaultdict

import pytest

from scheduler.model import memory_to_fraction
from scheduler.snapshot_io import snapshot_to_dict, validate
from scheduler.sources.synthetic import SCENARIO_TIME, generate_scenario, make_queues, pool_sizes


@pytest.fixture(scope="module")
def scenario64():
    return generate_scenario(seed=3, nodes=64)


def _share(task, node):
    if task.gpu_memory_mib is not None:
        return memory_to_fraction(task.gpu_memory_mib, node.gpu_memory_mib)
    return task.gpu


def test_same_seed_same_scenario_and_different_seed_differs():
    a, b = generate_scenario(seed=7, nodes=16), generate_scenario(seed=7, nodes=16)
    assert snapshot_to_dict(a.snapshot) == snapshot_to_dict(b.snapshot)
    assert [(x.offset_s, x.job.name, x.duration_s) for x in a.arrivals] == \
        [(x.offset_s, x.job.name, x.duration_s) for x in b.arrivals]
    assert snapshot_to_dict(generate_scenario(seed=8, nodes=16).snapshot) != snapshot_to_dict(a.snapshot)


def test_pool_sizes_by_largest_remainder():
    # 64 nodes: minimums h100/l4/cpu = 1 each, the other 61 by weight (24.6, 12.8, 6.4, 8.6, 5.12, 3.48)
    assert pool_sizes(64) == {"h100": 26, "a100-80": 13, "a100-40": 6, "l4": 10, "t4": 5, "cpu": 4}
    for n in (1, 2, 3, 8, 33, 1000, 1500):
        assert sum(pool_sizes(n).values()) == n


def test_queue_quotas_split_hierarchically():
    # 64 nodes: 26×8 + 13×8 + 6×8 H100/A100 + 10×4 L4 + 5×4 T4 = 420 GPUs; 95% = 399 across departments
    q = {x.name: x for x in make_queues(420)}
    assert q["research"].gpu.quota == 199 and q["llm"].gpu.quota == 129 and q["vision"].gpu.quota == 69
    assert q["data-science"].gpu.quota == 139 and q["analytics"].gpu.quota == 55 and q["inference"].gpu.quota == 83
    assert q["infrastructure"].gpu.quota == 39 and q["infrastructure"].gpu.limit == 78
    assert q["analytics"].gpu.limit == 83  # ceil(55 × 1.5)
    assert q["llm"].parent == "research" and q["inference"].parent == "data-science"
    assert q["llm"].preempt_min_runtime_s == 600 and q["llm"].reclaim_min_runtime_s == 1800
    assert q["inference"].cpu.quota == -1  # non-preemptible CPU requests are never blocked by a 0 quota


@pytest.mark.parametrize("seed,nodes", [(0, 8), (1, 64), (2, 300)])
def test_valid_and_never_over_allocated(seed, nodes):
    snap = generate_scenario(seed=seed, nodes=nodes).snapshot
    validate(snap)
    node_map = snap.node_map()
    shares = defaultdict(float)              # (node, gpu index) -> share
    whole = defaultdict(int)                 # (node, gpu index) -> whole-GPU tasks on it
    groups = defaultdict(set)                # (node, gpu index) -> fractional groups on it
    index_of_group = {}
    host = defaultdict(lambda: [0.0, 0.0, 0])
    for _, t in snap.iter_tasks():
        if t.node is None:
            assert t.status == "pending" and not t.gpu_indices and not t.gpu_groups
            continue
        node = node_map[t.node]
        h = host[t.node]
        h[0] += t.cpu_millis
        h[1] += t.memory_bytes
        h[2] += 1
        if t.is_fractional:
            assert len(t.gpu_groups) == len(t.gpu_indices) == 1
            key = (t.node, t.gpu_indices[0])
            shares[key] += _share(t, node)
            groups[key].add(t.gpu_groups[0])
            assert index_of_group.setdefault((t.node, t.gpu_groups[0]), t.gpu_indices[0]) == t.gpu_indices[0]
        elif t.gpu:
            assert len(t.gpu_indices) == t.gpu == len(set(t.gpu_indices))
            for i in t.gpu_indices:
                whole[(t.node, i)] += 1
    for key, n in whole.items():
        assert n == 1 and key not in shares, f"GPU {key} held twice"
        assert 0 <= key[1] < node_map[key[0]].gpus
    for key, s in shares.items():
        assert s <= 1 + 1e-9 and len(groups[key]) == 1, f"GPU {key} over-shared: {s}"
    for name, (cpu, mem, pods) in host.items():
        n = node_map[name]
        assert cpu <= n.cpu_millis and mem <= n.memory_bytes and pods <= n.pods


def test_busy_cluster_at_t0(scenario64):
    snap = scenario64.snapshot
    nodes = snap.node_map()
    queues = snap.queue_map()
    total = sum(n.gpus for n in snap.nodes)
    alloc = defaultdict(float)
    nonpreemptible = defaultdict(float)
    pending = defaultdict(int)
    for job in snap.jobs:
        placed = [t for t in job.tasks if t.node]
        if not placed:
            pending[job.queue] += 1
        for t in placed:
            g = t.gpus_on(nodes[t.node].gpu_memory_mib)
            alloc[job.queue] += g
            if not job.is_preemptible:
                nonpreemptible[job.queue] += g
    assert 0.70 <= sum(alloc.values()) / total <= 0.90
    assert alloc["llm"] > queues["llm"].gpu.quota                        # borrowing
    assert alloc["vision"] < queues["vision"].gpu.quota and pending["vision"] >= 1  # starved, waiting
    assert sum(pending.values()) >= 3
    for q, g in nonpreemptible.items():                                  # KAI keeps these within quota
        assert g <= queues[q].gpu.quota


def test_workload_mix_and_real_usage(scenario64):
    snap = scenario64.snapshot
    nodes = snap.node_map()
    gangs = [j for j in snap.jobs if len(j.tasks) >= 2 and all(t.gpu == 8 for t in j.tasks)
             and all(t.node and nodes[t.node].gpu_model in ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")
                     for t in j.tasks)]
    assert gangs and all(j.min_available == len(j.tasks) for j in gangs)
    inference = [j for j in snap.jobs if j.queue == "inference" and j.priority == 125]
    assert inference and all(not j.is_preemptible for j in inference)
    fractional = [t for j in inference for t in j.tasks if t.is_fractional]
    assert any(t.gpu_memory_mib is not None for t in fractional)
    assert all(0.2 <= t.gpu <= 0.7 for t in fractional if t.gpu_memory_mib is None)
    notebooks = [j for j in snap.jobs if j.priority == 100]
    assert notebooks and all(t.is_fractional and not j.is_preemptible for j in notebooks for t in j.tasks)
    assert any(j.priority == 50 for j in snap.jobs)
    running = [(t, nodes[t.node]) for _, t in snap.iter_tasks() if t.node and t.is_gpu]
    assert all(t.usage is not None and 0 <= t.usage.gpu_util <= 1 for t, _ in running)
    over_share = [t for t, n in running if t.is_fractional and t.usage.gpu_memory_mib > _share(t, n) * n.gpu_memory_mib]
    idle = [t for t, _ in running if t.usage.gpu_util == 0]
    assert over_share and idle
    cpu_only = [t for _, t in snap.iter_tasks() if not t.is_gpu]
    assert cpu_only and all(t.usage is None for t in cpu_only)


def test_running_jobs_have_start_times_and_durations(scenario64):
    for job in scenario64.snapshot.jobs:
        if any(t.node for t in job.tasks):
            assert job.last_start_time <= SCENARIO_TIME
            assert job.duration_s > SCENARIO_TIME - job.last_start_time
        else:
            assert job.creation_time < SCENARIO_TIME and job.duration_s > 0


def test_arrivals(scenario64):
    arrivals = scenario64.arrivals
    assert len(arrivals) > 50  # 0.75 per node-hour × 64 nodes × 4 h ≈ 192 expected
    offsets = [a.offset_s for a in arrivals]
    assert offsets == sorted(offsets) and 0 <= offsets[0] and offsets[-1] <= 4 * 3600
    names = {j.key for j in scenario64.snapshot.jobs}
    for a in arrivals:
        assert a.job.key not in names
        names.add(a.job.key)
        assert all(t.status == "pending" and t.node is None for t in a.job.tasks)
        assert a.job.creation_time == SCENARIO_TIME + a.offset_s and a.duration_s == a.job.duration_s > 0


def test_arrivals_offer_each_queue_its_share_and_less_than_the_cluster():
    """Balanced demo: over a long horizon each leaf queue's arrivals offer about its OFFERED_LOAD share of the
    GPUs (GPU-seconds arriving per second), and all of them together less than the cluster (the old single rate
    offered several times the cluster, so the backlog grew without bound)."""
    from scheduler.sources.synthetic import OFFERED_LOAD

    hours = 400
    sc = generate_scenario(seed=5, nodes=16, horizon_s=hours * 3600.0)
    total_gpus = sum(n.gpus for n in sc.snapshot.nodes)
    mem = min(n.gpu_memory_mib for n in sc.snapshot.nodes if n.gpus)
    offered: dict[str, float] = {}
    for a in sc.arrivals:
        gpus = sum(t.gpus_on(mem) for t in a.job.tasks)
        offered[a.job.queue] = offered.get(a.job.queue, 0.0) + gpus * a.duration_s / (hours * 3600.0) / total_gpus
    for queue, share in OFFERED_LOAD.items():
        assert 0.5 * share <= offered[queue] <= 1.6 * share, (queue, offered[queue], share)
    assert sum(offered.values()) < 0.95


def test_jobs_that_start_later_get_real_usage():
    from scheduler.sources.synthetic import usage_for

    sc = generate_scenario(seed=5, nodes=16)
    node = next(n for n in sc.snapshot.nodes if n.gpus)
    job = next(a.job for a in sc.arrivals if a.job.tasks[0].is_gpu)
    task = job.tasks[0]
    u = usage_for(job, task, node)
    assert u is not None and u == usage_for(job, task, node)          # the same pod, the same usage
    renamed = type(job)(**{**vars(job), "name": job.name + "-r3"})      # a refill batch's copy: same kind
    assert usage_for(renamed, task, node) is not None
