"""kaidash dashboard: ``panel serve dashboard/app.py`` (or ``kaidash serve``).

This file only assembles: a template, a navigation bound to the URL, and the views over the process's live
state. The live loop is started once per process by :func:`dashboard.loop.get_loop` (this file runs again
for every browser session; the loop does not). Options come from ``KAIDASH_*`` environment variables or
``panel serve dashboard/app.py --args --source kube ...``.
"""

from __future__ import annotations

import html
import sys
import time as _time
from typing import Optional

import panel as pn
from panel.io.callbacks import PeriodicCallback
from panel.theme.fast import Fast

from dashboard import display
from dashboard.loop import LiveLoop, get_loop
from dashboard.models import VIEW_TITLES, VIEWS, Selection
from dashboard.options import SourceOptions
from dashboard.quiet_log import quiet_closed_sessions
from dashboard.session import SessionSource
from dashboard.state import LiveState
from dashboard.views import (GpusView, OverviewView, PendingView, QueuesView, SettingsView, SnapshotView,
                             TimelineView, WhatIfView)
from dashboard.views.a11y import AccessibleNames
from dashboard.views.common import ensure_css, widget_args
from dashboard.views.liveness import Liveness, thresholds

VIEW_CLASSES = {"overview": OverviewView, "queues": QueuesView, "gpus": GpusView, "pending": PendingView,
                "whatif": WhatIfView, "timeline": TimelineView, "snapshot": SnapshotView, "settings": SettingsView}
NEEDS_SOURCE = {"snapshot", "settings"}
ACCENT = "#4e79a7"


def configure_panel(theme: str = "dark") -> None:
    """Extensions, offline resources and theme (idempotent).

    Panel's Fast design links Open Sans from Google Fonts; the page must load with no internet access, so the
    link is dropped (a subclass cannot do it: Panel resolves the design's bundled files by class name) and
    the template uses the system font stack.
    """
    if Fast._resources.get("font"):
        Fast._resources = {**Fast._resources, "font": {}}
    # no notifications extension: the header says what toasts would
    pn.extension("tabulator", design="fast", theme=theme, sizing_mode="stretch_width")
    pn.config.browser_info = False      # nothing reads pn.state.browser_info: one model less per session
    _mathjax_only_for_math()
    ensure_css()


MATH_DELIMITERS = ("$", "\\(", "\\[")


def _mathjax_only_for_math() -> None:
    """Serve Bokeh's MathJax bundle (1.8 MB of script to parse on every page load) only to a page that shows math.

    Panel adds it to any page with one of its HTML models among the document's roots (the template's busy
    indicator is one), whether or not any text holds math. Panel decides in
    ``panel.io.resources._panel_use_mathjax``; it is replaced by a test that keeps MathJax when a model of the
    page renders math (``disable_math`` off) and its text holds a math delimiter when the page is served. The
    dashboard shows no math; text that arrives later with a ``$`` renders as plain text (Panel's HTML view skips
    math when MathJax is not loaded).
    """
    from panel.io import resources
    from panel.models.markup import HTML as PanelHTML

    if getattr(resources._panel_use_mathjax, "kaidash", False):
        return

    def shows_math(obj) -> bool:
        text = getattr(obj, "text", "") or ""
        return (isinstance(obj, PanelHTML) and not obj.disable_math
                and any(d in text for d in MATH_DELIMITERS))

    def use_mathjax(roots) -> bool:
        return any(shows_math(model) for root in roots for model in root.references())
    use_mathjax.kaidash = True
    resources._panel_use_mathjax = use_mathjax


