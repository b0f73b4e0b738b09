"""The one reading path for input from outside: snapshot and fair-share files, KAI zips, dashboard uploads, and
paths typed into the dashboard's Settings.

Everything kaidash reads from a file goes through :func:`read_bytes` (a regular file only, at most
``max_file_bytes``, optionally only inside the server's data directories and within a time limit) and is parsed
by :func:`parse_json` / :func:`parse_yaml` (nesting at most ``max_depth`` levels; YAML aliases may add at most
``max_alias_nodes`` nodes, so a "billion laughs" document stops early). A KAI zip is read through
:func:`open_zip`: at most ``max_members`` members, a member inflates to at most ``max_member_bytes`` and at most
``max_ratio`` times its compressed size, checked from the headers first and again while streaming.

A limit is a :class:`InputLimitError` naming the file (and member) and the limit; a refused path is a
:class:`PathRefusedError`. Both are :class:`~scheduler.errors.KaidashError`: the CLI prints them on one line
and exits 1, the dashboard shows them. The limits and their messages are listed in docs/snapshot-format.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import os
import stat
import struct
import threading
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (AliasEvent, MappingEndEvent, MappingStartEvent, ScalarEvent, SequenceEndEvent,
                         SequenceStartEvent)
from yaml.resolver import Resolver

from .errors import KaidashError, SnapshotError, SourceError

MIB = 2**20
SIZE_ENV = "KAIDASH_MAX_INPUT_MIB"
"""Environment variable that raises (or lowers) the two size limits, in MiB."""
DATA_DIRS_ENV = "KAIDASH_DATA_DIRS"
"""The server's data directories (``os.pathsep``-separated), set by ``kaidash serve --data-dir``."""


@dataclass(frozen=True)
class Limits:
    """What kaidash accepts from a file. Defaults fit a 4,000-node cluster's KAI snapshot (≈100 MiB of JSON
    that compresses 25:1 and nests 9 levels) with a wide margin."""

    max_file_bytes: int = 512 * MIB
    """A snapshot, fair-share or zip file on disk (or an upload)."""
    max_member_bytes: int = 512 * MIB
    """A zip member once inflated (``snapshot.json``)."""
    max_members: int = 1000
    """Members in a zip (KAI's holds one)."""
    max_central_directory_bytes: int = 1 * MIB
    """A zip's table of contents (bounds what the zip reader allocates before any member is read)."""
    max_ratio: float = 200.0
    """Inflated size / compressed size of a zip member (JSON compresses ≈ 10-40:1; a zip bomb ≈ 1000:1)."""
    max_depth: int = 100
    """Nesting of lists and mappings in JSON or YAML (real snapshots nest ≤ 20 levels)."""
    max_alias_nodes: int = 100_000
    """Nodes that YAML aliases (``*name``) may add to a document, counting each alias as the size it expands to."""
    server_read_timeout_s: float = 60.0
    """Time to read one file the server reads (Settings path, ``serve --snapshot``)."""

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Limits":
        """The defaults, with both size limits set from ``KAIDASH_MAX_INPUT_MIB`` when given."""
        env = os.environ if env is None else env
        raw = env.get(SIZE_ENV, "").strip()
        if not raw:
            return cls()
        try:
            mib = float(raw)
        except ValueError:
            raise SourceError(f"{SIZE_ENV}={raw!r}: expected a number of MiB") from None
        if not mib > 0:
            raise SourceError(f"{SIZE_ENV}={raw!r}: expected a positive number of MiB")
        return cls(max_file_bytes=int(mib * MIB), max_member_bytes=int(mib * MIB))


class InputLimitError(SnapshotError):
    """An input is over one of the :class:`Limits`; ``limit`` is the field name (``max_depth``, ...)."""

    def __init__(self, where: str, limit: str, message: str):
        self.limit = limit
        super().__init__(where, message)


class PathRefusedError(SourceError):
    """A path kaidash will not read: a device or other special file, or (server) outside the data directories."""


def _size(n: float) -> str:
    return f"{n / MIB:,.0f} MiB" if n >= MIB else f"{n:,.0f} bytes"


def _size_hint() -> str:
    return f"set {SIZE_ENV} to raise it"


# ---------------------------------------------------------------------------------------------- server paths

