"""A simulated dcgm-exporter: DCGM-format ``/metrics`` for a snapshot's GPUs, from its tasks' ``usage``.

The exposition reproduces dcgm-exporter's (``internal/pkg/rendermetrics/render_metrics.go``; ecosystem.md
§3.3/§3.5): one ``# HELP``/``# TYPE`` pair per family, families in DCGM field-id order, and per GPU the labels
``gpu, UUID, pci_bus_id, device, modelName, Hostname, <label-type fields>, <kubernetes attributes>`` with the
last two groups each in sorted key order (Go templates range over maps sorted). Integer DCGM fields print as
``%d``, doubles as ``%f``. Names, label names and units follow an :class:`~.variants.ExporterVariant`.

Pod attribution is dcgm-exporter's (§3.4): a GPU held by one whole-GPU pod is labelled with that pod; a GPU
shared by KAI fractional pods is labelled with KAI's reservation pod (``kai-resource-reservation``); an idle
GPU has no pod labels. With ``per_pod=True`` the exporter behaves like ``--kubernetes-virtual-gpus`` with
NVML per-process data (PR #594): ``FB_USED`` and ``GPU_UTIL`` get the unlabelled device-level series plus
one series per pod with that pod's own value (and ``pod_uid``); every other family is repeated once per pod
with the whole-GPU value.

Simulated values per GPU (documented so tests can derive them by hand):
memory used = sum of the holders' ``usage.gpu_memory_mib`` (per device), capped at total - reserved;
reserved = min(total, :data:`RESERVED_MIB`); free = total - used - reserved; utilisation =
min(1, sum of the holders' ``usage.gpu_util``); graphics-engine activity = utilisation; DRAM activity =
utilisation / 2; power = idle + utilisation * (max - idle) watts for the model (:data:`POWER_RANGE_W`);
temperature = 30 + 40 * utilisation degrees C; XID = 0. ``overrides`` replace any of these per GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from ..model import Snapshot
from . import variants as V
from .allocation import (
    RESERVATION_CONTAINER,
    RESERVATION_NAMESPACE,
    gpu_uuid,
    pod_uid,
    reservation_pod_name,
    slices,
)

RESERVED_MIB = 512.0
"""GPU memory the driver reserves (FB_RESERVED) in the simulation, per GPU."""

POWER_RANGE_W = {"H100": (70.0, 700.0), "H200": (70.0, 700.0), "A100": (50.0, 400.0), "L4": (16.0, 72.0),
                 "L40": (35.0, 300.0), "V100": (40.0, 300.0), "T4": (10.0, 70.0)}
DEFAULT_POWER_RANGE_W = (50.0, 300.0)
WORKLOAD_CONTAINER = "main"
DRIVER_VERSION = "550.54.15"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GpuKey = tuple[str, int]


@dataclass
class SimPod:
    """A pod the simulated exporter labels a series with."""

    namespace: str
    pod: str
    container: str
    uid: Optional[str] = None
    vgpu: Optional[str] = None
    fb_used_mib: float = 0.0
    util: float = 0.0


@dataclass
class SimGpu:
    """One simulated GPU: identity, canonical values, the pod it is credited to, and its sharing pods."""

    node: str
    index: int
    uuid: str
    model_name: str
    pci_bus_id: str
    values: dict[str, float]
    credited: Optional[SimPod] = None
    sharers: list[SimPod] = field(default_factory=list)


def _power_range(model: Optional[str]) -> tuple[float, float]:
    for key, rng in POWER_RANGE_W.items():
        if model and key.lower() in model.lower():
            return rng
    return DEFAULT_POWER_RANGE_W


def simulate_gpus(snapshot: Snapshot, overrides: Optional[dict[GpuKey, dict[str, float]]] = None) -> list[SimGpu]:
    """The simulated exporter's view of every GPU in ``snapshot`` (see the module docstring for the rules)."""
    overrides = overrides or {}
    usage = {t.name: t.usage for _, t in snapshot.iter_tasks()}
    holders: dict[GpuKey, list] = {}
    for row in slices(snapshot).itertuples(index=False):
        holders.setdefault((row.node, row.gpu_index), []).append(row)
    out = []
    for node in snapshot.nodes:
        idle_w, max_w = _power_range(node.gpu_model)
        total = float(node.gpu_memory_mib)
        reserved = min(total, RESERVED_MIB)
        for index in range(node.gpus):
            rows = holders.get((node.name, index), [])
            pods = []
            for k, row in enumerate(rows):
                u = usage.get(row.task)
                pods.append(SimPod(namespace=row.namespace, pod=row.pod, container=WORKLOAD_CONTAINER,
                                   uid=pod_uid(row.namespace, row.pod),
                                   vgpu=str(k) if row.fractional else None,
                                   fb_used_mib=float(u.gpu_memory_mib) if u else 0.0,
                                   util=float(u.gpu_util) if u else 0.0))
            used = min(max(total - reserved, 0.0), sum(p.fb_used_mib for p in pods))
            util = min(1.0, sum(p.util for p in pods))
            values = {
                V.FB_USED: used, V.FB_RESERVED: reserved, V.FB_FREE: total - used - reserved, V.FB_TOTAL: total,
                V.GPU_UTIL: util, V.GR_ENGINE_ACTIVE: util, V.DRAM_ACTIVE: util / 2,
                V.POWER: idle_w + util * (max_w - idle_w), V.TEMP: 30 + 40 * util, V.XID: 0.0,
            }
            values.update(overrides.get((node.name, index), {}))
            credited = None
            if any(r.fractional for r in rows):
                group = next((r.gpu_group for r in rows if r.gpu_group), None) or gpu_uuid(node.name, index)
                credited = SimPod(RESERVATION_NAMESPACE, reservation_pod_name(node.name, group),
                                  RESERVATION_CONTAINER)
            elif pods:
                credited = pods[0]
            out.append(SimGpu(node=node.name, index=index, uuid=gpu_uuid(node.name, index),
                              model_name=f"NVIDIA {node.gpu_model}" if node.gpu_model else "NVIDIA GPU",
                              pci_bus_id=f"00000000:{(0x18 + 0x20 * index) % 256:02X}:00.0",
                              values=values, credited=credited, sharers=pods))
    return out


