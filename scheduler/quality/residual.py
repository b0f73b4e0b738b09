"""Expected stranded GPU of a partly used device, learned from a workload's shapes (kaidash policy, issue 8).

A shared GPU left with ``r`` milli free strands what no later fraction fills. How much, on average, depends on
the workload: with many 0.47-GPU pods a 530 m leftover is soon filled to 60 m, while a 190 m leftover (what a
0.81 pod leaves) waits for one of the rare pods of at most 0.19 GPU and is mostly stranded for good.
:func:`residual_waste` estimates ``W[r]`` = the milli-GPU a device with ``r`` free still has free when the
cluster is full, for every ``r`` in 0..1000, by self-play on the device level:

1. draw arrival sequences from the workload's shapes (i.i.d. by popularity) until their GPU request reaches
   the cluster's capacity, as the FGD protocol's replays do;
2. pack each sequence onto ``n_gpus`` devices, ignoring nodes and CPU: whole-GPU pods take idle devices, a
   fraction takes the device that minimises ``W[left after] − W[left before]`` (an idle device counts
   ``W[1000] = 0``; ties go to the tightest fit, so the first round is plain best fit);
3. set ``W[r]`` to the mean final free milli of the devices that passed through ``r`` free (a value never seen
   is taken as fully stranded, ``W[r] = r``) and repeat, averaging with the previous table.

This is policy iteration with a value per residual instead of per cluster state. Rarely visited residuals
make the table noisy with few sequences: 32 sequences × 4 rounds (the default) take about 1.1 s for the
Alibaba trace's 6,212 GPUs (3.5 s for ``gpushare100``, where every GPU pod is a fraction), and placed 0.1 pp
more GPU than 8 sequences on seeds 1..4 of ``default``. Nothing here looks at the sequence that will actually
be replayed: like FGD's target workload, only the shapes' popularity is used.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from scheduler.quality.fragmentation import TargetWorkload
from scheduler.quality.state import MILLI


def _sample(shapes: TargetWorkload, n_gpus: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """One arrival sequence of ``(gpus, milli per gpu)`` whose GPU request just reaches ``n_gpus``."""
    gpu = shapes.k * shapes.d
    mean = float((shapes.p * gpu).sum())
    if mean <= 0:
        return []
    draws = rng.choice(len(shapes.p), size=int(n_gpus * MILLI / mean * 1.1) + 100, p=shapes.p)
    cut = int(np.searchsorted(np.cumsum(gpu[draws]), n_gpus * MILLI)) + 1     # up to the one reaching it
    return list(zip(shapes.k[draws[:cut]].tolist(), shapes.d[draws[:cut]].tolist()))


def _pack(seq: list[tuple[int, int]], n_gpus: int, W: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Pack ``seq`` on ``n_gpus`` devices with the table ``W`` (None = best fit).

    Returns ``(total, count)`` per residual: the summed final free milli of the devices that passed through
    each residual, and how many devices did.
    """
    by_left: dict[int, list[int]] = {}      # free milli -> ids of partly used devices with that much free
    visits: list[set[int]] = []             # residuals each opened device passed through
    left: list[int] = []
    idle = n_gpus
    for k, d in seq:
        if k == 0:
            continue
        if d >= MILLI:
            if idle >= k:
                idle -= k
            continue
        options = [h for h, ids in by_left.items() if ids and h >= d]
        if idle:
            options.append(MILLI)
        if not options:
            continue
        h = min(options) if W is None else min(options, key=lambda h: (W[h - d] - W[h], h))
        if h == MILLI:
            idle -= 1
            dev = len(left)
            left.append(MILLI)
            visits.append({MILLI})
        else:
            dev = by_left[h].pop()
        left[dev] = h - d
        visits[dev].add(h - d)
        if h - d > 0:
            by_left.setdefault(h - d, []).append(dev)
    total = np.zeros(MILLI + 1)
    count = np.zeros(MILLI + 1)
    for dev, seen in enumerate(visits):
        idx = np.fromiter(seen, np.int64)
        total[idx] += left[dev]
        count[idx] += 1
    return total, count


def residual_waste(shapes: TargetWorkload, n_gpus: int, samples: int = 32, rounds: int = 4,
                   seed: int = 0) -> np.ndarray:
    """``W[r]``, r = 0..1000: expected milli-GPU still free at the end on a device left with ``r`` free.

    ``shapes``: the workload's task shapes and popularity (GPU shapes matter; CPU is ignored).
    ``n_gpus``: devices in the cluster. ``W[0] = W[1000] = 0``. Deterministic for a given ``seed``.
    """
    if n_gpus <= 0:
        raise ValueError(f"residual_waste: n_gpus must be positive, got {n_gpus}")
    seqs = [_sample(shapes, n_gpus, np.random.default_rng([seed, i])) for i in range(samples)]
    W = None
    for _ in range(max(rounds, 1)):
        total = np.zeros(MILLI + 1)
        count = np.zeros(MILLI + 1)
        for seq in seqs:
            t, c = _pack(seq, n_gpus, W)
            total += t
            count += c
        new = np.where(count > 0, total / np.maximum(count, 1), np.arange(MILLI + 1, dtype=float))
        new[0] = new[MILLI] = 0.0
        W = new if W is None else 0.5 * (W + new)
    return W


@lru_cache(maxsize=32)
def _cached(key: tuple, n_gpus: int, samples: int) -> np.ndarray:
    k, d, p = (np.array(x) for x in zip(*key)) if key else (np.zeros(0, np.int64),) * 3
    shapes = TargetWorkload(cpu=np.zeros(len(k), np.int64), k=k.astype(np.int64), d=d.astype(np.int64),
                            spec=[""] * len(k), p=p.astype(float) / max(float(p.sum()), 1e-12))
    table = residual_waste(shapes, n_gpus, samples=samples)
    table.setflags(write=False)
    return table


def residual_waste_cached(shapes: TargetWorkload, n_gpus: int, samples: int = 32) -> np.ndarray:
    """:func:`residual_waste` memoised on the GPU shapes, popularity, device count and samples (read-only)."""
    key = tuple((int(k), int(d), round(float(p), 9)) for k, d, p in zip(shapes.k, shapes.d, shapes.p))
    return _cached(key, int(n_gpus), int(samples))
