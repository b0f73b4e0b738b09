"""FGD-protocol replay: place an arrival sequence on an empty cluster, no departures, record the curves.

After every arrival the replay records the GPU requested so far ("arrived"), the GPU allocated and the
cluster fragmentation, all in milli-GPU. :meth:`ReplayResult.curve` turns that into the authors' discrete
curves: for each integer arrived-% of capacity (0..130), the mean over the arrivals whose arrived-%
rounds to it (anchors §2.2, ``merge_*_discrete.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scheduler.quality.fragmentation import FragIndex, TargetWorkload, target_workload
from scheduler.quality.policies import POLICIES, Context, Policy, PodRequest
from scheduler.quality.residual import residual_waste_cached
from scheduler.quality.state import Cluster, Pods, State
from scheduler.sources import trace


@dataclass
class ReplayResult:
    """Per-arrival records of one replay (index 0 = empty cluster before the first arrival)."""

    policy: str
    capacity_milli: int
    arrived: np.ndarray      # (P+1,) cumulative GPU milli requested
    allocated: np.ndarray    # (P+1,) GPU milli allocated
    frag: np.ndarray         # (P+1,) cluster fragmentation, milli
    placed: np.ndarray       # (P,) bool
    node: np.ndarray         # (P,) node index or -1
    seconds: float
    meta: dict = field(default_factory=dict)

    @property
    def pods_placed(self) -> int:
        return int(self.placed.sum())

    @property
    def gpu_pods_placed(self) -> int:
        return int((self.placed & (self.meta["gpu_milli"] > 0)).sum())

    def curve(self, max_pct: int = 130) -> pd.DataFrame:
        """Per arrived-% (0..max_pct): allocation %, unallocated %, fragmentation % of all GPU and of idle GPU."""
        cap = self.capacity_milli
        arr = np.round(self.arrived / cap * 100.0)
        alloc = self.allocated / cap * 100.0
        frag = self.frag / cap * 100.0
        idle = cap - self.allocated
        frag_rate = np.divide(self.frag, idle, out=np.zeros(len(idle)), where=idle > 0) * 100.0
        rows = []
        for a in range(max_pct + 1):
            sel = arr == a
            if not sel.any():
                sel = (arr >= a - 1) & (arr <= a + 1)
                if not sel.any():
                    continue
            rows.append((a, alloc[sel].mean(), frag[sel].mean(), frag_rate[sel].mean()))
        df = pd.DataFrame(rows, columns=["arrived_pct", "alloc_pct", "frag_pct", "frag_rate_pct"])
        df["unalloc_pct"] = 100.0 - df["alloc_pct"]
        return df

    def unallocated_at(self, arrived_pct: int = 100) -> float:
        """Unallocated GPU % of capacity when arrivals reach ``arrived_pct`` % of capacity."""
        c = self.curve()
        return float(np.interp(arrived_pct, c["arrived_pct"], c["unalloc_pct"]))


def replay(cluster: Cluster, pods: Pods, policy: str | Policy, workload: TargetWorkload,
           seed: int = 0, shapes: TargetWorkload | None = None) -> ReplayResult:
    """Place ``pods`` in order on an empty ``cluster`` with ``policy`` (a name in POLICIES or a callable).

    ``workload`` is the fragmentation target (usually :func:`target_workload` of the original trace).
    ``seed`` drives the policy's random choices (Random) and the node order that breaks score ties.
    ``shapes`` (default ``workload``) is what a policy with ``uses_residual_waste`` learns its
    residual-waste table from (:mod:`scheduler.quality.residual`; cached per workload, and its build time is
    counted in ``seconds``).
    """
    fn = POLICIES[policy] if isinstance(policy, str) else policy
    name = policy if isinstance(policy, str) else getattr(policy, "__name__", "custom")
    t0 = time.perf_counter()
    state = State(cluster)
    fi = FragIndex(cluster, workload, state.cpu_left, state.gpu_left)
    rng = np.random.default_rng(seed)
    ctx = Context(state=state, frag=fi, rng=rng, rank=rng.permutation(cluster.n))
    if getattr(fn, "uses_residual_waste", False):
        ctx.waste = residual_waste_cached(shapes if shapes is not None else workload, int(cluster.gpu_count.sum()))
    type_ok = [cluster.type_mask(s) for s in pods.specs]
    n = len(pods.cpu)
    arrived = np.zeros(n + 1, np.int64)
    allocated = np.zeros(n + 1, np.int64)
    frag = np.zeros(n + 1)
    placed = np.zeros(n, bool)
    where = np.full(n, -1, np.int64)
    frag_total = fi.total
    frag[0] = frag_total
    arr_sum = alloc_sum = 0
    cpu, mem, k, d, spec = (pods.cpu.tolist(), pods.mem.tolist(), pods.k.tolist(), pods.d.tolist(),
                            pods.spec_id.tolist())
    for i in range(n):
        req = PodRequest(cpu[i], mem[i], k[i], d[i])
        arr_sum += req.gpu_milli
        nodes = state.feasible(req.cpu, req.mem, req.k, req.d, type_ok[spec[i]])
        if len(nodes):
            node, gpus = fn(ctx, req, nodes)
            state.place(node, gpus, req.cpu, req.mem, req.k, req.d)
            before = fi.F[node]
            fi.update(node, state.cpu_left, state.gpu_left)
            frag_total += fi.F[node] - before
            alloc_sum += req.gpu_milli
            placed[i] = True
            where[i] = node
        arrived[i + 1] = arr_sum
        allocated[i + 1] = alloc_sum
        frag[i + 1] = frag_total
    return ReplayResult(policy=name, capacity_milli=cluster.gpu_milli_total, arrived=arrived,
                        allocated=allocated, frag=frag, placed=placed, node=where,
                        seconds=time.perf_counter() - t0, meta={"gpu_milli": pods.gpu_milli})


def replay_trace(variant: str = "default", policy: str = "fgd", seed: int = 42, ratio: float = 1.3,
                 trace_dir=None, node_list: str = trace.NODE_LIST_DEFAULT) -> ReplayResult:
    """One FGD-protocol replay of a trace variant: load, inflate with ``seed``, replay with ``policy``."""
    nodes = trace.load_nodes(node_list, trace_dir)
    pods = trace.load_pods(variant, trace_dir)
    cluster = Cluster.from_frame(nodes)
    seq = trace.inflate(pods, cluster.gpu_milli_total, ratio=ratio, seed=seed)
    res = replay(cluster, Pods.from_frame(seq), policy, target_workload(pods), seed=seed,
                 shapes=target_workload(pods, threshold=1.0))
    res.meta.update(variant=variant, seed=seed, ratio=ratio)
    return res
