"""The GPUs view of the demo's topology, MIG and DRA pools in headless Chromium: the "Group by" select groups the
grid by rack and names the pending rack gang's best rack, the MIG pool renders, no console error, nothing leaves
loopback. Screenshots at 1280×720 and 1440×900 go to ``artifacts/screenshots/`` (gitignored)."""

from __future__ import annotations

import pytest

from scheduler.snapshot_io import save_snapshot
from scheduler.sources.synthetic import generate_scenario

from test_dashboard_browser import SHOTS, Server, browser  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")
SIZES = ((1280, 720), (1440, 900))
TWO_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The 64-node demo with its extension pools as a static snapshot file (a live sim would move on)."""
    path = tmp_path_factory.mktemp("demo-ext") / "demo-extensions.yaml"
    save_snapshot(generate_scenario(seed=7, nodes=64, extensions=True).snapshot, path)
    server = Server("--snapshot", str(path), "--data-dir", str(path.parent))
    yield server
    server.stop()


def _open(browser, server, size):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{server.url}?view=gpus", wait_until="networkidle", timeout=90_000)
    page.wait_for_selector('[data-view="gpus"][data-complete]', timeout=60_000)
    page.get_by_text("node(s) match").wait_for(timeout=60_000)
    page.locator("canvas").first.wait_for(state="visible", timeout=60_000)
    page.evaluate(TWO_FRAMES_JS)      # the grid is drawn: a person's first click comes after it
    return page, errors, requests


def _select(page, label: str, value: str) -> None:
    page.get_by_label(label).select_option(value)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_group_by_rack_and_mig_pool_render(served, browser, size):
    page, errors, requests = _open(browser, served, size)
    try:
        _select(page, "Group by", "rack")
        gang = page.locator(".kd-gang", has_text="llm/llm-train-nv-10")
        gang.wait_for(timeout=60_000)
        assert "needs 16 GPUs in one rack" in gang.inner_text()
        assert "no rack with 16 free GPUs; largest 8" in gang.inner_text()
        grouped = page.get_by_text("Grouped by rack")
        grouped.wait_for(timeout=60_000)
        assert "rack-b2x 8/16 free" in grouped.inner_text()
        page.locator(".kd-gang").first.scroll_into_view_if_needed()
        page.wait_for_timeout(1500)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"gpus-topology-rack-{size[0]}x{size[1]}.png"))
        _select(page, "Group by", "none")
        grouped.wait_for(state="detached", timeout=60_000)     # a person's pace: one change lands, then the next
        page.wait_for_timeout(1000)
        _select(page, "Node pool", "a100-mig")
        page.get_by_text("4 node(s) match").wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SHOTS / f"gpus-mig-{size[0]}x{size[1]}.png"))
        assert errors == [], errors
        assert [u for u in requests if "127.0.0.1" not in u and not u.startswith(("data:", "blob:"))] == []
    finally:
        page.close()


PICKED_JS = """() => { for (const d of Bokeh.documents) for (const m of d._all_models.values()) {
  if (m.type == 'ColumnDataSource' && m.data.flags !== undefined && m.data.evidence !== undefined)
    return Array.from(m.selected.indices).map(i => [m.data.node[i], Number(m.data.gpu[i])]); }
  return null; }"""


@pytest.mark.parametrize("size", SIZES[:1], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_picked_slice_row_outlines_its_gpu_and_a_clicked_mig_instance_its_cells(served, browser, size):
    """In the browser: a row of a 2-GPU pod picked in the slice table outlines that row's GPU, not the pod's
    other one (the rows had one key for both); a 3g.40gb instance's one row outlines its three cells. The
    table's selection arrives outside the document lock: changing the grid's source there failed on the server
    until it was made unlocked."""
    page, errors, _ = _open(browser, served, size)
    log_start = len(served.read())
    try:
        page.get_by_label("Node", exact=True).select_option("a100-40-001")
        rows = page.locator('.tabulator-row')
        rows.filter(has_text="analytics-batch-0004").first.wait_for(timeout=60_000)
        assert rows.filter(has_text="analytics-batch-0004").count() == 2            # one pod, two GPUs, two rows
        rows.filter(has_text="analytics-batch-0004").nth(1).click()
        page.wait_for_function(f"() => JSON.stringify(({PICKED_JS})()) == '[[\"a100-40-001\",3]]'", timeout=30_000)
        _select(page, "Node pool", "a100-mig")
        page.get_by_text("4 node(s) match").wait_for(timeout=60_000)
        page.get_by_label("Node", exact=True).select_option("a100-mig-001")
        row = rows.filter(has_text="inference-serve-mig-07")
        row.wait_for(timeout=60_000)
        assert rows.filter(has_text="3g.40gb").count() == 2                         # two instances, not six cells
        assert "3g.40gb" in row.inner_text() and "40" in row.inner_text().split()
        row.click()
        page.wait_for_function(f"() => JSON.stringify(({PICKED_JS})()) == "
                               "'[[\"a100-mig-001\",3],[\"a100-mig-001\",4],[\"a100-mig-001\",5]]'", timeout=30_000)
        page.wait_for_timeout(500)
        assert errors == [], errors
        assert "Traceback" not in served.read()[log_start:]
    finally:
        page.close()
