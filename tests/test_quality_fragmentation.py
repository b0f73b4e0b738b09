"""FGD fragmentation measure (anchors-performance.md §2.3): hand-computed cases and the fast path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.quality.fragmentation import FragIndex, TargetWorkload, node_fragmentation, target_workload
from scheduler.quality.state import Cluster


def cluster(rows):
    return Cluster.from_frame(pd.DataFrame(rows, columns=["sn", "cpu_milli", "memory_mib", "gpu", "model"]))


def wl(*shapes):
    """shapes: (cpu, k, d, spec, p)."""
    cpu, k, d, spec, p = zip(*shapes)
    return TargetWorkload(cpu=np.array(cpu), k=np.array(k), d=np.array(d), spec=list(spec), p=np.array(p, float))


# One node, 2 GPUs of type A with 1000 and 300 milli free, 8000 milli CPU free.
# Workload: CPU-only (p .25), 1 GPU x 500m with 4000 CPU (p .5), 2 whole GPUs (p .25).
W = wl((2000, 0, 0, "", 0.25), (4000, 1, 500, "", 0.5), (1000, 2, 1000, "", 0.25))


def frag_both(c, cpu_left, gpu_left, w):
    ref = node_fragmentation(np.array(cpu_left), np.array(gpu_left), c.type_code, c, w)
    fast = FragIndex(c, w, np.array(cpu_left), np.array(gpu_left)).F
    np.testing.assert_allclose(fast, ref)
    return ref


def test_hand_computed_node():
    c = cluster([("a", 16000, 1, 2, "A")])
    # CPU-only: all idle (1300) is fragment; 500m task fits: only the 300m GPU is fragment;
    # 2-GPU task: only one GPU has 1000 free -> all 1300.  .25*1300 + .5*300 + .25*1300 = 800
    assert frag_both(c, [8000], [[1000, 300] + [0] * 6], W)[0] == pytest.approx(800.0)


def test_lack_of_cpu_makes_everything_fragment():
    c = cluster([("a", 16000, 1, 2, "A")])
    # 3000 CPU free: the 500m task (4000 CPU) no longer fits -> 1300; 2-GPU task still lacks GPUs.
    assert frag_both(c, [3000], [[1000, 300] + [0] * 6], W)[0] == pytest.approx(1300.0)


def test_gpu_type_constraint_is_no_access():
    c = cluster([("a", 16000, 1, 2, "A"), ("b", 16000, 1, 2, "B")])
    w = wl((4000, 1, 500, "B", 1.0))
    f = frag_both(c, [8000, 8000], [[1000, 300] + [0] * 6] * 2, w)
    assert f[0] == pytest.approx(1300.0)    # type A not allowed: all idle GPU is fragment
    assert f[1] == pytest.approx(300.0)


def test_whole_gpu_task_counts_partly_used_gpus():
    c = cluster([("a", 64000, 1, 4, "A")])
    w = wl((1000, 1, 1000, "", 1.0))
    # GPUs 1000, 1000, 600, 0: a whole-GPU task fits; the 600m leftover is fragment.
    assert frag_both(c, [1000], [[1000, 1000, 600, 0] + [0] * 4], w)[0] == pytest.approx(600.0)
    # empty node, nothing is fragment; full node, nothing idle
    assert frag_both(c, [1000], [[1000] * 4 + [0] * 4], w)[0] == 0.0
    assert frag_both(c, [1000], [[0] * 8], w)[0] == 0.0


def test_target_workload_cut_and_order():
    pods = pd.DataFrame({
        "cpu_milli": [1000] * 6 + [2000] * 2 + [3000] * 2,
        "num_gpu": [1] * 6 + [0] * 2 + [1] * 2,
        "gpu_milli": [500] * 6 + [0] * 2 + [1000] * 2,
        "gpu_spec": [""] * 10})
    w = target_workload(pods, threshold=0.7)
    # counts 6, 2, 2: cumulative 0.6 < 0.7, 0.8 >= 0.7 -> two shapes; the tie (2 vs 2) goes to the larger shape
    assert list(zip(w.cpu, w.k, w.d)) == [(1000, 1, 500), (3000, 1, 1000)]
    np.testing.assert_allclose(w.p, [0.75, 0.25])
    assert target_workload(pods, threshold=1.0).m == 3


def test_fast_deltas_match_recomputation():
    rng = np.random.default_rng(7)
    rows = [(f"n{i}", 32000, 1, int(g), t) for i, (g, t) in enumerate(zip(rng.choice([1, 2, 4, 8], 40),
                                                                          rng.choice(["A", "B"], 40)))]
    c = cluster(rows)
    w = wl((2000, 0, 0, "", 0.2), (3000, 1, 250, "", 0.2), (6000, 1, 600, "B", 0.2),
           (8000, 1, 1000, "", 0.2), (16000, 2, 1000, "A|B", 0.2))
    gpu = np.where(np.arange(8)[None, :] < c.gpu_count[:, None], rng.choice([0, 100, 400, 700, 1000], (40, 8)), 0)
    cpu = rng.integers(0, 32000, 40)
    fi = FragIndex(c, w, cpu, gpu)
    nodes = np.arange(40)
    base = node_fragmentation(cpu, gpu, c.type_code, c, w)
    shared = fi.delta_shared(nodes, cpu - 3000, gpu, 400)
    whole = fi.delta_whole(nodes, cpu - 3000, 2)
    for n in range(40):
        for i in range(8):
            g = gpu.copy()
            if g[n, i] < 400:
                assert shared[n, i] == np.inf
                continue
            g[n, i] -= 400
            after = node_fragmentation(cpu - 3000, g, c.type_code, c, w)[n]
            assert shared[n, i] == pytest.approx(after - base[n], abs=1e-6)
        idle = np.flatnonzero(gpu[n] == 1000)[:2]
        if len(idle) == 2:
            g = gpu.copy()
            g[n, idle] = 0
            after = node_fragmentation(cpu - 3000, g, c.type_code, c, w)[n]
            assert whole[n] == pytest.approx(after - base[n], abs=1e-6)
    # update after a change keeps the cache equal to the reference
    gpu[3, :] = 0
    cpu[3] = 5
    fi.update(3, cpu, gpu)
    np.testing.assert_allclose(fi.F, node_fragmentation(cpu, gpu, c.type_code, c, w))
