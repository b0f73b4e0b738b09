"""A real Kubernetes control plane on loopback for the ``kube_apiserver`` tests: etcd → kube-apiserver →
kube-controller-manager → kwok, started from the binaries ``tools/kube/build.sh`` builds (pinned versions).

- etcd v3.7.3 (plain HTTP on loopback, no fsync: test data only);
- kube-apiserver v1.37.2 with TLS, client-certificate and service-account-token authentication,
  ``Node,RBAC`` authorization, the default admission plugins, an audit log (every request, metadata level), and
  the watch cache off for PriorityClasses only, so etcd compaction can expire a watch on demand (every other
  resource is served from the watch cache, which is what sends watch bookmarks);
- kube-controller-manager v1.37.2 (default ServiceAccounts, ``kube-root-ca.crt``, node lifecycle: the
  ``not-ready`` taints, garbage collection);
- kwok v0.8.0 as the kubelet of every node annotated ``kwok.x-k8s.io/node=fake``: it reports the node Ready,
  renews its lease, runs the pods bound to it and finishes their deletion.

No container runtime, no network beyond 127.0.0.1. :class:`ControlPlane` writes an admin kubeconfig (client
certificate in ``system:masters``) and makes kubeconfigs for service-account tokens.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional
from urllib.request import Request, urlopen

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kube_certs import Pki, make_pki

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "tools" / "kube" / "build.sh"
CRD_DIR = Path(__file__).resolve().parent / "kube" / "crds"
CONTEXT = "kaidash-test"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Watches on PriorityClasses go straight to etcd, so compacting etcd expires them (410) on demand.
UNCACHED_RESOURCE = "priorityclasses.scheduling.k8s.io"

AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}


class ControlPlaneError(RuntimeError):
    """A component did not start (the message carries the end of its log)."""


def kube_binaries(build: bool = True) -> Path:
    """The directory holding etcd, kube-apiserver, kube-controller-manager, kwok and kwok-stages.yaml.

    Runs ``tools/kube/build.sh``, which returns at once when the binaries of the pinned versions are cached
    and otherwise builds them (about 1,000 CPU-seconds; ``scripts/setup.sh --tests`` does it ahead of the tests).
    """
    args = ["bash", str(BUILD_SCRIPT)] + ([] if build else ["--dir"])
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT.relative_to(ROOT)} failed (exit {proc.returncode}):\n"
                                f"{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float = 30.0, message: str = "condition",
             interval: float = 0.05):
    """Poll ``condition`` until it returns something truthy; its value, or AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)