# ------------------------------------------------------------------------------------------ exposition

def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(canonical: float, spec: V.MetricSpec) -> str:
    if V.is_sentinel(canonical):  # a DCGM blank goes out raw, as older exporters printed it
        return f"{int(canonical)}" if spec.integer else f"{canonical:f}"
    raw = canonical / spec.scale
    return f"{int(round(raw))}" if spec.integer else f"{raw:f}"


def _attributes(variant: V.ExporterVariant, pod: SimPod, with_uid: bool) -> list[tuple[str, str]]:
    names = variant.attribute_labels
    attrs = [(names["container"], pod.container), (names["namespace"], pod.namespace), (names["pod"], pod.pod)]
    if with_uid and pod.uid:
        attrs.append(("pod_uid", pod.uid))
    if pod.vgpu is not None:
        attrs.append(("vgpu", pod.vgpu))
    return sorted(attrs)


def render_exposition(gpus: list[SimGpu], variant: V.ExporterVariant | str = V.DEFAULT_EXPORTER_VARIANT,
                      per_pod: bool = False, driver_version: str = DRIVER_VERSION) -> str:
    """dcgm-exporter's text exposition for ``gpus`` in ``variant`` naming."""
    if isinstance(variant, str):
        variant = V.EXPORTER_VARIANTS[variant]
    families = sorted(((f, s) for f, s in variant.metrics.items() if s.default), key=lambda fs: fs[1].field_id)
    lines: list[str] = []
    for canonical, spec in families:
        lines.append(f"# HELP {spec.name} {spec.help}")
        lines.append(f"# TYPE {spec.name} {spec.type}")
        for gpu in gpus:
            value = gpu.values.get(canonical)
            if value is None:  # current exporters skip a field DCGM has no value for
                continue
            fixed = (f'gpu="{gpu.index}",{variant.uuid_label}="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
                     f'device="nvidia{gpu.index}",modelName="{_escape(gpu.model_name)}",'
                     f'{variant.host_label}="{_escape(gpu.node)}",{variant.driver_label}="{driver_version}"')
            text = _format_value(value, spec)
            if per_pod and gpu.sharers:
                per_process = canonical in V.PER_POD_FIELDS
                if per_process:
                    lines.append(f"{spec.name}{{{fixed}}} {text}")
                for pod in gpu.sharers:
                    own = text
                    if per_process:
                        own = _format_value(pod.fb_used_mib if canonical == V.FB_USED else pod.util, spec)
                    attrs = ",".join(f'{k}="{_escape(v)}"' for k, v in _attributes(variant, pod, per_process))
                    lines.append(f"{spec.name}{{{fixed},{attrs}}} {own}")
            elif gpu.credited is not None:
                attrs = ",".join(f'{k}="{_escape(v)}"' for k, v in _attributes(variant, gpu.credited, False))
                lines.append(f"{spec.name}{{{fixed},{attrs}}} {text}")
            else:
                lines.append(f"{spec.name}{{{fixed}}} {text}")
    return "\n".join(lines) + "\n"


