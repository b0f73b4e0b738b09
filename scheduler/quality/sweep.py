"""Sweeps of FGD-protocol replays (policies × trace variants × seeds) on Dask, returning DataFrames.

Usable from a notebook::

    from scheduler.quality.sweep import run_sweep
    summary, curves = run_sweep(["fgd", "kaidash"], ["default"], seeds=range(42, 52))

``client`` may be a ``dask.distributed.Client``, a scheduler address (``"tcp://host:8786"``), or None for a
local cluster (one worker process per core). Each task loads the trace on its worker, so nothing big is
shipped; results come back as small frames.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from typing import Iterable, Optional

import numpy as np
import pandas as pd

from scheduler.quality.replay import replay_trace

SEEDS = tuple(range(42, 52))


def run_one(variant: str, policy: str, seed: int, ratio: float = 1.3, trace_dir=None) -> dict:
    """One replay, reduced to plain data: a summary row and its discrete curve (for Dask workers)."""
    res = replay_trace(variant, policy, seed=seed, ratio=ratio, trace_dir=trace_dir)
    curve = res.curve()
    row = {"variant": variant, "policy": policy, "seed": seed,
           "unalloc_pct_at_100": float(np.interp(100, curve["arrived_pct"], curve["unalloc_pct"])),
           "frag_pct_at_100": float(np.interp(100, curve["arrived_pct"], curve["frag_pct"])),
           "unalloc_pct_end": float(100.0 - res.allocated[-1] / res.capacity_milli * 100.0),
           "pods": len(res.placed), "pods_placed": res.pods_placed, "gpu_pods_placed": res.gpu_pods_placed,
           "seconds": res.seconds}
    curve.insert(0, "seed", seed)
    curve.insert(0, "policy", policy)
    curve.insert(0, "variant", variant)
    return {"summary": row, "curve": curve}


@contextlib.contextmanager
def _client(client, n_workers: Optional[int]):
    from dask.distributed import Client, LocalCluster

    if client is None:
        # One BLAS thread per worker process: several processes × several BLAS threads thrash a small box.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as c:
            yield c
    elif isinstance(client, str):
        with Client(client) as c:
            yield c
    else:
        yield client


def _bar(done: int, total: int, width: int = 30, stream=sys.stderr) -> None:
    filled = int(width * done / total) if total else width
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} replays")
    if done == total:
        stream.write("\n")
    stream.flush()


def run_sweep(policies: Iterable[str], variants: Iterable[str] = ("default",), seeds: Iterable[int] = SEEDS,
              client=None, n_workers: Optional[int] = None, ratio: float = 1.3, trace_dir=None,
              progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every (variant, policy, seed) replay on Dask; return ``(summary, curves)`` DataFrames.

    ``summary`` has one row per replay (unallocated GPU % at 100% arrival, pods placed, seconds, ...);
    ``curves`` has one row per replay and arrived-% (allocation, unallocated, fragmentation).
    Use :func:`summarise` for means over seeds.
    """
    from dask.distributed import as_completed

    jobs = list(itertools.product(list(variants), list(policies), list(seeds)))
    with _client(client, n_workers) as c:
        futures = [c.submit(run_one, v, p, s, ratio, trace_dir, pure=False) for v, p, s in jobs]
        results = []
        if progress:
            _bar(0, len(futures))
        for i, fut in enumerate(as_completed(futures), 1):
            results.append(fut.result())
            if progress:
                _bar(i, len(futures))
    summary = pd.DataFrame([r["summary"] for r in results]).sort_values(["variant", "policy", "seed"])
    curves = pd.concat([r["curve"] for r in results], ignore_index=True)
    return summary.reset_index(drop=True), curves.sort_values(["variant", "policy", "seed", "arrived_pct"],
                                                             ignore_index=True)


def summarise(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seeds per (variant, policy)."""
    g = summary.groupby(["variant", "policy"])
    out = g.agg(unalloc_pct=("unalloc_pct_at_100", "mean"), unalloc_sd=("unalloc_pct_at_100", "std"),
                pods_placed=("pods_placed", "mean"), gpu_pods_placed=("gpu_pods_placed", "mean"),
                seconds=("seconds", "mean"), seeds=("seed", "count"))
    return out.reset_index()


def published(path=None) -> pd.DataFrame:
    """The FGD authors' published means (``fgd_expected_summary.csv``), with our policy names.

    Columns: ``variant, policy, arrived_pct, unalloc_pct, frag_pct, frag_rate_pct``. Read from
    ``<trace dir>/../../fgd-expected-results/`` unless ``path`` is given.
    """
    from pathlib import Path

    from scheduler.errors import SourceError
    from scheduler.quality.policies import PUBLISHED_NAMES
    from scheduler.sources.trace import default_trace_dir

    p = Path(path) if path else default_trace_dir().parents[1] / "fgd-expected-results" / "fgd_expected_summary.csv"
    if not p.is_file():
        raise SourceError(f"{p}: file not found (published FGD results)")
    df = pd.read_csv(p)
    names = {v: k for k, v in PUBLISHED_NAMES.items()}
    df = df[df["policy"].isin(names)]
    return pd.DataFrame({
        "variant": df["workload"].str.replace("openb_pod_list_", "", regex=False),
        "policy": df["policy"].map(names), "arrived_pct": df["arrived_gpu_pct_of_capacity"],
        "unalloc_pct": df["unalloc_pct_mean"], "frag_pct": df["frag_amount_pct_of_total_gpu_mean"],
        "frag_rate_pct": df["frag_ratio_pct_of_idle_gpu_mean"]}).reset_index(drop=True)
