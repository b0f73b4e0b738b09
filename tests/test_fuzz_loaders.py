"""Property-based fuzzing of the loaders: hostile snapshots, fair-share inputs and KAI zips (tests/strategies.py).

For every generated input, reading it as kaidash does (``load_snapshot`` on a file, ``kaidash fairshare``'s
``load_problem`` and division, the KAI zip import) either succeeds or raises a :class:`KaidashError`; never
another exception, and the memory Python allocates while reading stays under :data:`MEMORY_BOUND` with the
size limits at :data:`LIMIT_MIB` (``tracemalloc`` peak). Hangs are caught by the alias and nesting limits
the strategies exercise; the coverage-guided run with a per-input timeout is tests/test_fuzz_atheris.py.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_objects import kai_snapshot_doc, small_cluster
from scheduler.commands.fairshare import load_problem
from scheduler.errors import KaidashError
from scheduler.snapshot_io import load_snapshot
from strategies import hostile_fairshare_texts, hostile_kai_zips, hostile_snapshot_texts

pytestmark = pytest.mark.fuzz

LIMIT_MIB = 4
MEMORY_BOUND = 24 * LIMIT_MIB * 2**20
"""Peak Python allocation while reading one input: a few copies of the largest thing a limit lets through
(file bytes, text, parsed objects), nowhere near what the input would expand to without the limits."""
KAI_DOC = kai_snapshot_doc(small_cluster())


@contextlib.contextmanager
def _small_limits():
    old = os.environ.get("KAIDASH_MAX_INPUT_MIB")
    os.environ["KAIDASH_MAX_INPUT_MIB"] = str(LIMIT_MIB)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KAIDASH_MAX_INPUT_MIB", None)
        else:
            os.environ["KAIDASH_MAX_INPUT_MIB"] = old


def _read_within_bounds(name: str, data: bytes, read) -> str:
    """Write ``data`` as ``name``, read it with ``read(path)``; "ok" or "error" (KaidashError), memory bounded."""
    with tempfile.TemporaryDirectory() as d, _small_limits():
        path = Path(d) / name
        path.write_bytes(data)
        tracemalloc.start()
        try:
            read(path)
            outcome = "ok"
        except KaidashError as exc:
            assert str(exc).strip(), "a KaidashError with no message"
            outcome = "error"
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"{name}: reading it took {peak / 2**20:.0f} MiB"
    return outcome


@settings(max_examples=120)
@given(hostile_snapshot_texts())
def test_hostile_snapshot_files_load_or_raise_a_kaidash_error(case):
    text, fmt = case
    _read_within_bounds(f"snapshot.{fmt}", text.encode("utf-8", errors="surrogatepass"), load_snapshot)


@settings(max_examples=80)
@given(hostile_fairshare_texts())
def test_hostile_fairshare_files_load_or_raise_a_kaidash_error(case):
    text, fmt = case
    _read_within_bounds(f"fairshare.{fmt}", text.encode("utf-8", errors="surrogatepass"),
                        lambda p: load_problem(p).solve({}))


@settings(max_examples=120)
@given(hostile_kai_zips(KAI_DOC))
def test_hostile_kai_zips_import_or_raise_a_kaidash_error(data):
    _read_within_bounds("kai.zip", data, load_snapshot)


@settings(max_examples=30)
@given(st.binary(max_size=4096), st.sampled_from(["s.yaml", "s.json", "k.zip", "f.yaml"]))
def test_arbitrary_bytes_in_any_input_file(data, name):
    read = (lambda p: load_problem(p).solve({})) if name == "f.yaml" else load_snapshot
    _read_within_bounds(name, data, read)
