"""Coverage-guided fuzzing of kaidash's loaders with atheris (libFuzzer for Python).

    python tests/fuzz/fuzz_loaders.py NEW_DIR tests/fuzz/corpus tests/fuzz/regressions -seed=1 -runs=20000

Arguments are libFuzzer's: corpus directories (new interesting inputs go to the first), ``-runs``,
``-max_total_time``, ``-timeout`` (seconds per input: a hang is a finding), ``-rss_limit_mb`` (memory: a blow-up
is a finding), ``-artifact_prefix``. Every input goes through :func:`targets.run_one`: anything but success or a
KaidashError is a finding, written as ``crash-<sha1>`` (add it to tests/fuzz/regressions/ once fixed).
``KAIDASH_MAX_INPUT_MIB`` is 8 unless set, so what a small input may inflate to stays small.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("KAIDASH_MAX_INPUT_MIB", "8")

with atheris.instrument_imports(include=["scheduler", "yaml", "zipfile", "targets"]):
    import targets


def main() -> None:
    shm = Path("/dev/shm")
    workdir = Path(tempfile.mkdtemp(prefix="kaidash-fuzz-", dir=shm if shm.is_dir() else None))
    atheris.Setup(sys.argv, lambda data: targets.run_one(data, workdir))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
