"""Array form of a GPU cluster and a pod sequence, for fast placement-quality replays.

Nodes are rows; GPUs are an ``(N, MAX_GPUS)`` array of free milli-GPU per device (1000 = idle). Slots past a
node's GPU count hold 0, which no request fits and which adds nothing to any sum, so no mask is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MILLI = 1000
MAX_GPUS = 8


@dataclass
class Cluster:
    """Static description of the nodes (capacities, GPU types), sorted by node name."""

    names: np.ndarray          # (N,) str
    cpu_cap: np.ndarray        # (N,) int64 milli-CPU
    mem_cap: np.ndarray        # (N,) int64 MiB
    gpu_count: np.ndarray      # (N,) int64
    type_code: np.ndarray      # (N,) int64 index into ``types``
    types: list[str]           # GPU model per code; "" = CPU-only node

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def gpu_milli_total(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    @classmethod
    def from_frame(cls, nodes: pd.DataFrame) -> "Cluster":
        """From a trace node list (columns ``sn, cpu_milli, memory_mib, gpu, model``)."""
        nodes = nodes.sort_values("sn", kind="stable").reset_index(drop=True)
        if (nodes["gpu"] > MAX_GPUS).any():
            raise ValueError(f"nodes with more than {MAX_GPUS} GPUs are not supported")
        models = nodes["model"].fillna("").astype(str)
        types = sorted(set(models))
        code = {t: i for i, t in enumerate(types)}
        return cls(names=nodes["sn"].astype(str).to_numpy(),
                   cpu_cap=nodes["cpu_milli"].to_numpy(np.int64),
                   mem_cap=nodes["memory_mib"].to_numpy(np.int64),
                   gpu_count=nodes["gpu"].to_numpy(np.int64),
                   type_code=models.map(code).to_numpy(np.int64),
                   types=types)

    def type_mask(self, spec: str) -> np.ndarray:
        """(T,) bool: which GPU types a ``|``-separated ``gpu_spec`` allows ("" = any GPU type)."""
        allowed = [s for s in spec.split("|") if s]
        if not allowed:
            return np.array([t != "" for t in self.types])
        return np.array([t in allowed for t in self.types])


@dataclass
class Pods:
    """A pod sequence as arrays (one row per arrival)."""

    names: np.ndarray          # (P,) str
    cpu: np.ndarray            # (P,) int64 milli-CPU
    mem: np.ndarray            # (P,) int64 MiB
    k: np.ndarray              # (P,) int64 GPUs requested
    d: np.ndarray              # (P,) int64 milli per GPU (0 for CPU-only pods)
    spec_id: np.ndarray        # (P,) int64 index into ``specs``
    specs: list[str]

    @property
    def gpu_milli(self) -> np.ndarray:
        return self.k * self.d

    @classmethod
    def from_frame(cls, pods: pd.DataFrame) -> "Pods":
        spec = pods["gpu_spec"].fillna("").astype(str) if "gpu_spec" in pods else pd.Series([""] * len(pods))
        specs = sorted(set(spec))
        code = {s: i for i, s in enumerate(specs)}
        return cls(names=pods["name"].astype(str).to_numpy(),
                   cpu=pods["cpu_milli"].to_numpy(np.int64), mem=pods["memory_mib"].to_numpy(np.int64),
                   k=pods["num_gpu"].to_numpy(np.int64), d=pods["gpu_milli"].to_numpy(np.int64),
                   spec_id=spec.map(code).to_numpy(np.int64), specs=specs)


@dataclass
class State:
    """Mutable free resources of a cluster during a replay."""

    cluster: Cluster
    cpu_left: np.ndarray = field(init=False)
    mem_left: np.ndarray = field(init=False)
    gpu_left: np.ndarray = field(init=False)   # (N, MAX_GPUS) int64
    tags: np.ndarray = field(init=False)       # (N, MAX_GPUS+1) pods per GPU-request kind (0 = shared)

    def __post_init__(self):
        c = self.cluster
        self.cpu_left = c.cpu_cap.copy()
        self.mem_left = c.mem_cap.copy()
        self.gpu_left = np.where(np.arange(MAX_GPUS)[None, :] < c.gpu_count[:, None], MILLI, 0).astype(np.int64)
        self.tags = np.zeros((c.n, MAX_GPUS + 1), np.int64)

    @property
    def full_count(self) -> np.ndarray:
        """(N,) idle (fully free) GPUs per node."""
        return (self.gpu_left == MILLI).sum(1)

    @property
    def gpu_free(self) -> np.ndarray:
        """(N,) free milli-GPU per node."""
        return self.gpu_left.sum(1)

    def feasible(self, cpu: int, mem: int, k: int, d: int, type_ok: np.ndarray) -> np.ndarray:
        """Indices of nodes that can host a pod (CPU, memory, GPU type, ``k`` GPUs with ``d`` milli free)."""
        ok = (self.cpu_left >= cpu) & (self.mem_left >= mem)
        if k > 0:
            ok &= type_ok[self.cluster.type_code]
            ok &= (self.gpu_left >= d).sum(1) >= k
        return np.flatnonzero(ok)

    def place(self, node: int, gpus: list[int] | np.ndarray, cpu: int, mem: int, k: int, d: int) -> None:
        """Apply a placement: take CPU, memory and ``d`` milli from each GPU index in ``gpus``."""
        self.cpu_left[node] -= cpu
        self.mem_left[node] -= mem
        if k > 0:
            if len(gpus) != k or np.any(self.gpu_left[node, gpus] < d):
                raise ValueError(f"bad GPU choice {list(gpus)} on node {node} for {k}x{d}m")
            self.gpu_left[node, gpus] -= d
            self.tags[node, 0 if d < MILLI else k] += 1
