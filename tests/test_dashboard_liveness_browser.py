"""Liveness in a real browser: the page tells the truth when the server goes away, and comes back by itself.

Each test runs the real ``kaidash serve`` (a small simulated cluster ticking every second) on loopback and drives
Debian's Chromium through Playwright:

* the server is killed: the header badge turns red ("disconnected") and a red full-width banner appears, while
  the data age keeps counting up in the page; the server is started again on the same port: the page reloads
  itself and shows live data with no banner;
* the server is frozen (SIGSTOP): no heartbeat arrives, the data age counts up in the browser past the stale
  threshold and the banner says so; thawed (SIGCONT), the banner goes away;
* opening and closing pages quickly leaves no traceback in the server log.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from test_dashboard_browser import Page, Server, browser, playwright_api  # noqa: F401 (fixture, skip)

pytestmark = pytest.mark.browser


def _badge(page) -> str:
    return page.locator('[data-live="badge"]').inner_text()


def _age_s(page) -> int:
    return int(page.locator('[data-live="age"]').get_attribute("data-age-s") or -1)


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if cond():
                return
        except playwright_api.Error:      # the page is navigating (reloading itself): ask again
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_killed_server_shows_the_banner_and_a_restarted_one_brings_the_page_back(browser):
    server = Server("--nodes", "8", "--period", "1")
    port = server.port
    page = Page(browser)
    try:
        page.open(server.url + "?view=overview")
        p = page.page
        _wait(lambda: _badge(p) == "live", 30, "the live badge")
        assert p.locator('[data-live="banner"]').is_hidden()
        p.evaluate("window.__before_restart = true")           # gone once the page reloads
        server.stop()
        _wait(lambda: _badge(p) == "disconnected", 30, "the disconnected badge")
        banner = p.locator('[data-live="banner"]')
        assert banner.is_visible()
        assert "lost" in banner.inner_text() and "Reconnecting" in banner.inner_text()
        box = banner.bounding_box()
        assert box["x"] == 0 and box["width"] >= p.viewport_size["width"] - 1      # full width
        first = _age_s(p)
        p.wait_for_timeout(2500)
        assert _age_s(p) >= first + 2                             # the age keeps counting with no server
        server = Server("--nodes", "8", "--period", "1", port=port)
        _wait(lambda: p.evaluate("window.__before_restart === undefined"), 60, "the page to reload itself")
        p.locator('[data-view="overview"]').wait_for(timeout=60_000)
        _wait(lambda: _badge(p) == "live", 60, "the live badge after the restart")
        assert p.locator('[data-live="banner"]').is_hidden()
        assert _age_s(p) <= 5
    finally:
        page.close()
        server.stop()


def test_a_frozen_server_reads_as_disconnected_and_recovers_when_it_thaws(browser):
    server = Server("--nodes", "8", "--period", "1")
    page = Page(browser)
    try:
        page.open(server.url + "?view=queues")
        p = page.page
        _wait(lambda: _badge(p) == "live", 30, "the live badge")
        os.killpg(server.proc.pid, signal.SIGSTOP)
        try:
            _wait(lambda: _age_s(p) >= 12, 30, "the data age to count past the stale threshold")
            _wait(lambda: _badge(p) in ("stale", "disconnected"), 30, "a red badge")
            assert p.locator('[data-live="banner"]').is_visible()
        finally:
            os.killpg(server.proc.pid, signal.SIGCONT)
        _wait(lambda: _badge(p) == "live", 60, "the live badge after the server thawed")
        assert p.locator('[data-live="banner"]').is_hidden()
    finally:
        page.close()
        server.stop()


def test_closing_pages_is_not_an_error_in_the_server_log(browser):
    server = Server("--nodes", "8", "--period", "1")
    try:
        for view in ("overview", "gpus", "queues", "pending", "timeline", "overview", "gpus", "whatif"):
            p = browser.new_page(viewport={"width": 1280, "height": 720})
            p.goto(f"{server.url}?view={view}", wait_until="commit")
            p.wait_for_timeout(300)                # closed while the session is still being set up
            p.close()
        page = Page(browser)
        page.open(server.url + "?view=gpus")
        page.page.wait_for_timeout(1500)
        page.close()
        time.sleep(2)
    finally:
        log = server.stop_and_read()
    assert "Traceback" not in log, log[-3000:]
    assert "ERROR" not in log, log[-3000:]
