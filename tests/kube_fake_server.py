"""A local Kubernetes API server for tests: real HTTP on loopback, the real API's JSON shapes, injectable faults.

It serves list and watch for nodes, pods, priority classes and KAI's queues, pod groups and bind requests:

- list: ``{"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "..."}, "items": [...]}``,
  with ``limit``/``continue`` paging;
- watch (``?watch=true&resourceVersion=N``): a chunked stream of newline-delimited
  ``{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": {...}}`` events after N; a resourceVersion older
  than the compacted history gets an ERROR event carrying a 410 ``Status`` (reason ``Expired``), as the real
  server does;
- errors are ``Status`` objects (403 Forbidden, 404 NotFound, 500 InternalError).

Test code changes the cluster with :meth:`FakeKubeServer.add` / ``modify`` / ``delete`` (watchers see the events)
and injects faults with :meth:`fail`, :meth:`delay`, :meth:`drop_watches`, :meth:`expire`. Every request is recorded
(method, path, query) in :attr:`requests`.

Usage::

    with FakeKubeServer() as server:
        server.load({"nodes": [...], "pods": [...]})
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", context="fake")
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

RESOURCES: dict[str, tuple[str, str, str, str]] = {
    # name: (collection path, apiVersion, list kind, group for error messages)
    "nodes": ("/api/v1/nodes", "v1", "NodeList", ""),
    "pods": ("/api/v1/pods", "v1", "PodList", ""),
    "priorityclasses": ("/apis/scheduling.k8s.io/v1/priorityclasses", "scheduling.k8s.io/v1", "PriorityClassList",
                        "scheduling.k8s.io"),
    "queues": ("/apis/scheduling.run.ai/v2/queues", "scheduling.run.ai/v2", "QueueList", "scheduling.run.ai"),
    "podgroups": ("/apis/scheduling.run.ai/v2alpha2/podgroups", "scheduling.run.ai/v2alpha2", "PodGroupList",
                  "scheduling.run.ai"),
    "bindrequests": ("/apis/scheduling.run.ai/v1alpha2/bindrequests", "scheduling.run.ai/v1alpha2",
                     "BindRequestList", "scheduling.run.ai"),
    "topologies": ("/apis/kai.scheduler/v1alpha1/topologies", "kai.scheduler/v1alpha1", "TopologyList",
                   "kai.scheduler"),
    "resourceclaims": ("/apis/resource.k8s.io/v1/resourceclaims", "resource.k8s.io/v1", "ResourceClaimList",
                       "resource.k8s.io"),
    "resourceslices": ("/apis/resource.k8s.io/v1/resourceslices", "resource.k8s.io/v1", "ResourceSliceList",
                       "resource.k8s.io"),
}
PATHS = {path: name for name, (path, *_rest) in RESOURCES.items()}


def status_object(code: int, reason: str, message: str, details: Optional[dict] = None) -> dict:
    """The API server's ``Status`` error body."""
    obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
           "reason": reason, "code": code}
    if details:
        obj["details"] = details
    return obj


def forbidden_status(resource: str, user: str = "system:serviceaccount:kaidash:kaidash") -> dict:
    group = RESOURCES[resource][3]
    in_group = f' in API group "{group}"' if group else ""
    full = f"{resource}.{group}" if group else resource
    return status_object(403, "Forbidden",
                         f'{full} is forbidden: User "{user}" cannot list resource "{resource}"{in_group} at the '
                         "cluster scope", {"group": group, "kind": resource})


@dataclass
class Fault:
    """An injected failure: respond with ``code`` to ``on`` requests (``list``, ``watch`` or ``any``)."""

    code: int
    on: str = "any"
    times: Optional[int] = None  # None = until cleared


@dataclass
class _Resource:
    items: dict = field(default_factory=dict)
    events: list = field(default_factory=list)  # (rv, type, object)
    compacted_rv: int = 0
    faults: list = field(default_factory=list)
    delay_s: float = 0.0
    served: bool = True
    watch_epoch: int = 0  # bumped to drop open watch streams
    expire_epoch: int = 0  # bumped to send 410 to open watch streams


class _QuietServer(ThreadingHTTPServer):
    """Clients hanging up mid-response (watch stops, timeouts) are normal here, not errors to print."""

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, TimeoutError)):
            super().handle_error(request, client_address)


def _key(obj: dict) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace') or ''}/{meta['name']}"


