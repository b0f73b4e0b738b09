"""The served dashboard in headless Chromium (Playwright): every view loads with no console error and no
request leaving loopback, numbers on screen are the engine's, a what-if slider moves the diff as the engine
predicts, the pending view shows reasons, a snapshot file imports, and the URL carries the view.

Each server is the real ``kaidash serve`` in a subprocess on a free loopback port, stopped at the end.
Screenshots of every view go to ``artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

import pytest

from dashboard import display
from scheduler.engine import run_session
from scheduler.snapshot_io import save_snapshot
from scheduler.sources.synthetic import generate_scenario
from scheduler.whatif import run_whatif

from test_dashboard_models import SCENARIO

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
VIEWS = ["overview", "queues", "gpus", "pending", "whatif", "timeline", "snapshot", "settings"]
SEED, NODES = 11, 16

playwright_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``kaidash serve`` in a subprocess on loopback (``port``: a given one, e.g. to restart on the same port);
    its output goes to a temporary log file (``stop_and_read``)."""

    def __init__(self, *args: str, port: int | None = None):
        import tempfile

        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("KAIDASH_SNAPSHOT", None)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="kaidash-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "serve", "--port", str(self.port),
                                      "--address", "127.0.0.1", *args], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.read()[-3000:]}")
            try:
                with urlopen(self.url + "healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("server did not become healthy in 90 s")

    def read(self) -> str:
        with open(self.log.name) as f:
            return f.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def stop_and_read(self) -> str:
        """Stop the server and return everything it logged."""
        self.stop()
        text = self.read()
        os.unlink(self.log.name)
        return text


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The seeded synthetic scenario as a static snapshot file, served; and the engine's result for it."""
    snap = generate_scenario(seed=SEED, nodes=NODES).snapshot
    path = tmp_path_factory.mktemp("seeded") / "seeded.yaml"
    save_snapshot(snap, path)
    server = Server("--snapshot", str(path), "--data-dir", str(path.parent))
    yield server, snap, run_session(snap)
    server.stop()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The hand-derived two-queue scenario of test_dashboard_models, served."""
    path = tmp_path_factory.mktemp("small") / "two-queues.yaml"
    path.write_text(SCENARIO)
    server = Server("--snapshot", str(path), "--data-dir", str(path.parent))
    yield server, path
    server.stop()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


class Page:
    """A page that records console errors and every request it makes."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1600, "height": 1000})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, url: str, ready: str = "[data-view]") -> None:
        """Go to ``url`` and wait for ``ready`` and for the whole view (the parts below the first screen follow
        the first document: ``data-complete`` on the view's title)."""
        self.page.goto(url, wait_until="networkidle", timeout=90_000)
        self.page.wait_for_selector(ready, timeout=60_000)
        self.page.wait_for_selector("[data-view][data-complete]", state="attached", timeout=60_000)

    def off_loopback(self) -> list[str]:
        return [u for u in self.requests if not re.match(r"^(https?|wss?)://127\.0\.0\.1[:/]|^(data|blob):", u)]

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def page(browser):
    p = Page(browser)
    yield p
    p.close()


ROWS_JS = """table => table.isConnected ? [...table.querySelectorAll('.tabulator-row')].map(row => Object.fromEntries(
    [...row.querySelectorAll('.tabulator-cell')].map(c => [c.getAttribute('tabulator-field'), c.innerText.trim()])))
    : null"""


def table_rows(table, attempts: int = 20) -> list[dict]:
    """A Tabulator's rows as ``{field: text}``, read in ONE call in the page, so one consistent DOM.

    Panel answers every patch of a table's data with Tabulator's ``setData``, which wipes every row element
    and builds new ones; a ticking table (Queues' status panel) does that every period. Listing the rows and
    then reading each in its own call (``locator.all()`` then ``evaluate`` per row: separate protocol round
    trips) reads, now and then, a row wiped in between: detached, no cells (the KeyError 'queue' once seen under
    load). A table element replaced as a whole reads as ``None`` and is looked up again."""
    for _ in range(attempts):
        rows = table.evaluate(ROWS_JS)
        if rows is not None:
            return rows
        table.page.wait_for_timeout(100)
    raise AssertionError("the table was replaced on every read")


def upload_and_click(page, path, button) -> None:
    """Choose ``path`` in the file input and press ``button`` (a name pattern) once the upload reached the
    server: on a busy machine the file can arrive after the click, which answers "Choose a file first"."""
    page.locator('input[type="file"]').set_input_files(str(path))
    for _ in range(20):
        page.wait_for_timeout(500)
        page.get_by_role("button", name=button).click()
        page.wait_for_timeout(500)
        if page.get_by_text("Choose a file first").count() == 0:
            return
    raise AssertionError("the uploaded file never reached the server")


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.page.wait_for_timeout(1200)
    page.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


# ------------------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("view", VIEWS)
def test_every_view_loads_offline_without_console_errors(seeded, page, view):
    server, _, _ = seeded
    page.open(f"{server.url}?view={view}", ready=f'[data-view="{view}"]')
    _shot(page, view)
    assert page.errors == []
    assert page.off_loopback() == []


def test_overview_numbers_are_the_observed_clusters(seeded, page):
    """Allocated and pending are the served snapshot's, not the state after the engine's binds (predictions)."""
    server, snap, result = seeded
    page.open(f"{server.url}?view=overview")
    node_mem = {n.name: n.gpu_memory_mib for n in snap.nodes}
    allocated = sum(t.gpus_on(node_mem[t.node]) for _, t in snap.iter_tasks()
                    if t.status in ("running", "binding") and t.is_gpu)
    pending = sum(1 for j in snap.jobs if any(t.status == "pending" for t in j.tasks))
    assert pending != sum(1 for j in result.snapshot.jobs if any(t.status == "pending" for t in j.tasks))
    card = page.page.locator('[data-kpi="allocated"] .kd-value')
    card.wait_for()
    assert card.inner_text().replace(",", "") == f"{allocated:.2f}".rstrip("0").rstrip(".")
    assert page.page.locator('[data-kpi="gpus"] .kd-value').inner_text().replace(",", "") == str(
        sum(n.gpus for n in snap.nodes))
    assert page.page.locator('[data-kpi="pending"] .kd-value').inner_text() == str(pending)


def test_gpu_grid_clicks_while_filters_change_raise_no_console_error(seeded, page):
    """Click the grid while the pool filter and the page size change the layout (and before a layout's first
    render lands): the view keeps one figure, so no click refers to a model the server dropped ("reference
    pNNN isn't known") and no source is sent half-updated ("columns of inconsistent lengths")."""
    server, snap, _ = seeded
    warnings: list[str] = []
    page.page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    page.open(f"{server.url}?view=gpus", ready='[data-view="gpus"]')
    pool = page.page.locator(".bk-input-group", has_text="Node pool").locator("select")
    size = page.page.locator(".bk-input-group", has_text="Nodes per page").locator("select")
    pools = ["", *sorted({n.pool for n in snap.nodes if n.gpus})]
    assert len(pools) > 2
    canvas = page.page.locator("canvas").first
    for i in range(24):
        pool.select_option(pools[i % len(pools)])
        if i % 5 == 4:
            size.select_option(index=i % 3)
        for k in range(3):                          # at once, before the new layout has rendered
            box = canvas.bounding_box()
            if box:
                page.page.mouse.click(box["x"] + 8 + (37 * k + 13 * i) % max(16, box["width"] - 16),
                                      box["y"] + 6 + (11 * k) % max(12, box["height"] - 12))
    page.page.wait_for_timeout(1500)
    assert page.errors == []
    assert not [w for w in warnings if "inconsistent lengths" in w], warnings[:3]


def test_queue_table_shows_the_engines_fair_share(seeded, page):
    server, _, result = seeded
    page.open(f"{server.url}?view=queues")
    rows = page.page.locator(".tabulator-row")
    rows.first.wait_for()
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    for queue, stats in result.queue_stats.items():
        fair = stats["gpu"]["fair_share"]
        row = next(t for t in texts if re.search(rf"(^|\s){re.escape(queue)}\s", t))
        assert re.search(rf"(^|\s){re.escape(display.gpus(fair))}(\s|$)", row), (queue, fair, row)


def test_pending_view_shows_reasons(small, page):
    server, _ = small
    page.open(f"{server.url}?view=pending")
    page.page.get_by_text("OverLimit").first.wait_for()
    assert page.page.locator(".tabulator-row", has_text="b-big").count() == 1
    # b-serve waits in the cluster too; the engine binds it this cycle, which the row says as a prediction
    def row(job):
        return page.page.locator(".tabulator-row").filter(
            has=page.page.locator('[tabulator-field="job"]', has_text=re.compile(f"^{job}$")))

    # one line: the reason badge and the expected start in short; the whole prediction is the cell's tooltip
    assert row("b-serve").count() == 1
    assert row("b-serve").locator('[tabulator-field="reason"]').inner_text().strip() == "KAI would start"
    assert row("b-serve").locator('[tabulator-field="eta"]').inner_text().strip() == "this cycle"
    row("b-big").click()
    detail = page.page.locator(".kd-explain", has_text="Would start if").filter(has_text="b-big").first
    detail.wait_for(timeout=30_000)
    assert "over the queue limit" in detail.inner_text().lower()
    assert "2 after this cycle, predicted" in detail.inner_text()


def test_whatif_slider_changes_the_diff_as_the_engine_predicts(small, page):
    server, path = small
    page.open(f"{server.url}?view=whatif&queue=b")
    from scheduler.snapshot_io import load_snapshot

    expected = run_whatif(load_snapshot(path), {"queues": {"b": {"gpu": {"limit": 4}}}})
    assert expected.after.fair_share["b"]["gpu"] == 4
    slider = page.page.locator(".bk-input-group", has_text="GPU limit").locator(".noUi-handle")
    slider.wait_for()
    slider.focus()
    slider.press("ArrowRight")           # step 0.5: 3 -> 3.5
    slider.press("ArrowRight")           # 3.5 -> 4
    page.page.locator('[data-whatif="overrides"]', has_text="gpu limit 4").wait_for(timeout=30_000)
    table = page.page.locator(".tabulator", has_text="Fair share (GPUs)")
    table.locator(".tabulator-row").first.wait_for()
    deadline = time.time() + 20            # the table is patched just after the overrides line
    while True:
        rows = [r.locator(".tabulator-cell").all_inner_texts() for r in table.locator(".tabulator-row").all()]
        b_row = next((cells[cells.index("b"):] for cells in rows if "b" in cells), rows)
        if b_row[:4] == ["b", "3", "4", "1"] or time.time() > deadline:
            break
        page.page.wait_for_timeout(250)
    assert b_row[:4] == ["b", "3", "4", "1"]       # fair share before | after | Δ, GPUs as integers
    jobs = page.page.locator(".tabulator-row", has_text="b-big").first.inner_text()
    assert "pending" in jobs and "started" in jobs
    _shot(page, "whatif-limit")


def test_snapshot_import_switches_my_session_only(seeded, page, browser, tmp_path):
    server, _, _ = seeded
    path = tmp_path / "imported-two-queues.yaml"
    path.write_text(SCENARIO)
    other = Page(browser)                      # somebody else, looking at the shared source meanwhile
    other.open(f"{server.url}?view=queues")
    page.open(f"{server.url}?view=snapshot")
    upload_and_click(page.page, path, re.compile("Load into my session"))
    page.page.locator('[data-import="ok"]').wait_for(timeout=30_000)
    page.page.locator('[data-scope="private"]', has_text="imported-two-queues.yaml").wait_for(timeout=10_000)
    page.page.get_by_role("button", name="Queues", exact=True).click()
    page.page.locator('[data-view="queues"]').wait_for()
    page.page.locator(".tabulator-row", has_text="b").first.wait_for()
    queue_rows = page.page.locator(".tabulator").first.locator(".tabulator-row")
    assert queue_rows.count() == 3                                      # org, a, b
    other.page.wait_for_timeout(1500)
    assert other.page.locator('[data-scope="private"]').count() == 0    # the other session did not move
    assert "seeded.yaml" in other.page.locator('[data-live="source"]').inner_text()
    assert other.page.locator(".tabulator").first.locator(".tabulator-row").count() > 3
    other.close()
    # a bad file is refused with the field named, and the app keeps the imported state
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("gpu: 4, cpu_millis", "gpu: -4, cpu_millis"))
    page.page.get_by_role("button", name="Snapshot", exact=True).click()
    upload_and_click(page.page, bad, re.compile("Load into my session"))
    err = page.page.locator('[data-import="error"]')
    err.wait_for(timeout=30_000)
    assert "a-train-0" in err.inner_text() and "gpu" in err.inner_text()
    page.page.get_by_role("button", name=re.compile("Back to the shared live view")).first.click()
    page.page.locator('[data-live="source"]', has_text="seeded.yaml").wait_for(timeout=30_000)
    assert page.page.locator('[data-scope="private"]').count() == 0


