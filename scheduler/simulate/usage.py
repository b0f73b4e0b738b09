"""Historical queue usage for KAI's time-based fair share (kai-semantics.md §b.5).

KAI reads usage from Prometheus (``pkg/scheduler/cache/usagedb/prometheus/prometheus.go``): for every queue
and resource, the sum over a window of the queue's allocation samples, divided by the sum over the same window
of the cluster capacity samples, both sampled every ``queryResolution`` (1 min) and, when a half-life is set,
both weighted by ``0.5^((now - t) / halfLife)``::

    usage[q, r] = Σ_s alloc[q, r](s)·decay(s) / Σ_s capacity[r](s)·decay(s)

The window is sliding (``sum_over_time(expr[window:resolution])``, default one week) or tumbling (from the
last reset ``start + n·window`` up to now). Samples exist only from the moment the cluster was first recorded,
so early in a simulation the usage is normalised over the time simulated so far, as Prometheus would do over
the series it holds. Usage is re-read every ``fetchInterval`` (1 min); between fetches KAI keeps the last value.

Storage is a ring buffer of one slot per resolution step (a ``steps × queues × 3`` array), filled with
slices when time advances: cost and memory do not depend on how many cycles ran.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..errors import KaidashError
from ..model import RESOURCES

WEEK_S = 7 * 24 * 3600.0
WINDOW_TYPES = ("sliding", "tumbling")


class UsageConfigError(KaidashError, ValueError):
    """A usage window parameter is out of range (names the field)."""


@dataclass
class UsageConfig:
    """KAI's ``usageDBConfig.usageParams`` (defaults as in ``usagedb/api/defaults.go``).

    ``half_life_s = None`` disables decay (KAI's default). ``tumbling_start_s`` is an absolute time; ``None``
    means the simulation start.
    """

    window_s: float = WEEK_S
    window_type: str = "sliding"
    half_life_s: Optional[float] = None
    resolution_s: float = 60.0
    fetch_interval_s: float = 60.0
    tumbling_start_s: Optional[float] = None

    def validate(self) -> None:
        if self.window_type not in WINDOW_TYPES:
            raise UsageConfigError(f"usage.window_type: {self.window_type!r} is not one of {', '.join(WINDOW_TYPES)}")
        for name in ("window_s", "resolution_s", "fetch_interval_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise UsageConfigError(f"usage.{name}: must be a positive number of seconds, got {value!r}")
        if self.half_life_s is not None and not (self.half_life_s > 0 and math.isfinite(self.half_life_s)):
            raise UsageConfigError(f"usage.half_life_s: must be positive seconds or None, got {self.half_life_s!r}")
        if self.resolution_s > self.window_s:
            raise UsageConfigError("usage.resolution_s: must not exceed usage.window_s")


class UsageTracker:
    """Per-queue allocation samples on a fixed time grid, and the normalised usage computed from them.

    Rows of the ``allocated`` matrices passed to :meth:`advance` follow ``queue_names``; columns follow
    :data:`~scheduler.model.RESOURCES` (gpu, cpu, memory). Parents must carry their subtree sums (KAI's
    queue-controller publishes a parent's allocation as the sum of its children's:
    ``pkg/queuecontroller/controllers/resource_updater/resource_updater.go``).
    """

    def __init__(self, queue_names: Sequence[str], config: Optional[UsageConfig] = None,
                 start_time: float = 0.0) -> None:
        self.config = dataclasses.replace(config) if config is not None else UsageConfig()   # own copy
        self.config.validate()
        self.queue_names = list(queue_names)
        self.time = float(start_time)
        self.tumbling_start = float(start_time if self.config.tumbling_start_s is None
                                    else self.config.tumbling_start_s)
        res = self.config.resolution_s
        self._slots = int(math.ceil(self.config.window_s / res)) + 1
        nq = len(self.queue_names)
        self._step_time = np.full(self._slots, -np.inf)           # time of the sample in each slot
        self._alloc = np.zeros((self._slots, nq, len(RESOURCES)))
        self._capacity = np.zeros((self._slots, len(RESOURCES)))
        self._last_fetch: Optional[float] = None
        self._fetched = np.zeros((nq, len(RESOURCES)))

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the sample buffers (fixed at construction)."""
        return self._step_time.nbytes + self._alloc.nbytes + self._capacity.nbytes

    def advance(self, until: float, allocated: np.ndarray, capacity: np.ndarray) -> None:
        """Record that ``allocated`` (queues × 3) and ``capacity`` (3,) held from the current time to ``until``.

        Every grid step ``s = k·resolution`` with ``time < s <= until`` gets these values (a sample at ``s``
        reads the last value published before it). Moving backwards is an error.
        """
        until = float(until)
        if until < self.time:
            raise UsageConfigError(f"usage time: cannot go back from {self.time} to {until}")
        res = self.config.resolution_s
        first = math.floor(self.time / res) + 1
        last = math.floor(until / res)
        self.time = until
        if last < first:
            return
        first = max(first, last - self._slots + 1)   # older steps would be overwritten anyway
        steps = np.arange(first, last + 1)
        slots = steps % self._slots
        self._step_time[slots] = steps * res
        self._alloc[slots] = allocated
        self._capacity[slots] = capacity

    def usage(self, now: Optional[float] = None) -> np.ndarray:
        """Normalised usage (queues × 3) at ``now`` (default: the recorded time), computed afresh."""
        now = self.time if now is None else float(now)
        t = self._step_time
        if self.config.window_type == "sliding":
            valid = (t > now - self.config.window_s) & (t <= now)
        else:
            valid = (t >= self.window_start(now)) & (t <= now)
        weight = valid.astype(float)
        if self.config.half_life_s is not None:
            age = np.where(valid, now - t, 0.0)
            weight *= np.power(0.5, age / self.config.half_life_s)
        numerator = np.tensordot(weight, self._alloc, axes=(0, 0))       # queues × 3
        denominator = weight @ self._capacity                              # 3
        return np.divide(numerator, denominator, out=np.zeros_like(numerator),
                         where=denominator[None, :] > 0)

    def window_start(self, now: float) -> float:
        """Start of the window at ``now``: ``now - window`` (sliding) or the last tumbling reset."""
        w = self.config.window_s
        if self.config.window_type == "sliding":
            return now - w
        if now <= self.tumbling_start:
            return now if now < self.tumbling_start else self.tumbling_start
        n = max(0, math.ceil((now - self.tumbling_start) / w) - 1)
        return self.tumbling_start + n * w

    def fetch(self, now: float) -> tuple[np.ndarray, bool]:
        """The usage the scheduler sees at ``now``: re-read every ``fetch_interval_s``, else the last value.

        Returns ``(usage, refreshed)``.
        """
        if self._last_fetch is None or now >= self._last_fetch + self.config.fetch_interval_s:
            self._fetched = self.usage(now)
            self._last_fetch = now
            return self._fetched, True
        return self._fetched, False

    def next_fetch_time(self) -> float:
        """When :meth:`fetch` will next re-read (``-inf`` before the first fetch)."""
        if self._last_fetch is None:
            return -math.inf
        return self._last_fetch + self.config.fetch_interval_s

    def as_dict(self, usage: np.ndarray) -> dict[str, dict[str, float]]:
        """``{queue: {gpu, cpu, memory}}``: the shape of ``Snapshot.usage``."""
        return {q: {r: float(usage[i, j]) for j, r in enumerate(RESOURCES)}
                for i, q in enumerate(self.queue_names)}
