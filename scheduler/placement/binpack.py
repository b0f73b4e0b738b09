"""Bin-packing node placement (KAI ``nodeplacement`` plugin, ``pack.go``).

Score ``9 · (1 − (free − min) / (max − min))`` where ``free`` is the node's idle + releasing amount of the
strategy's resource (whole GPUs for GPU tasks, CPU millicores for CPU-only tasks) and ``min``/``max`` range
over the nodes considered that have that resource. A node without the resource scores 0; when every node
has the same amount free, all score 9; when the most free is 0, all score 0.
"""

from __future__ import annotations

import numpy as np

from .scores import MAX_HIGH_DENSITY

NAME = "binpack"


def score(free: np.ndarray, total: np.ndarray, considered: np.ndarray) -> np.ndarray:
    """Binpack scores for every node (fewest free resources wins)."""
    has = considered & (total > 0)
    out = np.zeros(free.shape[0], dtype=float)
    if not has.any():
        return out
    vals = free[has]
    lo, hi = float(vals.min()), float(vals.max())
    if hi == 0:
        return out
    if lo == hi:
        out[total > 0] = MAX_HIGH_DENSITY
        return out
    out = MAX_HIGH_DENSITY * (1.0 - (free - lo) / (hi - lo))
    out[total <= 0] = 0.0
    return out


def local_score(free: np.ndarray, total: np.ndarray, max_total: float) -> np.ndarray:
    """A per-node score that orders nodes exactly like :func:`score` (strictly decreasing in ``free``,
    in [0, 9]) without the min/max over all nodes, so it can be updated one node at a time."""
    return np.where(total > 0, MAX_HIGH_DENSITY * (1.0 - free / (max_total + 1.0)), 0.0)


def local_score_one(free: float, total: float, max_total: float) -> float:
    """:func:`local_score` for one node, in plain Python."""
    return MAX_HIGH_DENSITY * (1.0 - free / (max_total + 1.0)) if total > 0 else 0.0