def kubeconfig_doc(server: str, ca_pem: bytes, user: dict, context: str = CONTEXT) -> dict:
    """A kubeconfig with one cluster, one user and one context (the current one)."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": context, "cluster": {"server": server,
                                                       "certificate-authority-data": _b64(ca_pem)}}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}]}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class _Process:
    """One component: a subprocess in its own session, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kwok on loopback; ``start()`` / ``stop()``.

    ``admin_kubeconfig`` reaches the API server as a cluster admin (context ``kaidash-test``); ``admin`` is a
    read-write ``ApiClient`` for the tests to build the cluster with. ``timings`` records start-up seconds.
    """

    def __init__(self, bin_dir: Path, work: Path):
        self.bin = bin_dir
        self.work = work
        self.logs = work / "logs"
        self.etcd_port, self.etcd_peer_port, self.api_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.audit_log = work / "audit.log"
        self.timings: dict[str, float] = {}
        self._procs: dict[str, _Process] = {}
        self.pki: Optional[Pki] = None
        self.admin_kubeconfig = work / "admin.kubeconfig"
        self.admin: Optional[k8s.ApiClient] = None

    # ------------------------------------------------------------------------------------------ start / stop

    def start(self) -> "ControlPlane":
        began = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.work / "pki", {
            "admin": ("kaidash-test-admin", "system:masters"),
            "controller-manager": ("system:kube-controller-manager", None),
            "kwok": ("kwok", "system:masters"),
        })
        self._write_kubeconfig(self.admin_kubeconfig, *self.pki.client("admin"))
        kcm_config = self._write_kubeconfig(self.work / "controller-manager.kubeconfig",
                                            *self.pki.client("controller-manager"))
        kwok_config = self._write_kubeconfig(self.work / "kwok.kubeconfig", *self.pki.client("kwok"))
        (self.work / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        try:
            self._start_etcd()
            self.timings["etcd"] = time.monotonic() - began
            self._start_apiserver()
            self.timings["kube-apiserver"] = time.monotonic() - began
            self.admin = self.api_client(self.admin_kubeconfig)
            self.install_crds()
            self.timings["crds"] = time.monotonic() - began
            self._start_controller_manager(kcm_config)
            self._start_kwok(kwok_config)
            wait_for(self._default_service_account, 60, "the controller manager's default ServiceAccount")
            self.timings["ready"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component, newest first (kwok, controller manager, API server, etcd)."""
        for name in reversed(list(self._procs)):
            self._procs[name].stop()
        shutil.rmtree(self.work / "etcd", ignore_errors=True)   # 120+ MB of preallocated WAL; logs are kept
        if self.admin is not None:
            self.admin.close()
            self.admin = None

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ components

    def _spawn(self, name: str, argv: list[str]) -> _Process:
        proc = self._procs[name] = _Process(name, argv, self.logs / f"{name}.log")
        proc.start()
        return proc

    def _wait_healthy(self, proc: _Process, probe: Callable[[], bool], timeout: float) -> None:
        def ready():
            if not proc.alive():
                raise ControlPlaneError(f"{proc.name} exited ({proc.proc.returncode}):\n{proc.tail()}")
            try:
                return probe()
            except OSError:
                return False
        try:
            wait_for(ready, timeout, f"{proc.name} to become healthy", interval=0.1)
        except AssertionError as exc:
            raise ControlPlaneError(f"{exc}; log:\n{proc.tail()}") from None

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        proc = self._spawn("etcd", [
            str(self.bin / "etcd"), "--name", "default", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}", "--unsafe-no-fsync", "--log-level", "warn",
            # progress notifications (default every 10 min) move the API server's watch caches on for quiet
            # resources, which is what lets a watch bookmark carry a newer resourceVersion: every second here
            "--watch-progress-notify-interval", "1s"])

        def healthy() -> bool:
            with urlopen(self.etcd_url + "/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        self._wait_healthy(proc, healthy, 60)

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki
        return [
            str(self.bin / "kube-apiserver"),
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
            "--tls-cert-file", str(pki.server_cert), "--tls-private-key-file", str(pki.server_key),
            "--client-ca-file", str(pki.ca_cert),
            "--service-account-issuer", SERVICE_ACCOUNT_ISSUER,
            "--service-account-key-file", str(pki.sa_pub),
            "--service-account-signing-key-file", str(pki.sa_key),
            "--authorization-mode", "Node,RBAC",
            "--endpoint-reconciler-type", "none",
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--watch-cache-sizes", f"{UNCACHED_RESOURCE}#0",
            "--audit-policy-file", str(self.work / "audit-policy.yaml"), "--audit-log-path", str(self.audit_log),
            "--audit-log-format", "json", "--audit-log-mode", "blocking",
            "--profiling=false", "--v", "1",
        ]

    def _start_apiserver(self, timeout: float = 120) -> None:
        proc = self._spawn("kube-apiserver", self._apiserver_argv())
        cert, key = self.pki.client("admin")

        def ready() -> bool:
            import ssl

            ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
            ctx.load_cert_chain(str(cert), str(key))
            with urlopen(Request(self.server + "/readyz"), timeout=3, context=ctx) as r:
                return r.status == 200
        self._wait_healthy(proc, ready, timeout)

    def restart_apiserver(self) -> float:
        """Stop the API server and start it again on the same port (as an upgrade would); returns the seconds
        it was down. Clients see their connections drop and watch history start anew."""
        began = time.monotonic()
        self._procs["kube-apiserver"].stop()
        self._start_apiserver()
        return time.monotonic() - began

    def _start_controller_manager(self, kubeconfig: Path) -> None:
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), "--kubeconfig", str(kubeconfig),
            "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--use-service-account-credentials=true",   # one identity per controller, as kubeadm
            "--service-account-private-key-file", str(self.pki.sa_key), "--root-ca-file", str(self.pki.ca_cert),
            "--controllers", "*,-csrsigning,-csrapproving,-bootstrapsigner,-tokencleaner",
            "--v", "1"])

    def _start_kwok(self, kubeconfig: Path) -> None:
        key, value = KWOK_NODE_ANNOTATION
        self._spawn("kwok", [
            str(self.bin / "kwok"), "--kubeconfig", str(kubeconfig), "--config", str(self.bin / "kwok-stages.yaml"),
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={key}={value}",
            "--node-ip", "10.1.0.1", "--cidr", "10.244.0.0/16", "--node-lease-duration-seconds", "40"])

    def _default_service_account(self) -> bool:
        for name in ("kube-controller-manager", "kwok"):
            proc = self._procs[name]
            if not proc.alive():
                raise ControlPlaneError(f"{name} exited ({proc.proc.returncode}):\n{proc.tail()}")
        try:
            k8s.CoreV1Api(self.admin).read_namespaced_service_account("default", "default")
            return True
        except k8s.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def log_tail(self, name: str, chars: int = 3000) -> str:
        return self._procs[name].tail(chars)

    # ------------------------------------------------------------------------------------------ clients

    def _write_kubeconfig(self, path: Path, cert: Path, key: Path) -> Path:
        user = {"client-certificate-data": _b64(cert.read_bytes()), "client-key-data": _b64(key.read_bytes())}
        path.write_text(yaml.safe_dump(kubeconfig_doc(self.server, self.pki.ca_cert.read_bytes(), user)))
        path.chmod(0o600)
        return path

    def token_kubeconfig(self, path: Path, token: str, context: str = CONTEXT) -> Path:
        """A kubeconfig that authenticates with a bearer token (a ServiceAccount's, from the TokenRequest API)."""
        path.write_text(yaml.safe_dump(kubeconfig_doc(self.server, self.pki.ca_cert.read_bytes(), {"token": token},
                                                      context)))
        path.chmod(0o600)
        return path

    @staticmethod
    def api_client(kubeconfig: Path) -> k8s.ApiClient:
        """A read-write client (for the tests' own setup; kaidash's source wraps its own read-only one)."""
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return k8s.ApiClient(configuration)

    def install_crds(self) -> None:
        """Create the project's KAI CRDs (tests/kube/crds) and wait until each is served."""
        ext = k8s.ApiextensionsV1Api(self.admin)
        names = []
        for path in sorted(CRD_DIR.glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            ext.create_custom_resource_definition(doc)
            names.append(doc["metadata"]["name"])

        def established() -> bool:
            for name in names:
                conds = ext.read_custom_resource_definition(name).status.conditions or []
                if not any(c.type == "Established" and c.status == "True" for c in conds):
                    return False
            return True
        wait_for(established, 60, "the KAI CRDs to be established")

    # ------------------------------------------------------------------------------------------ etcd

    def etcd_revision(self) -> int:
        """etcd's current revision (the API server's newest resourceVersion)."""
        return int(self._etcd("/v3/kv/range", {"key": _b64(b"/"), "limit": 1})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (what the API server does every 5 minutes): a watch resuming from
        an older resourceVersion of an uncached resource then gets ``410 Expired``. Returns the revision."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict) -> dict:
        req = Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST",
                      headers={"Content-Type": "application/json"})
        with urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    # ------------------------------------------------------------------------------------------ audit

    def audit_events(self, user: Optional[str] = None, since: Optional[float] = None) -> list[dict]:
        """Completed requests from the API server's audit log, of ``user`` and received at or after ``since``
        (epoch seconds) when given."""
        events = []
        try:
            lines = self.audit_log.read_text().splitlines()
        except FileNotFoundError:
            return []
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line being written
            if ev.get("stage") != "ResponseComplete":
                continue
            if user is not None and (ev.get("user") or {}).get("username") != user:
                continue
            if since is not None and _epoch(ev["requestReceivedTimestamp"]) < since:
                continue
            events.append(ev)
        return events


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
