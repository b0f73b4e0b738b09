"""Coverage-guided fuzzing of the loaders (atheris), and the corpus of inputs that once failed.

- Every file in ``tests/fuzz/corpus/`` (seeds) and ``tests/fuzz/regressions/`` (findings, kept once fixed)
  goes through :func:`targets.run_one` in this process: a success or a KaidashError, nothing else.
- ``tests/fuzz/fuzz_loaders.py`` runs under libFuzzer from those seeds for :data:`RUNS` inputs with a fixed
  seed (the same inputs every run for the same code), a per-input timeout (:data:`INPUT_TIMEOUT_S`) and an RSS
  limit (:data:`RSS_LIMIT_MB`), both far above what any input takes: they catch hangs and blow-ups. On a finding
  the test fails with the input's path; fix it and copy the input into tests/fuzz/regressions/.

atheris ships wheels for Linux x86-64 (CPython 3.10-3.14); elsewhere the coverage-guided run is skipped and the
corpus replay still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
sys.path.insert(0, str(FUZZ))

import targets  # noqa: E402

pytestmark = pytest.mark.fuzz

RUNS = 8000
"""Inputs per CI run: about 20-30 s on a shared 2-core machine (300-450 inputs/s)."""
MAX_TOTAL_TIME_S = 90
INPUT_TIMEOUT_S = 10
RSS_LIMIT_MB = 1024
SEED = 1

CORPUS = sorted(p for d in ("corpus", "regressions") for p in (FUZZ / d).glob("*") if p.is_file())


@pytest.mark.parametrize("path", CORPUS, ids=[f"{p.parent.name}/{p.name}" for p in CORPUS])
def test_corpus_and_regressions_load_or_raise_a_kaidash_error(path, tmp_path, monkeypatch):
    monkeypatch.setenv("KAIDASH_MAX_INPUT_MIB", "8")   # as in the fuzzing run
    assert targets.run_one(path.read_bytes(), tmp_path) in ("ok", "error")


def test_seed_corpus_covers_every_loader():
    kinds = {p.read_bytes()[0] % len(targets.NAMES) for p in CORPUS if p.parent.name == "corpus"}
    assert kinds == set(range(len(targets.NAMES)))


def test_coverage_guided_fuzzing_of_the_loaders_finds_nothing(tmp_path):
    pytest.importorskip("atheris", reason="atheris has wheels for Linux x86-64 only")
    new, artifacts = tmp_path / "new", tmp_path / "artifacts"
    new.mkdir()
    artifacts.mkdir()
    cmd = [sys.executable, str(FUZZ / "fuzz_loaders.py"), str(new), str(FUZZ / "corpus"), str(FUZZ / "regressions"),
           f"-seed={SEED}", f"-runs={RUNS}", f"-max_total_time={MAX_TOTAL_TIME_S}", f"-timeout={INPUT_TIMEOUT_S}",
           f"-rss_limit_mb={RSS_LIMIT_MB}", "-max_len=65536", f"-artifact_prefix={artifacts}/",
           "-print_final_stats=1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KAIDASH_MAX_INPUT_MIB": "8"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=MAX_TOTAL_TIME_S + 120)
    found = sorted(artifacts.iterdir())
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0 and not found, (
        f"fuzzing found {len(found)} input(s): {[str(p) for p in found]}; fix, then copy them into "
        f"tests/fuzz/regressions/\n{tail}")
    assert "stat::number_of_executed_units" in tail
