"""First screens side by side: two checkouts served at once, each view opened cold in turns, CPU up to the first
screen painted.

``bench/dashboard_browser.py`` measures one checkout at a time; on a shared machine the load moves between two
such runs by more than a change to one view moves its render. This benchmark serves every ``--root`` at once
(``kaidash serve``, 64 nodes, ticking) and opens each view cold (a new browser profile), alternating between the
checkouts render by render (and their order every round), so all see the same load. Per view and checkout, the
medians of ``--repeats`` renders of

* the render time to the first screen painted and its phases (as ``dashboard_browser``; the parts below the
  first screen are not waited for);
* the page's renderer main thread CPU (Chromium's ``ThreadTime``: CPU, not wall time, so it does not grow with
  the machine's load) and the server main thread's CPU, from navigation to the first screen.

    python bench/dashboard_first_screen.py --roots OLD_EXPORT,. [--views queues,gpus,timeline] [--repeats 5]

``OLD_EXPORT`` is e.g. ``git archive main --prefix=old/ | tar -x -C /tmp``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from dashboard_browser import CHROMIUM, CHROMIUM_ARGS, Server, _render, loadavg


def _metrics(cdp) -> dict:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def first_screen(browser, server: Server, view: str, width: int, height: int) -> dict:
    """One cold render of ``view`` to its first screen, with the renderer's main thread CPU."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("Performance.enable")
        before = _metrics(cdp)
        out = _render(page, f"{server.url}?view={view}", view, server=server)
        out["renderer_cpu_s"] = _metrics(cdp)["ThreadTime"] - before["ThreadTime"]
        return out
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", required=True, help="checkouts to compare, comma-separated")
    parser.add_argument("--views", default="overview,queues,gpus,timeline")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    roots = [Path(r).resolve() for r in args.roots.split(",")]
    views = args.views.split(",")
    servers = [Server(64, 2.0, 900.0, root=r) for r in roots]
    for s in servers:
        s.marks_complete = False            # up to the first screen: the rest is not waited for
    runs: dict = {(r, v): [] for r in roots for v in views}
    print(f"load before: {loadavg()}")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for i in range(args.repeats):
                for view in views:
                    order = list(zip(roots, servers))
                    for root, server in (order if i % 2 == 0 else order[::-1]):
                        runs[(root, view)].append(first_screen(browser, server, view, args.width, args.height))
            browser.close()
    finally:
        for s in servers:
            s.stop()
    print(f"load after: {loadavg()}")
    print("| view | checkout | render | html | doc | title | renderer CPU | server CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for view in views:
        for root in roots:
            rs = runs[(root, view)]

            def med(key):
                return statistics.median(r[key] for r in rs if key in r)
            print(f"| {view} | {root} | {med('render_s'):.2f} s | {med('html_s'):.2f} | {med('doc_s'):.2f} | "
                  f"{med('attached_s'):.2f} | {med('renderer_cpu_s'):.2f} s | {med('server_cpu_s'):.2f} s |")


if __name__ == "__main__":
    main()