class DataDirs:
    """The directories the server may read files from (``kaidash serve --data-dir``, default: the working
    directory unless it is the filesystem root). A path is allowed when, with every symlink resolved, it lies
    inside one of them."""

    def __init__(self, dirs: Sequence[str | os.PathLike]):
        self.dirs = [Path(os.path.realpath(d)) for d in dirs]

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "DataDirs":
        """From ``KAIDASH_DATA_DIRS``, else the working directory (none if that is ``/``)."""
        env = os.environ if env is None else env
        raw = env.get(DATA_DIRS_ENV, "")
        if raw:
            return cls([d for d in raw.split(os.pathsep) if d])
        cwd = os.getcwd()
        return cls([] if os.path.realpath(cwd) == os.path.sep else [cwd])

    def to_env(self) -> dict[str, str]:
        return {DATA_DIRS_ENV: os.pathsep.join(str(d) for d in self.dirs)}

    def check(self, path: str | os.PathLike) -> Path:
        """The resolved path if it is inside a data directory; else :class:`PathRefusedError`."""
        real = Path(os.path.realpath(path))
        for d in self.dirs:
            if real == d or d in real.parents:
                return real
        where = ", ".join(str(d) for d in self.dirs) or "none configured"
        raise PathRefusedError(f"{path}: outside the data directories this server reads from ({where}); "
                               "start kaidash serve with --data-dir DIR to allow another directory")


@dataclass(frozen=True)
class _Policy:
    data_dirs: Optional[DataDirs] = None
    timeout_s: Optional[float] = None


_POLICY: contextvars.ContextVar[_Policy] = contextvars.ContextVar("kaidash_read_policy", default=_Policy())


@contextlib.contextmanager
def server_reads(data_dirs: Optional[DataDirs] = None, timeout_s: Optional[float] = None) -> Iterator[DataDirs]:
    """Within this block (this thread), every file read must lie in ``data_dirs`` (default: from the
    environment) and finish within ``timeout_s`` (default: ``Limits.server_read_timeout_s``)."""
    dirs = data_dirs if data_dirs is not None else DataDirs.from_env()
    timeout = timeout_s if timeout_s is not None else Limits.from_env().server_read_timeout_s
    token = _POLICY.set(_Policy(dirs, timeout))
    try:
        yield dirs
    finally:
        _POLICY.reset(token)


# ---------------------------------------------------------------------------------------------- files

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: str | os.PathLike, limits: Optional[Limits] = None) -> bytes:
    """The bytes of a regular file of at most ``limits.max_file_bytes``; :class:`SnapshotError` naming the file
    when it cannot be read. Inside :func:`server_reads`, the path must be in the data directories and the read
    must finish in time."""
    limits = limits or Limits.from_env()
    policy = _POLICY.get()
    where = str(path)
    dirs = policy.data_dirs
    target = dirs.check(path) if dirs is not None else Path(path)
    read = lambda: _read_regular(target, where, limits.max_file_bytes, dirs)  # noqa: E731
    return read() if policy.timeout_s is None else _with_timeout(read, policy.timeout_s, where)


