"""Load: N concurrent browser sessions on ``kaidash serve`` (loopback), page-load and update latency, loop jitter.

Starts the real ``kaidash serve`` (sim mode) on a free loopback port, opens ``--sessions`` pages in headless
Chromium spread over ``--contexts`` browser contexts (each context its own cookie jar, like separate users),
then for ``--duration`` seconds:

* page load: time from ``goto`` to the overview's GPU card on screen, per page;
* update latency: each page polls its own DOM (shadow roots included) for the sidebar's ``tick N`` every
  50 ms and records when N changes; a poller reads ``/readyz`` every 100 ms and records each tick's publish
  time (``last_tick_wall``). Latency = first time a page shows tick N − the loop's publish time of tick N
  (same host clock). It includes the session's refresh period (``min(1 s, loop period)``) by design;
* loop jitter: intervals between consecutive published ticks minus the configured period.

Prints median and 95th percentile of each; ``--json`` writes the raw numbers. Bounded: stops after
``--duration`` and kills the server. Loopback only.

Run: ``python bench/load.py [--sessions 20] [--contexts 4] [--duration 60] [--nodes 16] [--period 2]``
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
import threading
import time
from pathlib import Path
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"

POLL_JS = """() => {
  window.__kdTicks = window.__kdTicks || [];
  const find = () => {
    let found = null;
    const walk = (n) => {
      if (found !== null) return;
      if (n.nodeType === 3) { const m = /tick (\\d+) ·/.exec(n.textContent); if (m) found = +m[1]; return; }
      if (n.shadowRoot) walk(n.shadowRoot);
      for (const c of n.childNodes) walk(c);
    };
    walk(document.body);
    return found;
  };
  let last = null;
  setInterval(() => {
    const t = find();
    if (t !== null && t !== last) { last = t; window.__kdTicks.push([t, Date.now() / 1000]); }
  }, 50);
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, q: float) -> float:
    """The ``q`` quantile (0-1) by nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def start_server(port: int, nodes: int, period: float) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIDASH_")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "serve", "--port", str(port), "--address",
                             "127.0.0.1", "--nodes", str(nodes), "--period", str(period)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("kaidash serve exited")
        try:
            with urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise SystemExit("kaidash serve not ready in 120 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


class TickPoller(threading.Thread):
    """Reads ``/readyz`` every 100 ms; records each new tick index with its publish time."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.ticks: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with urlopen(self.url, timeout=2) as r:
                    body = json.loads(r.read())
                if body.get("tick_index") is not None and body["tick_index"] not in self.ticks:
                    self.ticks[body["tick_index"]] = body["last_tick_wall"]
            except (OSError, ValueError):
                pass
            self.stop.wait(0.1)


def run(sessions: int, contexts: int, duration: float, nodes: int, period: float) -> dict:
    from playwright.sync_api import sync_playwright

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    proc = start_server(port, nodes, period)
    poller = TickPoller(base + "readyz")
    poller.start()
    loads, pages = [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            ctxs = [browser.new_context(viewport={"width": 1400, "height": 900}) for _ in range(contexts)]
            for i in range(sessions):
                page = ctxs[i % contexts].new_page()
                t0 = time.perf_counter()
                page.goto(base + "?view=overview", wait_until="domcontentloaded", timeout=120_000)
                page.locator('[data-kpi="gpus"] .kd-value').wait_for(timeout=120_000)
                loads.append(time.perf_counter() - t0)
                page.evaluate(POLL_JS)
                pages.append(page)
            started = time.time()
            while time.time() - started < duration:
                pages[0].wait_for_timeout(1000)      # keeps Playwright's event loop turning
            seen = [page.evaluate("() => window.__kdTicks || []") for page in pages]
            browser.close()
    finally:
        poller.stop.set()
        poller.join(3)
        stop_server(proc)
    published = poller.ticks
    latencies = [shown - published[t] for page_ticks in seen for t, shown in page_ticks
                 if t in published and shown >= started]
    idx = sorted(i for i, w in published.items() if w >= started)
    intervals = [published[b] - published[a] for a, b in zip(idx, idx[1:]) if b == a + 1]
    return {"sessions": sessions, "contexts": contexts, "duration_s": duration, "nodes": nodes, "period_s": period,
            "page_load_s": loads, "update_latency_s": latencies, "tick_intervals_s": intervals,
            "ticks_published": len(idx), "updates_seen": len(latencies)}


def summary(r: dict) -> str:
    jitter = [i - r["period_s"] for i in r["tick_intervals_s"]]
    rows = [("page load (s)", r["page_load_s"]), ("update latency (s)", r["update_latency_s"]),
            ("tick interval (s)", r["tick_intervals_s"]), ("tick jitter (s)", jitter)]
    out = [f"{r['sessions']} sessions in {r['contexts']} contexts, {r['duration_s']:g} s, sim {r['nodes']} nodes, "
           f"period {r['period_s']:g} s: {r['ticks_published']} ticks published, {r['updates_seen']} updates seen",
           "| measure | n | median | p95 | max |", "|---|---|---|---|---|"]
    for name, vals in rows:
        out.append(f"| {name} | {len(vals)} | {pct(vals, 0.5):.3f} | {pct(vals, 0.95):.3f} | "
                   f"{(max(vals) if vals else float('nan')):.3f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of measurement after all pages loaded")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--period", type=float, default=2.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    r = run(args.sessions, args.contexts, args.duration, args.nodes, args.period)
    print(summary(r))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