def test_url_carries_the_view_and_selection(seeded, page):
    server, _, _ = seeded
    page.open(f"{server.url}?view=overview")
    page.page.get_by_role("button", name="Pending", exact=True).click()
    page.page.locator('[data-view="pending"]').wait_for()
    page.page.wait_for_function("() => window.location.search.includes('view=pending')", timeout=10_000)
    page.open(f"{server.url}?view=gpus&node=x")
    assert page.page.locator('[data-view="gpus"]').count() == 1


def test_default_sim_serves_a_live_cluster(browser):
    """No arguments: the embedded simulated cluster, ticking."""
    server = Server("--nodes", "16", "--period", "1")
    try:
        p = Page(browser)
        p.open(server.url)
        first = p.page.locator('[data-kpi="gpus"] .kd-value').inner_text()
        assert int(first.replace(",", "")) > 0
        with urlopen(server.url + "healthz", timeout=5) as r:
            assert r.status == 200
        with urlopen(server.url + "metrics", timeout=5) as r:
            assert b"kaidash_" in r.read()
        # ticking: the sidebar counts past the first tick ("tick 1 at HH:MM:SS" after the first, never "tick 0")
        p.page.get_by_text(re.compile(r"tick ([2-9]|[1-9]\d+) at \d\d:\d\d:\d\d")).first.wait_for(timeout=30_000)
        assert p.errors == [] and p.off_loopback() == []
        p.close()
    finally:
        server.stop()


