"""The faster per-GPU DCGM frame is identical to the one it replaced: every column, row and value of
``build_gpu_frame`` on the fixed inputs of ``tests/perf_equivalence_dcgm_scenario.py`` equals the "before"
output stored in ``tests/fixtures/perf_equivalence/dcgm/`` (written by the old code, never regenerated)."""

import pytest

from perf_equivalence_dcgm_scenario import FIXTURES, canonical, cases
from scheduler.metrics.dcgm import build_gpu_frame

CASES = list(cases())


@pytest.mark.parametrize("name,snap,samples,idle", CASES, ids=[c[0] for c in CASES])
def test_frame_is_identical_to_before(name, snap, samples, idle):
    assert canonical(build_gpu_frame(snap, samples, idle)) == (FIXTURES / f"{name}.json").read_text()


def test_every_fixture_has_a_case():
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted(c[0] for c in CASES)
