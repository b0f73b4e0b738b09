"""The notebooks: committed without outputs, public API only, and each runs top to bottom with nbclient.

Every notebook under ``notebooks/`` is executed from that directory with the ``python3`` kernel (ipykernel is
in the test extras); any cell error fails the test. For the notebooks with a known answer, a probe cell is
appended to the in-memory copy before execution: it prints the notebook's own variables as JSON, and the tests
compare them with numbers derived by hand from the rules (``docs/fairshare.md``) or from the inputs. The files
on disk are never modified.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
ALL_NOTEBOOKS = sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300
PROBE_MARK = "__KAIDASH_TEST_PROBE__"

PROBES = {
    "fair-share.ipynb": """
import json
print(PROBE_MARK + json.dumps({
    "worked": fair, "worked_remaining": remaining,
    "tree": {q.name: problem.shares[q.name]["gpu"].fair_share for q in problem.queues},
    "requestable": {q.name: problem.shares[q.name]["gpu"].requestable for q in problem.queues},
    "what_if": {q.name: what_if.shares[q.name]["gpu"].fair_share for q in what_if.queues},
    "sweep": sweep.to_dict("records"),
    "explore_rows": list(explore("platform", 8, 12, 1, 100, 1.0, False)[1].object.index),
}))
""",
    "capacity-planning.ipynb": """
import json
print(PROBE_MARK + json.dumps({
    "summary": summary.reset_index().to_dict("records"),
    "attainment": attainment[["variant", "queue", "attainment", "mean_fair_share_gpu"]].to_dict("records"),
    "leaves": sorted(q.name for q in snapshot.leaf_queues()),
    "gpus_now": int(sum(n.gpus for n in snapshot.nodes)),
    "h100_gpus_per_node": sorted({n.gpus for n in snapshot.nodes if n.pool == POOL}),
    "series_variants": sorted(series["variant"].unique()),
    "savings": savings.reset_index().to_dict("records"),
    "prices": {m: prices.price(m) for m in {n.gpu_model for n in snapshot.nodes if n.gpu_model}},
    "pool_model": next(n.gpu_model for n in snapshot.nodes if n.pool == POOL),
    "eta": eta_table[["job", "eta_p50_before_s", "eta_p50_after_s"]].to_dict("records"),
    "waiting_now": sorted(j.key for j in snapshot.jobs
                          if all(t.status == "pending" for t in j.tasks)),
}, default=float))
""",
    "fragmentation.ipynb": """
import json
print(PROBE_MARK + json.dumps({
    "table": table.reset_index().to_dict("records"),
    "curve_range": {p: [int(c["arrived_pct"].min()), int(c["arrived_pct"].max())]
                    for p, c in mean_curves.groupby("policy")},
    "nodes_sampled": int(summary["nodes"].iloc[0]) if "nodes" in summary else None,
    "policies": POLICIES,
}, default=float))
""",
    "live-cluster.ipynb": """
