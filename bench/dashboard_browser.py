"""The dashboard in a real browser: frames per second while the loop ticks, and time to a rendered view.

For each cluster size a real ``kaidash serve`` (the embedded simulated cluster, ``--nodes N``) runs on
loopback and Debian's headless Chromium (Playwright) opens every view:

* **render, cold**: wall time from navigation start (``?view=X`` typed in a new browser profile: empty cache)
  to the view's content on screen (its ready element, e.g. a table row or the GPU canvas, visible and two
  animation frames painted after it). Split into phases: the page's HTML (the server built the session), its
  scripts loaded and run, the document received over the websocket, the view's title attached; and, when the
  served checkout sends the parts below the first screen after it, **complete** (``data-complete`` on the title);
* **render, warm**: the same in a browser profile that loaded the dashboard before (Panel's and Bokeh's
  scripts come from the HTTP cache), e.g. a second tab or a reload;
* **in-app**: a click on the view's button in the sidebar of an open page (no page load), to the rendered view;
* **CPU**: during a render, the server's main thread CPU (``/proc``; page build, websockets, static files) and
  the CPU of Chromium's processes (``/proc``); on an idle machine a render takes about their sum, which does not
  depend on the machine's load as the wall times do;
* **fps**: ``requestAnimationFrame`` callbacks counted in the page over ``--seconds`` (15 s) while the loop
  publishes ticks and the session re-renders; also the longest frame, the main-thread time blocked in long
  tasks (PerformanceObserver ``longtask``) and how many ticks the page received in the window.

Renders are medians of ``--repeats`` (3). Budgets (issue 16): every view >= 30 frames/s while ticking,
rendered <= 2 s after navigation.

    python bench/dashboard_browser.py [--sizes 64,1000] [--seconds 15] [--repeats 3] [--views overview,gpus]
                                      [--json OUT] [--root CHECKOUT]

The output is a Markdown table (``docs/dashboard.md``). The machine's load is printed with it: a shared
2-core machine makes render times and frame rates noisy, so compare runs taken at the same time (run a
``--root`` export of the older commit beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
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
TITLES = {"overview": "Overview", "queues": "Queues", "gpus": "GPUs", "pending": "Pending", "whatif": "What-if",
          "timeline": "Timeline", "snapshot": "Snapshot", "settings": "Settings"}
"""The navigation buttons' labels (in-app navigation clicks them)."""
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
        self.marks_complete = "data-complete" in (root / "dashboard" / "app.py").read_text()
        """Whether this checkout marks a view whose parts below the first screen have arrived (older ones send
        the whole view in the first document)."""
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

    def main_thread_cpu_s(self) -> float:
        """CPU seconds the server's main thread (Tornado's IOLoop: page builds, websockets, static files, the
        sessions' periodic callbacks; not the loop thread's ticks) has used so far."""
        with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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


DOC_FRAME_BYTES = 5_000
"""A websocket frame this large is the document itself (Bokeh's PULL-DOC reply), not a heartbeat or an ack."""


def _render(page, url: str, view: str, click: str = "", server: "Server | None" = None) -> dict:
    """Navigate (by URL, or in the page by clicking the navigation button ``click``) and wait for ``view``'s
    content: its ready element visible and two frames painted after it. Returns the render time and its phases
    (seconds since navigation start): the page's HTML (the server built the session), its scripts loaded and run,
    the document received over the websocket, the view's title attached; and the CPU both sides spent meanwhile:
    the server's main thread (``server_cpu_s``), Chromium's processes (``browser_cpu_s``) and the page's renderer
    main thread busy time (``browser_busy_s``, Chromium's TaskDuration, which grows when the machine is crowded).
    On an idle machine a render takes about the two CPU figures added (the sides mostly wait for each other)."""
    marks: dict = {}
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    busy0 = _task_duration(cdp)
    cpu0 = server.main_thread_cpu_s() if server else None
    chrome0 = browser_cpu_s()
    t0 = time.perf_counter()

    def on_ws(ws):
        marks.setdefault("ws_s", time.perf_counter() - t0)

        def on_frame(payload):
            if "doc_s" not in marks and payload is not None and len(payload) >= DOC_FRAME_BYTES:
                marks["doc_s"] = time.perf_counter() - t0
        ws.on("framereceived", on_frame)
    if click:
        page.get_by_role("button", name=click, exact=True).click(timeout=120_000)
    else:
        page.on("websocket", on_ws)
        page.goto(url, wait_until="commit", timeout=120_000)
    page.wait_for_selector(f'[data-view="{view}"]', state="attached", timeout=120_000)
    marks["attached_s"] = time.perf_counter() - t0
    page.locator(f'[data-view="{view}"]').wait_for(state="attached", timeout=120_000)
    page.locator(READY[view]).first.wait_for(state="visible", timeout=120_000)
    page.evaluate(TWO_FRAMES_JS)
    render_s = time.perf_counter() - t0
    if server is not None and server.marks_complete and not click:
        # the parts below the first screen follow the first document (dashboard.app.Dashboard._show)
        page.locator(f'[data-view="{view}"][data-complete]').wait_for(state="attached", timeout=120_000)
        page.evaluate(TWO_FRAMES_JS)
        marks["complete_s"] = time.perf_counter() - t0
    marks["browser_busy_s"] = _task_duration(cdp) - busy0
    marks["browser_cpu_s"] = browser_cpu_s() - chrome0
    cdp.detach()
    if server is not None:
        marks["server_cpu_s"] = server.main_thread_cpu_s() - cpu0
    if not click:
        marks.update(page.evaluate(NAV_JS))
        page.remove_listener("websocket", on_ws)
    return {"render_s": render_s, **{k: round(v, 3) for k, v in marks.items()}}


