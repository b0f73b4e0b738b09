"""Spreading node placement (KAI ``nodeplacement`` plugin, ``spread.go``).

Score ``free / total`` in [0, 1]: the node with the largest free fraction of the strategy's resource wins.
A node without the resource scores 0.
"""

from __future__ import annotations

import numpy as np

NAME = "spread"


def score(free: np.ndarray, total: np.ndarray, considered: np.ndarray) -> np.ndarray:
    """Spread scores for every node (most free fraction wins)."""
    out = np.zeros(free.shape[0], dtype=float)
    has = total > 0
    out[has] = free[has] / total[has]
    return out


def local_score(free: np.ndarray, total: np.ndarray, max_total: float) -> np.ndarray:
    """Spread is already per node."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, free / np.where(total > 0, total, 1.0), 0.0)


def local_score_one(free: float, total: float, max_total: float) -> float:
    """:func:`local_score` for one node, in plain Python."""
    return free / total if total > 0 else 0.0
