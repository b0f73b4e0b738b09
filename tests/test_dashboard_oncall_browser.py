"""What an on-call engineer sees in Chromium at 1280x720 and 1440x900, on the seeded 16-node cluster served as a
static snapshot (10 waiting jobs): Pending shows one line per job, a screenful of them with the longest waits on
top, every summary whole, and the whole "would start if" as the cell's tooltip and in the detail card; the GPUs
view's slice table names each job once ("job / pod"), sorts by it and fits the card. Screenshots go to
``artifacts/screenshots/`` (gitignored)."""

from __future__ import annotations

import re
import time

import pytest

from test_dashboard_browser import SHOTS, Page, Server, browser, page, seeded  # noqa: F401 - fixtures shared

pytestmark = pytest.mark.browser

ROWS_GEOMETRY = """t => {
  const holder = t.querySelector('.tabulator-tableholder');
  const cut = el => el.scrollWidth > el.clientWidth + 1;
  return {holderScroll: holder.scrollTop, pageScroll: window.scrollY, viewport: window.innerHeight,
          rows: [...t.querySelectorAll('.tabulator-row')].map(r => {
            const box = r.getBoundingClientRect();
            const cells = [...r.querySelectorAll('.tabulator-cell[tabulator-field]')].filter(c => c.offsetWidth > 0)
              .map(c => c.querySelector('.kd-job') || c);      // a job name: its own box, cut at its start
            const badge = r.querySelector('.tabulator-cell[tabulator-field="reason"] .kd-badge');
            return {top: box.top, bottom: box.bottom, height: box.height,
                    job: r.querySelector('[tabulator-field="job"]').innerText.trim(),
                    cut: cells.filter(cut).map(c => c.closest('[tabulator-field]').getAttribute('tabulator-field')
                                               + ' ' + getComputedStyle(c).direction + ': ' + c.innerText)
                         .concat(badge && cut(badge) ? ['reason badge: ' + badge.innerText] : [])};
          })};
}"""


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.page.wait_for_timeout(800)
    page.page.screenshot(path=str(SHOTS / f"{name}.png"))


def _explained(table, timeout_s: float = 120) -> None:
    """Wait for the explainer's answers: the searches run between ticks, one waiting job at a time."""
    cells = table.locator('.tabulator-row .tabulator-cell[tabulator-field="counterfactual"]')
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        texts = cells.all_inner_texts()
        if texts and all("not explained yet" not in t for t in texts):
            return
        time.sleep(0.5)
    raise AssertionError(f"not every waiting job explained in {timeout_s} s: {cells.all_inner_texts()}")


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
def test_pending_shows_a_screenful_of_one_line_rows_longest_wait_first(seeded, page, size):
    """Every row one line tall, none of its summaries cut (a long job name shows its end); at 1280x720 at least
    8 whole rows on the first
    screen without scrolling, the longest wait on top (the reason of "would start if" wrapped to ten lines and
    two jobs filled the screen)."""
    server, snap, _ = seeded
    waiting = sorted(((snap.time - j.creation_time, j.key) for j in snap.jobs
                      if any(t.status == "pending" for t in j.tasks)), reverse=True)
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{server.url}?view=pending", ready='[data-view="pending"]')
    table = page.page.locator(".tabulator", has_text="would start if")
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    _explained(table)
    page.page.wait_for_timeout(800)
    seen = table.evaluate(ROWS_GEOMETRY)
    rows = seen["rows"]
    assert [r["job"] for r in rows] == [k for _, k in waiting]              # every waiting job, longest first
    one_line = min(r["height"] for r in rows)
    assert one_line < 36 and all(r["height"] <= one_line + 1 for r in rows), [r["height"] for r in rows]
    # summaries whole; a job name longer than its column loses its start, never its end (the number)
    assert [c for r in rows for c in r["cut"] if not c.startswith("job rtl: ")] == []
    assert seen["holderScroll"] == 0 and seen["pageScroll"] == 0
    on_screen = [r for r in rows if r["bottom"] <= seen["viewport"]]
    assert len(on_screen) >= (8 if size == (1280, 720) else 10), (len(on_screen), rows[:2])
    _shot(page, f"pending-oneline-{size[0]}x{size[1]}")
    assert page.errors == [] and page.off_loopback() == []


