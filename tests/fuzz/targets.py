"""The fuzz target: one input through kaidash's reading path, as a file on disk.

An input's first byte picks the loader, the rest is the file:

====== ==================== ==========================================================================
byte   file                 what reads it
====== ==================== ==========================================================================
0      ``snapshot.yaml``    :func:`scheduler.snapshot_io.load_snapshot` (YAML)
1      ``snapshot.json``    :func:`~scheduler.snapshot_io.load_snapshot` (JSON)
2      ``kai.zip``          :func:`~scheduler.snapshot_io.load_snapshot` (a KAI ``/get-snapshot`` zip)
3      ``kai.zip``          the rest is ``snapshot.json`` text, zipped here (fuzzes the KAI JSON import)
4      ``fairshare.yaml``   ``kaidash fairshare``: :func:`~scheduler.commands.fairshare.load_problem`, solved
====== ==================== ==========================================================================

:func:`run_one` returns ``"ok"`` or ``"error"`` (a :class:`~scheduler.errors.KaidashError`); any other
exception escapes: that is a finding. Used by the atheris harness (``fuzz_loaders.py``) and by the tests that
replay the committed corpus and the regressions (``tests/test_fuzz_atheris.py``).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from scheduler.commands.fairshare import load_problem
from scheduler.errors import KaidashError
from scheduler.snapshot_io import load_snapshot

NAMES = ("snapshot.yaml", "snapshot.json", "kai.zip", "kai.zip", "fairshare.yaml")


def _zipped(text: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("snapshot.json", text)
    return buf.getvalue()


def run_one(data: bytes, workdir: Path) -> str:
    """Write the input as its file in ``workdir`` and read it; ``"ok"`` or ``"error"``."""
    if not data:
        return "ok"
    kind = data[0] % len(NAMES)
    body = data[1:] if kind != 3 else _zipped(data[1:])
    path = Path(workdir) / NAMES[kind]
    path.write_bytes(body)
    try:
        if kind == 4:
            load_problem(path).solve({})
        else:
            load_snapshot(path)
    except KaidashError:
        return "error"
    return "ok"