HEADER_LINES = """t => { const cols = [...t.querySelectorAll('.tabulator-col[tabulator-field]')]
    .filter(c => c.offsetWidth > 0 && c.getAttribute('tabulator-field') !== '_index');
  const title = c => c.querySelector('.tabulator-col-title');
  const one = Math.min(...cols.map(c => title(c).getBoundingClientRect().height).filter(h => h > 0));
  return cols.map(c => ({field: c.getAttribute('tabulator-field'), text: title(c).innerText.replace(/\\s+/g, ' '),
                         lines: Math.round(title(c).getBoundingClientRect().height / one)})); }"""


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
def test_gpu_slice_table_titles_fit_in_two_lines(seeded, page, size):
    """The selected node's slice table: every column title reads on at most two lines (a three-line "memory
    share GiB" pushed the rows down and read as a word list), and the short memory titles keep their full
    meaning as a tooltip."""
    server, snap, _ = seeded
    node = next(t.node for _, t in snap.iter_tasks() if t.is_gpu and t.node and t.status == "running")
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{server.url}?view=gpus&node={node}", ready='[data-view="gpus"]')
    table = page.page.locator(".tabulator", has=page.page.locator('[tabulator-field="memory_share_gib"]')).first
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    table.scroll_into_view_if_needed()
    page.page.wait_for_timeout(800)
    heads = table.evaluate(HEADER_LINES)
    assert {h["field"] for h in heads} >= {"memory_share_gib", "memory_used_gib", "over_share", "device_source"}
    assert all(h["lines"] <= 2 for h in heads), heads
    for field, meaning in (("memory_share_gib", "GPU memory the pod's share entitles it to"),
                           ("memory_used_gib", "GPU memory the pod uses now")):
        assert "GiB" in next(h["text"] for h in heads if h["field"] == field)
        table.locator(f'.tabulator-col[tabulator-field="{field}"]').hover()
        page.page.locator(".tabulator-tooltip", has_text=meaning).wait_for(timeout=10_000)
    _shot(page, f"gpus-slices-{size[0]}x{size[1]}")
    assert page.errors == []