import json
from scheduler.queue_allocation import observed_allocations
print(PROBE_MARK + json.dumps({
    "health": {k: health[k] for k in ("status", "source", "error", "tick_index")},
    "history": len(state.history), "ticks": TICKS,
    "nodes": len(tick.scheduled.nodes),
    "gpus": sum(n.gpus for n in tick.scheduled.nodes if n.ready),
    "fair_share": {q: s["gpu"]["fair_share"] for q, s in result.queue_stats.items()},
    "leaves": sorted(q.name for q in tick.scheduled.leaf_queues()),
    "gpu_frame_rows": 0 if gpu_frame is None else len(gpu_frame),
    "plotted_allocated": {q: float(v) for q, v in leaves["allocated"].items()},
    "observed_allocated": {q.name: observed_allocations(tick.snapshot)[0][q.name]["gpu"]
                           for q in tick.scheduled.leaf_queues()},
}, default=float))
""",
}


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


@functools.lru_cache(maxsize=None)
def execute(name: str):
    """Execute a copy of ``notebooks/<name>`` (plus its probe cell); returns ``(notebook, probe dict or None)``."""
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    probe = PROBES.get(name)
    if probe:
        nb.cells.append(nbformat.v4.new_code_cell(f"PROBE_MARK = {PROBE_MARK!r}\n" + probe))
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}}).execute()
    data = None
    if probe:
        text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
        data = json.loads(text.split(PROBE_MARK, 1)[1])
    return nb, data


def stdout(nb) -> str:
    return "".join(o.get("text", "") for c in _code_cells(nb) for o in c.outputs if o.output_type == "stream")


# ---------------------------------------------------------------------------------------------- static checks

def test_the_four_notebooks_exist():
    for name in ("fair-share.ipynb", "capacity-planning.ipynb", "fragmentation.ipynb", "live-cluster.ipynb"):
        assert name in ALL_NOTEBOOKS


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{name}: cells {dirty} have outputs or execution counts (strip them before committing)"


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_public_api_only(name):
    """No import of a private module or name (``_x``) from kaidash's packages."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    bad = []
    for cell in _code_cells(nb):
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                parts = (node.module or "").split(".")
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                parts, names = [], [a.name for a in node.names]
            else:
                continue
            for full in [".".join(parts)] + names:
                if any(p.startswith("_") for p in full.split(".") if p):
                    bad.append(full)
        bad += re.findall(r"\b(?:scheduler|dashboard)(?:\.\w+)*\._\w+", source)
    assert not bad, f"{name}: private imports {bad}"


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_starts_with_an_intro_and_a_parameter_cell(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    if name in PROBES:
        first_code = _code_cells(nb)[0].source
        assert "Parameters" in first_code


# ---------------------------------------------------------------------------------------------- execution

@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_runs_top_to_bottom(name):
    nb, _ = execute(name)
    errors = [o for c in _code_cells(nb) for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.slow
def test_fair_share_numbers_by_hand():
    nb, data = execute("fair-share.ipynb")
    text = stdout(nb)
    # docs/fairshare.md worked example: 10 GPUs, quotas 2/3/1, weights 1/2/1, requests 8/4/6.
    assert "fair share: A=4, B=4, C=2; not handed out: 0 GPUs" in text
    assert data["worked"] == {"A": 4, "B": 4, "C": 2} and data["worked_remaining"] == 0
    # Time-based example: weights 1:1, usage 0.6 / 0.1, k=1: sw 0.4 / 0.9 -> 3.08 / 6.92 -> 3 + 6, remainder to B.
    assert "fair share: A=3, B=7" in text
    # The department tree (hand derivation in the notebook's prose): 64 GPUs, deserved 24/24/8; platform's
    # limit 9 caps it; over-quota 8 GPUs by weights 3:1:1 then 3:1; the last GPU to research (older, tie 0.5).
    assert data["tree"] == {"research": 30, "llm": 21, "vision": 9, "product": 25, "inference": 13,
                            "analytics": 12, "platform": 9, "ci": 9}
    assert data["requestable"]["platform"] == 9 and data["requestable"]["research"] == 50
    # Vision's weight 1 -> 3: research's surplus of 6 splits 3:3; vision needs 2, llm gets the rest.
    assert data["what_if"]["llm"] == 20 and data["what_if"]["vision"] == 10
    assert data["what_if"]["research"] == 30 and data["what_if"]["product"] == 25
    # k = 0 ignores usage: the same division as without usage. Any k keeps the sum at 64 and deserved quotas.
    by_k = {}
    for row in data["sweep"]:
        by_k.setdefault(row["k"], {})[row["queue"]] = row["fair share"]
    assert by_k[0] == data["tree"]
    for shares in by_k.values():
        assert shares["research"] + shares["product"] + shares["platform"] == 64
        assert shares["research"] >= 24 and shares["product"] >= 24 and shares["platform"] <= 9
    # Research used 70% of the cluster against a normalised weight of 0.6: a larger k cannot give it more.
    assert by_k[4]["research"] <= by_k[0]["research"]
    # The widget callback returns a before/after table over every queue.
    assert sorted(data["explore_rows"]) == sorted(data["tree"])


@pytest.mark.slow
def test_capacity_planning_sweep():
    nb, data = execute("capacity-planning.ipynb")
    summary = {row["variant"]: row for row in data["summary"]}
    # 4 node counts x 2 placements + 1 quota case.
    assert len(summary) == 9
    assert data["h100_gpus_per_node"] == [8]
    for change in (-1, 0, 2, 4):
        for placement in ("binpack", "spread"):
            name = f"today, {placement}" if change == 0 else f"{change:+d} h100, {placement}"
            assert summary[name]["gpus"] == data["gpus_now"] + 8 * change
            assert summary[name]["placement"] == placement
    assert summary["today, binpack, vision quota x2"]["gpus"] == data["gpus_now"]
    for row in summary.values():
        assert 0 < row["gpu utilisation %"] <= 100
        assert row["started"] + row["still pending"] == row["jobs arrived"] > 0
        assert row["mean wait min"] >= 0 and row["p90 wait min"] >= 0
    # Attainment is per leaf queue and variant.
    pairs = {(r["variant"], r["queue"]) for r in data["attainment"]}
    assert pairs == {(v, q) for v in summary for q in data["leaves"]}
    # Doubling vision's quota cannot lower vision's mean fair share.
    fs = {(r["variant"], r["queue"]): r["mean_fair_share_gpu"] for r in data["attainment"]}
    assert fs[("today, binpack, vision quota x2", "vision")] >= fs[("today, binpack", "vision")]
    assert data["series_variants"] == sorted(summary)
    # Cost: capacity is the GPUs at their model's price, all day; a pool node adds its 8 GPUs' price.
    savings = {row["variant"]: row for row in data["savings"]}
    node_day = 8 * data["prices"][data["pool_model"]] * 24
    for change in (-1, 2, 4):
        for placement in ("binpack", "spread"):
            row = savings[f"{change:+d} h100, {placement}"]
            assert row["extra cost per day"] == pytest.approx(change * node_day)
    for row in savings.values():
        assert 0 <= row["stranded per day"] <= row["unallocated per day"] <= row["capacity per day"]
        assert row["job-hours waited per day"] >= 0
    # The ETA covers exactly the jobs waiting now; two more nodes start at least as many at the next cycle.
    eta = data["eta"]
    assert sorted(r["job"] for r in eta) == data["waiting_now"]
    assert (sum(r["eta_p50_after_s"] == 0 for r in eta) >= sum(r["eta_p50_before_s"] == 0 for r in eta))


@pytest.mark.slow
def test_fragmentation_table_has_a_row_per_policy():
    nb, data = execute("fragmentation.ipynb")
    table = {row["policy"]: row for row in data["table"]}
    assert list(table) == data["policies"]
    # The FGD authors' published means at 100% arrival, default trace (fgd_expected_summary.csv).
    published = {"random": 13.697, "dotproduct": 9.378, "gpuclustering": 8.35, "gpupacking": 8.221,
                 "bestfit": 7.138, "fgd": 4.773}
    for policy, value in published.items():
        assert table[policy]["published_unallocated_pct"] == pytest.approx(value, abs=1e-3)
        # A quarter-cluster sample with one seed lands near the 10-seed full-cluster means.
        assert abs(table[policy]["unallocated_pct"] - value) < 3.0, policy
    for policy in ("kai-binpack", "kai-spread", "kaidash"):
        assert math.isnan(table[policy]["published_unallocated_pct"])
    for row in table.values():
        assert 0 < row["pods_placed"] <= row["pods"]
        assert 0 <= row["fragmentation_pct"] <= row["unallocated_pct"] + 1e-9
    # The paper's ordering: fragmentation-aware beats packing beats random.
    assert table["fgd"]["unallocated_pct"] < table["bestfit"]["unallocated_pct"] < table["random"]["unallocated_pct"]
    # Curves run from the empty cluster to 130% arrival for every policy.
    assert all(r == [0, 130] for r in data["curve_range"].values())
    assert "least stranded:" in stdout(nb)


@pytest.mark.slow
def test_live_cluster_on_the_simulation():
    nb, data = execute("live-cluster.ipynb")
    assert data["health"]["source"] == "sim" and data["health"]["status"] == "ok" and not data["health"]["error"]
    assert data["health"]["tick_index"] == data["ticks"] - 1
    assert data["history"] == data["ticks"]
    assert data["nodes"] == 32
    # The synthetic organisation's departments share the cluster: their fair shares never exceed its GPUs.
    assert sum(data["fair_share"][q] for q in ("research", "data-science", "infrastructure")) <= data["gpus"] + 1e-6
    assert set(data["leaves"]) <= set(data["fair_share"])
    assert data["gpu_frame_rows"] > 0
    # The last plot shows what the cluster holds (observed), not the engine's after-session prediction.
    assert data["plotted_allocated"].keys() == data["observed_allocated"].keys()
    for q, held in data["observed_allocated"].items():
        assert abs(data["plotted_allocated"][q] - held) < 0.01, q
    # Every dashboard view rendered inline as a Panel/Bokeh bundle.
    view_cells = [c for c in _code_cells(nb) if re.fullmatch(r"\w+View\(state\)", c.source.strip())]
    assert len(view_cells) == 5
    for cell in view_cells:
        kinds = {k for o in cell.outputs for k in o.get("data", {})}
        assert "application/vnd.holoviews_exec.v0+json" in kinds, cell.source