def test_pending_whole_would_start_if_is_the_tooltip_and_in_the_card(seeded, page):
    """The summary's whole text: hovering the cell shows it, and the detail card of the clicked row says the
    same (the row shows a summary that is a shorter text)."""
    server, _, _ = seeded
    page.page.set_viewport_size({"width": 1280, "height": 720})
    page.open(f"{server.url}?view=pending", ready='[data-view="pending"]')
    table = page.page.locator(".tabulator", has_text="would start if")
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    _explained(table)
    row = table.locator(".tabulator-row").filter(                 # a job that waits (not one KAI binds now)
        has=page.page.locator('[tabulator-field="reason"] .kd-badge', has_text=re.compile(r"^(?!KAI would)"))).first
    job = row.locator('[tabulator-field="job"]').inner_text().strip()
    cell = row.locator('[tabulator-field="counterfactual"]')
    short = cell.inner_text().strip()
    row.locator('[tabulator-field="queue"]').click()
    card = page.page.locator(".kd-explain", has_text="Would start if:").filter(has_text=job).first
    card.wait_for(timeout=30_000)
    whole = re.search(r"Would start if: (.*)", card.inner_text())[1].strip()
    cell.hover()
    tip = page.page.locator(".tabulator-tooltip").first
    tip.wait_for(timeout=10_000)
    assert tip.inner_text().strip() == whole
    assert len(short) < len(whole)
    reason_cell = row.locator('[tabulator-field="reason"]')
    code = reason_cell.inner_text().strip()
    page.page.mouse.move(0, 0)
    reason_cell.hover()
    page.page.locator(".tabulator-tooltip", has_text=f"{code}: ").first.wait_for(timeout=10_000)  # code: message
    assert page.errors == []


PREEMPTION_DELAY = """
time: 1000
nodes:
  - {name: n1, gpus: 4, gpu_memory_mib: 81920, cpu_millis: 64000, memory_bytes: 512Gi}
queues:
  - {name: a, gpu: {quota: 3}, cpu: {quota: -1}, memory: {quota: -1}}
  - {name: infrastructure, gpu: {quota: 1}, cpu: {quota: -1}, memory: {quota: -1}}
jobs:
  - {name: a1, queue: a, creation_time: 1, tasks: [{name: a1-0, gpu: 1, status: running, node: n1}]}
  - {name: a2, queue: a, creation_time: 2, tasks: [{name: a2-0, gpu: 1, status: running, node: n1}]}
  - {name: a3, queue: a, creation_time: 3, tasks: [{name: a3-0, gpu: 1, status: running, node: n1}]}
  - {name: a4, queue: a, creation_time: 4, tasks: [{name: a4-0, gpu: 1, status: running, node: n1}]}
  - {name: infrastructure-etl-0031, queue: infrastructure, creation_time: 990, preemption_delay_s: 30,
     tasks: [{name: etl-0, gpu: 1}]}
"""
"""A job that may not evict yet (test_scenarios' preemption-delay case): KAI's longest reason code, in a queue
with a long name."""


@pytest.fixture(scope="module")
def preemption_delay(tmp_path_factory):
    path = tmp_path_factory.mktemp("delay") / "delay.yaml"
    path.write_text(PREEMPTION_DELAY)
    server = Server("--snapshot", str(path), "--data-dir", str(path.parent))
    yield server
    server.stop()


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
def test_a_long_reason_code_gets_a_whole_short_badge(preemption_delay, page, size):
    """"PreemptionDelayNotElapsed" was cut to "PreemptionDelayNotEla…" in the 184 px reason column: its badge reads
    "PreemptionDelay", whole; hovering the cell shows the whole code and the scheduler's message."""
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{preemption_delay.url}?view=pending", ready='[data-view="pending"]')
    table = page.page.locator(".tabulator", has_text="would start if")
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    page.page.wait_for_timeout(800)
    [row] = table.evaluate(ROWS_GEOMETRY)["rows"]
    assert [c for c in row["cut"] if not c.startswith("job rtl: ")] == []
    cell = table.locator('.tabulator-row [tabulator-field="reason"]').first
    assert cell.inner_text().strip() == "PreemptionDelay"
    # room to spare: the whole code took 174 of the cell's 183 px here, and was cut where the font is wider
    badge, room = cell.evaluate("c => [c.querySelector('.kd-badge').offsetWidth, c.clientWidth]")
    assert badge <= 0.75 * room, (badge, room)
    _shot(page, f"pending-preemption-delay-{size[0]}x{size[1]}")
    cell.hover()
    page.page.locator(".tabulator-tooltip", has_text="PreemptionDelayNotElapsed: ").first.wait_for(timeout=10_000)
    assert page.errors == [] and page.off_loopback() == []


ETA_JS = """t => [...t.querySelectorAll('.tabulator-row .tabulator-cell[tabulator-field="eta"]')].map(c => c.innerText.trim())"""
UNITS_S = {"s": 1, "min": 60, "h": 3600, "d": 86400}


def _eta_rank(text: str) -> tuple[int, float]:
    """Where a summary ("this cycle", "~5 min", "likely ~6.6 h", "next cycle", "> 24.0 h", "cannot start", anything
    else: no estimate) belongs in chronological order."""
    if text == "this cycle":
        return 0, 0.0
    if text == "next cycle":
        return 0, 1.0
    if m := re.fullmatch(r"(?:likely )?~([\d.]+) (s|min|h|d)", text):
        return 0, float(m[1]) * UNITS_S[m[2]]
    if text.startswith("> "):
        return 1, 0.0
    return (2, 0.0) if text == "cannot start" else (3, 0.0)


def test_pending_expected_start_sorts_chronologically(seeded, page):
    """Clicking "expected start" orders the rows by time ("~5 min" before "~12 min", "> 24.0 h" after every
    estimate), not by the text; no estimate and "cannot start" stay last when the order is reversed."""
    server, _, _ = seeded
    page.page.set_viewport_size({"width": 1440, "height": 900})
    page.open(f"{server.url}?view=pending", ready='[data-view="pending"]')
    table = page.page.locator(".tabulator", has_text="would start if")
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    deadline = time.time() + 120                   # the forward simulations answer in the background
    while len({_eta_rank(t) for t in table.evaluate(ETA_JS)}) < 3 and time.time() < deadline:
        time.sleep(1)
    shown = table.evaluate(ETA_JS)
    assert len({_eta_rank(t) for t in shown}) >= 3, shown
    header = table.locator('.tabulator-col[tabulator-field="eta"] .tabulator-col-title')
    header.click()
    page.page.wait_for_timeout(500)
    once = table.evaluate(ETA_JS)
    if once[0] != min(once, key=_eta_rank):        # Tabulator's first click may sort descending
        header.click()
        page.page.wait_for_timeout(500)
        once = table.evaluate(ETA_JS)
    assert [_eta_rank(t) for t in once] == sorted(_eta_rank(t) for t in once), once
    assert sorted(once) == sorted(shown)
    header.click()
    page.page.wait_for_timeout(500)
    twice = table.evaluate(ETA_JS)
    known = [t for t in twice if _eta_rank(t)[0] < 2]
    assert twice[:len(known)] == known, twice        # unknown and never: last in either direction
    assert [_eta_rank(t) for t in known] == sorted((_eta_rank(t) for t in known), reverse=True), twice
    assert page.errors == [] and page.off_loopback() == []


ORDER_JS = """t => [...t.querySelectorAll('.tabulator-row .tabulator-cell[tabulator-field="job_pod"]')]
    .map(c => c.innerText.replace(/\\s+/g, ' ').trim())"""
SIDEWAYS_JS = """t => { const h = t.querySelector('.tabulator-tableholder'); return h.scrollWidth - h.clientWidth; }"""


@pytest.mark.parametrize("size", [(1280, 720), (1440, 900)])
def test_gpu_slice_table_names_each_job_once_sorts_and_fits(seeded, page, size):
    """One "job / pod" column: single-pod jobs read as the job (the pod repeated it), a gang's pod adds which
    pod; sorting by it works; the table fits the card without scrolling sideways."""
    server, snap, _ = seeded
    pods = {}
    for job in snap.jobs:
        for t in job.tasks:
            if t.status == "running" and t.is_gpu and t.node:
                pods.setdefault(job.key, []).append(t)
    gang_key, gang = next((k, ts) for k, ts in pods.items() if len(ts) > 1)
    singles = {}
    for key, ts in pods.items():
        if len(ts) == 1:
            singles.setdefault(ts[0].node, []).append(key)
    node, jobs = max(singles.items(), key=lambda kv: len(kv[1]))
    page.page.set_viewport_size({"width": size[0], "height": size[1]})
    page.open(f"{server.url}?view=gpus&node={node}", ready='[data-view="gpus"]')
    table = page.page.locator(".tabulator", has=page.page.locator('[tabulator-field="job_pod"]')).first
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    table.scroll_into_view_if_needed()
    assert table.locator('.tabulator-col[tabulator-field="task"]').count() == 0
    assert "job / pod" in table.locator('.tabulator-col[tabulator-field="job_pod"]').inner_text()
    shown = table.evaluate(ORDER_JS)
    assert sorted(set(shown)) == sorted(jobs)                                 # the job, not "<job>-0" beside it
    assert table.evaluate(SIDEWAYS_JS) <= 1
    table.locator('.tabulator-col[tabulator-field="job_pod"] .tabulator-col-title').click()
    page.page.wait_for_timeout(500)
    once = table.evaluate(ORDER_JS)
    assert once in (sorted(shown), sorted(shown, reverse=True)) and sorted(once) == sorted(shown)
    _shot(page, f"gpus-slices-jobpod-{size[0]}x{size[1]}")
    page.open(f"{server.url}?view=gpus&node={gang[0].node}", ready='[data-view="gpus"]')
    table = page.page.locator(".tabulator", has=page.page.locator('[tabulator-field="job_pod"]')).first
    table.locator(".tabulator-row").first.wait_for(timeout=60_000)
    assert gang[0].name.startswith(gang_key + "-")                             # the gang's pod: <job>-<n>
    assert f"{gang_key} · pod {gang[0].name[len(gang_key) + 1:]}" in table.evaluate(ORDER_JS)
    assert page.errors == [] and page.off_loopback() == []