class FakeKubeServer:
    """A threaded HTTP server on 127.0.0.1 (random port) that speaks enough of the Kubernetes API for sources."""

    def __init__(self, bookmark_interval_s: float = 0.5) -> None:
        self._lock = threading.Condition()
        self._rv = 100
        self._resources = {name: _Resource() for name in RESOURCES}
        self.requests: list[tuple[str, str, dict]] = []
        self.bookmark_interval_s = bookmark_interval_s
        self._stopping = False
        self.hung = False
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeKubeServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeKubeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path, context: str = "fake") -> Path:
        """A kubeconfig whose ``context`` points at this server (token auth, plain HTTP)."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "other",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}},
                         {"name": "other-cluster", "cluster": {"server": "http://127.0.0.1:9"}}],
            "users": [{"name": "fake-user", "user": {"token": "fake-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake-cluster", "user": "fake-user"}},
                         {"name": "other", "context": {"cluster": "other-cluster", "user": "fake-user"}}],
        }
        path = Path(path)
        path.write_text(json.dumps(doc))
        return path

    # ------------------------------------------------------------------------------------------ cluster state

    def load(self, objects: dict[str, list[dict]]) -> None:
        """Replace the objects of the given resource types (no watch events: use before clients start)."""
        with self._lock:
            for name, items in objects.items():
                res = self._resources[name]
                res.items = {}
                for obj in items:
                    self._rv += 1
                    obj = json.loads(json.dumps(obj))
                    obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
                    res.items[_key(obj)] = obj
                res.compacted_rv = self._rv

    def _event(self, resource: str, etype: str, obj: dict) -> dict:
        with self._lock:
            self._rv += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
            res = self._resources[resource]
            if etype == "DELETED":
                res.items.pop(_key(obj), None)
            else:
                res.items[_key(obj)] = obj
            res.events.append((self._rv, etype, obj))
            self._lock.notify_all()
            return obj

    def add(self, resource: str, obj: dict) -> dict:
        return self._event(resource, "ADDED", obj)

    def modify(self, resource: str, obj: dict) -> dict:
        return self._event(resource, "MODIFIED", obj)

    def delete(self, resource: str, namespace: Optional[str], name: str) -> dict:
        with self._lock:
            obj = self._resources[resource].items[f"{namespace or ''}/{name}"]
        return self._event(resource, "DELETED", obj)

    def items(self, resource: str) -> list[dict]:
        with self._lock:
            return list(self._resources[resource].items.values())

    # ------------------------------------------------------------------------------------------ faults

    def fail(self, resource: str, code: int, on: str = "any", times: Optional[int] = None) -> None:
        """Answer ``resource`` requests with an error ``Status`` (403, 404, 500, ...), ``times`` times or until cleared."""
        with self._lock:
            self._resources[resource].faults.append(Fault(code, on, times))

    def clear_faults(self, resource: Optional[str] = None) -> None:
        with self._lock:
            for name in [resource] if resource else list(self._resources):
                self._resources[name].faults.clear()
                self._resources[name].delay_s = 0.0

    def unserve(self, resource: str) -> None:
        """Make the collection 404, as when a CRD is not installed."""
        with self._lock:
            self._resources[resource].served = False

    def delay(self, resource: str, seconds: float) -> None:
        """Wait ``seconds`` before answering each ``resource`` request (for client timeouts)."""
        with self._lock:
            self._resources[resource].delay_s = seconds

    def drop_watches(self, resource: str) -> None:
        """Cut every open watch stream of ``resource`` (the connection closes mid-stream)."""
        with self._lock:
            self._resources[resource].watch_epoch += 1
            self._lock.notify_all()

    def expire(self, resource: str) -> None:
        """Compact history: open watches get a 410 ERROR event; watching from an older version gets 410."""
        with self._lock:
            res = self._resources[resource]
            res.compacted_rv = self._rv
            res.events.clear()
            res.expire_epoch += 1
            self._lock.notify_all()

    def hang(self, hung: bool = True) -> None:
        """A hung API server: open watch streams stop sending (no events, no bookmarks) without closing, and new
        requests get no answer; ``hang(False)`` resumes."""
        with self._lock:
            self.hung = hung
            self._lock.notify_all()

    def methods(self) -> set[str]:
        return {m for m, _, _ in self.requests}

    def count(self, resource: str, watch: Optional[bool] = None) -> int:
        path = RESOURCES[resource][0]
        return sum(1 for _, p, q in self.requests
                   if p == path and (watch is None or (q.get("watch") == ["true"]) == watch))

    def _take_fault(self, res: _Resource, kind: str) -> Optional[Fault]:
        for f in res.faults:
            if f.on in ("any", kind):
                if f.times is not None:
                    f.times -= 1
                    if f.times <= 0:
                        res.faults.remove(f)
                return f
        return None

    # ------------------------------------------------------------------------------------------ HTTP

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                # as Go's net/http does: no Nagle delay between headers and body
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _record(self) -> tuple[str, dict]:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                with server._lock:
                    server.requests.append((self.command, parts.path, query))
                return parts.path, query

            def _send_json(self, code: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _not_allowed(self) -> None:
                self._record()
                self._send_json(405, status_object(405, "MethodNotAllowed", "this fake API server is read-only"))

            do_POST = do_PUT = do_PATCH = do_DELETE = _not_allowed

            def do_GET(self) -> None:
                path, query = self._record()
                with server._lock:
                    while server.hung and not server._stopping:
                        server._lock.wait(timeout=0.05)
                resource = PATHS.get(path)
                if resource is None:
                    self._send_json(404, status_object(404, "NotFound", "the server could not find the requested resource"))
                    return
                watch = query.get("watch", ["false"])[0] in ("true", "1")
                with server._lock:
                    res = server._resources[resource]
                    delay = res.delay_s
                    fault = server._take_fault(res, "watch" if watch else "list")
                    served = res.served
                if delay:
                    time.sleep(delay)
                if not served:
                    self._send_json(404, status_object(404, "NotFound", "the server could not find the requested resource"))
                    return
                if fault is not None:
                    if fault.code == 403:
                        self._send_json(403, forbidden_status(resource))
                    else:
                        reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}.get(fault.code, "Unknown")
                        self._send_json(fault.code, status_object(fault.code, reason, f"injected {fault.code} for {resource}"))
                    return
                if watch:
                    self._watch(resource, query)
                else:
                    self._list(resource, query)

            def _list(self, resource: str, query: dict) -> None:
                path, api_version, kind, _ = RESOURCES[resource]
                with server._lock:
                    res = server._resources[resource]
                    items = [res.items[k] for k in sorted(res.items)]
                    rv = server._rv
                limit = int(query.get("limit", ["0"])[0] or 0)
                start = int(query.get("continue", ["0"])[0] or 0)
                meta: dict[str, Any] = {"resourceVersion": str(rv)}
                if limit and start + limit < len(items):
                    meta["continue"] = str(start + limit)
                    meta["remainingItemCount"] = len(items) - start - limit
                page = items[start:start + limit] if limit else items[start:]
                self._send_json(200, {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": page})

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, resource: str, query: dict) -> None:
                _, api_version, kind, _ = RESOURCES[resource]
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                timeout = float(query.get("timeoutSeconds", ["30"])[0])
                bookmarks = query.get("allowWatchBookmarks", ["false"])[0] == "true"
                deadline = time.monotonic() + timeout
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with server._lock:
                    res = server._resources[resource]
                    epoch, expire_epoch = res.watch_epoch, res.expire_epoch
                    expired = since < res.compacted_rv
                last_bookmark = time.monotonic()
                try:
                    if expired:
                        self._send_expired(since)
                        return
                    while True:
                        with server._lock:
                            if server._stopping:
                                return
                            if res.watch_epoch != epoch:
                                self.close_connection = True
                                self.connection.shutdown(2)  # cut mid-stream, no final chunk
                                return
                            if res.expire_epoch != expire_epoch:
                                self._send_expired(since)
                                return
                            if server.hung:
                                server._lock.wait(timeout=0.05)
                                continue
                            pending = [(rv, t, o) for rv, t, o in res.events if rv > since]
                            now = time.monotonic()
                            if not pending and now < deadline and not (bookmarks and now - last_bookmark >= server.bookmark_interval_s):
                                server._lock.wait(timeout=min(0.05, max(deadline - now, 0.001)))
                                continue
                            current = server._rv
                        for rv, etype, obj in pending:
                            self._chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
                            since = rv
                        if time.monotonic() >= deadline:
                            break
                        if bookmarks and time.monotonic() - last_bookmark >= server.bookmark_interval_s:
                            since = max(since, current)
                            mark = {"kind": kind[:-4], "apiVersion": api_version,
                                    "metadata": {"resourceVersion": str(since)}}
                            self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                            last_bookmark = time.monotonic()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

            def _send_expired(self, since: int) -> None:
                status = status_object(410, "Expired", f"too old resource version: {since} ({server._rv})")
                self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler
