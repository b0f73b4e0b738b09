"""Residual-waste table (``scheduler/quality/residual.py``) and the kaidash policy that uses it.

Expected values are worked from the workloads by hand: which leftovers any shape can fill at all, and which
ones a later pod always fills.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.quality.fragmentation import FragIndex, TargetWorkload
from scheduler.quality.policies import POLICIES, Context, PodRequest
from scheduler.quality.residual import residual_waste, residual_waste_cached
from scheduler.quality.state import Cluster, State


def shapes(*pairs):
    """``(milli per GPU, popularity)`` pairs → a one-GPU workload (1000 = a whole GPU)."""
    d = np.array([p[0] for p in pairs])
    p = np.array([p[1] for p in pairs], float)
    return TargetWorkload(cpu=np.full(len(d), 1000), k=np.ones(len(d), np.int64), d=d, spec=[""] * len(d),
                          p=p / p.sum())


def test_a_leftover_nothing_fits_is_stranded_in_full():
    # Only 0.81 pods: every shared GPU ends with 190 free and no shape fits 190.
    W = residual_waste(shapes((810, 1.0)), n_gpus=50)
    assert W[190] == 190
    assert W[0] == 0 and W[1000] == 0
    assert W[500] == 500            # never seen: taken as fully stranded


def test_halves_always_pair_up():
    # 0.5 pods, 40 GPUs' worth = 80 pods: each second pod closes the first one's GPU.
    W = residual_waste(shapes((500, 1.0)), n_gpus=40)
    assert W[500] == 0


def test_small_pods_rescue_most_leftovers_of_their_partners():
    # 0.81 and 0.19 pods equally popular: a 190 leftover is usually closed by a 0.19 pod (or was opened by
    # one), so far less than the full 190 stays free — unlike the 0.81-only workload above.
    W = residual_waste(shapes((810, 1.0), (190, 1.0)), n_gpus=200)
    assert W[190] < 190 / 4
    assert W[810] < 810 / 4


def test_pairing_values_prefer_the_complement():
    # 0.47 (half the pods), 0.65 and 0.32: 0.32 + 0.47 leaves 210 that no shape fits; 0.32 alone leaves 680
    # that a 0.65 closes to 30.
    W = residual_waste(shapes((470, 2.0), (650, 1.0), (320, 1.0)), n_gpus=300)
    assert W[210] == 210
    assert W[680] < 100
    assert W[210] - W[530] > W[680] - W[1000]      # opening a GPU for the 0.32 is the better move


def test_whole_gpu_only_workload_sees_no_shared_leftovers():
    W = residual_waste(shapes((1000, 1.0)), n_gpus=30)
    assert np.array_equal(W[1:1000], np.arange(1, 1000))


def test_deterministic_cached_and_rejects_empty_cluster():
    wl = shapes((470, 1.0), (320, 1.0))
    assert np.array_equal(residual_waste(wl, 100, seed=3), residual_waste(wl, 100, seed=3))
    cached = residual_waste_cached(wl, 100)
    assert cached is residual_waste_cached(wl, 100) and not cached.flags.writeable
    with pytest.raises(ValueError, match="n_gpus"):
        residual_waste(wl, 0)


def _ctx(used, workload, waste):
    c = Cluster.from_frame(pd.DataFrame({"sn": [f"n{i}" for i in range(len(used))], "cpu_milli": 64000,
                                         "memory_mib": 10**6, "gpu": 2, "model": "A"}))
    st = State(c)
    for i, u in enumerate(used):
        st.gpu_left[i, : len(u)] -= np.array(u, dtype=np.int64)
    fi = FragIndex(c, workload, st.cpu_left, st.gpu_left)
    return Context(state=st, frag=fi, rng=np.random.default_rng(0), rank=np.arange(c.n), waste=waste)


def test_kaidash_opens_a_gpu_for_the_small_partner_where_best_fit_would_strand_210():
    wl = shapes((470, 2.0), (650, 1.0), (320, 1.0))
    W = residual_waste(wl, 300)
    pod = PodRequest(cpu=1000, mem=1, k=1, d=320)
    # node 0: GPU0 holds a 0.47 pod (530 free), GPU1 idle; node 1: both idle.
    ctx = _ctx([[470], []], wl, W)
    nodes = ctx.state.feasible(pod.cpu, pod.mem, pod.k, pod.d, np.array([True]))
    assert POLICIES["bestfit"](ctx, pod, nodes) == (0, [0])        # tightest GPU: 530 → 210 stranded
    node, gpus = POLICIES["kaidash"](ctx, pod, nodes)
    assert ctx.state.gpu_left[node, gpus[0]] == 1000                # a fresh GPU instead


def test_kaidash_without_a_table_is_fgd():
    wl = shapes((470, 2.0), (650, 1.0), (320, 1.0))
    pod = PodRequest(cpu=1000, mem=1, k=1, d=320)
    ctx = _ctx([[470], [650]], wl, None)
    nodes = ctx.state.feasible(pod.cpu, pod.mem, pod.k, pod.d, np.array([True]))
    assert POLICIES["kaidash"](ctx, pod, nodes) == POLICIES["fgd"](ctx, pod, nodes)


def test_engine_scores_agree_with_the_policy_on_random_states():
    """``fragaware.node_scores`` (KAI's max score, ties by node order) picks the policy's node and device."""
    from scheduler.quality.fragaware import node_scores

    wl = shapes((470, 2.0), (650, 1.0), (320, 1.0), (810, 1.0), (1000, 2.0))
    W = residual_waste(wl, 300)
    rng = np.random.default_rng(7)
    fills = np.array([0, 0, 0, 470, 650, 320, 810, 940, 1000])
    for _ in range(25):
        used = [rng.choice(fills, size=2).tolist() for _ in range(6)]
        ctx = _ctx(used, wl, W)
        for d in (320, 470, 650, 1000):
            pod = PodRequest(cpu=1000, mem=1, k=1, d=d)
            nodes = ctx.state.feasible(pod.cpu, pod.mem, pod.k, pod.d, np.array([True]))
            if not len(nodes):
                continue
            want = POLICIES["kaidash"](ctx, pod, nodes)
            st = ctx.state
            score, device = node_scores(st.gpu_left[:, :2] / 1000, st.cpu_left.astype(float), ["A"] * st.cluster.n,
                                        1000, d / 1000, wl, waste=W)
            node = int(np.argmax(score))
            assert node == want[0], (used, d)
            if d < 1000:
                assert int(device[node]) == want[1][0], (used, d)
