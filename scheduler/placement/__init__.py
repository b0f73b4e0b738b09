"""Node placement strategies and GPU device order, registered by name.

A node-placement strategy is a module (or object) with ``score(free, total, considered) -> ndarray`` over
all nodes and optionally ``local_score`` (see :class:`NodeStrategy`) (see :mod:`.binpack`, :mod:`.spread`). Adding one (e.g. fragmentation-aware) is one file plus one
:func:`register` line below; the name then becomes valid in ``config.placement.gpu|cpu`` because the
registry extends :data:`scheduler.model.PLACEMENT_STRATEGIES`.

GPU device order for fractions lives in :mod:`.gpu_order`; the scales of KAI's node-order plugins in
:mod:`.scores`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .. import model
from ..errors import EngineError
from . import binpack, fragaware, spread


class NodeStrategy(Protocol):
    """What a node-placement strategy provides."""

    def score(self, free: np.ndarray, total: np.ndarray, considered: np.ndarray) -> np.ndarray:
        """Per-node score in [0, 9] (higher = preferred). ``free``/``total`` of the strategy's resource."""

    # Optional: ``local_score(free, total, max_total)`` ordering nodes exactly like ``score`` but computed
    # per node (no normalisation over all nodes). When present, the session updates cached node orders
    # incrementally, one changed node at a time; without it every query scores all nodes.


NODE_STRATEGIES: dict[str, NodeStrategy] = {}


def register(name: str, strategy: NodeStrategy) -> None:
    """Register a node-placement strategy under ``name`` (and make the name valid in snapshots)."""
    NODE_STRATEGIES[name] = strategy
    if name not in model.PLACEMENT_STRATEGIES:
        model.PLACEMENT_STRATEGIES.append(name)


def get_strategy(name: str) -> NodeStrategy:
    """The strategy registered as ``name``; :class:`EngineError` naming the known ones otherwise."""
    try:
        return NODE_STRATEGIES[name]
    except KeyError:
        raise EngineError(f"config.placement: unknown placement strategy {name!r} "
                          f"(known: {', '.join(sorted(NODE_STRATEGIES))})") from None


register(binpack.NAME, binpack)
register(spread.NAME, spread)
register(fragaware.NAME, fragaware)