def browser_cpu_s() -> float:
    """CPU seconds used so far by the Chromium processes this benchmark started (every process below this
    one whose name says chromium: browser, renderers, GPU and network services), from ``/proc``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        pid = int(entry)
        names[pid] = head.split("(", 1)[1]
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = int(fields[11]) + int(fields[12])
    total, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if "chrom" in names.get(pid, ""):
            total += ticks.get(pid, 0)
    return total / os.sysconf("SC_CLK_TCK")


def _task_duration(cdp) -> float:
    return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")


def measure_view(browser, server: Server, view: str, seconds: float, width: int, height: int,
                 repeats: int = 1, warm_context=None) -> dict:
    """Open ``view`` by URL: time to rendered content with an empty browser cache (a fresh browser context, as a
    first visit) and with a warm one (``warm_context``: a context that loaded the dashboard before, so Panel's and
    Bokeh's scripts come from the cache), medians of ``repeats``; then frames per second over ``seconds`` in the
    last page."""
    url = f"{server.url}?view={view}"
    errors: list[str] = []
    cold, warm = [], []
    page = None
    try:
        for i in range(repeats):
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            cold.append(_render(page, url, view, server=server))
            if i < repeats - 1:
                context.close()
        if warm_context is not None:
            for _ in range(repeats):
                wpage = warm_context.new_page()
                wpage.on("pageerror", lambda e: errors.append(str(e)))
                try:
                    warm.append(_render(wpage, url, view, server=server))
                finally:
                    wpage.close()
        tick_before = server.health().get("tick_index")
        stats = page.evaluate(FPS_JS, int(seconds * 1000))
        tick_after = server.health().get("tick_index")
        ticks = (tick_after - tick_before) if isinstance(tick_before, int) and isinstance(tick_after, int) else None
        out = {"view": view, **median_phases(cold), **stats, "ticks_in_window": ticks, "page_errors": errors,
               "cold_runs": cold}
        if warm:
            out.update({f"warm_{k}": v for k, v in median_phases(warm).items()}, warm_runs=warm)
        return out
    finally:
        if page is not None:
            page.context.close()


def median_phases(runs: list[dict]) -> dict:
    """Per phase, the median over runs (the run with the median render time would mix phases of other runs)."""
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: statistics.median(r[k] for r in runs if k in r) for k in keys}


def measure_switches(browser, server: Server, views: list[str], width: int, height: int,
                     repeats: int = 1) -> dict[str, float]:
    """In-app navigation: in one open page, click each view's button in the sidebar (the way a user moves between
    views; no page load) and time it to the view's rendered content. Median of ``repeats`` rounds."""
    context = browser.new_context(viewport={"width": width, "height": height})
    times: dict[str, list[float]] = {v: [] for v in views}
    try:
        page = context.new_page()
        _render(page, f"{server.url}?view=settings", "settings")
        for _ in range(repeats):
            for view in views:
                times[view].append(_render(page, "", view, click=TITLES[view], server=server)["render_s"])
    finally:
        context.close()
    return {v: statistics.median(t) for v, t in times.items() if t}


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def markdown(results: list[dict]) -> str:
    """One row per view; per size: frames/s while ticking, render with an empty cache, with a warm cache, and
    in-app (a click in the sidebar)."""
    sizes = sorted({r["nodes"] for r in results})
    head = "| view | " + " | ".join(f"{n:,} nodes: fps | render: cold | warm | in-app | CPU: server + browser (cold)"
                                    for n in sizes) + " |"
    sep = "|---|" + "---|---|---|---|---|" * len(sizes)
    lines = [head, sep]

    def secs(v):
        return "–" if v is None else f"{v:.1f} s" + ("" if v <= BUDGET_RENDER_S else " ✗")
    for view in dict.fromkeys(r["view"] for r in results):
        cells = []
        for n in sizes:
            r = next((x for x in results if x["nodes"] == n and x["view"] == view), None)
            if r is None or r.get("error"):
                cells += ["–", "–" if r is None else "failed", "–", "–", "–"]
                continue
            fps_ok = "" if r["fps"] >= BUDGET_FPS else " ✗"
            cpu = (f"{r['server_cpu_s']:.2f} + {r['browser_cpu_s']:.2f} s"
                   if r.get("server_cpu_s") is not None and r.get("browser_cpu_s") is not None else "–")
            cells += [f"{r['fps']:.0f}{fps_ok}", secs(r["render_s"]), secs(r.get("warm_render_s")),
                      secs(r.get("switch_s")), cpu]
        lines.append(f"| {view} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def phases(r: dict, prefix: str = "") -> str:
    """``render 2.1 s (html 0.4, scripts 1.0, doc 1.2, title 1.9)`` for a result's cold or ``warm_`` run."""
    names = [("html_s", "html"), ("scripts_s", "scripts"), ("doc_s", "doc"), ("attached_s", "title"),
             ("complete_s", "complete"), ("server_cpu_s", "CPU: server"), ("browser_cpu_s", "browser")]
    parts = ", ".join(f"{label} {r[prefix + k]:.2f}" for k, label in names if r.get(prefix + k) is not None)
    return f"{r[prefix + 'render_s']:5.2f} s ({parts})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,1000")
    parser.add_argument("--views", default=",".join(VIEWS))
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=3, help="render measurements per view and mode (median)")
    parser.add_argument("--period", type=float, default=2.0, help="loop period of the served cluster (s)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--start-timeout", type=float, default=900.0)
    parser.add_argument("--json", default="", help="write the raw results here too")
    parser.add_argument("--root", default=str(ROOT),
                        help="checkout whose `kaidash serve` to measure (e.g. an export of an older commit)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    views = args.views.split(",")
    results: list[dict] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for nodes in (int(s) for s in args.sizes.split(",")):
            server = Server(nodes, args.period, args.start_timeout, root=Path(args.root))
            h = server.health()
            print(f"\n{nodes} nodes: server ready after {server.start_s:.0f} s · load {loadavg()} · "
                  f"{h.get('detail', '')}", flush=True)
            warm = browser.new_context(viewport={"width": args.width, "height": args.height})
            try:
                primer = warm.new_page()          # a first visit fills the warm context's cache
                _render(primer, f"{server.url}?view=settings", "settings")
                primer.close()
                size_results = []
                for view in views:
                    try:
                        r = measure_view(browser, server, view, args.seconds, args.width, args.height,
                                         repeats=args.repeats, warm_context=warm)
                    except Exception as exc:  # noqa: BLE001 — a view that never renders is a result too
                        r = {"view": view, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    r.update(nodes=nodes, load=loadavg())
                    size_results.append(r)
                    if r.get("error"):
                        print(f"  {view:<9} FAILED {r['error']}", flush=True)
                    else:
                        print(f"  {view:<9} cold {phases(r)} · warm {phases(r, 'warm_')} · {r['fps']:5.1f} fps · "
                              f"longest frame {r['longest_frame_ms']:4.0f} ms · blocked "
                              f"{r['blocked_ms'] / 1000:4.1f} s of {r['seconds']:.0f} · {r['ticks_in_window']} "
                              f"ticks · load {r['load']}", flush=True)
                try:
                    switches = measure_switches(browser, server, views, args.width, args.height, args.repeats)
                except Exception as exc:  # noqa: BLE001
                    switches = {}
                    print(f"  in-app navigation FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                for r in size_results:
                    r["switch_s"] = switches.get(r["view"])
                print("  in-app: " + ", ".join(f"{v} {s:.2f} s" for v, s in switches.items())
                      + f" · load {loadavg()}", flush=True)
                results += size_results
                h = server.health()
                print(f"  loop: {h.get('detail', '')}", flush=True)
            finally:
                warm.close()
                server.stop()
        browser.close()
    print("\n" + markdown(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
