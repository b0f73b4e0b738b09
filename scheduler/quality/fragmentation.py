"""GPU fragmentation w.r.t. a target workload (FGD, ATC'23; ``anchors-performance.md`` §2.3), vectorised.

For a node with free CPU ``c``, free milli per GPU ``g_i``, type ``t`` and a task shape ``m = (cpu_m, k_m,
d_m, T_m)``, the fragment ``F_n(m)`` is the idle GPU the task could not use:

* all idle GPU ``U = Σ g_i`` if the task is CPU-only, the type is not allowed, ``c < cpu_m`` or fewer than
  ``k_m`` GPUs have ``g_i ≥ d_m``;
* else ``Σ g_i · [g_i < d_m]``.

``F_n(M) = Σ_m p_m F_n(m)``. Writing ``S_m = Σ g_i [g_i ≥ d_m]`` (GPU milli usable by ``m``) this is
``F_n(M) = P·U − Σ_m p_m · fits_m · S_m`` with ``P = Σ p_m``, which is what the fast path computes:
``S`` and ``cnt = #{i: g_i ≥ d}`` per distinct ``d``, and the CPU/type/count test folded into a small
table ``A[n, d, cnt]`` by one matrix product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scheduler.quality.state import MAX_GPUS, MILLI, Cluster

POPULARITY_THRESHOLD = 0.95


@dataclass
class TargetWorkload:
    """Typical task shapes and their popularity ``p`` (Σ p = 1)."""

    cpu: np.ndarray      # (M,) milli-CPU
    k: np.ndarray        # (M,) GPUs
    d: np.ndarray        # (M,) milli per GPU (0 for CPU-only shapes)
    spec: list[str]      # (M,) allowed GPU models, "|"-separated, "" = any
    p: np.ndarray        # (M,) popularity

    @property
    def m(self) -> int:
        return len(self.p)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"cpu_milli": self.cpu, "num_gpu": self.k, "gpu_milli": self.d,
                             "gpu_spec": self.spec, "p": self.p})


def target_workload(pods: pd.DataFrame, threshold: float = POPULARITY_THRESHOLD,
                    gpu_weight: float = 0.0) -> TargetWorkload:
    """The FGD target workload of a pod list: most popular shapes covering ``threshold`` of the pods.

    Shapes are ``(cpu_milli, num_gpu, gpu_milli, gpu_spec)`` (memory ignored; CPU-only pods included),
    sorted by count, ties by larger shape first (as the FGD simulator sorts), cut at the first shape where the
    cumulative count reaches ``threshold`` of all pods, renormalised to Σ p = 1. With ``gpu_weight`` > 0 a
    shape's popularity is its count × (1 + gpu_weight × GPUs it asks), after the cut.
    """
    spec = pods["gpu_spec"].fillna("").astype(str) if "gpu_spec" in pods else pd.Series([""] * len(pods))
    df = pd.DataFrame({"cpu": pods["cpu_milli"].to_numpy(np.int64), "d": pods["gpu_milli"].to_numpy(np.int64),
                       "k": pods["num_gpu"].to_numpy(np.int64), "spec": spec.to_numpy()})
    counts = df.groupby(["cpu", "d", "k", "spec"]).size().rename("n").reset_index()
    counts = counts.sort_values(["n", "cpu", "d", "k", "spec"], ascending=False, kind="stable")
    total = counts["n"].sum()
    cum = counts["n"].cumsum().to_numpy()
    keep = int(np.searchsorted(cum, threshold * total, side="left")) + 1
    top = counts.iloc[:keep]
    w = top["n"].to_numpy(float) * (1.0 + gpu_weight * top["k"].to_numpy() * top["d"].to_numpy() / MILLI)
    p = w / w.sum()
    return TargetWorkload(cpu=top["cpu"].to_numpy(np.int64), k=top["k"].to_numpy(np.int64),
                          d=top["d"].to_numpy(np.int64), spec=list(top["spec"]), p=p)


def _access(cluster: Cluster, wl: TargetWorkload) -> np.ndarray:
    """(T, M) bool: shape ``m`` may use GPUs of type ``t`` (always False for CPU-only shapes)."""
    out = np.zeros((len(cluster.types), wl.m), bool)
    for j, (k, s) in enumerate(zip(wl.k, wl.spec)):
        if k > 0:
            out[:, j] = cluster.type_mask(s)
    return out


def node_fragmentation(cpu_left: np.ndarray, gpu_left: np.ndarray, type_code: np.ndarray,
                       cluster: Cluster, wl: TargetWorkload) -> np.ndarray:
    """(N,) fragment milli-GPU of each node, straight from the definition (reference implementation)."""
    access = _access(cluster, wl)[type_code]                         # (N, M)
    g = gpu_left[:, :, None]                                          # (N, G, 1)
    d = wl.d[None, None, :]                                           # (1, 1, M)
    ge = g >= np.maximum(d, 1)
    fits = access & (cpu_left[:, None] >= wl.cpu[None, :]) & (ge.sum(1) >= wl.k[None, :])
    U = gpu_left.sum(1).astype(float)
    below = (g * ~ge).sum(1)                                          # (N, M)
    frag_m = np.where(fits, below, U[:, None])
    return frag_m @ wl.p


class FragIndex:
    """Cached per-node fragmentation with fast what-if deltas for one candidate placement per node/GPU.

    Keeps ``cnt[n, j]`` and ``S[n, j]`` for the distinct per-GPU requests ``dv[j]`` of the target workload,
    ``U[n]`` and ``F[n]``. After a placement call :meth:`update` for the node that changed.
    """

    def __init__(self, cluster: Cluster, wl: TargetWorkload, cpu_left: np.ndarray, gpu_left: np.ndarray):
        self.cluster, self.wl = cluster, wl
        gpu_shape = wl.k > 0
        self.dv = np.unique(wl.d[gpu_shape]) if gpu_shape.any() else np.array([MILLI])
        D = len(self.dv)
        self.shape_cpu = wl.cpu
        # pa[t, m] = p_m if shape m may use type t (0 for CPU-only shapes: they always count U).
        self.pa = _access(cluster, wl) * wl.p[None, :]
        self.P = float(wl.p.sum())
        # A[n, j, c] = Σ p_m over shapes m asking dv[j] per GPU, needing at most c GPUs, that node n can
        # serve by CPU and type. Built without BLAS (a tiny matmul is slower threaded): sum the columns of
        # B by (j, k) group with reduceat, scatter to [j, k], cumulate over c.
        gpu_idx = np.flatnonzero(gpu_shape & (wl.k <= MAX_GPUS))
        j_of = np.searchsorted(self.dv, wl.d[gpu_idx])
        order = np.lexsort((wl.k[gpu_idx], j_of))
        self._cols = gpu_idx[order]
        keys = j_of[order] * (MAX_GPUS + 1) + wl.k[gpu_idx][order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.array([], np.int64)
        self._starts, self._slots = starts, keys[starts]
        self._jbase = np.arange(D) * (MAX_GPUS + 1)
        n = cluster.n
        self.cnt = np.zeros((n, D), np.int64)
        self.S = np.zeros((n, D), np.int64)
        self.U = np.zeros(n, np.int64)
        self.F = np.zeros(n)
        self.update(np.arange(n), cpu_left, gpu_left)

    def _table(self, nodes: np.ndarray, cpu: np.ndarray) -> np.ndarray:
        """(len(nodes), D*(G+1)) weight table A for nodes with the given free CPU."""
        cols = self._cols
        B = self.pa[self.cluster.type_code[nodes]][:, cols] * (cpu[:, None] >= self.shape_cpu[cols][None, :])
        A = np.zeros((len(nodes), len(self.dv) * (MAX_GPUS + 1)))
        if len(cols):
            A[:, self._slots] = np.add.reduceat(B, self._starts, axis=1)
        A = A.reshape(len(nodes), len(self.dv), MAX_GPUS + 1).cumsum(axis=2)
        return A.reshape(len(nodes), -1)

    def _frag(self, A: np.ndarray, U, cnt, S) -> np.ndarray:
        """F = P·U − Σ_j A[cnt_j] · S_j; ``cnt``/``S`` have shape (..., D) broadcastable to A's rows."""
        idx = self._jbase + np.clip(cnt, 0, MAX_GPUS)
        rows = np.arange(A.shape[0]).reshape((-1,) + (1,) * (idx.ndim - 1))
        W = A[rows, idx]
        return self.P * U - (W * S).sum(-1)

    def update(self, nodes, cpu_left: np.ndarray, gpu_left: np.ndarray) -> None:
        """Recompute the cache for ``nodes`` (index array or int) from the current free resources."""
        nodes = np.atleast_1d(nodes)
        g = gpu_left[nodes][:, :, None]
        ge = g >= self.dv[None, None, :]
        self.cnt[nodes] = ge.sum(1)
        self.S[nodes] = (g * ge).sum(1)
        self.U[nodes] = gpu_left[nodes].sum(1)
        A = self._table(nodes, cpu_left[nodes])
        self.F[nodes] = self._frag(A, self.U[nodes], self.cnt[nodes], self.S[nodes])

    @property
    def total(self) -> float:
        """Cluster fragmentation Σ_n F_n (milli-GPU)."""
        return float(self.F.sum())

    def delta_whole(self, nodes: np.ndarray, cpu_after: np.ndarray, k: int) -> np.ndarray:
        """(len(nodes),) ΔF if ``k`` idle GPUs (k may be 0: CPU-only pod) and CPU are taken on each node."""
        A = self._table(nodes, cpu_after)
        cnt = self.cnt[nodes] - k
        S = self.S[nodes] - k * MILLI
        U = self.U[nodes] - k * MILLI
        return self._frag(A, U, cnt, S) - self.F[nodes]

    def delta_shared(self, nodes: np.ndarray, cpu_after: np.ndarray, gpu_left: np.ndarray, d: int) -> np.ndarray:
        """(len(nodes), G) ΔF if ``d`` milli of GPU i (and the CPU) are taken; +inf where GPU i lacks ``d``."""
        A = self._table(nodes, cpu_after)
        g = gpu_left[nodes]                                            # (F, G)
        g2 = g - d
        dv = self.dv[None, None, :]
        ge1 = g[:, :, None] >= dv
        ge2 = g2[:, :, None] >= dv
        cnt = self.cnt[nodes][:, None, :] - ge1 + ge2                  # (F, G, D)
        S = self.S[nodes][:, None, :] - g[:, :, None] * ge1 + g2[:, :, None] * ge2
        U = (self.U[nodes] - d)[:, None]
        after = self._frag(A, U, cnt, S)                               # (F, G)
        return np.where(g >= d, after - self.F[nodes][:, None], np.inf)