def read_text(path: str | os.PathLike, limits: Optional[Limits] = None) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a BOM is dropped)."""
    data = read_bytes(path, limits)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SnapshotError(str(path), f"not UTF-8 text (byte {exc.start}): is this a snapshot file?") from None


def _read_regular(path: Path, where: str, cap: int, dirs: Optional[DataDirs] = None) -> bytes:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise PathRefusedError(f"{where}: {_kind(st.st_mode)}, not a regular file; kaidash reads only regular "
                                   "files (save the data to a file first)")
        if st.st_size > cap:
            raise InputLimitError(where, "max_file_bytes", f"file is {_size(st.st_size)}, over the {_size(cap)} "
                                                           f"limit on an input file ({_size_hint()})")
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, opening it must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SnapshotError(where, "cannot read file: no such file") from None
    except IsADirectoryError:
        raise PathRefusedError(f"{where}: a directory, not a regular file") from None
    except OSError as exc:
        raise SnapshotError(where, f"cannot read file: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st2 = os.fstat(fh.fileno())
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            raise PathRefusedError(f"{where}: changed while being opened; not read")
        opened = f"/proc/self/fd/{fh.fileno()}"
        if dirs is not None and os.path.exists(opened):   # what was opened, not what the name meant a moment ago
            dirs.check(os.path.realpath(opened))
        try:
            data = fh.read(cap + 1)
        except OSError as exc:
            raise SnapshotError(where, f"cannot read file: {exc.strerror or exc}") from None
    if len(data) > cap:  # grew after the stat
        raise InputLimitError(where, "max_file_bytes", f"file is over the {_size(cap)} limit on an input file "
                                                       f"({_size_hint()})")
    return data


def _with_timeout(fn, timeout_s: float, where: str):
    """``fn()`` on a helper thread; :class:`SourceError` if it takes longer than ``timeout_s`` (a hung network
    filesystem must not stall the server's loop; the helper is left to finish on its own)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 — handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="kaidash-read", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise SourceError(f"{where}: reading took longer than {timeout_s:g} s; gave up")
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---------------------------------------------------------------------------------------------- zip archives

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"


def _central_directory(data: bytes) -> Optional[tuple[int, int]]:
    """``(entries, central directory bytes)`` from the end-of-central-directory record (zip64 aware), or None
    when there is none (the zip reader then reports a bad archive)."""
    tail_start = max(0, len(data) - (22 + 65535))
    i = data.rfind(_EOCD, tail_start)
    if i < 0 or len(data) - i < 22:
        return None
    entries, cd_size = struct.unpack_from("<HI", data, i + 10)
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:
        loc = i - 20
        if loc >= 0 and data[loc:loc + 4] == _EOCD64_LOCATOR:
            (offset,) = struct.unpack_from("<Q", data, loc + 8)
            if offset + 56 <= len(data) and data[offset:offset + 4] == _EOCD64:
                entries, cd_size = struct.unpack_from("<QQ", data, offset + 32)
    return entries, cd_size


class SafeZip:
    """A zip archive read into memory, opened within the limits (see :func:`open_zip`)."""

    def __init__(self, data: bytes, where: str, limits: Limits):
        self.where, self.limits = where, limits
        cd = _central_directory(data)
        if cd is not None:
            self._check_table(*cd)
        try:
            self._zf = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zf.infolist()
        except Exception as exc:  # noqa: BLE001 — whatever the zip reader trips on in a damaged archive
            raise SnapshotError(where, f"not a valid zip archive (truncated or corrupt download?): "
                                       f"{_zip_reason(exc)}") from None
        self._check_table(len(infos), 0)
        self.infos = {i.filename: i for i in infos}

    def _check_table(self, entries: int, cd_size: int) -> None:
        lim = self.limits
        if entries > lim.max_members:
            raise InputLimitError(self.where, "max_members",
                                  f"zip has {entries:,} members, over the limit of {lim.max_members:,}")
        if cd_size > lim.max_central_directory_bytes:
            raise InputLimitError(self.where, "max_central_directory_bytes",
                                  f"zip's table of contents is {_size(cd_size)}, over the "
                                  f"{_size(lim.max_central_directory_bytes)} limit")

    @property
    def names(self) -> list[str]:
        return list(self.infos)

    def read(self, name: str) -> bytearray:
        """A member's bytes, streamed with a cap: at most ``max_member_bytes`` and ``max_ratio`` times its
        compressed size, whatever its header claims (a ``bytearray``, not copied once more)."""
        info, lim = self.infos[name], self.limits
        where = f"{self.where}:{name}"
        cap = lim.max_member_bytes
        if info.file_size > cap:
            raise InputLimitError(where, "max_member_bytes",
                                  f"inflates to {_size(info.file_size)}, over the {_size(cap)} limit on a zip "
                                  f"member ({_size_hint()})")
        ratio_cap = max(int(lim.max_ratio * info.compress_size), MIB)
        if info.file_size > ratio_cap:
            raise InputLimitError(where, "max_ratio", self._ratio_message(info.file_size, info.compress_size))
        out = bytearray()
        try:
            with self._zf.open(info) as stream:
                while True:
                    chunk = stream.read(MIB)
                    if not chunk:
                        break
                    out += chunk
                    if len(out) > cap:
                        raise InputLimitError(where, "max_member_bytes",
                                              f"inflates to more than {_size(cap)}, the limit on a zip member "
                                              f"({_size_hint()})")
                    if len(out) > ratio_cap:
                        raise InputLimitError(where, "max_ratio", self._ratio_message(len(out), info.compress_size))
        except KaidashError:
            raise
        except (RuntimeError, NotImplementedError) as exc:  # encrypted; a compression method Python lacks
            raise SnapshotError(where, f"cannot read zip member: {exc}") from None
        except Exception as exc:  # noqa: BLE001 — a damaged member: bad CRC, bad deflate data, bad header
            raise SnapshotError(where, f"zip member is truncated or corrupt: {_zip_reason(exc)}") from None
        return out

    def _ratio_message(self, inflated: int, compressed: int) -> str:
        return (f"inflates to {_size(inflated)} from {_size(compressed)} (over {self.limits.max_ratio:g}:1, "
                f"the limit on a zip member's compression ratio; a zip bomb?)")


def _zip_reason(exc: Exception) -> str:
    """The zip reader's complaint; its class name when that says more than the message."""
    known = (zipfile.BadZipFile, zlib.error, EOFError)
    return str(exc) if isinstance(exc, known) and str(exc) else f"{type(exc).__name__}: {exc}"


def open_zip(path: str | os.PathLike, limits: Optional[Limits] = None) -> SafeZip:
    """A zip file read through :func:`read_bytes` (so within every file limit and the server's policy)."""
    limits = limits or Limits.from_env()
    return SafeZip(read_bytes(path, limits), str(path), limits)


# ---------------------------------------------------------------------------------------------- JSON

def parse_json(data: bytes | bytearray | str, where: str, limits: Optional[Limits] = None) -> Any:
    """A JSON document, nested at most ``max_depth`` levels; :class:`SnapshotError` naming ``where``."""
    limits = limits or Limits.from_env()
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as exc:
        raise SnapshotError(where, f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(where, f"not valid JSON at line {exc.lineno}, column {exc.colno} "
                                   f"(file truncated or corrupt?): {exc.msg}") from None
    except RecursionError:
        raise _depth_error(where, limits) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise SnapshotError(where, f"not valid JSON: {_value_error(exc)}") from None
    check_depth(doc, where, limits)
    return doc


def _value_error(exc: Exception) -> str:
    return str(exc).split("; use sys.set_int_max_str_digits", 1)[0]


LIBYAML_MAX_NESTING = 1000
"""libyaml's own limit on nesting (``exceeded maximum nesting depth``), reached while its scanner reads ahead."""


def _depth_error(where: str, limits: Limits, line: Optional[int] = None) -> InputLimitError:
    at = f" at line {line}" if line is not None else ""
    return InputLimitError(where, "max_depth",
                           f"nested more than {limits.max_depth} levels deep{at} (the limit on nesting)")


def check_depth(doc: Any, where: str, limits: Optional[Limits] = None) -> None:
    """:class:`InputLimitError` if lists/mappings nest deeper than ``max_depth`` (an iterative walk)."""
    limit = (limits or Limits.from_env()).max_depth
    level = [doc] if type(doc) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise _depth_error(where, limits or Limits.from_env())
        nxt: list = []
        for obj in level:
            items = obj.values() if type(obj) is dict else obj
            nxt.extend([c for c in items if type(c) is dict or type(c) is list])
        level = nxt


# ---------------------------------------------------------------------------------------------- YAML

class _BudgetedEvents:
    """Counts the parser's events as the composer takes them: nesting depth, and the nodes every alias adds
    (an alias counts as the size of the node it names, so nested aliases multiply as they would expand)."""

    def _start_budget(self, where: str, limits: Limits) -> None:
        self._where, self._limits = where, limits
        self._open: list[list] = []          # [anchor or None, nodes so far] per open collection
        self._sizes: dict[str, int] = {}     # anchor -> expanded size of its node
        self._alias_nodes = 0

    def get_event(self):
        event = super().get_event()
        kind = type(event)
        if kind is ScalarEvent:
            if event.anchor is not None:
                self._sizes[event.anchor] = 1
            if self._open:
                self._open[-1][1] += 1
        elif kind is SequenceStartEvent or kind is MappingStartEvent:
            if len(self._open) >= self._limits.max_depth:
                raise _depth_error(self._where, self._limits, event.start_mark.line + 1)
            self._open.append([event.anchor, 1])
        elif kind is SequenceEndEvent or kind is MappingEndEvent:
            anchor, size = self._open.pop()
            if anchor is not None:
                self._sizes[anchor] = size
            if self._open:
                self._open[-1][1] += size
        elif kind is AliasEvent:
            if any(anchor == event.anchor for anchor, _ in self._open):
                raise SnapshotError(self._where, f"not valid YAML at line {event.start_mark.line + 1}: alias "
                                                 f"*{event.anchor} refers to a node that contains it (a loop)")
            size = self._sizes.get(event.anchor, 1)
            self._alias_nodes += size
            if self._alias_nodes > self._limits.max_alias_nodes:
                raise InputLimitError(self._where, "max_alias_nodes",
                                      f"YAML aliases expand to more than {self._limits.max_alias_nodes:,} nodes "
                                      f"(at line {event.start_mark.line + 1}, *{event.anchor}; the limit on alias "
                                      "expansion: a 'billion laughs' document?)")
            if self._open:
                self._open[-1][1] += size
        return event


class _PyLoader(_BudgetedEvents, yaml.SafeLoader):
    """PyYAML's safe loader (pure Python), events counted."""

    def __init__(self, stream, where: str, limits: Limits):
        yaml.SafeLoader.__init__(self, stream)
        self._start_budget(where, limits)


try:
    from yaml._yaml import CParser as _CParser
except ImportError:  # PyYAML built without libyaml
    _CParser = None

if _CParser is not None:
    class _CLoader(_BudgetedEvents, Composer, _CParser, SafeConstructor, Resolver):
        """libyaml's parser (fast, iterative) with PyYAML's composer, so every event passes the budget."""

        def __init__(self, stream, where: str, limits: Limits):
            _CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_budget(where, limits)

    _LOADER: type = _CLoader
else:
    _LOADER = _PyLoader


def parse_yaml(text: str | bytes, where: str, limits: Optional[Limits] = None) -> Any:
    """One YAML document with PyYAML's safe types, nested at most ``max_depth`` levels and with at most
    ``max_alias_nodes`` nodes added by aliases; :class:`SnapshotError` naming ``where``."""
    limits = limits or Limits.from_env()
    loader = _LOADER(text, where, limits)
    try:
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        detail = getattr(exc, "problem", None) or str(exc)
        if "maximum nesting depth" in detail and limits.max_depth < LIBYAML_MAX_NESTING:
            # libyaml (PyYAML >= 6.0.4 wheels) stops at 1,000 levels while scanning ahead, before the composer
            # sees the level past our own limit: the document is nested deeper than that limit all the same
            raise _depth_error(where, limits, mark.line + 1 if mark is not None else None) from None
        context = getattr(exc, "context", None)
        if context and detail.startswith("but "):   # "expected a single document ..., but found another document"
            detail = f"{context}, {detail}"
        raise SnapshotError(where, f"not valid YAML{at} (file truncated or corrupt?): {detail}") from None
    except RecursionError:
        raise _depth_error(where, limits) from None
    except (ValueError, OverflowError, TypeError) as exc:  # a timestamp out of range, a 5,000-digit integer
        raise SnapshotError(where, f"not valid YAML: unreadable value: {_value_error(exc)}") from None
    finally:
        loader.dispose()


def parse_document(data: bytes | str, where: str, fmt: str, limits: Optional[Limits] = None) -> Any:
    """``fmt`` ``json`` or ``yaml`` (YAML reads JSON too)."""
    if fmt == "json":
        return parse_json(data, where, limits)
    return parse_yaml(data, where, limits)


def load_document(path: str | os.PathLike, limits: Optional[Limits] = None) -> Any:
    """A YAML or JSON file (by extension) read and parsed within the limits."""
    limits = limits or Limits.from_env()
    p = Path(path)
    fmt = "json" if p.suffix.lower() == ".json" else "yaml"
    return parse_document(read_text(p, limits), str(p), fmt, limits)


# ---------------------------------------------------------------------------------------------- output

def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text``; an OS error becomes a one-line :class:`SourceError` naming the file."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from None


__all__ = ["Limits", "InputLimitError", "PathRefusedError", "DataDirs", "server_reads", "read_bytes", "read_text",
           "SafeZip", "open_zip", "parse_json", "parse_yaml", "parse_document", "load_document", "check_depth",
           "write_text"]
