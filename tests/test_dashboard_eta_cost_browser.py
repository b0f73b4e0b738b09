"""The ETA and cost panels in headless Chromium, against a real ``kaidash serve`` of the simulated cluster with
a price file of its own (EUR, one price for every GPU): Pending's expected start, Queues' status panel, the
Overview's waits and cost, the Timeline's daily cost and its CSV. Screenshots of each panel at 1280x720 and
1440x900 go to ``artifacts/screenshots/`` (gitignored)."""

from __future__ import annotations

import csv
import io
import re
import time

import pytest

from dashboard.views.pending_text import short_eta
from scheduler.sources.synthetic import generate_scenario
from test_dashboard_browser import SHOTS, Page, Server, browser, page, table_rows  # noqa: F401 - fixtures shared

pytestmark = pytest.mark.browser
_PlaywrightError = pytest.importorskip("playwright.sync_api").Error

SEED, NODES, PRICE = 7, 16, 3.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    prices = tmp_path_factory.mktemp("prices") / "prices.yaml"
    prices.write_text(f"currency: EUR\ndefault_gpu_hour: {PRICE}\ngpu_hour: {{}}\n")
    server = Server("--nodes", str(NODES), "--seed", str(SEED), "--period", "1", "--prices", str(prices))
    yield server
    server.stop()


def _shots(page: Page, name: str, locator) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 720), (1440, 900)):
        page.page.set_viewport_size({"width": width, "height": height})
        for _ in range(10):      # a pane re-rendered by a tick detaches the element: find it again
            try:
                locator.first.scroll_into_view_if_needed(timeout=3000)
                break
            except _PlaywrightError:
                page.page.wait_for_timeout(200)
        page.page.wait_for_timeout(1200)
        page.page.screenshot(path=str(SHOTS / f"eta-cost-{name}-{width}x{height}.png"), full_page=False)


