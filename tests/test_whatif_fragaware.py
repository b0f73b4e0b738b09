"""What-if "what if KAI placed fragmentation-aware?": ``placement_gpu: fragaware`` in the engine's what-if and
the dashboard's what-if model.

Cluster (as in ``test_placement_fragaware.py``): ``na`` 2 idle GPUs, ``nb`` 3; pending in one queue a 0.5-GPU
job (oldest) and three 2-GPU jobs. By hand:

* bin-pack (the snapshot's setting): cycle 1 puts the 0.5 pod on na (fewest whole GPUs free) and one 2-GPU
  job on nb; na is stranded for 2-GPU jobs, so KAI's consolidation has to move the 0.5 pod (1 eviction, one
  more cycle) before a second 2-GPU job starts.
* fragaware: the 0.5 pod goes to nb in cycle 1 (ΔF 375 < 1125 milli), two 2-GPU jobs start at once; no
  eviction. Both end with 3 jobs started and one 2-GPU job pending (4.5 of 5 GPUs).
"""

import pytest

from dashboard.loop import publish_snapshot
from dashboard.models import UNCHANGED, WhatIfModel
from dashboard.state import LiveState
from scheduler.errors import SnapshotError
from scheduler.whatif import WhatIf, run_whatif

from test_placement_fragaware import cluster


def test_whatif_accepts_fragaware_and_avoids_the_consolidation_eviction():
    diff = run_whatif(cluster("binpack"), WhatIf(placement_gpu="fragaware"))
    assert diff.modified.config.placement.gpu == "fragaware"
    s = diff.summary()
    assert s["tasks_evicted"] == (1, 0)
    assert s["jobs_started"] == (3, 3) and s["jobs_pending"] == (1, 1)
    assert s["gpu_allocated"] == (4.5, 4.5)
    nodes = {t.name: t.node for _, t in diff.after.snapshot.iter_tasks()}
    assert nodes["frac-0"] == "nb"


def test_whatif_still_rejects_unknown_strategy():
    with pytest.raises(SnapshotError, match="placement_gpu"):
        run_whatif(cluster("binpack"), WhatIf(placement_gpu="fragawares"))


def test_dashboard_whatif_offers_fragaware_and_returns_a_diff():
    st = LiveState()
    publish_snapshot(st, cluster("binpack"), "fragaware test")
    m = WhatIfModel(st)
    assert m.param.placement_gpu.objects == [UNCHANGED, "binpack", "spread", "fragaware"]
    m.placement_gpu = "fragaware"
    assert m.overrides() == {"placement_gpu": "fragaware"}
    diff = m.run()
    assert m.error == "" and diff is not None
    summary = dict(zip(m.summary()["metric"], zip(m.summary()["before"], m.summary()["after"])))
    assert summary["tasks_evicted"] == (1, 0)
