"""Live, read-only view of a Kubernetes cluster scheduled by KAI: list then watch, always current Snapshot.

One thread per resource type (nodes, pods, priority classes, KAI queues, pod groups, bind requests) lists the
collection, then watches from the list's resourceVersion, applying ADDED/MODIFIED/DELETED events to a cache.
A watch that ends is resumed from the last version seen; a 410 Gone (history compacted) triggers a relist;
other failures back off exponentially (with jitter) and retry. A 403 on one resource type is reported by name
("forbidden: cannot list podgroups.scheduling.run.ai: ...") and the others keep working; a 403 after that type
was listed (a role without watch, an API server still loading RBAC after a restart) keeps its cached objects in
use, marked stale.

:meth:`KubeSource.snapshot` converts the cache into a validated :class:`~scheduler.model.Snapshot` at any time
(thread-safe; re-converted only when something changed, and then incrementally: an
:class:`~scheduler.sources.k8s_convert.IncrementalConverter` reconverts only the objects that changed and rebuilds
only the jobs they touch). :meth:`KubeSource.status` is the per-resource health
the dashboard shows; :attr:`KubeSource.warnings` lists every object that was skipped or adjusted.

Liveness: a watch on a quiet cluster carries nothing for a minute or more (the server's bookmarks are the only
traffic), so silence cannot tell a hung API server from an idle one. A probe thread asks ``GET /version``
every ``probe_interval_s`` with that as its timeout; when it fails, every listed resource is marked stale
("API server not answering") and the watch streams are cut so they reconnect, and the next successful watch
marks them ok again. A server that stops sending without closing its connections therefore shows as stale
within about two probe intervals, not after the watch's 330 s read timeout.

Read-only by construction: the client is a :class:`ReadOnlyApiClient` that refuses any HTTP method but GET,
and the only API calls made are the generated ``list_*`` functions (with ``watch=True`` for watches) and the
``GET /version`` probe.
"""

from __future__ import annotations

import copy
import os

import json
import random
import threading
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterable, Optional

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import (ConnectTimeoutError, MaxRetryError, NameResolutionError, NewConnectionError,
                               ReadTimeoutError, SSLError)
from kubernetes.watch.watch import iter_resp_lines

from ..errors import SourceError
from ..model import SchedulerConfig, Snapshot
from .k8s_convert import DEFAULT_QUEUE_LABEL_KEY, DEFAULT_SCHEDULER_NAME, Conversion, IncrementalConverter
from .warnings import SourceWarning


class ReadOnlyApiClient(k8s.ApiClient):
    """An ``ApiClient`` that can only send GET requests: kube mode never writes to the cluster."""

    def call_api(self, method, url, *args, **kwargs):  # noqa: D401 - same contract as the parent
        if str(method).upper() != "GET":
            raise SourceError(f"kaidash is read-only: refused {method} {url}")
        return super().call_api(method, url, *args, **kwargs)


@dataclass(frozen=True)
class ResourceType:
    """A collection the source lists and watches."""

    name: str  # key in RawObjects
    display: str  # plural.group, as RBAC and error messages name it
    make_list: Callable[[k8s.ApiClient], Callable[..., Any]]
    required: bool = False  # nodes and pods: without them there is no cluster to show


def _custom(group: str, version: str, plural: str) -> Callable[[k8s.ApiClient], Callable[..., Any]]:
    return lambda api: partial(k8s.CustomObjectsApi(api).list_cluster_custom_object, group, version, plural)


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("nodes", "nodes", lambda api: k8s.CoreV1Api(api).list_node, required=True),
    ResourceType("pods", "pods", lambda api: k8s.CoreV1Api(api).list_pod_for_all_namespaces, required=True),
    ResourceType("priorityclasses", "priorityclasses.scheduling.k8s.io",
                 lambda api: k8s.SchedulingV1Api(api).list_priority_class),
    ResourceType("queues", "queues.scheduling.run.ai", _custom("scheduling.run.ai", "v2", "queues")),
    ResourceType("podgroups", "podgroups.scheduling.run.ai", _custom("scheduling.run.ai", "v2alpha2", "podgroups")),
    ResourceType("bindrequests", "bindrequests.scheduling.run.ai",
                 _custom("scheduling.run.ai", "v1alpha2", "bindrequests")),
    ResourceType("topologies", "topologies.kai.scheduler", _custom("kai.scheduler", "v1alpha1", "topologies")),
    # DRA (built in since Kubernetes 1.34; absent on older clusters): pods' GPU claims and nodes' GPU devices
    ResourceType("resourceclaims", "resourceclaims.resource.k8s.io", _custom("resource.k8s.io", "v1", "resourceclaims")),
    ResourceType("resourceslices", "resourceslices.resource.k8s.io", _custom("resource.k8s.io", "v1", "resourceslices")),
)
"""Everything kube mode reads; the shipped RBAC grants get/list/watch on exactly these."""

