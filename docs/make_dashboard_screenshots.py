"""Screenshots of every dashboard view for docs/dashboard.md: the real ``kaidash serve`` (the 64-node simulated
cluster) in headless Chromium, 1280×720 (what a laptop shows without scrolling).

    python docs/make_dashboard_screenshots.py [--out docs/screenshots] [--size 1280x720] [--warmup 40]

``--warmup`` seconds of ticking first, so the Timeline has a history and why-pending searches have answered.
The What-if is also shot with the fragmentation-aware placement selected (``whatif-fragaware.png``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from dashboard_browser import CHROMIUM, CHROMIUM_ARGS, READY, VIEWS, Server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=40.0)
    parser.add_argument("--views", default=",".join(VIEWS))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    width, height = (int(x) for x in args.size.split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = Server(args.nodes, 2.0, 600)
    try:
        time.sleep(args.warmup)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for view in args.views.split(","):
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"{server.url}?view={view}", wait_until="networkidle", timeout=120_000)
                page.locator(READY[view]).first.wait_for(state="visible", timeout=120_000)
                page.locator("[data-view][data-complete]").wait_for(state="attached", timeout=120_000)
                if view == "whatif":        # the steady state, not a run's "computing" line
                    page.locator('[data-whatif="steady"]').wait_for(timeout=120_000)
                page.wait_for_timeout(2500)
                path = out / f"{view}.png"
                page.screenshot(path=str(path))
                print(f"wrote {path}")
                if view == "whatif":        # also the fragmentation-aware placement (docs/placement-quality.md)
                    page.get_by_label("GPU placement strategy").select_option("fragaware")
                    page.locator('[data-whatif="overrides"]', has_text="fragaware").wait_for(timeout=120_000)
                    page.locator('[data-whatif="steady"]').wait_for(timeout=120_000)
                    page.locator('[data-view="whatif"]').scroll_into_view_if_needed()
                    page.wait_for_timeout(1500)
                    page.screenshot(path=str(out / "whatif-fragaware.png"))
                    print(f"wrote {out / 'whatif-fragaware.png'}")
                page.close()
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
