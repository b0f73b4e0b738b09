"""Node + GPU scoring policies for placement-quality replays, registered by name in :data:`POLICIES`.

Every policy is a function ``(ctx, pod, nodes) -> (node, gpu_indices)`` where ``nodes`` are the feasible
node indices (non-empty), ``pod`` a :class:`PodRequest` and ``ctx`` a :class:`Context` holding the live
:class:`~scheduler.quality.state.State`, the :class:`~scheduler.quality.fragmentation.FragIndex` and an RNG.

The FGD-paper baselines follow the authors' simulator (kubernetes-scheduler-simulator, ``pkg/simulator/
plugin/*_score.go``) including its integer scores (0..100) and the K8s framework's uniformly random choice
among equal top scores, because both change the results measurably. KAI's policies follow
``kai-semantics.md`` §e.4/§e.5 (ties by node name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from scheduler.quality.fragmentation import FragIndex
from scheduler.quality.state import MILLI, State

MAX_SPEC_CPU = 128_000   # simulator's normalisation constants (largest node in the trace)
MAX_SPEC_GPU = 8_000


@dataclass(frozen=True)
class PodRequest:
    cpu: int
    mem: int
    k: int       # GPUs
    d: int       # milli per GPU

    @property
    def shared(self) -> bool:
        return self.k == 1 and 0 < self.d < MILLI

    @property
    def gpu_milli(self) -> int:
        return self.k * self.d


@dataclass
class Context:
    """What a policy may look at: live state, fragmentation cache, RNG, and a per-replay node order.

    ``rank`` is a random permutation of the nodes drawn once per replay: the simulator prefixes node names
    with it and its scheduler breaks score ties by smallest name, so ties consistently favour the same nodes.
    """

    state: State
    frag: FragIndex
    rng: np.random.Generator
    rank: np.ndarray
    waste: np.ndarray | None = None   # residual-waste table W[0..1000] (kaidash policy), see residual.py


Policy = Callable[[Context, PodRequest, np.ndarray], tuple[int, list[int]]]


# ---------------------------------------------------------------- helpers

def argmax_ranked(scores: np.ndarray, rank: np.ndarray) -> int:
    """Index of a maximum; ties go to the lowest ``rank`` (the simulator's patched ``selectHost``)."""
    top = np.flatnonzero(scores == scores.max())
    return int(top[0] if len(top) == 1 else top[np.argmin(rank[top])])


def argmax_first(scores: np.ndarray) -> int:
    """Index of the first maximum (nodes are sorted by name: KAI's tie rule)."""
    return int(np.argmax(scores))


def gpus_first_idle(row: np.ndarray, k: int) -> list[int]:
    """The first ``k`` idle GPUs by index (simulator's ``AllocateExclusiveGpuId``)."""
    return np.flatnonzero(row == MILLI)[:k].tolist()


def gpus_best_fit(row: np.ndarray, pod: PodRequest) -> list[int]:
    """Shared pod: the GPU with the least free milli that still fits (first by index); else idle GPUs."""
    if not pod.shared:
        return gpus_first_idle(row, pod.k)
    fit = np.where(row >= pod.d, row, MILLI + 1)
    return [int(np.argmin(fit))]


def _gpus(ctx: Context, node: int, pod: PodRequest, chooser=gpus_best_fit) -> list[int]:
    return chooser(ctx.state.gpu_left[node], pod) if pod.k > 0 else []


# ---------------------------------------------------------------- FGD-paper baselines

def random_policy(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Random feasible node; random fitting GPU for a shared pod."""
    node = int(nodes[ctx.rng.integers(len(nodes))])
    if pod.shared:
        fit = np.flatnonzero(ctx.state.gpu_left[node] >= pod.d)
        return node, [int(fit[ctx.rng.integers(len(fit))])]
    return node, _gpus(ctx, node, pod)


def dot_product(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Tetris alignment: lowest (node free · pod request), max-spec normalised over (CPU, total GPU)."""
    st = ctx.state
    dot = (st.cpu_left[nodes] / MAX_SPEC_CPU) * (pod.cpu / MAX_SPEC_CPU) \
        + (st.gpu_free[nodes] / MAX_SPEC_GPU) * (pod.gpu_milli / MAX_SPEC_GPU)
    score = (100 * (1 - dot / 2)).astype(np.int64)
    node = int(nodes[argmax_ranked(score, ctx.rank[nodes])])
    return node, _gpus(ctx, node, pod)


def gpu_clustering(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Prefer nodes whose GPU pods all have this pod's kind, then mixed nodes, idle nodes, other kinds."""
    st = ctx.state
    if pod.k == 0:
        score = np.zeros(len(nodes), np.int64)
    else:
        tags = st.tags[nodes]
        kinds = (tags > 0).sum(1)
        same = tags[:, 0 if pod.shared else pod.k] > 0
        band = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        score = 25 * (MAX_SPEC_GPU - st.gpu_free[nodes]) // MAX_SPEC_GPU + band
    node = int(nodes[argmax_ranked(score, ctx.rank[nodes])])
    return node, _gpus(ctx, node, pod)


def gpu_packing(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Prefer partly used GPUs (least left), then idle GPUs on used nodes, then idle nodes (fewer GPUs)."""
    st = ctx.state
    if pod.k == 0:
        score = np.zeros(len(nodes), np.int64)
    else:
        g = st.gpu_left[nodes]
        full = (g == MILLI).sum(1)
        all_idle = full == st.cluster.gpu_count[nodes]
        if pod.shared:
            fit = np.where(g >= pod.d, g, MILLI + 1).min(1)          # tightest fitting GPU
            used_score = np.where(fit == MILLI, 49, np.maximum(100 - (fit * 100 // MILLI) // 10, 50))
        else:
            used_score = np.maximum(50 - pod.k, 33) * np.ones(len(nodes), np.int64)
        score = np.where(all_idle, np.maximum(33 - full, full), used_score)
    node = int(nodes[argmax_ranked(score, ctx.rank[nodes])])
    return node, _gpus(ctx, node, pod)


def best_fit(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Least weighted leftover after placement: 0.5 CPU + 0.5 GPU, max-spec normalised."""
    st = ctx.state
    left = 0.5 * (st.cpu_left[nodes] - pod.cpu) / MAX_SPEC_CPU + 0.5 * (st.gpu_free[nodes] - pod.gpu_milli) / MAX_SPEC_GPU
    score = ((1 - left) * 100).astype(np.int64)
    node = int(nodes[argmax_ranked(score, ctx.rank[nodes])])
    return node, _gpus(ctx, node, pod)


def _fgd_deltas(ctx: Context, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
    """ΔF per node (shape (F,)) or per node × GPU (shape (F, G)) for a shared pod."""
    st, fi = ctx.state, ctx.frag
    cpu_after = st.cpu_left[nodes] - pod.cpu
    if pod.shared:
        return fi.delta_shared(nodes, cpu_after, st.gpu_left, pod.d)
    return fi.delta_whole(nodes, cpu_after, pod.k)


def fgd_levels(delta: np.ndarray) -> np.ndarray:
    """FGD's integer score 0..100 of each ΔF, ``int(sigmoid(−ΔF/1000)·100)``; −1 where ΔF is +inf (no room)."""
    with np.errstate(over="ignore"):
        level = (100.0 / (1.0 + np.exp(delta / 1000.0))).astype(np.int64)
    return np.where(np.isfinite(delta), level, -1)


def fgd(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """Fragmentation gradient descent: least growth of fragmentation, simulator scoring.

    Score = :func:`fgd_levels`; a shared pod takes the first GPU with the node's best score.
    """
    score = fgd_levels(_fgd_deltas(ctx, pod, nodes))       # GPUs without room score −1: no candidates
    if pod.shared:
        node_score = score.max(1)
        i = argmax_ranked(node_score, ctx.rank[nodes])
        return int(nodes[i]), [int(np.argmax(score[i]))]
    i = argmax_ranked(score, ctx.rank[nodes])
    node = int(nodes[i])
    return node, gpus_first_idle(ctx.state.gpu_left[node], pod.k)


# ---------------------------------------------------------------- KAI

def _kai_gpu_pack(row: np.ndarray, pod: PodRequest) -> list[int]:
    """KAI gpupack: the most-used shared GPU the fraction fits on; a new (idle) GPU last."""
    if not pod.shared:
        return gpus_first_idle(row, pod.k)
    shared_fit = (row < MILLI) & (row >= pod.d)
    if shared_fit.any():
        return [int(np.argmin(np.where(shared_fit, row, MILLI + 1)))]
    return gpus_first_idle(row, 1)


def _kai_gpu_spread(row: np.ndarray, pod: PodRequest) -> list[int]:
    """KAI gpuspread: an idle GPU first; else the least-used shared GPU that fits."""
    if not pod.shared:
        return gpus_first_idle(row, pod.k)
    if (row == MILLI).any():
        return gpus_first_idle(row, 1)
    return [int(np.argmax(np.where(row >= pod.d, row, -1)))]


def kai_binpack(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """KAI binpack: fewest free resources (idle GPUs, CPU for CPU-only pods), shared GPUs first.

    Score = 1e4·[a shared GPU on the node fits the fraction] (gpusharingorder) +
    9·(1 − (free − min)/(max − min)) over the feasible nodes (nodeplacement); ties by node name.
    """
    st = ctx.state
    free = (st.full_count[nodes] if pod.k > 0 else st.cpu_left[nodes]).astype(float)
    lo, hi = free.min(), free.max()
    score = np.full(len(nodes), 9.0) if hi == lo else 9.0 * (1.0 - (free - lo) / (hi - lo))
    if pod.shared:
        g = st.gpu_left[nodes]
        score = score + 1e4 * ((g < MILLI) & (g >= pod.d)).any(1)
    node = int(nodes[argmax_first(score)])
    return node, _gpus(ctx, node, pod, _kai_gpu_pack)


def kai_spread(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """KAI spread: most free fraction (idle GPUs / GPUs, or free CPU / CPU); idle GPUs first; ties by name."""
    st = ctx.state
    c = st.cluster
    if pod.k > 0:
        score = st.full_count[nodes] / np.maximum(c.gpu_count[nodes], 1)
    else:
        score = st.cpu_left[nodes] / c.cpu_cap[nodes]
    node = int(nodes[argmax_first(score)])
    return node, _gpus(ctx, node, pod, _kai_gpu_spread)


# ---------------------------------------------------------------- kaidash

KAIDASH_SLACK = 6
"""FGD score levels (of 100) a shared pod's placement may give up to strand less GPU (chosen on seeds 1..4)."""


def pairing_gain(waste: np.ndarray, free: np.ndarray, d: int, level: np.ndarray) -> np.ndarray:
    """Residual-waste gain ``W[free − d] − W[free]`` of taking ``d`` milli from each GPU (``free``: (F, G)
    milli), +inf where the GPU has no room or its FGD ``level`` is more than ``KAIDASH_SLACK`` below the best."""
    near = (level >= 0) & (level >= level.max() - KAIDASH_SLACK)
    return np.where(near, waste[np.clip(free - d, 0, MILLI)] - waste[free], np.inf)


def kaidash(ctx: Context, pod: PodRequest, nodes: np.ndarray):
    """kaidash placement: FGD's node choice, plus pairing of fractions by their expected stranded GPU.

    Whole-GPU and CPU-only pods are placed exactly as :func:`fgd` places them (it keeps whole nodes free for
    multi-GPU pods and watches CPU). A fraction may go to any (node, GPU) whose FGD score is within
    :data:`KAIDASH_SLACK` levels of the best; among those it takes the GPU whose residual-waste value
    ``W[free after] − W[free before]`` (:mod:`scheduler.quality.residual`, learned from the workload's shapes;
    an idle GPU counts 0) is least, then the higher FGD score, then the replay's node order. So a 0.32 pod
    opens a fresh GPU, where a 0.65 pod will join it (30 m left), instead of filling a 0.47 pod's GPU to 210 m
    that only rare small pods could use.
    """
    if not pod.shared or ctx.waste is None:
        return fgd(ctx, pod, nodes)
    level = fgd_levels(_fgd_deltas(ctx, pod, nodes))                    # (F, G), −1 where no room
    gain = pairing_gain(ctx.waste, ctx.state.gpu_left[nodes], pod.d, level)
    rows, cols = np.nonzero(gain <= gain.min() + 1e-9)
    cand = nodes[rows]
    pick = np.lexsort((ctx.rank[cand], -level[rows, cols]))[0]
    return int(cand[pick]), [int(cols[pick])]


kaidash.uses_residual_waste = True


POLICIES: dict[str, Policy] = {
    "random": random_policy,
    "dotproduct": dot_product,
    "gpuclustering": gpu_clustering,
    "gpupacking": gpu_packing,
    "bestfit": best_fit,
    "fgd": fgd,
    "kai-binpack": kai_binpack,
    "kai-spread": kai_spread,
    "kaidash": kaidash,
}
"""Policies by name. ``PUBLISHED_NAMES`` maps the FGD-paper baselines to the authors' result labels."""

PUBLISHED_NAMES = {
    "random": "01-Random", "dotproduct": "02-DotProd", "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD",
}