def _wait_text(locator, pattern: re.Pattern, timeout_s: float = 120) -> str:
    deadline = time.time() + timeout_s
    text = ""
    while time.time() < deadline:
        text = locator.inner_text() if locator.count() else ""
        if pattern.search(text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{pattern.pattern!r} never appeared; last text: {text[:500]!r}")


def test_pending_shows_each_jobs_expected_start_with_range_and_basis(served, page):
    page.open(f"{served.url}?view=pending")
    note = page.page.locator("[data-eta-note]").first
    _wait_text(note, re.compile("ETA estimated"))
    rows = page.page.locator(".tabulator", has_text="expected start").locator(".tabulator-row")
    rows.first.wait_for(timeout=60_000)
    cells = page.page.locator(".tabulator", has_text="expected start").locator('.tabulator-cell[tabulator-field="eta"]')
    shown = [t.strip() for t in cells.all_inner_texts()]
    for t in shown:                  # one line each: the median (the range and the blocker: tooltip and card)
        assert re.fullmatch(r"(likely )?~[\d.]+ (min|h|d)|next cycle|> [\d.]+ (min|h|d)|cannot start|this cycle|"
                            r"no estimate yet", t), shown
    assert any(t.startswith(("~", "likely ~", "next", ">", "cannot")) for t in shown), shown   # estimated
    detail = page.page.locator(".kd-explain", has_text="Expected start:").first
    deadline, agree = time.time() + 30, False
    while not agree and time.time() < deadline:   # the page ticks: compare the card and its row at one moment
        row = rows.filter(has=page.page.locator('[tabulator-field="eta"]', has_text=re.compile("~"))).first
        row.locator('[tabulator-field="queue"]').click()
        detail.wait_for(timeout=30_000)
        job = detail.locator("b").first.inner_text()
        whole = detail.locator("[data-eta]").inner_text()
        cell = page.page.locator(".tabulator-row", has_text=job).first.locator('[tabulator-field="eta"]')
        agree = bool(whole) and short_eta(whole) == cell.inner_text().strip()
        time.sleep(0.3)
    assert agree, (job, whole)
    # the card: a median and (when the runs differ) a p10–p90 range, each with its unit
    assert re.search(r"starts in ~[\d.]+ (min|h|d)( \((<1 min|[\d.]+ (min|h|d))–(>?[\d.]+ (min|h|d))\))?(,|$)",
                     whole), whole
    assert "ETA estimated" in note.inner_text()
    _shots(page, "pending", page.page.locator(".tabulator", has_text="expected start"))
    assert page.errors == [] and page.off_loopback() == []


def test_queues_status_panel_has_waits_expected_waits_and_cost_per_queue(served, page):
    snap = generate_scenario(seed=SEED, nodes=NODES).snapshot
    leaves = sorted(q.name for q in snap.leaf_queues())
    page.open(f"{served.url}?view=queues")
    panel = page.page.locator(".tabulator", has_text="expected wait")
    panel.locator(".tabulator-row").first.wait_for(timeout=60_000)
    _wait_text(panel, re.compile(r"~\d|beyond|none waiting"))
    reads = []
    for _ in range(8):            # the panel re-renders every tick (1 s): every read is whole, rows never half-built
        reads.append(table_rows(panel))
        page.page.wait_for_timeout(250)
    for rows in reads:
        assert sorted(r.get("queue") for r in rows) == leaves, rows
    rows = reads[-1]
    for cells in rows:
        assert re.fullmatch(r"~.+|beyond .+|none waiting|no estimate yet", cells["est_wait"]), cells
        assert (cells["est_wait"] == "none waiting") == (cells["pending_jobs"] == "0"), cells
        for c in ("idle_cost_per_h", "unused_quota_cost_per_h"):                    # in EUR, two decimals
            assert re.fullmatch(r"€[\d,]+\.\d\d", cells[c]), cells
        assert re.fullmatch(r"\d+ / \d+ / \d+", cells["gangs"]) and re.fullmatch(r"\d+ / \d+", cells["evicted"])
        for c in ("wait_p50_s", "wait_p90_s", "wait_p99_s"):                        # h:m, or – with no start
            assert re.fullmatch(r"–|\d+s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh", cells[c]), cells
    header = panel.locator(".tabulator-header").inner_text()
    for title in ("waiting jobs", "expected wait", "wait p50", "wait p90", "wait p99", "idle GPUs /h"):
        assert title in header.replace("\n", " "), header
    _shots(page, "queues", panel)
    assert page.errors == [] and page.off_loopback() == []


def test_overview_prices_the_cluster_at_the_configured_price(served, page):
    snap = generate_scenario(seed=SEED, nodes=NODES).snapshot
    gpus = sum(n.gpus for n in snap.nodes if n.ready)
    page.open(f"{served.url}?view=overview")
    table = page.page.locator("[data-waits-cost]")
    table.wait_for(timeout=60_000)
    cost = page.page.locator('[data-kpi="cost-per-hour"]').inner_text()
    assert f"all GPUs €{gpus * PRICE:,.0f}/h" in cost, cost          # capacity = GPUs x price
    text = _wait_text(table, re.compile(r"expected wait\s+~\S"))
    assert re.search(r"waiting jobs\s+\d+ · [\d,.]+ GPUs", text), text
    assert re.search(r"wait p50 \S+ · p90 \S+ · p99 \S+", text), text
    assert re.search(r"waste 30 days\s+idle but allocated €[\d,.]+ · stranded fragments €[\d,.]+", text), text
    _shots(page, "overview", table)
    assert page.errors == [] and page.off_loopback() == []


def test_timeline_cost_per_day_and_its_csv(served, page, tmp_path):
    snap = generate_scenario(seed=SEED, nodes=NODES).snapshot
    gpus = sum(n.gpus for n in snap.nodes if n.ready)
    page.open(f"{served.url}?view=timeline")
    days = page.page.locator(".tabulator", has_text="hours observed")
    days.locator(".tabulator-row").first.wait_for(timeout=60_000)
    _wait_text(days, re.compile("last 30 days"))
    with page.page.expect_download(timeout=30_000) as info:
        page.page.get_by_role("button", name=re.compile("Download cost CSV")).click()
    path = tmp_path / "cost.csv"
    info.value.save_as(path)
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert rows and set(rows[0]) == {"day", "category", "queue", "gpu_hours", "cost", "covered_h", "currency"}
    assert {r["currency"] for r in rows} == {"EUR"}
    for r in rows:   # every GPU-hour at one price
        assert float(r["cost"]) == pytest.approx(float(r["gpu_hours"]) * PRICE, rel=1e-6, abs=1e-6)
    capacity = [r for r in rows if r["category"] == "capacity"]
    assert capacity and all(float(r["gpu_hours"]) == pytest.approx(gpus * float(r["covered_h"]), rel=1e-6)
                            for r in capacity)
    _shots(page, "timeline", days)
    assert page.errors == [] and page.off_loopback() == []