CLIPPED_IN_TABLE = """t => [...t.querySelectorAll('.tabulator-col[tabulator-field] .tabulator-col-title, .tabulator-cell')]
    .filter(c => c.offsetWidth > 0 && c.innerText.trim() && c.scrollWidth > c.clientWidth + 1)
    .map(c => (c.closest('[tabulator-field]')?.getAttribute('tabulator-field') || '?') + ': ' + c.innerText)"""


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
def test_whatif_per_queue_diff_shows_whole_titles_and_queue_names(seeded, page, size):
    """The per-queue before | after | Δ table: "before" and a queue named "infrastructure" read whole (they were
    cut to "befor" and "infrastructur"), at 1280x720 and 1440x900."""
    server, snap, _ = seeded
    assert any(q.name == "infrastructure" for q in snap.queues)
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{server.url}?view=whatif", ready='[data-whatif="overrides"]')
    page.page.locator('[data-whatif="steady"]').wait_for(timeout=60_000)
    table = page.page.locator(".tabulator", has=page.page.locator('[tabulator-field="fair_share_before"]')).first
    table.locator(".tabulator-row", has_text="infrastructure").wait_for(timeout=30_000)
    table.scroll_into_view_if_needed()
    page.page.wait_for_timeout(500)
    assert table.evaluate(CLIPPED_IN_TABLE) == []
    box = table.bounding_box()
    assert box["x"] + box["width"] <= size[0]                       # no sideways cut at the window's edge
    _shot(page, f"whatif-queues-{size[0]}x{size[1]}")
    assert page.errors == []


CLIPPED_TITLES = """root => [...root.querySelectorAll('.tabulator-col[tabulator-field] .tabulator-col-title')]
    .filter(c => c.offsetWidth > 0 && c.innerText.trim() && c.scrollWidth > c.clientWidth + 1)
    .map(c => c.closest('[tabulator-field]').getAttribute('tabulator-field') + ': ' + c.innerText)"""


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
@pytest.mark.parametrize("view", ["queues", "gpus", "pending", "whatif"])
def test_no_table_column_title_is_cut(seeded, page, view, size):
    """Every table title of the view reads whole at 1280x720 and 1440x900: none cut at its column's edge or under
    its sort arrow (the queue status panel's titles were, and Pending's "GPUs", the slices' "share")."""
    server, _, _ = seeded
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{server.url}?view={view}", ready=f'[data-view="{view}"]')
    page.page.locator(".tabulator-row").first.wait_for(timeout=60_000)
    page.page.wait_for_timeout(1000)
    cut = [t for table in page.page.locator(".tabulator").all() for t in table.evaluate(CLIPPED_TITLES)]
    assert cut == [], cut
