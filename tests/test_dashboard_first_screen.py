"""What a new page is sent first (issue 16's render budget), without a browser.

* the first document of a page holds the view's first screen; the parts below it follow when the browser has
  drawn that (``pn.state.onload``), and the title says ``data-complete`` when the whole view is there;
* in-app navigation and pages outside a server get the whole view at once;
* Bokeh's MathJax bundle (1.8 MB) is served only to a page that shows math, which the dashboard never does.

The browser side (time to a rendered view) is measured by ``bench/dashboard_browser.py``; the browser tests
(``tests/test_dashboard_browser.py``) wait for ``data-complete`` and check every view's content.
"""

from __future__ import annotations

import pytest

from test_dashboard_models import SCENARIO, snapshot, state  # noqa: F401 (fixtures)

pn = pytest.importorskip("panel")

from bokeh.document import Document  # noqa: E402
from bokeh.resources import Resources  # noqa: E402
from panel.io.state import set_curdoc  # noqa: E402
from panel.io.resources import bundle_resources  # noqa: E402

from dashboard.app import VIEW_CLASSES, Dashboard, configure_panel  # noqa: E402
from dashboard.models import Selection  # noqa: E402

configure_panel()

FOLDED = ["overview", "queues", "gpus", "pending", "whatif", "timeline"]


def _served(state, view: str):
    """A dashboard session as the server builds it: inside a document, before the browser has loaded it."""
    doc = Document()
    pn.state._loaded[doc] = False                   # as a server session is until the browser says it drew it
    with set_curdoc(doc):
        dash = Dashboard(state, selection=Selection(view=view))
        dash.template().server_doc(doc)
    return dash, doc


def _boxes(view_obj) -> list:
    return [box for box, _ in view_obj.fold()]


@pytest.mark.parametrize("view", FOLDED)
def test_first_document_holds_the_first_screen_then_the_rest_follows(state, view):
    full = [list(box.objects) for box in _boxes(VIEW_CLASSES[view](state, Selection(view=view)))]
    dash, doc = _served(state, view)
    v = dash.views[view]
    first = [list(box.objects) for box in _boxes(v)]
    folds = [k for _, k in v.fold()]
    assert [len(objs) for objs in first] == folds                     # only the first screen's children
    assert all(len(f) > k for f, k in zip(full, folds))               # and there was more below it
    assert 'data-view="%s"' % view in dash.title.object and "data-complete" not in dash.title.object
    models_first = len(doc.models)

    with set_curdoc(doc):
        pn.state._on_load(doc)                                        # the browser has drawn the first document
    assert [len(box.objects) for box in _boxes(v)] == [len(f) for f in full]
    assert "data-complete" in dash.title.object
    assert len(doc.models) > models_first                             # the rest's models were added to the page


def test_views_outside_a_server_and_in_app_navigation_are_whole_at_once(state):
    dash = Dashboard(state, selection=Selection(view="queues"))      # no document: a notebook, a test
    assert "data-complete" in dash.title.object
    q = dash.views["queues"]
    assert all(len(box.objects) > k for box, k in q.fold())

    served, doc = _served(state, "overview")
    with set_curdoc(doc):
        served.selection.view = "timeline"                            # a click in the sidebar
    t = served.views["timeline"]
    assert all(len(box.objects) > k for box, k in t.fold())
    assert 'data-view="timeline" data-complete' in served.title.object


def test_leaving_before_the_rest_arrived_still_completes_the_view(state):
    dash, doc = _served(state, "queues")
    with set_curdoc(doc):
        dash.selection.view = "settings"
        pn.state._on_load(doc)
        q = dash.views["queues"]
        assert all(len(box.objects) > k for box, k in q.fold())
        assert 'data-view="settings" data-complete' in dash.title.object   # the title is the view shown now


def _js(roots) -> list[str]:
    return [str(getattr(f, "url", f)) for f in bundle_resources(roots, Resources(mode="server")).js_files]


def test_mathjax_is_not_served_to_the_dashboard(state):
    _, doc = _served(state, "overview")
    js = _js(doc.roots)
    assert any("bokeh.min.js" in f for f in js)
    assert not any("mathjax" in f for f in js)


def test_mathjax_is_still_served_to_a_page_with_math():
    doc = Document()
    pn.Column(pn.pane.HTML("area $x^2$", disable_math=False)).server_doc(doc)
    assert any("mathjax" in f for f in _js(doc.roots))
    plain = Document()
    pn.Column(pn.pane.HTML("costs $5 and $6")).server_doc(plain)      # math off (the HTML pane's default)
    assert not any("mathjax" in f for f in _js(plain.roots))


def test_a_tick_waits_for_a_page_build_but_never_long():
    import threading
    import time

    from dashboard.loop import LiveLoop
    from dashboard.options import SourceOptions

    loop = LiveLoop(SourceOptions(source="sim", nodes=4, seed=1))
    loop.MAX_TICK_HOLD_S = 0.6
    done = loop.page_build_started()
    threading.Timer(0.2, done).start()                 # the page's document is made after 0.2 s
    t0 = time.monotonic()
    loop._wait_for_page_builds()
    assert 0.15 <= time.monotonic() - t0 < 0.55        # the tick waited for it, not for the whole hold

    loop.page_build_started()                          # a build never reported done ...
    t0 = time.monotonic()
    loop._wait_for_page_builds()
    assert 0.55 <= time.monotonic() - t0 < 1.5         # ... holds a tick at most MAX_TICK_HOLD_S
    loop.PAGE_BUILD_FORGET_S = 0.0
    t0 = time.monotonic()
    loop._wait_for_page_builds()                       # and is forgotten after PAGE_BUILD_FORGET_S
    assert time.monotonic() - t0 < 0.1
    assert not loop._building()
