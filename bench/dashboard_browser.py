"""The dashboard in a real browser: frames per second while the loop ticks, and time to a rendered view.

For each cluster size a real ``kaidash serve`` (the embedded simulated cluster, ``--nodes N``) runs on
loopback and Debian's headless Chromium (Playwright) opens every view by URL (``?view=X``):

* **render**: wall time from navigation start to the view's content on screen (the view's ready element,
  e.g. a table row or the GPU canvas, is visible and two animation frames have been painted after it);
* **fps**: ``requestAnimationFrame`` callbacks counted in the page over ``--seconds`` (15 s) while the loop
  publishes ticks and the session re-renders; also the longest frame, the main-thread time blocked in long
  tasks (PerformanceObserver ``longtask``) and how many ticks the page received in the window.

Budgets (issue 16): every view >= 30 frames/s while ticking, rendered <= 2 s after navigation.

    python bench/dashboard_browser.py [--sizes 64,1000] [--seconds 15] [--views overview,gpus] [--json OUT]

The output is a Markdown table (``docs/dashboard.md``). The machine's load is printed with it: a shared
2-core machine makes frame rates noisy, so compare runs taken under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWS = ["overview", "queues", "gpus", "pending", "whatif", "timeline", "snapshot", "settings"]
READY = {
    # the element whose presence means the view shows its content (not a spinner, not an empty frame)
    "overview": '[data-kpi="gpus"] .kd-value',
    "queues": ".tabulator-row",
    "gpus": "canvas",
    "pending": ".tabulator-row, [data-empty]",
    "whatif": '[data-whatif="overrides"]',
    "timeline": "canvas",
    "snapshot": 'input[type="file"]',
    "settings": 'button:has-text("Apply")',
}
BUDGET_FPS = 30.0
BUDGET_RENDER_S = 2.0

FPS_JS = """(ms) => new Promise(resolve => {
  let frames = 0, last = performance.now(), longest = 0, blocked = 0, longtasks = 0;
  const t0 = last;
  let obs = null;
  try {
    obs = new PerformanceObserver(list => {
      for (const e of list.getEntries()) { blocked += e.duration; longtasks++; } });
    obs.observe({type: 'longtask', buffered: false});
  } catch (e) {}
  function step(now) {
    frames++;
    longest = Math.max(longest, now - last);
    last = now;
    if (now - t0 < ms) requestAnimationFrame(step);
    else { if (obs) obs.disconnect();
           resolve({fps: frames * 1000 / (now - t0), longest_frame_ms: longest, blocked_ms: blocked,
                    longtasks: longtasks, seconds: (now - t0) / 1000}); }
  }
  requestAnimationFrame(step);
})"""

TWO_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
NAV_JS = """() => { const n = performance.getEntriesByType('navigation')[0];
  return {html_s: n.responseEnd / 1000, scripts_s: n.domContentLoadedEventEnd / 1000}; }"""
"""Where the render time goes: the page's HTML (the server builds the session), its scripts loaded and run."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``kaidash serve --nodes N`` in a subprocess on loopback (its own process group, stopped by ``stop``)."""

    def __init__(self, nodes: int, period_s: float, start_timeout_s: float, extra: list[str] = (),
                 root: Path = ROOT):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(root)}
        for k in list(env):
            if k.startswith("KAIDASH_"):
                env.pop(k)
        self.log_path = ROOT / "artifacts" / "bench" / f"serve-{nodes}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, "w")
        t0 = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "serve", "--port", str(self.port), "--address", "127.0.0.1",
             "--nodes", str(nodes), "--period", f"{period_s:g}", *extra],
            cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = t0 + start_timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {self.log_path}")
            try:
                with urlopen(self.url + "readyz", timeout=5) as r:
                    if r.status == 200:
                        self.start_s = time.time() - t0
                        return
            except OSError:
                time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"server not ready within {start_timeout_s:.0f} s; see {self.log_path}")

    def health(self) -> dict:
        try:
            with urlopen(self.url + "readyz", timeout=10) as r:
                return json.loads(r.read())
        except OSError as exc:
            body = getattr(exc, "read", None)
            return json.loads(body()) if callable(body) else {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def measure_view(browser, server: Server, view: str, seconds: float, width: int, height: int) -> dict:
    """Open ``view`` in a fresh page: time to rendered content, then frames per second over ``seconds``."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        t0 = time.perf_counter()
        page.goto(f"{server.url}?view={view}", wait_until="commit", timeout=120_000)
        page.wait_for_selector(f'[data-view="{view}"]', state="attached", timeout=120_000)
        page.locator(READY[view]).first.wait_for(state="visible", timeout=120_000)
        page.evaluate(TWO_FRAMES_JS)
        render_s = time.perf_counter() - t0
        nav = page.evaluate(NAV_JS)
        tick_before = server.health().get("tick_index")
        stats = page.evaluate(FPS_JS, int(seconds * 1000))
        tick_after = server.health().get("tick_index")
        ticks = (tick_after - tick_before) if isinstance(tick_before, int) and isinstance(tick_after, int) else None
        return {"view": view, "render_s": render_s, **nav, **stats, "ticks_in_window": ticks, "page_errors": errors}
    finally:
        page.close()


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def markdown(results: list[dict]) -> str:
    sizes = sorted({r["nodes"] for r in results})
    head = "| view | " + " | ".join(f"{n:,} nodes: fps | {n:,} nodes: render" for n in sizes) + " |"
    sep = "|---|" + "---|---|" * len(sizes)
    lines = [head, sep]
    for view in dict.fromkeys(r["view"] for r in results):
        cells = []
        for n in sizes:
            r = next((x for x in results if x["nodes"] == n and x["view"] == view), None)
            if r is None or r.get("error"):
                cells += ["–", "–" if r is None else "failed"]
                continue
            fps_ok = "" if r["fps"] >= BUDGET_FPS else " ✗"
            ren_ok = "" if r["render_s"] <= BUDGET_RENDER_S else " ✗"
            cells += [f"{r['fps']:.0f}{fps_ok}", f"{r['render_s']:.1f} s{ren_ok}"]
        lines.append(f"| {view} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,1000")
    parser.add_argument("--views", default=",".join(VIEWS))
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--period", type=float, default=2.0, help="loop period of the served cluster (s)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--start-timeout", type=float, default=900.0)
    parser.add_argument("--json", default="", help="write the raw results here too")
    parser.add_argument("--root", default=str(ROOT),
                        help="checkout whose `kaidash serve` to measure (e.g. an export of an older commit)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    results: list[dict] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for nodes in (int(s) for s in args.sizes.split(",")):
            server = Server(nodes, args.period, args.start_timeout, root=Path(args.root))
            h = server.health()
            print(f"\n{nodes} nodes: server ready after {server.start_s:.0f} s · load {loadavg()} · "
                  f"{h.get('detail', '')}", flush=True)
            try:
                for view in args.views.split(","):
                    try:
                        r = measure_view(browser, server, view, args.seconds, args.width, args.height)
                    except Exception as exc:  # noqa: BLE001 — a view that never renders is a result too
                        r = {"view": view, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    r.update(nodes=nodes, load=loadavg())
                    results.append(r)
                    if r.get("error"):
                        print(f"  {view:<9} FAILED {r['error']}", flush=True)
                    else:
                        print(f"  {view:<9} render {r['render_s']:5.2f} s (html {r['html_s']:.2f}, scripts "
                              f"{r['scripts_s']:.2f}) · {r['fps']:5.1f} fps · longest frame "
                              f"{r['longest_frame_ms']:6.0f} ms · blocked {r['blocked_ms'] / 1000:5.1f} s of "
                              f"{r['seconds']:.0f} · {r['ticks_in_window']} ticks · load {r['load']}", flush=True)
                h = server.health()
                print(f"  loop: {h.get('detail', '')}", flush=True)
            finally:
                server.stop()
        browser.close()
    print("\n" + markdown(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
