"""The kaidash placement policy's node score in the engine's terms (KAI node-order scale 0..9).

The engine's node-placement strategies (``scheduler.placement``) see only per-node totals; this score needs
per-device free GPU, free CPU, the GPU model and the task's request, plus a target workload (the shapes the
cluster expects, e.g. the pending and running tasks of the snapshot). :func:`node_scores` takes exactly
that and returns a score per node (higher = preferred; equal bands are left to KAI's tie rule, node name)
and the device a shared request should take on each node.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from scheduler.quality.fragmentation import FragIndex, TargetWorkload, target_workload
from scheduler.quality.policies import fgd_levels, pairing_gain
from scheduler.quality.state import MAX_GPUS, MILLI, Cluster

MAX_SCORE = 9.0


def workload_from_requests(cpu_millis: Sequence[float], gpus: Sequence[float],
                           gpu_models: Sequence[str] | None = None, threshold: float = 0.95) -> TargetWorkload:
    """Target workload from task requests: ``gpus`` in devices (a fraction < 1 = one shared device)."""
    g = np.asarray(gpus, float)
    k = np.where(g <= 0, 0, np.where(g < 1, 1, np.round(g))).astype(np.int64)
    d = np.where(g <= 0, 0, np.where(g < 1, np.round(g * MILLI), MILLI)).astype(np.int64)
    spec = list(gpu_models) if gpu_models is not None else [""] * len(g)
    frame = pd.DataFrame({"cpu_milli": np.asarray(cpu_millis, np.int64), "num_gpu": k, "gpu_milli": d,
                          "gpu_spec": spec})
    return target_workload(frame, threshold=threshold)


def node_scores(gpu_free: np.ndarray, cpu_free: np.ndarray, gpu_models: Sequence[str], request_cpu: float,
                request_gpus: float, workload: TargetWorkload, considered: np.ndarray | None = None,
                waste: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kaidash policy's preference for placing one task on each node, on KAI's 0..9 node-order scale.

    ``gpu_free``: (N, G) free fraction per device (1 = idle; G ≤ 8; devices a node lacks = 0).
    ``cpu_free``: (N,) free millicores. ``request_gpus``: devices (a fraction < 1 = shared).
    ``waste``: the residual-waste table (:func:`scheduler.quality.residual.residual_waste`) for shared
    requests; without it a shared request is scored like any other.

    As :func:`scheduler.quality.policies.kaidash`: the FGD level (0..100) of every node, scaled to 0..9; for
    a shared request with ``waste``, the (node, device) pairs within ``KAIDASH_SLACK`` levels of the best
    are ranked by the residual-waste gain, then level, and take the scores above 4.5 (best = 9), the other
    fitting nodes keep their scaled level below 4.5. Equal scores are left to KAI's tie rule (node name).
    Returns ``(score, device)``: ``score`` is −1 where not considered or not fitting; ``device`` the device
    a shared request should take on each node (−1 otherwise).
    """
    free = np.zeros((len(cpu_free), MAX_GPUS), np.int64)
    gf = np.rint(np.asarray(gpu_free, float) * MILLI).astype(np.int64)
    free[:, : gf.shape[1]] = gf
    models = [m or "" for m in gpu_models]
    types = sorted(set(models))
    cluster = Cluster(names=np.arange(len(models)).astype(str), cpu_cap=np.asarray(cpu_free, np.int64),
                      mem_cap=np.zeros(len(models), np.int64), gpu_count=(free > 0).sum(1),
                      type_code=np.array([types.index(m) for m in models], np.int64), types=types)
    cpu = np.asarray(cpu_free, np.int64)
    k = 0 if request_gpus <= 0 else (1 if request_gpus < 1 else int(round(request_gpus)))
    d = 0 if k == 0 else (int(round(request_gpus * MILLI)) if request_gpus < 1 else MILLI)
    ok = cpu >= request_cpu
    if k:
        ok &= (free >= d).sum(1) >= k
    if considered is not None:
        ok &= np.asarray(considered, bool)
    score = np.full(len(cpu), -1.0)
    device = np.full(len(cpu), -1, np.int64)
    nodes = np.flatnonzero(ok)
    if not len(nodes):
        return score, device
    fi = FragIndex(cluster, workload, cpu, free)
    after = cpu[nodes] - int(request_cpu)
    shared = k == 1 and d < MILLI
    delta = fi.delta_shared(nodes, after, free, d) if shared else fi.delta_whole(nodes, after, k)
    level = fgd_levels(delta)
    if not shared:
        score[nodes] = MAX_SCORE * level / 100.0
        return score, device
    node_level = level.max(1)
    if waste is None:
        device[nodes] = np.argmax(level, axis=1)
        score[nodes] = MAX_SCORE * node_level / 100.0
        return score, device
    gain = pairing_gain(waste, free[nodes], d, level)
    # best device per node: least gain, then highest level, then lowest index
    best_dev = np.lexsort((np.broadcast_to(np.arange(MAX_GPUS), gain.shape), -level, gain), axis=1)[:, 0]
    rows = np.arange(len(nodes))
    best_gain, best_level = gain[rows, best_dev], level[rows, best_dev]
    device[nodes] = np.where(np.isfinite(best_gain), best_dev, np.argmax(level, axis=1))
    low = MAX_SCORE / 2 * node_level / 100.0
    cand = np.isfinite(best_gain)
    if cand.any():
        pairs = np.stack([best_gain[cand], -best_level[cand]], axis=1)
        uniq, inv = np.unique(pairs, axis=0, return_inverse=True)      # sorted: gain asc, then level desc
        ranks = inv.reshape(-1)
        high = MAX_SCORE - (MAX_SCORE / 2) * ranks / max(len(uniq), 1)
        low[cand] = high
    score[nodes] = low
    return score, device
