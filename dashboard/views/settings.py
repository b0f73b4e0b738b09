"""Settings: the same source options as ``kaidash serve``'s flags; applying them switches the live loop."""

from __future__ import annotations

import html

import panel as pn

from scheduler.errors import KaidashError

from ..feeds import make_feed
from ..models import ViewModel
from ..options import SourceOptions
from .base import View


class SettingsView(View):
    """Source, kube context, snapshot file, Prometheus URL, period; Apply restarts the loop on them."""

    model_class = ViewModel
    title = "Settings"

    def __init__(self, state=None, selection=None, model=None, loop=None, **params):
        self.loop = loop
        base = loop.options if loop is not None else SourceOptions()
        self.options = SourceOptions(**{k: v for k, v in base.param.values().items() if k != "name"})
        super().__init__(state, selection, model, **params)

    def _build(self):
        o = self.options
        form = pn.Param(o.param, parameters=["source", "context", "snapshot", "trace", "prometheus", "period_s",
                                             "seed", "nodes", "sim_step_s"],
                        widgets={"source": pn.widgets.RadioButtonGroup,
                                 "period_s": {"type": pn.widgets.FloatInput, "step": 0.5},
                                 "sim_step_s": {"type": pn.widgets.FloatInput, "step": 5}},
                        show_name=False, width=460)
        self.apply_btn = pn.widgets.Button(name="Apply: restart the live loop on these options", button_type="primary",
                                           disabled=self.loop is None)
        self.apply_btn.on_click(lambda e: self.apply())
        self.message = pn.pane.HTML("", sizing_mode="stretch_width")
        self.cli = pn.pane.HTML("", sizing_mode="stretch_width")
        o.param.watch(lambda *_: self._update(), list(o.param))
        return pn.Row(pn.Card(pn.Column(form, self.apply_btn, self.message), title="Source", collapsible=False),
                      pn.Card(self.cli, title="Same thing from the command line", sizing_mode="stretch_width",
                              collapsible=False),
                      sizing_mode="stretch_width")

    def apply(self) -> None:
        if self.loop is None:
            return
        opts = SourceOptions(**{k: v for k, v in self.options.param.values().items() if k != "name"})
        try:   # a snapshot file is read (within the data directories) before the loop switches: a refused or
            feed = make_feed(opts) if opts.source == "snapshot" else None   # broken file leaves it serving
        except KaidashError as exc:
            self.message.object = (f'<div class="kd-banner" data-apply="refused">Not applied: '
                                   f'{html.escape(str(exc))}</div>')
            return
        self.loop.switch(opts, feed=feed)
        tick = self.loop.step()
        self.message.object = ('<div class="kd-explain">Applied: ' + html.escape(opts.label()) + "</div>"
                               if tick is not None else
                               f'<div class="kd-banner">Applied, but the source failed: '
                               f'{html.escape(self.state.error)}</div>')

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
        if o.prometheus:
            parts.append(f"--prometheus {o.prometheus}")
        parts.append(f"--period {o.period_s:g}")
        return " ".join(parts)

    def _update(self):
        self.cli.object = (f'<pre style="white-space:pre-wrap">{html.escape(self.command_line())}</pre>'
                           '<div class="kd-muted">Options reach <code>panel serve dashboard/app.py</code> as '
                           '<code>KAIDASH_*</code> environment variables or <code>--args</code>. kube mode is '
                           'read-only: kaidash never writes to the cluster.</div>')
