"""The What-if view in headless Chromium while the engine works: a quota slider released on the 64-node what-if
cluster (``bench/whatif_latency.py``: 4 cycles to steady state) shows "computing" at once, an interim diff after
each cycle and then the steady state the engine computes; a second move during a run wins and the first one's
result never shows; no console error.

The server is the real ``kaidash serve`` in a subprocess on loopback, stopped at the end. Screenshots go to
``artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import re

import pytest

from bench.whatif_browser import MARKERS_JS, drag_slider, wait_settled
from bench.whatif_latency import cluster_64
from scheduler.snapshot_io import save_snapshot
from scheduler.whatif import WhatIf, WhatIfRunner
from test_dashboard_browser import SHOTS, Page, Server, browser  # noqa: F401 - fixtures shared

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snap = cluster_64()
    path = tmp_path_factory.mktemp("whatif64") / "cluster64.yaml"
    save_snapshot(snap, path)
    server = Server("--snapshot", str(path), "--data-dir", str(path.parent))
    yield server, snap
    server.stop()


def _open(browser, server, width: int, height: int) -> Page:
    page = Page(browser)
    page.page.set_viewport_size({"width": width, "height": height})
    page.open(f"{server.url}?view=whatif&queue=vision")
    page.page.locator('[data-whatif="steady"]').wait_for(timeout=120_000)    # the base, at steady state
    page.page.evaluate(MARKERS_JS)
    return page


def _quota(page) -> float:
    """The quota the "What-if:" line names (its pane may be patched a frame after the status line's)."""
    line = page.page.locator('[data-whatif="overrides"]', has_text="gpu quota")
    line.wait_for(timeout=10_000)
    text = line.inner_text()
    return float(re.search(r"gpu quota ([\d.]+)", text).group(1))


def _after(page, metric: str) -> str:
    """The summary table's "after" cell of ``metric``."""
    row = page.page.locator(".tabulator-row", has_text=metric).first
    return row.locator('.tabulator-cell[tabulator-field="after"]').inner_text().strip()


def _shows_the_engines_result(page, snap, steady: str):
    """The steady line's cycle count and the "jobs started" after cell equal ``WhatIfRunner``'s for the quota
    the page names; returns the engine's diff."""
    expected = WhatIfRunner(snap).run(WhatIf.from_dict({"queues": {"vision": {"gpu": {"quota": _quota(page)}}}}))
    assert f"Steady state after {expected.after.cycles_run} cycles" in steady
    page.page.wait_for_timeout(300)
    assert _after(page, "jobs started") == str(sum(expected.after.started.values()))
    return expected


def test_quota_move_shows_computing_then_interim_diffs_then_the_engines_steady_state(cluster, browser):
    server, snap = cluster
    page = _open(browser, server, 1280, 720)
    drag_slider(page.page, "GPU quota", 160, 0, 512)
    page.page.locator('[data-whatif="computing"], [data-whatif="interim"]').first.wait_for(timeout=30_000)
    page.page.screenshot(path=str(SHOTS / "whatif-progress-computing-1280x720.png"))
    events = wait_settled(page.page)
    kinds = [k for k, _, _ in events]
    assert kinds[0] == "computing" and kinds[-1] == "steady", events
    assert "interim" in kinds and "error" not in kinds
    assert "computing" not in kinds[kinds.index("interim"):]            # never back to "computing"
    cycles = [int(re.search(r"cycle (\d+) of up to 10", x).group(1)) for k, _, x in events if k == "interim"]
    assert cycles == sorted(cycles) and cycles[0] == 1
    times = [t for _, t, _ in events]
    assert times == sorted(times)
    expected = _shows_the_engines_result(page, snap, events[-1][2])
    assert max(cycles) < expected.after.cycles_run
    page.page.screenshot(path=str(SHOTS / "whatif-progress-steady-1280x720.png"))
    assert page.errors == []
    page.close()


def test_a_second_move_during_a_run_wins(cluster, browser):
    server, snap = cluster
    page = _open(browser, server, 1440, 900)
    drag_slider(page.page, "GPU quota", 200, 0, 512)
    page.page.locator('[data-whatif="computing"], [data-whatif="interim"]').first.wait_for(timeout=30_000)
    first_quota = _quota(page)
    drag_slider(page.page, "GPU quota", 130, 0, 512)                  # while the first still runs
    events = wait_settled(page.page)
    quota = _quota(page)
    assert quota != first_quota and quota < 160
    assert [k for k, _, _ in events].count("steady") == 1              # only the second move's result lands
    _shows_the_engines_result(page, snap, events[-1][2])
    assert page.errors == []
    page.close()


def test_after_pin_the_same_release_runs_again_and_moving_back_is_cached(cluster, browser):
    server, _ = cluster
    page = _open(browser, server, 1280, 720)
    drag_slider(page.page, "GPU quota", 160, 0, 512)
    first = wait_settled(page.page)[-1][2]
    quota = _quota(page)
    page.page.get_by_role("button", name="Pin latest live state").click()
    page.page.locator('[data-whatif="steady"]', has_text="no edits yet").wait_for(timeout=120_000)
    drag_slider(page.page, "GPU quota", 160, 0, 512)              # where it was released before the pin
    events = wait_settled(page.page)
    assert _quota(page) == quota and "computed now" in events[-1][2]      # the pin emptied the cache: computed
    assert first.split(" in ")[0] == events[-1][2].split(" in ")[0]         # "Steady state after N cycles"
    page.page.get_by_role("button", name="Reset edits").click()
    page.page.locator('[data-whatif="steady"]', has_text="no edits yet").wait_for(timeout=60_000)
    drag_slider(page.page, "GPU quota", 160, 0, 512)
    events = wait_settled(page.page)
    assert "from this pin's cache" in events[-1][2] and [k for k, _, _ in events] == ["steady"]   # no computing
    assert page.errors == []
    page.close()
