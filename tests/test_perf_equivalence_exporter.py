"""The vectorised simulated exporter gives byte-identical output to the per-GPU Python one it replaced.

The "before" outputs in tests/fixtures/perf_equivalence/exporter/ were written by the old code on the fixed
scenario in tests/perf_equivalence_exporter_scenario.py (see its docstring: never regenerate them).
"""

import pytest

from perf_equivalence_exporter_scenario import FIXTURES, cases, gpus_repr, overrides, scenario
from scheduler.metrics.exporter import ExporterState, render_exposition, simulate_gpus


@pytest.mark.parametrize("name,case", list(cases()), ids=[n for n, _ in cases()])
def test_exposition_text_is_identical_to_before(name, case):
    variant, per_pod, with_overrides = case
    gpus = simulate_gpus(scenario(), overrides() if with_overrides else None)
    assert render_exposition(gpus, variant, per_pod=per_pod) == (FIXTURES / f"{name}.txt").read_text()


@pytest.mark.parametrize("with_overrides", [False, True])
def test_exporter_state_serves_the_same_text_and_gpus_as_before(with_overrides):
    state = ExporterState(variant="classic", per_pod=True)
    state.update(scenario(), overrides() if with_overrides else None)
    suffix = "ovr" if with_overrides else "plain"
    assert state.render() == (FIXTURES / f"classic-perpod-{suffix}.txt").read_text()
    assert gpus_repr(state.gpus()) == (FIXTURES / f"gpus-{suffix}.repr").read_text()


def test_fixture_covers_the_scenarios_rules():
    """Guards the fixture itself: the cases it was written for are really in it."""
    text = (FIXTURES / "classic-exclusive-ovr.txt").read_text()
    assert 'pod="gpu-reservation-l4-b-' in text          # shared GPU credited to the reservation pod
    assert "} 9223372036854775794" in text               # sentinel override printed raw
    assert 'Hostname="odd\\"node\\\\e"' in text          # escaped label value
    assert 'Hostname="nope"' not in text                  # override for a GPU that does not exist
    assert text.count("DCGM_FI_DEV_FB_USED{") == 8 + 4 + 2 + 3 + 1