class Dashboard(pn.viewable.Viewer):
    """The whole app for one session: navigation, the active view, a header with live status.

    Views are built on first visit; every ``refresh_s`` the session sends a heartbeat to the header's
    :class:`~dashboard.views.liveness.Liveness` (which computes data age and connection state in the browser)
    and the active view re-renders if the loop published a new tick (sessions never run the loop). ``source``
    says whether the session looks at the shared live state or a private one of its own.
    """

    def __init__(self, state: Optional[LiveState] = None, loop: Optional[LiveLoop] = None,
                 selection: Optional[Selection] = None, refresh_s: Optional[float] = None,
                 source: Optional[SessionSource] = None, **params):
        super().__init__(**params)
        self.source = source or SessionSource(state, loop, may_change_shared=loop is not None)
        self.selection = selection or Selection()
        self.views: dict[str, pn.viewable.Viewer] = {}
        self.refresh_s = refresh_s if refresh_s is not None else min(1.0, self.state.period_s)
        self.nav = pn.widgets.RadioButtonGroup(options={VIEW_TITLES[v]: v for v in VIEWS}, value=self.selection.view,
                                               orientation="vertical", sizing_mode="stretch_width",
                                               **widget_args(label="nav", button_type="primary",
                                                             button_style="outline"))
        self.nav.param.watch(lambda e: setattr(self.selection, "view", e.new), "value")
        self.selection.param.watch(self._on_view, "view")
        stale_after, silent_after = thresholds(self.state.period_s, self.refresh_s)
        self.liveness = Liveness(stale_after_s=stale_after, silent_after_s=silent_after, margin=(0, 10),
                                 sizing_mode="stretch_width")
        self.names = AccessibleNames(width=0, height=0, margin=0)
        self.sidebar_info = pn.pane.HTML("", sizing_mode="stretch_width")
        self.scope_bar = pn.pane.HTML("", sizing_mode="stretch_width")
        self.back_btn = pn.widgets.Button(**widget_args(label="Back to the shared live view", button_type="primary",
                                                        width=240, margin=(5, 10)))
        self.back_btn.on_click(lambda e: self.source.back_to_shared())
        self.scope_row = pn.Row(self.scope_bar, self.back_btn, sizing_mode="stretch_width", visible=False)
        self.notice = pn.pane.HTML("", sizing_mode="stretch_width")
        self.notice_btn = pn.widgets.Button(**widget_args(label="Dismiss", button_type="primary",
                                                          button_style="outline", width=100, margin=(5, 10)))
        self.notice_row = pn.Row(self.notice, self.notice_btn, sizing_mode="stretch_width", visible=False)
        self.notice_btn.on_click(lambda e: setattr(self.notice_row, "visible", False))
        seen = self.source.shared.announcement
        self._seen_announcement = seen["id"] if seen else 0
        self.main = pn.Column(sizing_mode="stretch_width")
        self.title = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10, 5, 10))
        self.source.on_change(self._on_source)
        self._show(self.selection.view, first_page=True)
        self._update_status()
        self._callback = None
        self._doc = None

    @property
    def state(self) -> LiveState:
        """The state this session renders (shared, or its private source)."""
        return self.source.state

    @property
    def loop(self) -> Optional[LiveLoop]:
        return self.source.shared_loop

    # ------------------------------------------------------------------------------------ views

    def view(self, name: str):
        """The view object for ``name`` (built on first use)."""
        if name not in self.views:
            cls = VIEW_CLASSES[name]
            kwargs = {"source": self.source} if name in NEEDS_SOURCE else {}
            self.views[name] = cls(self.state, self.selection, **kwargs)
        return self.views[name]

    def _on_view(self, event) -> None:
        self.nav.value = event.new
        self._show(event.new)

    def _on_source(self) -> None:
        """The session switched between the shared and a private source: every view is rebuilt on it."""
        self.views = {name: v for name, v in self.views.items() if name in NEEDS_SOURCE}
        for v in self.views.values():
            v.retarget(self.state)
        stale_after, silent_after = thresholds(self.state.period_s, self.refresh_s)
        self.liveness.param.update(stale_after_s=stale_after, silent_after_s=silent_after)
        self._show(self.selection.view)
        self._update_status()

    def _show(self, name: str, first_page: bool = False) -> None:
        """Show view ``name``. On the page's first document only what the first screen shows is sent; the rest
        of the view follows as soon as the browser has drawn it (``pn.state.onload``), so a new page shows its
        content sooner. ``data-complete`` on the title says the whole view is there."""
        if self.loop is not None:
            self.loop.hold_searches(5.0)        # building and drawing a view come before why-pending searches
        v = self.view(name)
        v.refresh()
        # only a served page the browser has not drawn yet (elsewhere onload would run at once)
        restore = v.defer_below_fold() if first_page and not pn.state.loaded else None
        self._set_title(name, complete=restore is None)
        self.main.objects = [self.notice_row, self.scope_row, self.title, v]
        if restore is not None:
            def complete() -> None:
                restore()
                if self.selection.view == name:
                    self._set_title(name, complete=True)
            pn.state.onload(complete)

    def _set_title(self, name: str, complete: bool) -> None:
        flag = " data-complete" if complete else ""
        self.title.object = f'<h2 style="margin:4px 0" data-view="{name}"{flag}>{VIEW_TITLES[name]}</h2>'

    def tick(self) -> None:
        """Periodic: heartbeat and live status, announcements, and the active view if a new tick arrived.

        Nothing while no browser is connected: a closed tab's session lingers until the server's cleanup, and
        rendering for it would only take time from the pages people look at."""
        session = getattr(getattr(self._doc, "session_context", None), "session", None)
        if session is not None and session.connection_count == 0:
            return
        self._update_status()
        self._check_announcement()
        self.view(self.selection.view).refresh()

    def _update_status(self) -> None:
        st = self.state
        private = self.source.private
        self.liveness.beat(_time.time(), tick_wall=st.last_tick_wall, period_s=st.period_s,
                           status=st.source_status, error=st.error, label=st.source_label or st.source_kind,
                           static=st.source_status == "static",
                           scope="private: " + self.source.private_label if private else "")
        self.scope_row.visible = private
        if not private:
            self.scope_bar.object = ""
        else:
            self.scope_bar.object = (f'<div class="kd-private" data-scope="private"><b>Private view</b>: '
                                     f'{html.escape(self.source.private_label)}. Everyone else still sees the shared '
                                     f'live source ({html.escape(self.source.shared.source_label)}).</div>')
        tick = st.tick
        self.sidebar_info.object = (
            f'<div class="kd-muted" data-tick="{tick.number if tick else 0}">{display.tick(tick)}<br>'
            f'period {st.period_s:g}s<br>'
            f'{html.escape(st.metrics_status or "")}</div>')

    def _check_announcement(self) -> None:
        note = self.source.shared.announcement
        if not note or note["id"] <= self._seen_announcement:
            return
        self._seen_announcement = note["id"]
        self.notice.object = (f'<div class="kd-note" role="alert" data-announcement="{note["id"]}"><b>Shared source '
                              f'changed</b> at {display.clock(note["wall_time"])}: {html.escape(note["text"])}</div>')
        self.notice_row.visible = True

    def start(self) -> None:
        """Start this session's refresh (server only)."""
        if self._callback is None and pn.state.curdoc is not None:
            self._doc = pn.state.curdoc
            # background: the heartbeat is not work the user waits for, so it does not flip the header's busy
            # spinner (two websocket messages and a redraw per second per page otherwise)
            self._callback = PeriodicCallback(callback=self.tick, period=int(self.refresh_s * 1000), background=True)
            self._callback.start()
            pn.state.curdoc.on_session_destroyed(lambda ctx: self.source.close())

    def template(self) -> pn.template.BaseTemplate:
        """The served page: FastListTemplate, dark, navigation in the sidebar."""
        tpl = pn.template.FastListTemplate(
            title="kaidash", header=[self.liveness, self.names], sidebar=[self.nav, self.sidebar_info],
            main=[self.main],
            accent=ACCENT, theme="dark", theme_toggle=False, sidebar_width=200, main_layout=None,
            header_background="#1f2937", font_url="",   # no Google Fonts: the page must load offline
            font="system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif")
        return tpl

    def __panel__(self):
        return pn.Column(self.liveness, self.names,
                         pn.Row(pn.Column(self.nav, self.sidebar_info, width=190), self.main,
                                sizing_mode="stretch_width"), sizing_mode="stretch_width")