STATES = ("syncing", "ok", "stale", "forbidden", "absent", "error", "stopped")


@dataclass
class ResourceStatus:
    """Health of one watched resource type, for the dashboard's loop-health display.

    ``state``: ``syncing`` (first list in flight), ``ok`` (listed and watching), ``stale`` (was ok, now
    reconnecting: data is from ``last_event_time``), ``forbidden`` (RBAC 403), ``absent`` (404: CRD not
    installed), ``error`` (never listed successfully), ``stopped``. ``required``: the source cannot show a
    cluster without it (nodes, pods); an optional resource may be absent (a cluster without KAI's Topology CRD
    or DRA) and the source is still healthy.
    """

    resource: str
    state: str = "syncing"
    items: int = 0
    resource_version: Optional[str] = None
    last_event_time: Optional[float] = None
    last_list_time: Optional[float] = None
    error: Optional[str] = None
    relists: int = 0
    reconnects: int = 0
    bookmarks: int = 0  # BOOKMARK events: the server moved resource_version on without a change
    required: bool = False

    @property
    def usable(self) -> bool:
        """Whether the cache holds a listed state (possibly stale)."""
        return self.state in ("ok", "stale")

    @property
    def healthy(self) -> bool:
        """Listed and watching, or an optional resource the cluster does not serve (nothing to read: the
        snapshot is complete without it)."""
        return self.state == "ok" or (self.state == "absent" and not self.required)


@dataclass
class SourceStatus:
    """Health of the whole source: one :class:`ResourceStatus` per resource type."""

    resources: dict[str, ResourceStatus] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        """Every resource healthy (:attr:`ResourceStatus.healthy`): an absent optional CRD (KAI's Topology, DRA
        on an older cluster) does not make the source unhealthy; :attr:`absent` still names it."""
        return all(r.healthy for r in self.resources.values())

    @property
    def absent(self) -> list[str]:
        """Resources the API server does not serve (CRD not installed), required or not."""
        return [name for name, r in self.resources.items() if r.state == "absent"]

    @property
    def synced(self) -> bool:
        """Every resource has settled at least once (listed, or known forbidden / absent / failing)."""
        return all(r.state != "syncing" for r in self.resources.values())

    def __str__(self) -> str:
        """One line for a status bar: ``nodes ok, pods ok, podgroups forbidden, ...``."""
        return ", ".join(f"{name} {r.state}" for name, r in self.resources.items())

    def to_dict(self) -> dict:
        return {name: {"state": r.state, "items": r.items, "resource_version": r.resource_version,
                       "last_event_time": r.last_event_time, "last_list_time": r.last_list_time,
                       "error": r.error, "relists": r.relists, "reconnects": r.reconnects,
                       "bookmarks": r.bookmarks}
                for name, r in self.resources.items()}


class _Expired(Exception):
    """A watch reported 410 Gone: the resourceVersion is too old, relist."""


class _WatchError(Exception):
    """A watch stream delivered an ERROR event other than 410."""


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        message = None
        try:
            body = json.loads(exc.body) if exc.body else None
            if isinstance(body, dict):
                message = body.get("message")
        except (TypeError, ValueError):
            pass
        return f"HTTP {exc.status} {exc.reason}: {message or (exc.body or '').strip()[:300]}".strip()
    if isinstance(exc, MaxRetryError):   # the API server cannot be reached: say so in plain words
        pool = getattr(exc, "pool", None)
        where = f" at {pool.host}:{pool.port}" if pool is not None else ""
        return f"cannot reach the API server{where}: {_connection_reason(exc.reason)}"
    text = str(exc).strip() or type(exc).__name__
    return text[:300]


