"""What-if in a real browser: slider release -> first feedback, first interim diff, steady state.

Serves the 64-node what-if cluster of ``bench/whatif_latency.py`` (the one whose quota and priority moves take
4 and 6 cycles) as a static snapshot with a real ``kaidash serve`` on loopback, opens the What-if view in
Debian's headless Chromium (Playwright) and, for each move, records in the page (``performance.now()``) when the
mouse button or Enter key went up and when each ``data-whatif`` marker (``computing``, ``interim``, ``steady``)
first showed. Before every repeat it presses "Pin latest live state" (which empties the result cache) and waits
for the base's steady state, so each move is computed, not served from the cache.

    python bench/whatif_browser.py [--repeats 3] [--shots DIR] [--wait-s 20]

Prints one line per move with the medians and the machine's load (the numbers are wall times: on a shared
machine compare them with ``bench/whatif_latency.py`` taken at the same time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MARKERS_JS = """() => {
  window.__kdSeen = []; window.__kdRelease = null;
  let shown = '';
  const roots = new Set([document]);
  const record = () => {
    for (const root of roots) for (const el of root.querySelectorAll('[data-whatif]')) {
      const kind = el.getAttribute('data-whatif');
      if (!['computing', 'interim', 'steady', 'error'].includes(kind)) continue;
      if (kind + el.textContent !== shown) {
        shown = kind + el.textContent;
        window.__kdSeen.push([kind, performance.now(), el.textContent]);
      }
    }
  };
  const watch = root => new MutationObserver(() => { adopt(root); record(); })
      .observe(root, {subtree: true, childList: true, characterData: true, attributes: true});
  const adopt = root => root.querySelectorAll('*').forEach(e => {
      if (e.shadowRoot && !roots.has(e.shadowRoot)) { roots.add(e.shadowRoot); watch(e.shadowRoot); adopt(e.shadowRoot); } });
  watch(document); adopt(document); record();
  const released = () => { window.__kdRelease = performance.now(); window.__kdSeen = []; };
  document.addEventListener('mouseup', released, true);
  document.addEventListener('keyup', e => { if (e.key === 'Enter') released(); }, true);
}"""
"""Install once per page: records every what-if marker the page shows (Panel renders HTML panes in shadow
roots, so each one is observed) when it changes, and the time of the last slider release / Enter, which starts
a new record."""

SETTLED_JS = """() => window.__kdRelease !== null && window.__kdSeen.some(s => s[0] === 'steady' || s[0] === 'error')"""


def timeline(page) -> list[tuple[str, float, str]]:
    """``[(marker, ms after the release, text)]`` since the last release."""
    release, seen = page.evaluate("() => [window.__kdRelease, window.__kdSeen]")
    return [(kind, t - release, text) for kind, t, text in seen]


def drag_slider(page, label: str, value: float, start: float, end: float) -> None:
    """Drag the handle of the slider titled ``label`` to ``value`` (of ``start`` … ``end``) with the mouse and
    release it there (one ``value_throttled`` event, as a user's drag)."""
    group = page.locator(".bk-input-group", has_text=label)
    handle, track = group.locator(".noUi-handle"), group.locator(".noUi-base")
    handle.scroll_into_view_if_needed()
    hb, tb = handle.bounding_box(), track.bounding_box()
    y = hb["y"] + hb["height"] / 2
    page.mouse.move(hb["x"] + hb["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(tb["x"] + tb["width"] * (value - start) / (end - start), y, steps=6)
    page.mouse.up()


def type_number(page, label: str, value: int) -> None:
    """Type ``value`` into the number box titled ``label`` and press Enter."""
    box = page.locator(".bk-input-group", has_text=label).locator("input")
    box.fill(str(value))
    box.press("Enter")


def wait_settled(page, timeout_ms: float = 120_000) -> list[tuple[str, float, str]]:
    page.wait_for_function(SETTLED_JS, timeout=timeout_ms)
    return timeline(page)


def first(events, kind: str):
    return next((t for k, t, _ in events if k == kind), None)


MOVES = {
    # label: (queue in the URL, how to make the move)
    "queue quota": ("vision", lambda page, gpus: drag_slider(page, "GPU quota", 160, 0, gpus)),
    "queue priority": ("prod", lambda page, gpus: type_number(page, "Queue priority", 200)),
    "demand x1.5": ("vision", lambda page, gpus: drag_slider(page, "Pending demand", 1.5, 0, 4)),
}


def main() -> int:
    from playwright.sync_api import sync_playwright

    from bench.dashboard_browser import CHROMIUM, CHROMIUM_ARGS, Server, loadavg
    from bench.whatif_latency import cluster_64
    from scheduler.snapshot_io import save_snapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--wait-s", type=float, default=20.0,
                    help="idle time after the page loads, so the server's start-up work (ETA, why-pending) is done")
    ap.add_argument("--shots", default="", help="folder for screenshots at 1280x720 and 1440x900")
    ap.add_argument("--moves", default=",".join(MOVES))
    args = ap.parse_args()
    snap = cluster_64()
    gpus = sum(n.gpus for n in snap.nodes)
    tmp = Path(tempfile.mkdtemp(prefix="kaidash-whatif-bench-"))
    save_snapshot(snap, tmp / "cluster64.yaml")
    server = Server(64, 2.0, 300.0, extra=["--snapshot", str(tmp / "cluster64.yaml"), "--data-dir", str(tmp)])
    print(f"load before: {loadavg()}")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for label in [m.strip() for m in args.moves.split(",")]:
                queue, move = MOVES[label]
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.goto(f"{server.url}?view=whatif&queue={queue}", wait_until="networkidle", timeout=120_000)
                page.locator('[data-whatif="steady"]').wait_for(timeout=120_000)
                page.wait_for_timeout(args.wait_s * 1000)
                page.evaluate(MARKERS_JS)
                runs = []
                for r in range(args.repeats):
                    if r:                       # empty the cache: pin again, wait for the base
                        page.get_by_role("button", name="Pin latest live state").click()
                        page.locator('[data-whatif="steady"]', has_text="no edits yet").wait_for(timeout=120_000)
                        page.wait_for_timeout(1000)
                    move(page, gpus)
                    if args.shots and r == 0:
                        page.wait_for_timeout(120)
                        page.screenshot(path=f"{args.shots}/whatif-{label.replace(' ', '-')}-computing-1440x900.png")
                    events = wait_settled(page)
                    runs.append(events)
                    if args.shots and r == 0:
                        page.screenshot(path=f"{args.shots}/whatif-{label.replace(' ', '-')}-steady-1440x900.png")
                feedback = [first(e, "computing") or first(e, "interim") or first(e, "steady") for e in runs]
                interim = [first(e, "interim") for e in runs]
                steady = [first(e, "steady") for e in runs]
                texts = [next((x for k, _, x in e if k == "steady"), "") for e in runs]
                med = (lambda xs: statistics.median(xs) if all(x is not None for x in xs) else None)
                fmt = (lambda x: "–" if x is None else f"{x:,.0f} ms")
                print(f"{label:>15}: first feedback {fmt(med(feedback))}, first interim diff {fmt(med(interim))}, "
                      f"steady state {fmt(med(steady))} (medians of {len(runs)}; {texts[-1].strip()!r}); "
                      f"console errors {len(errors)}; load {loadavg()}", flush=True)
                page.close()
            if args.shots:
                _computing_shots(browser, server, args.shots)
            browser.close()
    finally:
        server.stop()
    return 0


def _computing_shots(browser, server, folder: str) -> None:
    """Screenshots at 1280x720 and 1440x900: computing (first cycle), interim, steady (a quota move)."""
    for w, h in ((1280, 720), (1440, 900)):
        page = browser.new_page(viewport={"width": w, "height": h})
        page.goto(f"{server.url}?view=whatif&queue=vision", wait_until="networkidle", timeout=120_000)
        page.locator('[data-whatif="steady"]').wait_for(timeout=120_000)
        page.evaluate(MARKERS_JS)
        drag_slider(page, "GPU quota", 150 + w / 1000, 0, 512)
        page.locator('[data-whatif="computing"]').wait_for(timeout=30_000)
        page.screenshot(path=f"{folder}/whatif-computing-{w}x{h}.png")
        page.locator('[data-whatif="interim"]').wait_for(timeout=60_000)
        page.screenshot(path=f"{folder}/whatif-interim-{w}x{h}.png")
        wait_settled(page)
        page.wait_for_timeout(500)
        page.screenshot(path=f"{folder}/whatif-steady-{w}x{h}.png")
        page.close()


if __name__ == "__main__":
    sys.exit(main())
