"""GPU device order for shared (fractional) GPU requests: KAI's ``gpupack`` / ``gpuspread`` plugins.

Candidates on a node are the existing shared GPUs the request fits on plus one "whole GPU" candidate per
idle or releasing whole GPU. Scores (higher first):

- ``pack`` (GPU strategy binpack, the default): shared GPU = its used portion (used MiB / GPU MiB), whole
  GPU = 0 → fill the fullest shared GPU first, open a new GPU last.
- ``spread``: whole GPU = 1, shared GPU = 1 − used portion → prefer empty GPUs.

KAI breaks equal scores in Go map order (random); we break them by GPU index so results are reproducible.
"""

from __future__ import annotations

WHOLE = -1
"""Candidate marker for "a whole idle or releasing GPU" (KAI ``WholeGpuIndicator``)."""


def order_candidates(order: str, shared: list[tuple[int, float]], whole_count: int) -> list[int]:
    """Sort candidates: ``shared`` is ``[(slot, used_portion)]``; returns slots and ``WHOLE`` markers.

    ``order`` is ``pack`` or ``spread`` (``SchedulerConfig.gpu_device_order``).
    """
    scored: list[tuple[float, int, int]] = []
    for slot, used_portion in shared:
        s = used_portion if order == "pack" else 1.0 - used_portion
        scored.append((-s, 0, slot))
    whole_score = 0.0 if order == "pack" else 1.0
    for i in range(whole_count):
        scored.append((-whole_score, 1, i))
    scored.sort()
    return [slot if kind == 0 else WHOLE for _, kind, slot in scored]
