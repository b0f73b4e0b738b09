"""Settings: the same source options as ``kaidash serve``'s flags; applying them switches the live loop."""

from __future__ import annotations

import html

import panel as pn

from scheduler.errors import KaidashError

from ..feeds import make_feed
from ..models import ViewModel
from ..options import SourceOptions
from .base import View
from .common import widget_args


ONLY_FOR = {"context": ("kube",), "snapshot": ("snapshot",), "trace": ("trace",), "seed": ("sim",),
            "nodes": ("sim",), "demo_extensions": ("sim",), "sim_step_s": ("sim", "trace")}
"""The options that act on some sources only; the form shows them for those (a kube context typed while "sim"
is selected did nothing, silently). The source, the Prometheus URL and the period act on every source."""


class SettingsView(View):
    """Source, kube context, snapshot file, Prometheus URL, period. Apply runs them in this session only (a
    private loop); with the source-admin role, "Apply for everyone" restarts the shared loop and tells every
    session."""

    model_class = ViewModel
    title = "Settings"

    def __init__(self, state=None, selection=None, model=None, source=None, **params):
        self.source = source
        base = source.options if source is not None else SourceOptions()
        self.options = SourceOptions(**{k: v for k, v in base.param.values().items() if k != "name"})
        super().__init__(state, selection, model, **params)

    def _build(self):
        o = self.options
        shared_ok = self.source is not None and self.source.may_change_shared
        form = pn.Param(o.param, parameters=["source", "context", "snapshot", "trace", "prometheus", "period_s",
                                             "seed", "nodes", "sim_step_s", "demo_extensions"],
                        widgets={"source": {"type": pn.widgets.RadioButtonGroup,
                                            **widget_args(button_type="primary", button_style="outline")},
                                 "period_s": {"type": pn.widgets.FloatInput, "step": 0.5},
                                 # an input: a 1-10,000 slider sat at its left end for 64 and moved by hundreds
                                 "nodes": {"type": pn.widgets.IntInput, "step": 8},
                                 "sim_step_s": {"type": pn.widgets.FloatInput, "step": 5}},
                        show_name=False, width=460)
        self.apply_btn = pn.widgets.Button(**widget_args(label="Apply in my session", button_type="primary",
                                                         disabled=self.source is None))
        self.apply_btn.on_click(lambda e: self.apply())
        self.share_btn = pn.widgets.Button(**widget_args(label="Apply for everyone (shared source)",
                                                         button_type="danger", button_style="outline",
                                                         visible=shared_ok))
        self.share_btn.on_click(lambda e: self.apply(shared=True))
        self.back_btn = pn.widgets.Button(**widget_args(label="Back to the shared live view", button_type="primary",
                                                        button_style="outline", disabled=self.source is None))
        self.back_btn.on_click(lambda e: self.source.back_to_shared())
        who = ("You hold the <b>source-admin</b> role: <i>Apply for everyone</i> restarts the shared loop for every "
               "session, and each of them is told." if shared_ok else
               "Changing the shared source for everyone needs the <b>source-admin</b> role of the access map.")
        self.message = pn.pane.HTML("", sizing_mode="stretch_width")
        self.cli = pn.pane.HTML("", sizing_mode="stretch_width")
        self.form = form
        o.param.watch(lambda *_: self._update(), list(o.param))
        o.param.watch(lambda *_: self._show_relevant(), "source")
        self._show_relevant()
        intro = pn.pane.HTML(f'<div class="kd-muted">Apply runs these options in <b>your session only</b>: '
                             f'everyone else keeps the shared live view. {who}</div>', sizing_mode="stretch_width")
        return pn.Row(pn.Card(pn.Column(intro, form, pn.Row(self.apply_btn, self.back_btn), self.share_btn,
                                        self.message), title="Source", collapsible=False, width=520),
                      pn.Card(self.cli, title="Same thing from the command line", sizing_mode="stretch_width",
                              collapsible=False),
                      sizing_mode="stretch_width")

    def _show_relevant(self) -> None:
        """Show only the options the selected source reads."""
        for name, sources in ONLY_FOR.items():
            self.form._widgets[name].visible = self.options.source in sources

    def apply(self, shared: bool = False) -> None:
        """Run the form's options in this session (``shared``: restart the shared loop, source-admin only)."""
        if self.source is None:
            return
        opts = SourceOptions(**{k: v for k, v in self.options.param.values().items() if k != "name"})
        try:   # a snapshot file is read (within the data directories) before anything switches: a refused or
            feed = make_feed(opts) if opts.source == "snapshot" else None   # broken file leaves it serving
        except KaidashError as exc:
            self.message.object = (f'<div class="kd-banner" data-apply="refused">Not applied: '
                                   f'{html.escape(str(exc))}</div>')
            return
        try:
            if shared:
                self.source.share_options(opts, feed=feed)
            else:
                self.source.use_options(opts, feed=feed)
        except PermissionError as exc:
            self.message.object = f'<div class="kd-banner">{html.escape(str(exc))}</div>'
            return
        state = self.source.state
        where = "for everyone" if shared else "in your session"
        self.message.object = (f'<div class="kd-explain" data-apply="ok">Applied {where}: {html.escape(opts.label())}'
                               '</div>' if state.tick is not None else
                               f'<div class="kd-banner" data-apply="error">Applied {where}, but the source failed: '
                               f'{html.escape(state.error)}</div>')

    def command_line(self) -> str:
        o = self.options
        parts = ["kaidash serve"]
        if o.source == "kube":
            parts += ["--source kube"] + ([f"--context {o.context}"] if o.context else [])
        elif o.source == "snapshot":
            parts += [f"--snapshot {o.snapshot or 'FILE'}"]
        elif o.source == "trace":
            parts += [f"--trace {o.trace}"]
        else:
            parts += [f"--seed {o.seed}", f"--nodes {o.nodes}", f"--sim-step {o.sim_step_s:g}"]
            if o.demo_extensions:
                parts.append("--demo-extensions")
        if o.prometheus:
            parts.append(f"--prometheus {o.prometheus}")
        parts.append(f"--period {o.period_s:g}")
        return " ".join(parts)

    def _update(self):
        self.cli.object = (f'<pre style="white-space:pre-wrap">{html.escape(self.command_line())}</pre>'
                           '<div class="kd-muted">Options reach <code>panel serve dashboard/app.py</code> as '
                           '<code>KAIDASH_*</code> environment variables or <code>--args</code>. kube mode is '
                           'read-only: kaidash never writes to the cluster.</div>')