def build_app(loop: Optional[LiveLoop] = None, selection: Optional[Selection] = None,
              sync_url: bool = True) -> pn.template.BaseTemplate:
    """One session's page over the process's live loop (started on first call); the URL carries the view
    and selection (``?view=queues&queue=llm``)."""
    configure_panel()
    quiet_closed_sessions()
    if loop is None:
        loop = get_loop(SourceOptions.from_args(sys.argv[1:], base=SourceOptions.from_env()))
    loop.hold_searches(5.0)            # a page is being built: why-pending searches wait
    page_built = loop.page_build_started()    # and the next tick waits until its document is made (<= 1 s)
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        pn.state.curdoc.add_next_tick_callback(page_built)     # runs once Panel has made the document
    else:
        page_built()
    selection = selection or Selection()
    if sync_url and pn.state.location is not None:
        query = dict(pn.state.location.query_params or {})
        selection.update_from_query({k: str(v) for k, v in query.items()})
        pn.state.location.sync(selection, {p: p for p in Selection.URL_PARAMS})
    from dashboard.auth import ALL, ScopedState, session_state

    state, may_change_shared, user, granted = session_state(loop.state)   # per-user queue scope (access map)
    scope = None if granted == ALL else (lambda private: ScopedState(private, granted))
    source = SessionSource(state, loop, may_change_shared=may_change_shared, user=user, scope=scope)
    dash = Dashboard(source=source, selection=selection)
    dash.start()
    return dash.template()


if __name__.startswith("bokeh"):
    build_app().servable(title="kaidash")