def _connection_reason(reason: BaseException | None) -> str:
    """``connection refused``, ``name not resolved (...)``, ``timed out``, ``TLS error: ...`` from urllib3."""
    cause = getattr(reason, "__cause__", None) or getattr(reason, "__context__", None)
    if isinstance(reason, NameResolutionError):
        return f"name not resolved ({getattr(cause, 'strerror', None) or cause or reason})"
    if isinstance(reason, NewConnectionError) and isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()   # a subclass of ConnectTimeoutError, but usually "connection refused"
    if isinstance(reason, (ConnectTimeoutError, ReadTimeoutError)):
        return "timed out"
    if isinstance(reason, SSLError):
        return f"TLS error: {cause or reason}"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return str(reason or "unknown error")[:200]


def _failures_text(failed: list) -> str:
    """One line for the resources that could not be listed; one cause said once when they share it."""
    errors = [w.status.error or f"cannot list {w.rtype.display}" for w in failed]
    causes = {e.split(": ", 1)[1] if e.startswith("cannot list ") and ": " in e else e for e in errors}
    if len(causes) == 1 and len(failed) > 1:
        return f"cannot list {', '.join(w.rtype.display for w in failed)}: {causes.pop()}"
    return "; ".join(errors)


class _Watcher:
    """List-then-watch loop for one resource type; the cache it fills is read under the source's lock."""

    def __init__(self, rtype: ResourceType, list_fn: Callable[..., Any], source: "KubeSource") -> None:
        self.rtype = rtype
        self.list_fn = list_fn
        self.source = source
        self.items: dict[str, dict] = {}
        self.generation = 0  # bumped on every change to items (the converter skips unchanged resource types)
        self.status = ResourceStatus(rtype.name, required=rtype.required)
        self.thread: Optional[threading.Thread] = None
        self._response = None
        self._doing = "list"  # the request in flight, for error messages: "list" or "watch"

    # ------------------------------------------------------------------------------------------ list

    def list_once(self) -> None:
        """List the whole collection (paged) and replace the cache."""
        src = self.source
        self._doing = "list"
        items: dict[str, dict] = {}
        cont: Optional[str] = None
        rv = None
        while True:
            kwargs: dict[str, Any] = {"limit": src.page_size, "_preload_content": False,
                                      "_request_timeout": (src.connect_timeout_s, src.request_timeout_s)}
            if cont:
                kwargs["_continue"] = cont
            resp = self.list_fn(**kwargs)
            try:
                doc = json.loads(resp.data)
            finally:
                resp.release_conn()
            if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
                raise SourceError(f"{self.rtype.display}: list response is not a Kubernetes list")
            for obj in doc["items"]:
                key = _object_key(obj)
                if key is not None:
                    items[key] = obj
            meta = doc.get("metadata") or {}
            rv = meta.get("resourceVersion") if rv is None else rv
            cont = meta.get("continue")
            if not cont:
                break
        now = src.clock()
        with src._lock:
            self.items = items
            self.generation += 1
            st = self.status
            st.state, st.error = "ok", None
            st.items, st.resource_version = len(items), rv
            st.last_list_time = st.last_event_time = now
            src._generation += 1

    # ------------------------------------------------------------------------------------------ watch

    def watch_once(self) -> None:
        """Watch from the cached resourceVersion until the server ends the stream (raises on trouble)."""
        src = self.source
        self._doing = "watch"
        timeout = int(src.watch_timeout_s)
        resp = self.list_fn(watch=True, resource_version=self.status.resource_version, allow_watch_bookmarks=True,
                            timeout_seconds=timeout, _preload_content=False,
                            _request_timeout=(src.connect_timeout_s, timeout + src.read_slack_s))
        self._response = resp
        finished = False
        try:
            if src._stop.is_set():
                return
            with src._lock:
                if self.status.state == "stale":
                    self.status.state, self.status.error = "ok", None
            for line in iter_resp_lines(resp):
                if src._stop.is_set():
                    return
                if not line.strip():
                    continue
                self._apply(json.loads(line))
            finished = True
        finally:
            self._response = None
            if finished:
                resp.release_conn()
            else:  # cut short (stop, error, 410): never hand a half-read connection back to the pool
                resp.close()

    def _apply(self, event: dict) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise _WatchError(f"watch event without an object: {str(event)[:200]}")
        if etype == "ERROR":
            if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise _Expired(obj.get("message") or "410 Gone")
            raise _WatchError(f"HTTP {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        src = self.source
        with src._lock:
            if etype in ("ADDED", "MODIFIED", "DELETED"):
                key = _object_key(obj)
                if key is not None:
                    if etype == "DELETED":
                        self.items.pop(key, None)
                    else:
                        self.items[key] = obj
                    self.generation += 1
                    src._generation += 1
                self.status.items = len(self.items)
                self.status.last_event_time = src.clock()
            elif etype == "BOOKMARK":
                self.status.bookmarks += 1
            if rv:
                self.status.resource_version = rv

    # ------------------------------------------------------------------------------------------ loop

    def run(self) -> None:
        src = self.source
        backoff = src.backoff_initial_s
        need_list = True
        while not src._stop.is_set():
            try:
                if need_list:
                    self.list_once()
                    need_list = False
                # The backoff resets only once a watch has run: a list that succeeds before a watch that is
                # refused (RBAC grants list but not watch) must not turn into a relist every half second.
                self.watch_once()
                backoff = src.backoff_initial_s
            except _Expired:
                with src._lock:
                    self.status.relists += 1
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure of one resource must not stop the others
                if src._stop.is_set():
                    break
                must_relist = self._record_failure(exc)
                need_list = need_list or must_relist
                if src._stop.wait(backoff * (0.8 + 0.4 * random.random())):
                    break
                backoff = min(backoff * 2, src.backoff_max_s)
        with src._lock:
            self.status.state = "stopped"

    def _record_failure(self, exc: Exception) -> bool:
        """Update the status after a failure; returns whether the next attempt must relist."""
        src = self.source
        status_code = exc.status if isinstance(exc, ApiException) else None
        text = _error_text(exc)
        with src._lock:
            st = self.status
            st.reconnects += 1
            if status_code == 410:
                st.relists += 1
                return True
            listed = st.last_list_time is not None and st.state in ("ok", "stale")
            if status_code == 403:
                # Once listed, the cache stays in use (stale): an API server that has just restarted answers
                # 403 until its RBAC cache is loaded, and a role may allow list but not watch (then the
                # relists, at the backoff's pace, keep the data fresh).
                st.state = "stale" if listed else "forbidden"
                st.error = f"forbidden: cannot {self._doing} {self.rtype.display}: {text}"
                return True
            if status_code == 404:
                st.state = "absent"
                st.error = f"not found: the API server does not serve {self.rtype.display} (CRD not installed?)"
                return True
            st.state = "stale" if listed else "error"
            st.error = f"cannot {self._doing} {self.rtype.display}: {text}"
            if src.unresponsive:   # the probe cut this stream: say why
                st.error = f"API server not answering (GET /version: {src.unresponsive}); {st.error}"
            return not listed

    def interrupt(self) -> None:
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass


def _object_key(obj: Any) -> Optional[str]:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        return None
    return f"{meta.get('namespace') or ''}/{meta['name']}"


class KubeSource:
    """A read-only live source: watches a cluster and converts it into snapshots on demand.

    Build it with :meth:`from_kubeconfig` (optionally a context) or :meth:`in_cluster`, pass an ``ApiClient``,
    or give ``context=`` / ``kubeconfig=`` directly.
    ``start()`` launches the watchers; :meth:`capture` lists everything once without threads.
    """

    def __init__(self, api_client: Optional[k8s.ApiClient] = None, *, context: Optional[str] = None,
                 kubeconfig: Optional[str] = None, scheduler_name: str = DEFAULT_SCHEDULER_NAME,
                 queue_label_key: str = DEFAULT_QUEUE_LABEL_KEY, config: Optional[SchedulerConfig] = None,
                 resources: Optional[Iterable[str]] = None, watch_timeout_s: float = 300.0,
                 connect_timeout_s: float = 10.0, request_timeout_s: float = 120.0, read_slack_s: float = 30.0,
                 backoff_initial_s: float = 0.5, backoff_max_s: float = 30.0, page_size: int = 500,
                 probe_interval_s: Optional[float] = 10.0, clock: Callable[[], float] = time.time) -> None:
        if api_client is None:  # kubeconfig (default file, current context unless one is named)
            api_client = self._client_from(kubeconfig, context, False)
        if not isinstance(api_client, ReadOnlyApiClient):
            api_client = ReadOnlyApiClient(api_client.configuration)
        self.api_client = api_client
        self.scheduler_name = scheduler_name
        self.queue_label_key = queue_label_key
        # A live cluster runs KAI's production defaults unless told otherwise: consolidation moves at most
        # 16 jobs (--max-consolidation-preemptees); the snapshot format's -1 is KAI's test-harness value.
        self.config = config or SchedulerConfig(max_consolidation_preemptees=16)
        self.watch_timeout_s = watch_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.read_slack_s = read_slack_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.page_size = page_size
        self.probe_interval_s = probe_interval_s
        self.clock = clock
        self._probe_thread: Optional[threading.Thread] = None
        self._probe_client: Optional[k8s.ApiClient] = None
        self.unresponsive: Optional[str] = None
        """Why the last liveness probe failed (``None`` while the API server answers)."""
        wanted = set(resources) if resources is not None else {r.name for r in RESOURCE_TYPES}
        unknown = wanted - {r.name for r in RESOURCE_TYPES}
        if unknown:
            raise SourceError(f"unknown resource types: {', '.join(sorted(unknown))}")
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._generation = 0
        self._cache: Optional[tuple[int, Conversion]] = None
        # Converts each object once per resourceVersion and rebuilds only the jobs an event touches.
        self._converter = IncrementalConverter(scheduler_name=scheduler_name, config=self.config,
                                               queue_label_key=queue_label_key)
        self._copies: dict[str, tuple[int, dict]] = {}  # per resource: (generation, copy of the watch cache)
        self._watchers = {r.name: _Watcher(r, r.make_list(self.api_client), self)
                          for r in RESOURCE_TYPES if r.name in wanted}

    # ------------------------------------------------------------------------------------------ construction

    @staticmethod
    def _client_from(kubeconfig: Optional[str], context: Optional[str], in_cluster: bool) -> ReadOnlyApiClient:
        configuration = k8s.Configuration()
        try:
            if in_cluster:
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                # The client reads $KUBECONFIG once, at import; honour the value the process has now.
                kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
                k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                            client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = "in-cluster service account" if in_cluster else \
                f"kubeconfig {kubeconfig or '(default)'}" + (f" context {context!r}" if context else "")
            raise SourceError(f"cannot load Kubernetes credentials from {where}: {exc}") from exc
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 16)
        return ReadOnlyApiClient(configuration)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Optional[str] = None, context: Optional[str] = None, **kwargs) -> "KubeSource":
        """A source for a kubeconfig file (default ``~/.kube/config`` / ``$KUBECONFIG``) and context."""
        return cls(cls._client_from(kubeconfig, context, False), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs) -> "KubeSource":
        """A source using the pod's service account (the in-cluster Deployment)."""
        return cls(cls._client_from(None, None, True), **kwargs)

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> "KubeSource":
        """Start one list-then-watch thread per resource type (idempotent)."""
        self._stop.clear()
        for name, w in self._watchers.items():
            if w.thread is None or not w.thread.is_alive():
                w.status.state = "syncing"
                w.thread = threading.Thread(target=w.run, name=f"kaidash-watch-{name}", daemon=True)
                w.thread.start()
        if self.probe_interval_s and (self._probe_thread is None or not self._probe_thread.is_alive()):
            self._probe_thread = threading.Thread(target=self._probe_loop, name="kaidash-kube-liveness",
                                                  daemon=True)
            self._probe_thread.start()
        return self

    # ------------------------------------------------------------------------------------------ liveness

    def probe(self) -> Optional[str]:
        """``GET /version`` within ``probe_interval_s``: ``None`` when the API server answers, else why not."""
        timeout = max(float(self.probe_interval_s or 10.0), 0.2)
        if self._probe_client is None:   # its own client: no urllib3 retries (they would multiply the timeout)
            conf = copy.deepcopy(self.api_client.configuration)
            conf.retries = False
            self._probe_client = ReadOnlyApiClient(conf)
        try:
            k8s.VersionApi(self._probe_client).get_code(
                _request_timeout=(min(self.connect_timeout_s, timeout), timeout))
        except ApiException:
            return None         # an HTTP answer (even 403 or 404) is a live server
        except Exception as exc:  # noqa: BLE001 - no answer in time, connection refused or reset
            return _error_text(exc)
        return None

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.probe_interval_s):
            problem = self.probe()
            if self._stop.is_set():
                break
            with self._lock:
                self.unresponsive = problem
                if problem is None:
                    continue
                for w in self._watchers.values():
                    if w.status.state == "ok":
                        w.status.state = "stale"
                        w.status.error = f"API server not answering (GET /version: {problem})"
            for w in self._watchers.values():
                w.interrupt()       # a hung stream would otherwise wait for its 330 s read timeout

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the watchers (open watch streams are shut down)."""
        self._stop.set()
        for w in self._watchers.values():
            w.interrupt()
        deadline = time.monotonic() + timeout_s
        if self._probe_thread is not None:
            self._probe_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for w in self._watchers.values():
            if w.thread is not None:
                w.thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "KubeSource":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_until_synced(self, timeout_s: float = 30.0) -> bool:
        """Wait until every resource has settled once (listed, forbidden, absent or failing)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status().synced:
                return True
            time.sleep(0.02)
        return self.status().synced

    # ------------------------------------------------------------------------------------------ one-shot

    def capture(self) -> Conversion:
        """List every resource once (no watch, no threads) and convert: ``kaidash snapshot capture``.

        Raises :class:`SourceError` when nodes or pods cannot be read; other resource types that fail are
        reported in the warnings and worked around.
        """
        for w in self._watchers.values():
            try:
                w.list_once()
            except Exception as exc:  # noqa: BLE001 - reported per resource below
                w._record_failure(exc)
                if w.status.state == "syncing":
                    w.status.state = "error"
        failed = [w for w in self._watchers.values() if w.rtype.required and not w.status.usable]
        if failed:
            raise SourceError(_failures_text(failed))
        return self.conversion()

    # ------------------------------------------------------------------------------------------ reading

    def status(self) -> SourceStatus:
        """A copy of every resource's health."""
        with self._lock:
            return SourceStatus({name: replace(w.status) for name, w in self._watchers.items()})

    def conversion(self) -> Conversion:
        """The current cache converted (snapshot, warnings, KAI's scheduling conditions); cached until a change.

        Raises :class:`SourceError` while nodes or pods have never been read: an empty cluster would be a
        wrong picture (every job "pending, 0/0 nodes fit"), not a stale one.
        """
        with self._lock:
            missing = [w for w in self._watchers.values() if w.rtype.required and not w.status.usable]
            if missing:
                raise SourceError("; ".join(w.status.error or f"cannot list {w.rtype.display}" for w in missing))
            generation = self._generation
            cached = self._cache
            if cached is not None and cached[0] == generation:
                conv = cached[1]
                return replace(conv, snapshot=replace(conv.snapshot, time=self.clock()),
                               warnings=self._with_source_warnings(conv))
            # the watch caches as they are now (the converter reads a resource only when its generation moved)
            raw, versions = {}, {}
            for name, w in self._watchers.items():
                copied = self._copies.get(name)
                if copied is None or copied[0] != w.generation:
                    copied = self._copies[name] = (w.generation, dict(w.items))
                raw[name], versions[name] = copied[1], w.generation
            available = {name for name, w in self._watchers.items() if w.status.usable}
        conv = self._converter.convert(raw, time=self.clock(), available=available, versions=versions)
        with self._lock:
            self._cache = (generation, conv)
        return replace(conv, warnings=self._with_source_warnings(conv))

    def _with_source_warnings(self, conv: Conversion) -> list[SourceWarning]:
        extra = [SourceWarning(w.rtype.display, None, None, None, w.status.error, skipped=False)
                 for w in self._watchers.values() if w.status.error and w.status.state != "ok"]
        return extra + list(conv.warnings)

    def snapshot(self) -> Snapshot:
        """The cluster as a validated snapshot, now (thread-safe; treat as read-only, ``.copy()`` to edit)."""
        return self.conversion().snapshot

    @property
    def warnings(self) -> list[SourceWarning]:
        """Resource-level problems (forbidden, errors) and every object skipped or adjusted in conversion."""
        return self.conversion().warnings
