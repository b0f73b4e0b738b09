"""Fragmentation-aware node placement (kaidash's policy, issue 8; ``docs/placement-quality.md``).

Not a KAI plugin: a what-if option ("what if KAI placed fragmentation-aware?"). For a GPU task the node
score is the FGD fragmentation gradient mapped onto KAI's 0..9 node-order scale by
:func:`scheduler.quality.fragaware.node_scores`: it needs per-device free GPU, free CPU, the node's GPU
model, the task's request and a target workload, so the session calls :func:`task_score` instead of
:func:`score` for GPU tasks. The target workload is the shapes of the session's pending and running GPU
tasks, built once per session and cached on it.

:func:`score` (per-node totals only) is bin-pack's, so the strategy is valid wherever a node strategy is
(e.g. ``placement.cpu``). There is deliberately no ``local_score``: the gradient depends on the whole
workload and per-device state, so the session's incremental per-shape node-order cache is not used and
every query scores all nodes.

A shared request's device on the chosen node follows :func:`device_order` (least residual-waste gain,
``scheduler.quality.residual``; ties keep ``gpu_device_order``), so fractions pair up as the policy intends.

Approximations (documented, not KAI's): a fraction on several devices is scored as one shared device of
that fraction; a gpu-memory request as the fraction ``memory / largest node GPU memory``; nodes beyond 8
GPUs are scored on their first 8.
"""

from __future__ import annotations

import numpy as np

from . import binpack

NAME = "fragaware"
_CACHE_ATTR = "_fragaware_workload"
_WASTE_ATTR = "_fragaware_waste"
MIN_HORIZON_GPUS = 256
"""Devices' worth of arrivals the residual-waste table is learned on, at least: a live cluster's arrivals go
on past one fill, and on a handful of devices the table would learn only end-of-sequence effects."""
MAX_HORIZON_GPUS = 4096
"""And at most this many: beyond a few thousand devices the table no longer changes, only its cost grows."""
SAMPLES = 8
"""Arrival sequences per table: fewer than the replays' 32, because a live session's workload changes every
cycle (0.2–0.6 s per new workload at 4,096 devices on the Alibaba trace's shapes instead of 0.7–2.3 s)."""
_LIVE = frozenset({"pending", "running", "binding", "pipelined", "releasing"})


def score(free: np.ndarray, total: np.ndarray, considered: np.ndarray) -> np.ndarray:
    """Fallback on per-node totals: identical to :func:`scheduler.placement.binpack.score`."""
    return binpack.score(free, total, considered)


def task_gpus(session, i: int) -> float:
    """Task ``i``'s GPU request in devices as the fragmentation score sees it (< 1 = one shared device)."""
    from ..session import KIND_MEMORY, KIND_NONE, KIND_WHOLE
    k = session.kind_list[i]
    if k == KIND_NONE:
        return 0.0
    if k == KIND_WHOLE:
        return float(session.gpu[i])
    if k == KIND_MEMORY:
        big = session.max_gpu_mem or 0.0
        return min(float(session.gmem[i]) / big, 1.0) if big > 0 else 1.0
    return float(session.gpu[i])


def workload(session):
    """The target workload of ``session``: shapes of its pending and running GPU tasks (cached)."""
    wl = getattr(session, _CACHE_ATTR, None)
    if wl is None:
        from ..quality.fragaware import workload_from_requests
        rows = [i for i in range(len(session.status))
                if session.status[i] in _LIVE and session.is_gpu_task(i)]
        if not rows:
            return None
        wl = workload_from_requests([float(session.cpu[i]) for i in rows], [task_gpus(session, i) for i in rows])
        setattr(session, _CACHE_ATTR, wl)
    return wl


def waste(session):
    """Residual-waste table of ``session``'s workload over its GPU devices (clipped to
    :data:`MIN_HORIZON_GPUS`..:data:`MAX_HORIZON_GPUS`), cached on the session and, per workload and device
    count, across sessions; None without a GPU workload."""
    if not hasattr(session, _WASTE_ATTR):
        wl = workload(session)
        n_dev = int(session.nodes.slot_exists.sum())
        table = None
        if wl is not None and n_dev > 0:
            from ..quality.residual import residual_waste_cached
            table = residual_waste_cached(wl, min(max(n_dev, MIN_HORIZON_GPUS), MAX_HORIZON_GPUS), SAMPLES)
        setattr(session, _WASTE_ATTR, table)
    return getattr(session, _WASTE_ATTR)


def device_order(session, i: int, n: int, order: list[int], free: dict[int, float]) -> list[int]:
    """Reorder a shared request's device candidates on node ``n`` by the residual-waste gain (least first).

    ``order`` is the GPU order's list (device slots and ``gpu_order.WHOLE`` markers), ``free`` the free
    fraction of each shared slot. A whole-GPU candidate counts as free 1; the request is :func:`task_gpus`.
    The sort is stable, so equal gains keep the configured ``gpu_device_order``.
    """
    table = waste(session)
    if table is None:
        return order
    from .gpu_order import WHOLE
    request = task_gpus(session, i)

    def gain(c: int) -> float:
        f = 1.0 if c == WHOLE else free[c]
        before = int(round(f * 1000))
        after = min(max(int(round((f - request) * 1000)), 0), 1000)
        return float(table[after] - table[min(before, 1000)])

    return sorted(order, key=gain)


def device_free(session) -> np.ndarray:
    """(N, G) free fraction of every device (idle + releasing, KAI's NonAllocated): a device with no task =
    1, a shared group = 1 − (allocated − releasing) / GPU memory, a device held by a whole-GPU task or
    external usage = 0, a device the node lacks = 0."""
    from ..session.nodes import SLOT_FREE, SLOT_RELEASING
    ns = session.nodes
    mem = np.where(ns.gpu_mem > 0, ns.gpu_mem, 1.0)[:, None]
    shared = np.clip(1.0 - (ns.sh_alloc - ns.sh_rel) / mem, 0.0, 1.0)
    whole_free = (ns.slot_whole == SLOT_FREE) | (ns.slot_whole == SLOT_RELEASING)
    out = np.where(ns.sh_used > 0, shared, np.where(whole_free, 1.0, 0.0))
    return np.where(ns.slot_exists, out, 0.0)


def task_score(session, i: int, fit) -> np.ndarray:
    """Fragmentation-aware score (0..9, higher = preferred) of every node for GPU task ``i``.

    Nodes where the task does not fit (``fit.fits``) score 0; so does every node when there is no GPU
    workload to aim at. Nodes the session says fit but the score's own fit test rejects (an
    approximation above) score 0, never −1, so the session's fit stays authoritative.
    """
    from ..quality.fragaware import node_scores
    from ..session.nodes import CPU
    n = session.nodes.n
    wl = workload(session)
    if wl is None or not fit.fits.any():
        return np.zeros(n)
    ns = session.nodes
    free = device_free(session)[:, :8]
    # the quality code treats model "" as "no GPU type" (no shape may use it): name unknown models
    models = [nd.gpu_model or "gpu" for nd in session.snapshot.nodes]
    sc, _ = node_scores(free, np.maximum(ns.free[:, CPU], 0.0), models, float(session.cpu[i]),
                        task_gpus(session, i), wl, considered=fit.fits, waste=waste(session))
    return np.maximum(sc, 0.0)
