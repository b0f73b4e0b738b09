"""Checks a command runs before it starts a server or a long job, so a mistake on the command line is one clear
line at once, not a traceback after the work: output paths, listening ports, a Prometheus URL, data directories.
Each raises :class:`~scheduler.errors.SourceError` naming the option and what is wrong.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

from .errors import SourceError
from .safe_io import DataDirs


def _probe(directory: Path, what: str) -> None:
    """Create and remove a file in ``directory``: the only test of writability that also holds for root and for
    read-only mounts."""
    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".kaidash-probe-"):
            pass
    except OSError as exc:
        raise SourceError(f"{what}: cannot write in {directory}: {(exc.strerror or str(exc)).lower()}") from None


def check_output_file(path: str | os.PathLike, option: str = "-o") -> None:
    """Before a long run: the file ``path`` can be created or replaced (its directory exists and takes a new
    file, it is not a directory). ``-`` (stdout) passes. :class:`SourceError` naming the option and the reason."""
    if str(path) == "-":
        return
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise SourceError(f"{option} {path}: is a directory; give a file name")
    if not parent.is_dir():
        missing = "is not a directory" if parent.exists() else "does not exist"
        raise SourceError(f"{option} {path}: directory {parent} {missing}")
    if p.exists() and not os.access(p, os.W_OK):
        raise SourceError(f"{option} {path}: file is not writable")
    _probe(parent, f"{option} {path}")


def check_output_dir(path: str | os.PathLike, option: str = "--out") -> None:
    """Before a long run: the directory ``path`` exists (it is created now if need be) and takes new files."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise SourceError(f"{option} {path}: exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"{option} {path}: cannot create the directory: {(exc.strerror or str(exc)).lower()}") \
            from None
    _probe(p, f"{option} {path}")


def data_dirs(dirs: Optional[Sequence[str]]) -> DataDirs:
    """The server's data directories: ``--data-dir`` values (each must be a directory), else from the
    environment (``KAIDASH_DATA_DIRS``) or the working directory."""
    if not dirs:
        return DataDirs.from_env()
    for d in dirs:
        if not Path(d).is_dir():
            raise SourceError(f"--data-dir {d}: not a directory")
    return DataDirs(dirs)


def listen_error(address: str, port: int, exc: OSError) -> SourceError:
    """The one-line error for a port that cannot be listened on."""
    reason = exc.strerror or str(exc)
    hint = (" (another process is listening there; pick another --port, or 0 for any free port)"
            if exc.errno == errno.EADDRINUSE else "")
    return SourceError(f"cannot listen on {address or '*'}:{port}: {reason.lower()}{hint}")


def check_port(address: str, port: int) -> None:
    """Bind ``address:port`` as a server would (``SO_REUSEADDR``) and let go; :class:`SourceError` if it cannot."""
    if port == 0:
        return
    if not 0 < port < 65536:
        raise SourceError(f"--port {port}: expected 1..65535 (or 0 for any free port)")
    try:
        infos = socket.getaddrinfo(address or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise SourceError(f"--address {address}: cannot resolve: {exc.strerror or exc}") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(sockaddr)
            except OSError as exc:
                raise listen_error(address, port, exc) from None


def check_prometheus_url(url: str, timeout_s: float = 2.0) -> list[str]:
    """A Prometheus base URL must be ``http(s)://host[:port][/path]`` (else :class:`SourceError`). Returns
    warnings: not answering now is a warning only (the reader retries; Prometheus may start later)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 — raises ValueError on a bad port
    except ValueError as exc:
        raise SourceError(f"--prometheus {url}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceError(f"--prometheus {url}: expected http://HOST:PORT or https://HOST:PORT "
                          "(e.g. http://localhost:9090)")
    probe = urllib.parse.urljoin(url.rstrip("/") + "/", "api/v1/status/buildinfo")
    try:
        with urllib.request.urlopen(probe, timeout=timeout_s) as resp:
            resp.read(1 << 16)
    except urllib.error.HTTPError as exc:
        return [f"--prometheus {url}: {probe} answered HTTP {exc.code}; is this a Prometheus server?"]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return [f"--prometheus {url}: not reachable now ({reason}); GPU metrics stay unavailable until it is"]
    return []
