"""Each placement policy's choice on tiny crafted clusters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.quality.fragmentation import FragIndex, TargetWorkload
from scheduler.quality.policies import POLICIES, Context, PodRequest
from scheduler.quality.state import Cluster, State

WHOLE = TargetWorkload(cpu=np.array([1000]), k=np.array([1]), d=np.array([1000]), spec=[""], p=np.array([1.0]))


def setup(gpus, used=None, cpu=64000, names=None, workload=WHOLE, rank=None):
    """Nodes with ``gpus[i]`` GPUs each; ``used[i]`` = list of milli already taken per GPU."""
    names = names or [f"n{i}" for i in range(len(gpus))]
    c = Cluster.from_frame(pd.DataFrame({"sn": names, "cpu_milli": cpu, "memory_mib": 10**6, "gpu": gpus,
                                         "model": "A"}))
    st = State(c)
    for i, u in enumerate(used or []):
        st.gpu_left[i, : len(u)] -= np.array(u, dtype=np.int64)
    fi = FragIndex(c, workload, st.cpu_left, st.gpu_left)
    rank = np.arange(c.n) if rank is None else np.array(rank)
    return Context(state=st, frag=fi, rng=np.random.default_rng(0), rank=rank)


def choose(ctx, policy, pod):
    nodes = ctx.state.feasible(pod.cpu, pod.mem, pod.k, pod.d, np.array([True]))
    return POLICIES[policy](ctx, pod, nodes)


SHARED = PodRequest(cpu=1000, mem=1, k=1, d=300)
ONE = PodRequest(cpu=1000, mem=1, k=1, d=1000)


def test_registry_names():
    assert set(POLICIES) >= {"random", "dotproduct", "gpuclustering", "gpupacking", "bestfit", "fgd",
                             "kai-binpack", "kai-spread", "kaidash"}


def test_bestfit_takes_least_leftover():
    ctx = setup([8, 2, 4], used=[[], [1000], []])
    assert choose(ctx, "bestfit", ONE) == (1, [1])


def test_dotproduct_prefers_small_free_vector():
    ctx = setup([8, 4, 2], cpu=[64000, 96000, 8000])
    assert choose(ctx, "dotproduct", ONE)[0] == 2


def test_gpupacking_prefers_tightest_partly_used_gpu():
    ctx = setup([2, 2, 2], used=[[500], [600], []])
    # node 1's GPU0 has 400 free (tightest fit for 300m) -> case 1, highest score
    assert choose(ctx, "gpupacking", SHARED) == (1, [0])
    # a whole GPU: used nodes beat idle nodes
    assert choose(ctx, "gpupacking", ONE)[0] in (0, 1)


def test_gpuclustering_prefers_nodes_with_same_kind():
    ctx = setup([4, 4, 4])
    ctx.state.place(1, [0], 1000, 1, 1, 300)       # node 1 hosts a shared pod
    ctx.state.place(2, [0], 1000, 1, 1, 1000)      # node 2 hosts a whole-GPU pod
    assert choose(ctx, "gpuclustering", SHARED)[0] == 1
    assert choose(ctx, "gpuclustering", ONE)[0] == 2
    assert choose(ctx, "gpuclustering", PodRequest(1000, 1, 2, 1000))[0] == 0   # idle node beats other kinds


def test_fgd_fills_the_leftover_that_no_typical_task_can_use():
    # Typical task: one whole GPU. Node 0: idle GPUs; node 1: a GPU with exactly 300 left (a fragment).
    ctx = setup([2, 2], used=[[], [700]])
    assert choose(ctx, "fgd", SHARED) == (1, [0])      # ΔF = -300 on node 1, +700 on node 0
    assert choose(ctx, "kaidash", SHARED) == (1, [0])


def test_fgd_ties_follow_the_replay_node_rank():
    ctx = setup([2, 2, 2], rank=[2, 0, 1])
    assert choose(ctx, "fgd", ONE)[0] == 1


def test_random_is_feasible_and_seeded():
    picks = {choose(setup([1, 1, 1], used=[[1000], [], [1000]]), "random", ONE)[0] for _ in range(5)}
    assert picks == {1}
    a = [choose(setup([2] * 6), "random", SHARED) for _ in range(3)]
    assert a[0] == a[1] == a[2]


def test_kai_binpack_shared_gpu_first_then_fewest_idle():
    ctx = setup([8, 2, 2], used=[[500], [], [1000]])
    # fraction: node 0 has a shared GPU with room (gpusharingorder 1e4) although it has the most idle GPUs
    assert choose(ctx, "kai-binpack", SHARED) == (0, [0])
    # whole GPU: fewest idle GPUs wins (node 2 has 1 idle)
    assert choose(ctx, "kai-binpack", ONE) == (2, [1])


def test_kai_binpack_ties_by_node_name_and_gpu_pack_order():
    ctx = setup([4, 4], used=[[200, 600], [200, 600]], names=["b", "a"])
    node, gpus = choose(ctx, "kai-binpack", SHARED)
    assert ctx.state.cluster.names[node] == "a"
    assert gpus == [1]          # most-used shared GPU the fraction fits on (600 used, 400 free)


def test_kai_spread_most_free_fraction_and_idle_gpu_first():
    ctx = setup([8, 2], used=[[1000, 1000], [300]])
    node, gpus = choose(ctx, "kai-spread", SHARED)
    assert node == 0 and gpus == [2]          # 6/8 idle > 1/2 idle; an idle GPU, not the shared one
    ctx = setup([2], used=[[300, 600]])
    assert choose(ctx, "kai-spread", SHARED) == (0, [0])    # no idle GPU: the least-used shared one


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_returns_a_feasible_placement(policy):
    ctx = setup([1, 2, 4, 8], used=[[1000], [900, 100], [], [1000] * 7])
    for pod in (SHARED, ONE, PodRequest(500, 1, 0, 0), PodRequest(1000, 1, 4, 1000), ONE, ONE):
        if not len(ctx.state.feasible(pod.cpu, pod.mem, pod.k, pod.d, np.array([True]))):
            continue
        node, gpus = choose(ctx, policy, pod)
        assert len(gpus) == pod.k
        assert all(ctx.state.gpu_left[node, g] >= pod.d for g in gpus)
        ctx.state.place(node, gpus, pod.cpu, pod.mem, pod.k, pod.d)
        ctx.frag.update(node, ctx.state.cpu_left, ctx.state.gpu_left)


def test_engine_adapter_scores_like_the_policy():
    from scheduler.quality.fragaware import node_scores, workload_from_requests

    w = workload_from_requests([1000, 1000, 2000], [1, 1, 0.3])
    # node 0: two idle GPUs; node 1: one GPU with 300 free (a leftover only a 0.3 request fills)
    score, device = node_scores(np.array([[1.0, 1.0], [0.3, 1.0]]), np.array([8000, 8000]), ["A", "A"],
                                1000, 0.3, w)
    assert score[1] > score[0] and device[1] == 0
    assert 0 <= score.min() and score.max() <= 9
    score, _ = node_scores(np.array([[1.0, 1.0], [0.3, 1.0]]), np.array([8000, 500]), ["A", "A"], 1000, 1, w)
    assert score[1] == -1 and score[0] >= 0         # node 1 lacks CPU


def test_fgd_never_picks_a_gpu_without_room_when_all_scores_bottom_out():
    # A large typical task makes every placement raise the fragment by far more than 4.6 GPUs, so every
    # fitting GPU scores 0 — the GPU must still be one with room (GPU 0 has none).
    # Node: GPU 0 has 300 free, 7 idle GPUs; typical task: 7 whole GPUs. Any 470m placement breaks it (ΔF ≈ +6.5 GPUs).
    big = TargetWorkload(cpu=np.array([1000]), k=np.array([7]), d=np.array([1000]), spec=[""], p=np.array([1.0]))
    ctx = setup([8], used=[[700]], workload=big)
    node, gpus = choose(ctx, "fgd", PodRequest(1000, 1, 1, 470))
    assert gpus != [0] and ctx.state.gpu_left[node, gpus[0]] >= 470
