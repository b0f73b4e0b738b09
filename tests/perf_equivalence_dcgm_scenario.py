"""Fixed inputs for the per-GPU DCGM frame's before/after equivalence test.

``tests/fixtures/perf_equivalence/dcgm/*.json`` were written by :func:`write_fixtures` with
``scheduler.metrics.dcgm.build_gpu_frame`` as it was before it was made faster (sorting once, one join of the
per-GPU tables instead of three merges, no pivot for an empty per-pod table); they must never be regenerated
from the new code. Cases: the exporter equivalence scenario (every holder rule) rendered by each simulated
exporter variant in exclusive and per-pod mode and parsed back (so reservation pods, per-pod series and
missing fields all occur), with and without an idle window. (Inputs are built here from fixed data only, so
changes elsewhere, e.g. to the engine, never change them.)

    python -m tests.perf_equivalence_dcgm_scenario   # only ever run on the "before" code
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "perf_equivalence" / "dcgm"


def canonical(frame) -> str:
    """The frame as JSON text: column order, row order and every value (NaN as null) are compared."""
    return frame.to_json(orient="split", index=False, double_precision=15)


def cases():
    """``(fixture name, snapshot, samples, idle_max_util)``."""
    from perf_equivalence_exporter_scenario import scenario

    from scheduler.metrics import variants as V
    from scheduler.metrics.dcgm import samples_from_exposition
    from scheduler.metrics.exporter import render_exposition, simulate_gpus

    snap = scenario()
    gpus = simulate_gpus(snap)
    idle = {(g.node, g.index): 0.01 * (i % 7) for i, g in enumerate(gpus)}
    for variant in V.EXPORTER_VARIANTS:
        for per_pod in (False, True):
            text = render_exposition(gpus, variant, per_pod=per_pod)
            samples = samples_from_exposition(text, V.variant_for_exporter(V.EXPORTER_VARIANTS[variant]))
            mode = "perpod" if per_pod else "exclusive"
            yield f"{variant}-{mode}", snap, samples, None
            yield f"{variant}-{mode}-idle", snap, samples, idle
    from dashboard.loop import sim_samples            # the dashboard's simulated samples, no text in between

    yield "sim-samples-idle", snap, sim_samples(gpus), idle


def write_fixtures() -> None:
    from scheduler.metrics.dcgm import build_gpu_frame

    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, snap, samples, idle in cases():
        (FIXTURES / f"{name}.json").write_text(canonical(build_gpu_frame(snap, samples, idle)))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    write_fixtures()
