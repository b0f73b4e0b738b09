"""kaidash dashboard: ``panel serve dashboard/app.py`` (or ``kaidash serve``).

This file only assembles: a template, a navigation bound to the URL, and the views over the process's live
state. The live loop is started once per process by :func:`dashboard.loop.get_loop` (this file runs again
for every browser session; the loop does not). Options come from ``KAIDASH_*`` environment variables or
``panel serve dashboard/app.py --args --source kube ...``.
"""

from __future__ import annotations

import datetime as _dt
import html
import sys
from typing import Optional

import panel as pn
from panel.theme.fast import Fast

from dashboard.frames import format_duration
from dashboard.loop import LiveLoop, get_loop
from dashboard.models import VIEW_TITLES, VIEWS, Selection
from dashboard.options import SourceOptions
from dashboard.state import LiveState
from dashboard.views import (GpusView, OverviewView, PendingView, QueuesView, SettingsView, SnapshotView,
                             TimelineView, WhatIfView)
from dashboard.views.common import STATUS_COLOURS, badge, ensure_css

VIEW_CLASSES = {"overview": OverviewView, "queues": QueuesView, "gpus": GpusView, "pending": PendingView,
                "whatif": WhatIfView, "timeline": TimelineView, "snapshot": SnapshotView, "settings": SettingsView}
NEEDS_LOOP = {"snapshot", "settings"}
ACCENT = "#4e79a7"


def configure_panel(theme: str = "dark") -> None:
    """Extensions, offline resources and theme (idempotent).

    Panel's Fast design links Open Sans from Google Fonts; the page must load with no internet access, so the
    link is dropped (a subclass cannot do it: Panel resolves the design's bundled files by class name) and
    the template uses the system font stack.
    """
    if Fast._resources.get("font"):
        Fast._resources = {**Fast._resources, "font": {}}
    pn.extension("tabulator", design="fast", theme=theme, notifications=True, sizing_mode="stretch_width")
    ensure_css()


class Dashboard(pn.viewable.Viewer):
    """The whole app for one session: navigation, the active view, a header with loop health.

    Views are built on first visit; every ``refresh_s`` the active view re-renders if the loop published a
    new tick (sessions never run the loop).
    """

    def __init__(self, state: LiveState, loop: Optional[LiveLoop] = None, selection: Optional[Selection] = None,
                 refresh_s: Optional[float] = None, **params):
        super().__init__(**params)
        self.state = state
        self.loop = loop
        self.selection = selection or Selection()
        self.views: dict[str, pn.viewable.Viewer] = {}
        self.refresh_s = refresh_s if refresh_s is not None else min(1.0, state.period_s)
        self.nav = pn.widgets.RadioButtonGroup(options={VIEW_TITLES[v]: v for v in VIEWS}, value=self.selection.view,
                                               orientation="vertical", button_type="primary",
                                               button_style="outline", sizing_mode="stretch_width", name="nav")
        self.nav.param.watch(lambda e: setattr(self.selection, "view", e.new), "value")
        self.selection.param.watch(self._on_view, "view")
        self.status = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self.sidebar_info = pn.pane.HTML("", sizing_mode="stretch_width")
        self.main = pn.Column(sizing_mode="stretch_width")
        self.title = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10, 5, 10))
        self._show(self.selection.view)
        self._update_status()
        self._callback = None

    # ------------------------------------------------------------------------------------ views

    def view(self, name: str):
        """The view object for ``name`` (built on first use)."""
        if name not in self.views:
            cls = VIEW_CLASSES[name]
            kwargs = {"loop": self.loop} if name in NEEDS_LOOP else {}
            self.views[name] = cls(self.state, self.selection, **kwargs)
        return self.views[name]

    def _on_view(self, event) -> None:
        self.nav.value = event.new
        self._show(event.new)

    def _show(self, name: str) -> None:
        v = self.view(name)
        v.refresh()
        self.title.object = f'<h2 style="margin:4px 0" data-view="{name}">{VIEW_TITLES[name]}</h2>'
        self.main.objects = [self.title, v]

    def tick(self) -> None:
        """Periodic: header health, and the active view if a new tick arrived."""
        self._update_status()
        self.view(self.selection.view).refresh()

    def _update_status(self) -> None:
        h = self.state.health()
        age = h["data_age_s"]
        stale = f" · stale since {_dt.datetime.fromtimestamp(h['stale_since']).strftime('%H:%M:%S')}" \
            if h["stale_since"] else ""
        self.status.object = (
            f'<div style="color:#fff;font-size:14px;white-space:nowrap">{badge(h["status"], STATUS_COLOURS.get(h["status"], "#888"))} '
            f'{html.escape(h["label"] or h["source"])} · data age {format_duration(age) if age is not None else "–"}'
            f'{stale}</div>')
        tick = self.state.tick
        self.sidebar_info.object = (
            f'<div class="kd-muted">tick {tick.index if tick else "–"} · period {self.state.period_s:g}s<br>'
            f'{html.escape(self.state.metrics_status or "")}</div>')

    def start(self) -> None:
        """Start this session's refresh (server only)."""
        if self._callback is None and pn.state.curdoc is not None:
            self._callback = pn.state.add_periodic_callback(self.tick, period=int(self.refresh_s * 1000))

    def template(self) -> pn.template.BaseTemplate:
        """The served page: FastListTemplate, dark, navigation in the sidebar."""
        tpl = pn.template.FastListTemplate(
            title="kaidash", header=[self.status], sidebar=[self.nav, self.sidebar_info], main=[self.main],
            accent=ACCENT, theme="dark", theme_toggle=False, sidebar_width=200, main_layout=None,
            header_background="#1f2937", font_url="",   # no Google Fonts: the page must load offline
            font="system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif")
        return tpl

    def __panel__(self):
        return pn.Row(pn.Column(self.nav, self.sidebar_info, width=190), self.main, sizing_mode="stretch_width")


def build_app(loop: Optional[LiveLoop] = None, selection: Optional[Selection] = None,
              sync_url: bool = True) -> pn.template.BaseTemplate:
    """One session's page over the process's live loop (started on first call); the URL carries the view
    and selection (``?view=queues&queue=llm``)."""
    configure_panel()
    if loop is None:
        loop = get_loop(SourceOptions.from_args(sys.argv[1:], base=SourceOptions.from_env()))
    selection = selection or Selection()
    if sync_url and pn.state.location is not None:
        query = dict(pn.state.location.query_params or {})
        selection.update_from_query({k: str(v) for k, v in query.items()})
        pn.state.location.sync(selection, {p: p for p in Selection.URL_PARAMS})
    from dashboard.auth import session_state

    state, may_change_source = session_state(loop.state)   # per-user queue scope when an access map is set
    dash = Dashboard(state, loop if may_change_source else None, selection)
    dash.start()
    return dash.template()


if __name__.startswith("bokeh"):
    build_app().servable(title="kaidash")
