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
