"""Cost over time: per-hour rates integrated into UTC days, for daily and 30-day totals and CSV export.

Each :meth:`CostLedger.add` closes the interval since the previous one at the previous rates (a step function:
a rate holds until the next sample, as the simulator's records do) and splits it at UTC midnight. A gap longer
than ``max_gap_s`` (the loop was down) is not charged, and each day records how many hours it covers, so a
partial day reads as one. Memory is one row per (day, category, queue), ``keep_days`` days, plus the cluster-wide
rate per category at most once a ``series_every_s`` for the last ``series_keep_s`` (:meth:`CostLedger.series`: the
Timeline's cost curve; 1,440 points for a day at one a minute).
"""

from __future__ import annotations

import io
from collections import defaultdict, deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import pandas as pd

from .rates import CostRates

DAILY_COLUMNS = ["day", "category", "queue", "gpu_hours", "cost", "covered_h"]


def utc_day(t: float) -> str:
    """``YYYY-MM-DD`` of a Unix time, in UTC."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d")


def _next_midnight(t: float) -> float:
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    midnight = d.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    return midnight + 86400.0


class CostLedger:
    """Daily cost totals per category and queue (see the module doc)."""

    def __init__(self, keep_days: int = 62, max_gap_s: float = 900.0, currency: str = "USD", *,
                 series_every_s: float = 60.0, series_keep_s: float = 86400.0) -> None:
        self.keep_days, self.max_gap_s, self.currency = keep_days, max_gap_s, currency
        self.series_every_s = series_every_s
        self._series: deque[tuple[float, dict[str, float]]] = deque(
            maxlen=max(1, int(series_keep_s / max(series_every_s, 1e-9))))
        self._amounts: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])  # gpu-s, cost
        self._covered: dict[str, float] = defaultdict(float)
        self._rates: Optional[list[tuple[str, str, float, float]]] = None    # category, queue, gpus, cost/h
        self._time: Optional[float] = None

    @property
    def last_time(self) -> Optional[float]:
        return self._time

    def add(self, rates: CostRates, at: Optional[float] = None) -> None:
        """Charge the previous rates up to ``at`` (default ``rates.time``), then hold ``rates`` from there."""
        t = float(rates.time if at is None else at)
        if self._rates is not None and self._time is not None and 0 < t - self._time <= self.max_gap_s:
            self._charge(self._time, t, self._rates)
        if self._time is None or t >= self._time:
            sums = rates.frame.groupby(["category", "queue"], as_index=False)[["gpus", "cost_per_h"]].sum()
            self._rates = list(zip(sums["category"], sums["queue"], sums["gpus"], sums["cost_per_h"]))
            self._time = t
            self.currency = rates.currency
            if not self._series or t - self._series[-1][0] >= self.series_every_s:
                self._series.append((t, rates.cluster()))
        self._prune(t)

    def _charge(self, start: float, end: float, rates) -> None:
        while start < end:
            stop = min(end, _next_midnight(start))
            day, seconds = utc_day(start), stop - start
            self._covered[day] += seconds
            for category, queue, gpus, cost_h in rates:
                acc = self._amounts[(day, category, queue)]
                acc[0] += gpus * seconds
                acc[1] += cost_h * seconds / 3600.0
            start = stop

    def _prune(self, now: float) -> None:
        oldest = utc_day(now - self.keep_days * 86400.0)
        for key in [k for k in self._amounts if k[0] < oldest]:
            del self._amounts[key]
        for day in [d for d in self._covered if d < oldest]:
            del self._covered[day]

    def series(self) -> pd.DataFrame:
        """Cluster-wide cost per hour by category over time (``time`` + one column per category)."""
        return pd.DataFrame([{"time": t, **values} for t, values in self._series])

    def daily(self) -> pd.DataFrame:
        """One row per (UTC day, category, queue): ``gpu_hours``, ``cost``, ``covered_h`` (hours of that day the
        ledger saw). Cluster-wide categories have ``queue == ""``."""
        rows = [(d, c, q, gs / 3600.0, cost, self._covered.get(d, 0.0) / 3600.0)
                for (d, c, q), (gs, cost) in sorted(self._amounts.items())]
        return pd.DataFrame(rows, columns=DAILY_COLUMNS)

    def totals(self, days: int = 30, now: Optional[float] = None, by_queue: bool = False) -> pd.DataFrame:
        """Cost and GPU-hours per category (and queue) over the last ``days`` UTC days, today included.

        ``attrs["covered_h"]`` says how many hours of that period the ledger saw.
        """
        now = self._time if now is None else now
        frame = self.daily()
        if now is None or frame.empty:
            out = pd.DataFrame(columns=["category", "queue", "gpu_hours", "cost"] if by_queue
                               else ["category", "gpu_hours", "cost"])
            out.attrs["covered_h"] = 0.0
            return out
        first = utc_day(now - (days - 1) * 86400.0)
        frame = frame[(frame["day"] >= first) & (frame["day"] <= utc_day(now))]
        keys = ["category", "queue"] if by_queue else ["category"]
        out = frame.groupby(keys, as_index=False)[["gpu_hours", "cost"]].sum()
        out.attrs["covered_h"] = sum(v for d, v in self._covered.items() if first <= d <= utc_day(now)) / 3600.0
        out.attrs["currency"] = self.currency
        return out

    def total(self, category: str, days: Optional[int] = 30, queue: Optional[str] = None,
              now: Optional[float] = None) -> float:
        """One number: the cost of ``category`` over the last ``days`` days (None: every day kept), cluster-wide
        or for one queue."""
        t = self.daily() if days is None else self.totals(days, now, by_queue=True)
        if t.empty:
            return 0.0
        t = t[t["category"] == category]
        if queue is not None:
            t = t[t["queue"] == queue]
        return float(t["cost"].sum())

    def to_csv(self, path: Optional[str | Path] = None) -> Optional[str]:
        """The daily rows as CSV (with ``currency``); a path writes the file, else the text is returned."""
        frame = self.daily().assign(currency=self.currency)
        if path is None:
            return frame.to_csv(index=False)
        frame.to_csv(path, index=False)
        return None

    @classmethod
    def from_csv(cls, source: str | Path | io.StringIO, **options) -> "CostLedger":
        """A ledger holding the daily rows of :meth:`to_csv` (to keep totals across restarts)."""
        frame = pd.read_csv(source, dtype={"day": str, "queue": str}, keep_default_na=False)
        missing = set(DAILY_COLUMNS) - set(frame.columns)
        if missing:
            from .prices import PriceError
            raise PriceError(str(source), f"not a cost ledger CSV: missing columns {sorted(missing)}")
        ledger = cls(**options)
        for row in frame.itertuples(index=False):
            ledger._amounts[(row.day, row.category, row.queue)] = [float(row.gpu_hours) * 3600.0, float(row.cost)]
            ledger._covered[row.day] = max(ledger._covered[row.day], float(row.covered_h) * 3600.0)
        if "currency" in frame and len(frame):
            ledger.currency = str(frame["currency"].iloc[0])
        return ledger


__all__ = ["CostLedger", "utc_day", "DAILY_COLUMNS"]