def simulated_samples(gpus: list[SimGpu]):
    """DCGM samples (:data:`~.dcgm.SAMPLE_COLUMNS`, canonical units) straight from simulated GPUs.

    What :func:`~.dcgm.samples_from_exposition` gives for this exporter's exclusive-mode exposition (every
    field, including ``fb_total_mib``), without rendering and parsing ten series per GPU on every tick.
    """
    import numpy as np
    import pandas as pd

    from .dcgm import SAMPLE_COLUMNS

    rows = []
    for g in gpus:
        pod = g.credited
        ns, name, container = (pod.namespace, pod.pod, pod.container) if pod else ("", "", "")
        for field_name, value in g.values.items():
            v = np.nan if value is None or V.is_sentinel(value) else float(value)
            rows.append((g.node, g.index, g.uuid, g.model_name, field_name, v, name, ns, container, "", ""))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS).astype({"gpu_index": "int64", "value": "float64"})


# ------------------------------------------------------------------------------------------ live state + server

class ExporterState:
    """The exporter's current values; the live loop calls :meth:`update` each tick, the server :meth:`render`.

    Thread-safe: an update builds the new exposition text completely, then swaps it in under a lock, so a
    scrape sees either the previous tick or the new one, never a mix.
    """

    def __init__(self, snapshot: Optional[Snapshot] = None, variant: str = V.DEFAULT_EXPORTER_VARIANT,
                 per_pod: bool = False):
        if variant not in V.EXPORTER_VARIANTS:
            raise ValueError(f"unknown exporter variant {variant!r} (known: {', '.join(V.EXPORTER_VARIANTS)})")
        self._lock = threading.Lock()
        self._variant = V.EXPORTER_VARIANTS[variant]
        self._per_pod = per_pod
        self._gpus: list[SimGpu] = []
        self._text = render_exposition([], self._variant, per_pod)
        self.updates = 0
        if snapshot is not None:
            self.update(snapshot)

    @property
    def variant(self) -> V.ExporterVariant:
        return self._variant

    def update(self, snapshot: Snapshot, overrides: Optional[dict[GpuKey, dict[str, float]]] = None) -> None:
        """Recompute every GPU from ``snapshot`` (a new tick)."""
        gpus = simulate_gpus(snapshot, overrides)
        text = render_exposition(gpus, self._variant, self._per_pod)
        with self._lock:
            self._gpus, self._text = gpus, text
            self.updates += 1

    def gpus(self) -> list[SimGpu]:
        """The GPUs of the last update (what the exporter currently reports)."""
        with self._lock:
            return list(self._gpus)

    def render(self) -> str:
        """The current ``/metrics`` body."""
        with self._lock:
            return self._text


def _handler_for(state: ExporterState):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = state.render().encode(), CONTENT_TYPE, 200
            elif path in ("/", "/health"):
                body, ctype, code = b"kaidash simulated dcgm-exporter: see /metrics\n", "text/plain", 200
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - silence per-request logging
            pass

    return Handler


class ExporterServer:
    """``/metrics`` over HTTP for an :class:`ExporterState`, served from a daemon thread.

    ``port=0`` picks a free port; :attr:`port` and :attr:`url` tell which after :meth:`start`.
    """

    def __init__(self, state: ExporterState, host: str = "127.0.0.1", port: int = 0):
        self.state = state
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(state))
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None
        self._served = False

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> "ExporterServer":
        self._served = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kaidash-exporter", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (the standalone command); returns after :meth:`stop` or an interrupt."""
        self._served = True
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket (safe to call more than once, or before serving)."""
        if self._served:
            self._httpd.shutdown()  # waits for serve_forever to return; it never returns if never started
            self._served = False
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ExporterServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
