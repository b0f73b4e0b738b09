"""The vectorised simulated exporter gives byte-identical output to the per-GPU Python one it replaced.

The "before" outputs in tests/fixtures/perf_equivalence/exporter/ were written by the old code on the fixed
scenario in tests/perf_equivalence_exporter_scenario.py (see its docstring: never regenerate them).

One deliberate difference, a bug fix: the old code read holders from a pandas frame in which pandas 3 turns a
missing ``gpu_group`` into NaN, which is truthy, so a shared GPU whose first holder has no group was credited to
``reservation_pod_name(node, "nan")`` instead of the first holder that has a group (the documented rule; pandas
2 gave that). :data:`FIXED_NAMES` are those two GPUs of the scenario; everything else must be identical.
"""

import pytest

from perf_equivalence_exporter_scenario import FIXTURES, cases, gpus_repr, overrides, scenario
from scheduler.metrics.allocation import reservation_pod_name
from scheduler.metrics.exporter import ExporterState, SimFrame, _escape, render_exposition, simulate_gpus

# (node, group the documented rule picks): l4-b GPU 0 (first holder nogroup-0 has no group, then g0) and the odd
# node's GPU 2 (a whole-GPU holder without group first, then a fraction in group 'G"1').
FIXED_NAMES = [("l4-b", "g0"), ('odd"node\\e', 'G"1')]


def before(name: str) -> str:
    """The fixture, with the NaN-group reservation pod names replaced by the documented ones."""
    text = (FIXTURES / name).read_text()
    for node, group in FIXED_NAMES:
        old, new = reservation_pod_name(node, "nan"), reservation_pod_name(node, group)
        if name.endswith(".repr"):  # as repr() writes the string
            old, new = repr(old)[1:-1], repr(new)[1:-1]
        else:  # as a label value
            old, new = _escape(old), _escape(new)
        assert old in text or "perpod" in name
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name,case", list(cases()), ids=[n for n, _ in cases()])
def test_exposition_text_is_identical_to_before(name, case):
    variant, per_pod, with_overrides = case
    gpus = simulate_gpus(scenario(), overrides() if with_overrides else None)
    assert render_exposition(gpus, variant, per_pod=per_pod) == before(f"{name}.txt")
    frame = SimFrame(scenario(), overrides() if with_overrides else None)
    assert render_exposition(frame, variant, per_pod=per_pod) == before(f"{name}.txt")


@pytest.mark.parametrize("with_overrides", [False, True])
def test_exporter_state_serves_the_same_text_and_gpus_as_before(with_overrides):
    state = ExporterState(variant="classic", per_pod=True)
    state.update(scenario(), overrides() if with_overrides else None)
    suffix = "ovr" if with_overrides else "plain"
    assert state.render() == before(f"classic-perpod-{suffix}.txt")
    assert gpus_repr(state.gpus()) == before(f"gpus-{suffix}.repr")


def test_fixture_covers_the_scenarios_rules():
    """Guards the fixture itself: the cases it was written for are really in it."""
    text = (FIXTURES / "classic-exclusive-ovr.txt").read_text()
    assert 'pod="gpu-reservation-l4-b-' in text          # shared GPU credited to the reservation pod
    assert "} 9223372036854775794" in text               # sentinel override printed raw
    assert 'Hostname="odd\\"node\\\\e"' in text          # escaped label value
    assert 'Hostname="nope"' not in text                  # override for a GPU that does not exist
    assert text.count("DCGM_FI_DEV_FB_USED{") == 8 + 4 + 2 + 3 + 1


def test_shared_gpu_whose_first_holder_has_no_group_is_credited_by_the_first_group():
    # l4-b GPU 0: nogroup-0 (0.3, no group) then grouped-late (0.3, group g0) -> reservation pod of g0.
    gpu = next(g for g in simulate_gpus(scenario()) if (g.node, g.index) == ("l4-b", 0))
    assert gpu.credited.pod == reservation_pod_name("l4-b", "g0")
    # tiny-c has no group on GPU 0's whole holder and none shared: credited to the holder itself
    tiny = next(g for g in simulate_gpus(scenario()) if (g.node, g.index) == ("tiny-c", 0))
    assert tiny.credited.pod == "tiny-0"
