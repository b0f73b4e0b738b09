"""Read DCGM metrics from Prometheus into the per-GPU frame, resiliently.

:class:`DcgmReader` detects which dcgm-exporter naming variant the server holds (one label-values and one
label-names probe, both filtered to DCGM series), asks for every canonical field in ONE instant query, asks
for utilisation over the idle window in one range query, and hands the samples to
:func:`~.dcgm.build_gpu_frame`. Every request has a timeout. Failures are retried with exponential backoff;
while backing off the reader answers at once from its last good frame. :meth:`DcgmReader.frame` never raises:
it returns ``(frame, ReaderStatus)`` where the status says ``ok``, ``no_data`` (Prometheus answered but holds
no DCGM series), ``stale`` (failed; the last good frame and its age) or ``error`` (failed and nothing good yet;
an empty frame). ``status.info["mig_instances"]`` is the per-MIG-instance usage of a fresh read
(:data:`~.dcgm_mig.INSTANCE_COLUMNS`), ``status.info["mig_problems"]`` what was wrong with MIG series.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional

import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from ..errors import SourceError
from ..model import Snapshot
from . import variants as V
from .dcgm import GpuKey, _match_hosts, build_gpu_frame, empty_frame, samples_from_vector

log = logging.getLogger(__name__)

OK, NO_DATA, STALE, ERROR = "ok", "no_data", "stale", "error"


@dataclass
class ReaderStatus:
    """How the last :meth:`DcgmReader.frame` call went.

    ``age_s`` is the age of the frame returned (0 when fresh, ``None`` when there is none);
    ``last_success`` the wall-clock time of the last good read; ``variant`` what detection found.
    """

    state: str
    message: str = ""
    age_s: Optional[float] = None
    last_success: Optional[float] = None
    variant: Optional[str] = None
    attempts: int = 0
    info: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state in (OK, NO_DATA)


def _utc(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


def _selector_join(selector: str) -> str:
    selector = selector.strip().strip("{}").strip()
    return f",{selector}" if selector else ""


class DcgmReader:
    """DCGM per-GPU frames from a Prometheus server.

    ``selector``: extra label matchers for every query (e.g. ``job="dcgm-exporter"``), to pick one exporter
    or cluster. ``variant``: skip detection and use this :class:`~.variants.DetectedVariant`.
    ``idle_window_s``/``idle_step_s``: the range query behind ``idle_allocated``. Other keyword arguments
    go to :func:`~.dcgm.build_gpu_frame` (thresholds). ``clock``/``sleep`` are injectable for tests.
    """

    def __init__(self, url: str, *, selector: str = "", timeout_s: float = 5.0, retries: int = 1,
                 backoff_s: float = 0.25, max_backoff_s: float = 30.0, idle_window_s: float = 600.0,
                 idle_step_s: Optional[float] = None, variant: Optional[V.DetectedVariant] = None,
                 redetect_s: float = 300.0, reservation_groups: Optional[dict[str, str]] = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 **frame_kw):
        self.url = url.rstrip("/")
        self.selector = _selector_join(selector)
        self.timeout_s = timeout_s
        self.retries = max(0, int(retries))
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.idle_window_s = idle_window_s
        self.idle_step_s = idle_step_s or max(1.0, idle_window_s / 30.0)
        self.redetect_s = redetect_s
        self.reservation_groups = reservation_groups
        self.frame_kw = frame_kw
        self._fixed_variant = variant
        self._variant: Optional[V.DetectedVariant] = variant
        self._detected_at = -math.inf
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._last_frame: Optional[pd.DataFrame] = None
        self._last_success: Optional[float] = None
        self._failures = 0
        self._next_try = -math.inf
        self._last_error = ""
        # Our own retry loop owns backoff; the client's urllib3 retries are switched off.
        self._prom = PrometheusConnect(url=self.url, timeout=timeout_s, retry=Retry(total=0, connect=0, read=0))

    # -------------------------------------------------------------------------------------- probes

    def _match(self) -> str:
        return f'{{__name__=~"DCGM_.*"{self.selector}}}'

    def detect(self) -> V.DetectedVariant:
        """Probe the server for its DCGM metric names and label names; raise :class:`SourceError` on failure."""
        try:
            names = self._prom.get_label_values("__name__", params={"match[]": self._match()})
            labels = self._prom.get_label_names(params={"match[]": self._match()})
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            raise SourceError(f"prometheus {self.url}: variant probe failed: {exc}") from exc
        return V.detect_variant(names or [], labels or [])

    def _current_variant(self, now: float) -> V.DetectedVariant:
        if self._fixed_variant is not None:
            return self._fixed_variant
        if self._variant is None or now - self._detected_at > self.redetect_s:
            self._variant = self.detect()
            self._detected_at = now
        return self._variant

    def _instant_samples(self, variant: V.DetectedVariant) -> pd.DataFrame:
        names = "|".join(spec.name for spec in variant.metrics.values())
        query = f'{{__name__=~"{names}"{self.selector}}}'
        try:
            result = self._prom.custom_query(query)
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            raise SourceError(f"prometheus {self.url}: query for DCGM series failed: {exc}") from exc
        return samples_from_vector(result, variant)

    def _idle_window(self, variant: V.DetectedVariant, snapshot: Snapshot, now: float) -> dict[GpuKey, float]:
        """Max utilisation per GPU over the window, for GPUs whose data covers the whole window."""
        host, gpu = variant.label("host"), variant.label("gpu")
        if not host or not gpu:
            return {}
        for field_name in (V.GPU_UTIL, V.GR_ENGINE_ACTIVE):
            spec = variant.metrics[field_name]
            out = self._window_max(f'max by ({host}, {gpu}) ({spec.name}{{{self.selector.lstrip(",")}}})',
                                   (host, gpu), spec.scale, snapshot, now)
            if out is not None:
                return out
        return {}

    def _idle_instances(self, variant: V.DetectedVariant, snapshot: Snapshot,
                        now: float) -> dict[tuple[str, int, int], float]:
        """Max graphics-engine activity per MIG instance over the window (NVML gives instances no GPU_UTIL)."""
        host, gpu, inst = variant.label("host"), variant.label("gpu"), variant.label("mig_instance")
        if not host or not gpu or not inst:
            return {}
        spec = variant.metrics[V.GR_ENGINE_ACTIVE]
        query = f'max by ({host}, {gpu}, {inst}) ({spec.name}{{{inst}!=""{self.selector}}})'
        return self._window_max(query, (host, gpu, inst), spec.scale, snapshot, now) or {}

    def _window_max(self, query: str, labels: tuple[str, ...], scale: float, snapshot: Snapshot,
                    now: float) -> Optional[dict]:
        """``(node, int(label), ...) -> max`` over the idle window of a range query grouped by ``labels`` (host
        first), for series whose data covers the whole window; None when the query returned nothing."""
        start, end = now - self.idle_window_s, now
        try:
            result = self._prom.custom_query_range(query, start_time=_utc(start), end_time=_utc(end),
                                                   step=f"{self.idle_step_s:g}s")
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            raise SourceError(f"prometheus {self.url}: idle-window range query failed: {exc}") from exc
        if not result:
            return None
        host = labels[0]
        host_map = _match_hosts({r["metric"].get(host, "") for r in result}, (n.name for n in snapshot.nodes))
        out: dict = {}
        for r in result:
            node = host_map.get(r["metric"].get(host, ""))
            ids = [r["metric"].get(label, "") for label in labels[1:]]
            values = [(float(t), float(v)) for t, v in r.get("values", []) if not V.is_sentinel(float(v))]
            if node is None or not all(i.isdigit() for i in ids) or not values:
                continue
            if values[0][0] > start + self.idle_step_s + 1e-6:  # data does not cover the window
                continue
            out[(node, *map(int, ids))] = max(v for _, v in values) * scale
        return out

    # -------------------------------------------------------------------------------------- frame

    def _read(self, snapshot: Snapshot, now: float, reservation_groups) -> tuple[pd.DataFrame, ReaderStatus]:
        variant = self._current_variant(now)
        samples = self._instant_samples(variant)
        if samples.empty and self._fixed_variant is None:
            self._variant = None  # maybe the exporter was upgraded: probe again next time
        idle = self._idle_window(variant, snapshot, now) if not samples.empty else {}
        has_mig = bool(len(samples)) and bool((samples["mig"] != "").any())
        idle_instances = self._idle_instances(variant, snapshot, now) if has_mig else {}
        info: dict = {}
        frame = build_gpu_frame(snapshot, samples, idle, reservation_groups=reservation_groups, info=info,
                                idle_instance_util=idle_instances, **self.frame_kw)
        info["series"] = int(len(samples))
        state, message = OK, f"{len(samples)} DCGM series, variant {variant.describe()}"
        if samples.empty:
            state, message = NO_DATA, f"prometheus {self.url} has no DCGM series matching {self._match()}"
        elif info.get("unknown_host_series"):
            message += f"; {info['unknown_host_series']} series on hosts not in the snapshot"
        if len(info.get("mig_instances", ())):
            message += f"; {len(info['mig_instances'])} MIG instances"
        if info.get("mig_problem_count"):
            message += f"; {info['mig_problem_count']} MIG series problems, first: {info['mig_problems'][0]}"
        return frame, ReaderStatus(state=state, message=message, age_s=0.0, last_success=now,
                                   variant=variant.profile, info=info)

    def frame(self, snapshot: Snapshot, reservation_groups: Optional[dict[str, str]] = None
              ) -> tuple[pd.DataFrame, ReaderStatus]:
        """``(frame, status)`` for ``snapshot``; never raises (see the module docstring)."""
        groups = reservation_groups if reservation_groups is not None else self.reservation_groups
        with self._lock:
            now = self._clock()
            if now < self._next_try:
                return self._fallback(now, f"backing off for {self._next_try - now:.1f}s after: {self._last_error}",
                                      attempts=0)
            attempts = 0
            for attempt in range(self.retries + 1):
                attempts += 1
                try:
                    frame, status = self._read(snapshot, self._clock(), groups)
                except SourceError as exc:
                    self._last_error = str(exc)
                    self._variant = self._fixed_variant  # re-detect after a failure
                    if attempt < self.retries:
                        self._sleep(min(self.backoff_s * 2 ** attempt, self.max_backoff_s))
                    continue
                except Exception as exc:  # the resilience boundary: a bad answer must not reach the caller
                    log.exception("DCGM frame from %s failed", self.url)
                    self._last_error = f"{type(exc).__name__}: {exc}"
                    break
                self._failures, self._next_try = 0, -math.inf
                self._last_frame, self._last_success = frame, status.last_success
                status.attempts = attempts
                return frame, status
            self._failures += 1
            now = self._clock()
            self._next_try = now + min(self.backoff_s * 2 ** (self._failures + self.retries), self.max_backoff_s)
            return self._fallback(now, self._last_error, attempts)

    def _fallback(self, now: float, message: str, attempts: int) -> tuple[pd.DataFrame, ReaderStatus]:
        variant = self._variant.profile if self._variant else None
        if self._last_frame is None:
            return empty_frame(), ReaderStatus(state=ERROR, message=message, attempts=attempts, variant=variant)
        age = now - self._last_success
        return self._last_frame, ReaderStatus(state=STALE, message=f"stale for {age:.1f}s: {message}", age_s=age,
                                              last_success=self._last_success, attempts=attempts, variant=variant)
