"""The synthetic demo's topology, MIG and DRA pools (``generate_scenario(extensions=True)``, ``--demo-extensions``)."""

from collections import Counter

import pytest

from dashboard.options import SourceOptions
from scheduler.engine import run_session
from scheduler.model import mig_gpu_total
from scheduler.snapshot_io import cross_check_problems, snapshot_to_dict, validate
from scheduler.sources.synthetic import generate_scenario, make_queues
from scheduler.sources.synthetic_extensions import RACK


@pytest.fixture(scope="module")
def extended():
    return generate_scenario(seed=7, nodes=64, extensions=True).snapshot


def test_off_by_default_and_plain_scenario_unchanged():
    plain = generate_scenario(seed=7, nodes=16).snapshot
    assert not plain.topologies and not any(n.mig or n.dra_gpus for n in plain.nodes)
    assert snapshot_to_dict(plain)["version"] == 1


def test_extended_snapshot_is_valid_version_1_2(extended):
    validate(extended)
    assert cross_check_problems(extended) == []
    assert snapshot_to_dict(extended)["version"] == 1.2
    pools = Counter(n.pool for n in extended.nodes)
    assert pools["h100-nv"] == 16 and pools["a100-mig"] == 4 and pools["gb200-dra"] == 2
    # quotas cover the extension GPUs too (168 GPU-equivalents more than the plain 64-node cluster's 420)
    total = sum(n.gpus for n in extended.nodes)
    assert total == 420 + 168
    assert [q.gpu.quota for q in extended.queues] == [q.gpu.quota for q in make_queues(total)]


def test_topology_pool_racks_and_rack_gangs(extended):
    (topo,) = extended.topologies
    assert [lv.alias for lv in topo.levels] == ["zone", "block", "rack", "hostname"]
    racks = Counter(n.labels[RACK] for n in extended.nodes if n.pool == "h100-nv")
    assert len(racks) == 8 and set(racks.values()) == {2}
    free = Counter()
    used = Counter()
    nodes = extended.node_map()
    for job, t in extended.iter_tasks():
        if t.node and nodes[t.node].pool == "h100-nv":
            used[nodes[t.node].labels[RACK]] += t.gpu
            assert job.topology.required_level == "rack"
    for rack, n in racks.items():
        free[rack] = 8 * n - used[rack]
    # a pending 16-GPU rack gang: enough free GPUs in the pool, none of the racks has 16
    assert sum(free.values()) >= 16 and max(free.values()) == 8


def test_rack_gang_waits_with_the_topology_reason_and_small_gang_fits(extended):
    result = run_session(extended)
    big, small = result.jobs["llm/llm-train-nv-10"], result.jobs["llm/llm-train-nv-11"]
    assert big.status == "pending" and "network.example.com/rack" in big.message
    assert small.status in ("binding", "pipelined")
    racks = {extended.node_map()[result.tasks[t.name].node].labels[RACK]
             for t in next(j for j in extended.jobs if j.name == "llm-train-nv-11").tasks}
    assert len(racks) == 1


def test_mig_pool_in_gpu_equivalents_and_instances_held(extended):
    mig_nodes = [n for n in extended.nodes if n.mig]
    assert len(mig_nodes) == 4 and all(mig_gpu_total(n.mig) <= n.gpus for n in mig_nodes)
    held = Counter()
    for _, t in extended.iter_tasks():
        if t.mig and t.node:
            (profile, count), = t.mig.items()
            held[(t.node, profile)] += count
            assert len(t.gpu_indices) == t.gpu == mig_gpu_total(t.mig)
    for (node, profile), count in held.items():
        assert count <= extended.node_map()[node].mig[profile]
    pending = [t for _, t in extended.iter_tasks() if t.mig and not t.node]
    assert [t.mig for t in pending] == [{"3g.40gb": 1}]
    assert run_session(extended).jobs["inference/inference-serve-mig-11"].status == "pending"


def test_dra_pods_shared_claim_and_missing_claim(extended):
    dra = [(j, t) for j, t in extended.iter_tasks() if t.is_dra]
    assert len(dra) == 5
    shared = [t for _, t in dra if t.dra_claims[0].shared]
    assert len(shared) == 2 and len({t.dra_claims[0].name for t in shared}) == 1
    assert all(extended.node_map()[t.node].dra_gpus for _, t in dra if t.node)
    result = run_session(extended)
    assert result.jobs["inference/inference-serve-dra-04"].status == "pending"
    assert "ResourceClaim" in result.jobs["inference/inference-serve-dra-04"].message


def test_demo_extensions_option_from_flag_and_env():
    o = SourceOptions.from_args(["--demo-extensions"])
    assert o.demo_extensions is True and "MIG" in o.label()
    assert SourceOptions.from_env(o.to_env()).demo_extensions is True
    assert SourceOptions.from_args([]).demo_extensions is False
    assert SourceOptions.from_env({"KAIDASH_DEMO_EXTENSIONS": "False"}).demo_extensions is False


def test_the_live_demo_with_extensions_ticks_and_keeps_its_pools():
    from dashboard.loop import LiveLoop

    loop = LiveLoop(SourceOptions(source="sim", nodes=16, seed=3, sim_step_s=600, demo_extensions=True))
    try:
        for _ in range(4):
            tick = loop.step()
        snap = tick.snapshot
        assert [t.name for t in snap.topologies] == ["dc-net"]
        assert {n.pool for n in snap.nodes} >= {"h100-nv", "a100-mig", "gb200-dra"}
        assert any(t.is_dra for _, t in snap.iter_tasks()) and any(t.mig for _, t in snap.iter_tasks())
        assert snap.time > generate_scenario(seed=3, nodes=16).snapshot.time      # it did move on
    finally:
        loop.stop()
