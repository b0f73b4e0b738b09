"""``kaidash serve --source kube`` against the real API server (the KAI cluster of tests/kube_scenario.py), in
headless Chromium: the Queues view shows the cluster's queues with the engine's fair share for what the source
reads, and the GPUs view shows the shared GPU slices on their node. The server reaches the cluster the way a user
runs it: ``KUBECONFIG`` plus ``--context``, as kaidash's read-only ServiceAccount.

Screenshots (1280x720 and 1440x900) go to artifacts/screenshots/kube-*.png.
"""

from __future__ import annotations

import os
import re

import pytest

from dashboard import display
from kube_cluster import CONTEXT
from scheduler.engine import run_session
from scheduler.sources.kube import KubeSource
from test_dashboard_browser import SHOTS, Page, Server, browser, page  # noqa: F401 - fixtures shared

pytestmark = [pytest.mark.kube_apiserver, pytest.mark.browser]


@pytest.fixture(scope="module")
def served(kai_cluster, kaidash_kubeconfig):
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kaidash_kubeconfig)
    try:
        server = Server("--source", "kube", "--context", CONTEXT)
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG")
        else:
            os.environ["KUBECONFIG"] = old
    yield server
    server.stop()


def _shots(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 720), (1440, 900)):
        page.page.set_viewport_size({"width": width, "height": height})
        page.page.wait_for_timeout(1500)
        page.page.screenshot(path=str(SHOTS / f"kube-{name}-{width}x{height}.png"), full_page=False)


def test_queues_view_shows_the_clusters_queues_with_the_engines_fair_share(served, kaidash_kubeconfig, page):
    snap = KubeSource.from_kubeconfig(str(kaidash_kubeconfig), context=CONTEXT).capture().snapshot
    result = run_session(snap)
    page.open(f"{served.url}?view=queues")
    rows = page.page.locator(".tabulator-row")
    rows.first.wait_for()
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    assert set(result.queue_stats) == {"research", "llm", "vision", "inference"}
    for queue, stats in result.queue_stats.items():
        fair = stats["gpu"]["fair_share"]
        row = next(t for t in texts if re.search(rf"(^|\s){re.escape(queue)}\s", t))
        assert display.number(fair) in row.split("\n"), (queue, fair, row)   # a cell, as the table formats it
    page.page.get_by_text(re.compile(f"kube context {CONTEXT}")).first.wait_for()   # the source, in the header
    _shots(page, "queues")
    assert page.errors == [] and page.off_loopback() == []


def test_gpus_view_shows_the_shared_gpu_slices_on_their_node(served, page):
    page.open(f"{served.url}?view=gpus&node=l4-0")
    # the node's table: the slices of the shared GPU groups (Panel renders in shadow DOM: locators pierce it), each
    # named "job · pod" in one column: KAI's PodGroup is not the pod's name, so the pod adds something here
    for cell in ("serving/pg-chat · chat-0", "serving/pg-chat-b · chat-1", "serving/pg-embed · embed-0"):
        page.page.get_by_text(cell, exact=True).first.wait_for(timeout=30_000)
    # no evidence says which GPU of l4-0 they hold (no DCGM, no device labels): "?", never a GPU "-1"
    gpus = page.page.locator(".tabulator", has_text="job / pod").first.locator(
        '.tabulator-row .tabulator-cell[tabulator-field="gpu_index"]').all_inner_texts()
    assert [g.strip() for g in gpus] == ["?", "?", "?"], gpus
    # every GPU of the cluster's nodes is drawn: 8 + 8 + 4 + 8 (a100-0 is NotReady but registered)
    page.page.get_by_text(re.compile(r"\b28 GPUs shown")).first.wait_for()
    _shots(page, "gpus")
    assert page.errors == [] and page.off_loopback() == []
