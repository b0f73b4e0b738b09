"""Authentication in headless Chromium against the real ``kaidash serve --basic-auth USERS.json --access-map``:
without credentials only the login page and no cluster data (no websocket opened, no queue name in the page);
with credentials the dashboard; a user mapped to one queue sees no other queue's name on the Queues view."""

from __future__ import annotations

import json
import re
import threading
from urllib.error import HTTPError
from urllib.request import HTTPRedirectHandler, build_opener

import pytest

from scheduler.snapshot_io import save_snapshot
from scheduler.sources.synthetic import generate_scenario

from test_dashboard_browser import CHROMIUM, Page, Server, playwright_api  # noqa: F401 (skips without Playwright)

pytestmark = pytest.mark.browser

USERS = {"carol": "carol-pw", "alice": "alice-pw", "dave": "dave-pw"}   # dave: no grant (refused)
ACCESS = "users:\n  carol: '*'\n  alice: [vision]\ndefault: []\n"
QUEUES = ["research", "llm", "vision", "data-science", "analytics", "inference", "infrastructure"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    snap = generate_scenario(seed=11, nodes=16).snapshot
    assert sorted(q.name for q in snap.queues) == sorted(QUEUES)
    save_snapshot(snap, d / "cluster.yaml")
    (d / "users.json").write_text(json.dumps(USERS))
    (d / "access.yaml").write_text(ACCESS)
    server = Server("--snapshot", str(d / "cluster.yaml"), "--data-dir", str(d), "--basic-auth", str(d / "users.json"),
                    "--cookie-secret", "test-cookie-secret-0123456789abcdef", "--access-map", str(d / "access.yaml"))
    yield server, snap
    server.stop()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


def _context_page(browser):
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = ctx.new_page()
    sockets = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    return ctx, page, sockets


def _login(page, url, user):
    page.goto(url, wait_until="networkidle", timeout=90_000)
    page.fill('input[name="username"]', user)
    page.fill('input[name="password"]', USERS[user])
    page.click('button[type="submit"]')
    page.wait_for_url(lambda u: "/login" not in u, timeout=60_000)


DEEP_TEXT = """(html) => { const out = [];
  const walk = (n) => {
    if (n.nodeType === 3) { out.push(n.textContent); return; }
    if (n.nodeType === 1 && html) { for (const a of n.attributes) out.push(a.value); }
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.childNodes) walk(c);
  };
  walk(document.documentElement); return out.join(' '); }"""


def page_text(page, markup: bool = False) -> str:
    """Every text node of the page, shadow DOMs included (Panel renders into shadow roots); with ``markup``
    also every attribute value."""
    return page.evaluate(DEEP_TEXT, markup)


def _named(text: str, queue: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(queue)}(?![\w-])", text) is not None


def test_without_credentials_only_the_login_page(served, browser):
    server, _ = served

    class NoRedirect(HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    with pytest.raises(HTTPError) as err:
        build_opener(NoRedirect).open(server.url + "?view=queues", timeout=10)
    assert err.value.code == 302 and "login" in err.value.headers["Location"]
    ctx, page, sockets = _context_page(browser)
    try:
        page.goto(server.url + "?view=queues", wait_until="networkidle", timeout=90_000)
        page.wait_for_timeout(1500)
        assert "/login" in page.url
        text = page_text(page, markup=True)
        assert "Login" in text
        assert [q for q in QUEUES if _named(text, q)] == []
        assert page.locator("[data-view]").count() == 0
        assert sockets == []                                     # no Bokeh session was ever opened
        # a wrong password stays on the login page
        page.fill('input[name="username"]', "alice")
        page.fill('input[name="password"]', "wrong")
        page.click('button[type="submit"]')
        page.wait_for_load_state("networkidle")
        assert "/login" in page.url and page.locator("[data-view]").count() == 0 and sockets == []
    finally:
        ctx.close()


def test_with_credentials_the_dashboard(served, browser):
    server, snap = served
    ctx, page, sockets = _context_page(browser)
    try:
        _login(page, server.url, "carol")
        page.goto(server.url + "?view=queues", wait_until="networkidle", timeout=90_000)
        page.locator('[data-view="queues"]').wait_for(timeout=60_000)
        page.locator(".tabulator-row").first.wait_for(timeout=60_000)
        text = page_text(page)
        assert [q for q in QUEUES if not _named(text, q)] == []  # carol sees everything
        assert any(u.startswith("ws://127.0.0.1") for u in sockets)
    finally:
        ctx.close()


def test_a_user_mapped_to_one_queue_sees_no_other_queue(served, browser):
    server, snap = served
    ctx, page, _ = _context_page(browser)
    try:
        _login(page, server.url, "alice")
        page.goto(server.url + "?view=queues", wait_until="networkidle", timeout=90_000)
        page.locator('[data-view="queues"]').wait_for(timeout=60_000)
        page.locator(".tabulator-row", has_text="vision").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        text = page_text(page)
        html = page_text(page, markup=True)
        assert _named(text, "vision")
        others = [q for q in QUEUES if q != "vision"]
        assert [q for q in others if _named(text, q)] == []
        assert [q for q in others if _named(html, q)] == []       # not hidden in the markup either
        # her jobs are there, nobody else's
        vision_jobs = [j.name for j in snap.jobs if j.queue == "vision"]
        other_jobs = [j.name for j in snap.jobs if j.queue != "vision"]
        assert vision_jobs and any(j in text for j in vision_jobs)
        assert [j for j in other_jobs if j in html] == []
    finally:
        ctx.close()


def _login_cookies(url: str, user: str) -> str:
    """Log in through the real /login form over HTTP; the ``Cookie`` header the browser would send."""
    import requests

    session = requests.Session()
    r = session.post(url + "login", data={"username": user, "password": USERS[user]}, allow_redirects=False,
                     timeout=30)
    assert r.status_code in (302, 303), r.status_code
    return "; ".join(f"{c.name}={c.value}" for c in session.cookies)


def _open_ws(url: str, cookies: str) -> list:
    """Open /ws with a Bokeh session token made by hand (sessions are unsigned), as a script could; the
    messages the server sends before closing (an ACK means a session was built), or ``["HTTP 403"]`` when the
    handshake is refused."""
    import asyncio

    from bokeh.util.token import generate_jwt_token, generate_session_id
    from tornado.httpclient import HTTPClientError, HTTPRequest
    from tornado.websocket import websocket_connect

    token = generate_jwt_token(generate_session_id(signed=False), signed=False,
                               extra_payload={"headers": {"Cookie": cookies}, "cookies": {}})

    async def talk():
        ws_url = url.replace("http://", "ws://") + "ws"
        request = HTTPRequest(ws_url, headers={"Cookie": cookies}, request_timeout=30)
        try:
            conn = await websocket_connect(request, subprotocols=["bokeh", token])
        except HTTPClientError as exc:
            return [f"HTTP {exc.code}"]
        got = []
        try:
            while len(got) < 3:
                msg = await asyncio.wait_for(conn.read_message(), 20)
                if msg is None:
                    break
                got.append(msg)
        except asyncio.TimeoutError:
            pass
        finally:
            conn.close()
        return got
    out: list = []          # in a thread of its own: Playwright's sync API keeps an event loop in this one
    runner = threading.Thread(target=lambda: out.append(asyncio.run(talk())))
    runner.start()
    runner.join(90)
    assert out, "the websocket exchange did not finish"
    return out[0]


def test_a_refused_login_gets_no_session_over_the_websocket(served):
    server, _ = served
    dave = _login_cookies(server.url, "dave")
    import requests
    page = requests.get(server.url, headers={"Cookie": dave}, timeout=60)
    assert page.status_code == 403                                     # Panel refuses the page itself
    assert _open_ws(server.url, dave) == ["HTTP 403"]                   # and the hand-made /ws is refused
    alice = _login_cookies(server.url, "alice")                         # a granted login does get a session
    assert any(isinstance(m, str) and '"msgtype":"ACK"' in m.replace(" ", "") for m in _open_ws(server.url, alice))
