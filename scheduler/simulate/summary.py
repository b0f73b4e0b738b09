"""Per-queue summary of a simulation: time-weighted means of the tick series, waits and evictions.

Tick rows are a step function (a row holds until the next row, the last one until ``end_time``), so means are
weighted by how long each row held, not by the number of rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY_COLUMNS = ("queue", "mean_allocated_gpu", "mean_fair_share_gpu", "mean_deserved_gpu",
                   "mean_pending_jobs", "jobs_arrived", "jobs_started", "jobs_completed", "mean_wait_s",
                   "evictions")


def time_weights(times: np.ndarray, end_time: float) -> np.ndarray:
    """How long each row of a step series held: ``next time - time``, the last one until ``end_time``."""
    times = np.asarray(times, dtype=float)
    if len(times) == 0:
        return times
    ends = np.append(times[1:], max(end_time, times[-1]))
    return ends - times


def queue_summary(frames: dict[str, pd.DataFrame], end_time: float) -> pd.DataFrame:
    """One row per queue (in record order) with the :data:`SUMMARY_COLUMNS`."""
    q = frames["queues"]
    names = list(q["queue"].cat.categories) if hasattr(q["queue"], "cat") else list(dict.fromkeys(q["queue"]))
    nq = len(names)
    out = pd.DataFrame({"queue": names})
    if len(q):
        nt = len(q) // nq
        w = time_weights(q["time"].to_numpy()[::nq], end_time)
        total = w.sum()

        def mean(col):
            values = q[col].to_numpy(dtype=float).reshape(nt, nq)
            if total <= 0:
                return values[-1]
            return np.nansum(values * w[:, None], axis=0) / total

        out["mean_allocated_gpu"] = mean("allocated_gpu")
        out["mean_fair_share_gpu"] = mean("fair_share_gpu")
        out["mean_deserved_gpu"] = mean("deserved_gpu")
        out["mean_pending_jobs"] = mean("pending_jobs")
    else:
        for col in ("mean_allocated_gpu", "mean_fair_share_gpu", "mean_deserved_gpu", "mean_pending_jobs"):
            out[col] = np.nan
    jobs = frames["jobs"]
    by_queue = jobs.groupby("queue", observed=True)
    out["jobs_arrived"] = out["queue"].map(by_queue.size()).fillna(0).astype(int)
    out["jobs_started"] = out["queue"].map(by_queue["first_start"].count()).fillna(0).astype(int)
    out["jobs_completed"] = out["queue"].map(by_queue["completion"].count()).fillna(0).astype(int)
    out["mean_wait_s"] = out["queue"].map(by_queue["wait_s"].mean())
    ev = frames["evictions"]
    out["evictions"] = out["queue"].map(ev.groupby("queue").size() if len(ev) else pd.Series(dtype=int))
    out["evictions"] = out["evictions"].fillna(0).astype(int)
    return out[list(SUMMARY_COLUMNS)]
