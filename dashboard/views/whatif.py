"""What-if: sliders and selectors over a pinned snapshot (live or a saved file); the engine re-runs to steady
state as they move (throttled: on release) and the diff shows before | after | Δ side by side.

The run happens on the session's what-if worker thread (``WhatIfModel.submit``), never in a widget callback: the
page says "computing…" at once, shows each cycle's interim diff marked as such, then the steady state; a newer
move supersedes a running one and a setting computed since the last pin comes back from the cache at once.

Honest by construction: GPU sliders run from 0 to the cluster's GPUs (an "unlimited" box instead of a -1 step),
an error clears the last result instead of leaving it under a banner, a placement strategy says that only
pending jobs move (or re-places running work when asked), and a change that starts nothing says why.
The what-if is this session's own: nothing here changes what other sessions see.
"""

from __future__ import annotations

import html
import io
import threading
from functools import partial

import pandas as pd
import panel as pn
from panel.io.callbacks import PeriodicCallback
from panel.io.state import set_curdoc

from .. import display
from ..models import WhatIfModel
from ..whatif_jobs import COMPUTING, INTERIM, STEADY, WhatIfUpdate
from .base import View
from .common import download_button, keyed, number_formatters, table, update_table, widget_args
from .plots import GroupedBars

SUMMARY_ROWS = {
    "gpu_total": ("GPUs", "gpus"), "gpu_allocated": ("GPUs allocated", "gpus"),
    "gpu_utilisation": ("GPU allocation (allocated / GPUs)", "ratio"), "cycles_run": ("cycles to steady state", "int"),
    "jobs_started": ("jobs started", "int"), "jobs_pending": ("jobs still pending", "int"),
    "tasks_evicted": ("tasks evicted", "int"), "idle_gpus": ("idle GPUs (nothing allocated)", "int"),
    "free_on_shared_gpus": ("free GPU on shared GPUs", "gpus"),
    "shared_free_fraction": ("share of free GPU stranded on shared GPUs", "ratio"),
    "nodes_unable_to_host": ("nodes unable to host the common pending shape", "int"),
    "largest_free_block": ("largest free block (whole GPUs on one node)", "int")}
"""Cluster metrics of the summary table: label and how to format the values."""
GROUPS = {"Fair share (GPUs)": ["fair_share_before", "fair_share_after", "fair_share_delta"],
          "Jobs started": ["started_before", "started_after", "started_delta"],
          "Tasks evicted": ["evicted_before", "evicted_after", "evicted_delta"],
          "Jobs still pending": ["pending_before", "pending_after", "pending_delta"]}
QUEUE_TITLES = {c: {"before": "before", "after": "after", "delta": "Δ"}[c.rsplit("_", 1)[1]]
                for cols in GROUPS.values() for c in cols}
CONTROLS_WIDTH = 310
QUEUE_WIDTHS = {"queue": 108, **{c: {"before": 54, "after": 52, "delta": 42}[c.rsplit("_", 1)[1]]
                                 for cols in GROUPS.values() for c in cols}}
"""The per-queue diff's widths: "before" and a queue name as long as "infrastructure" whole, and the table within
the result column at 1280 px (the controls are :data:`CONTROLS_WIDTH` wide); they clipped at 96/50 px."""
PLACEMENT_NOTE = ("<b>Only pending jobs move.</b> KAI never moves a running pod to improve placement, so a new "
                  "strategy changes nothing until jobs start. Tick <i>re-place running work</i> to compare the "
                  "whole cluster placed from scratch both ways. <i>fragaware</i>: kaidash's fragmentation-aware "
                  "policy (not KAI): FGD's node choice, fractions paired by the GPU they would strand "
                  "(docs/placement-quality.md).")


CARD_TITLES = ("Cluster: before | after | Δ", "Per queue: before | after | Δ",
               "GPU fair share per queue: before and after", "Jobs whose outcome changes")
INTERIM_TITLES = ("Cluster: before | after cycle {n}, still settling | Δ",
                  "Per queue: before | after cycle {n}, still settling | Δ",
                  "GPU fair share per queue: before and after", "Jobs whose outcome changes so far (cycle {n})")
"""Card titles while an interim diff shows: the after column is a state the run passes through."""
PROGRESS_MS = 250
"""How often the "computing… X ms so far" line ticks while a run is in flight."""
DIMMED = {"opacity": "0.45"}
"""The previous result's tables while the first cycle of a new run is computing."""
_STATUS_STYLE = {
    COMPUTING: "background:rgba(148,163,184,.14);border-left:4px solid #94a3b8",
    INTERIM: "background:rgba(245,158,11,.14);border-left:4px solid #f59e0b",
    STEADY: "background:rgba(52,211,153,.10);border-left:4px solid #34d399"}


def _fmt(value, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "ratio":
        return display.percent(value, 1.0)
    if kind == "int":
        return display.number(value, 0)
    return display.gpus(value)


def _delta(b, a, kind: str) -> str:
    try:
        d = float(a) - float(b)
    except (TypeError, ValueError):
        return ""
    if abs(d) < 1e-9:
        return "0"
    sign = "+" if d > 0 else "−"
    if kind == "ratio":
        return f"{sign}{abs(d) * 100:.1f} pp"
    return sign + (display.number(abs(d), 0) if kind == "int" else display.gpus(abs(d)))


def summary_rows(summary: pd.DataFrame, interim: bool = False) -> pd.DataFrame:
    """The model's raw summary as text: a label with the unit, before, after, Δ (``interim``: the after side
    has not settled, so its cycle count is "so far")."""
    rows = []
    for r in summary.itertuples():
        label, kind = SUMMARY_ROWS.get(r.metric, (r.metric.replace("_", " "), "gpus"))
        if interim and r.metric == "cycles_run":
            label = "cycles run (after: so far, still settling)"
        rows.append({"metric": label, "before": _fmt(r.before, kind), "after": _fmt(r.after, kind),
                     "delta": _delta(r.before, r.after, kind)})
    return keyed(pd.DataFrame(rows, columns=["metric", "before", "after", "delta"]), "metric")


class WhatIfView(View):
    """Controls on the left; before | after | Δ on the right."""

    model_class = WhatIfModel
    title = "What-if"

    def _build(self):
        m = self.model
        self.base_info = pn.pane.HTML("", sizing_mode="stretch_width")
        self.pin_btn = pn.widgets.Button(**widget_args(label="Pin latest live state", button_type="primary", width=170))
        self.pin_btn.on_click(lambda e: self._pin())
        self.reset_btn = pn.widgets.Button(**widget_args(label="Reset edits", button_type="warning",
                                                         button_style="outline"))
        self.reset_btn.on_click(lambda e: self._reset())
        self.queue = pn.widgets.Select.from_param(m.param.queue, **widget_args(label="Queue"))
        total = max(1.0, m.cluster_gpus())
        self.quota = self._slider("quota", "GPU quota (deserved)", 0, total, 0.5)
        self.limit = self._slider("limit", "GPU limit", 0, total, 0.5)
        self.no_limit = pn.widgets.Checkbox(**widget_args(label="no GPU limit (unlimited)"), value=m.limit == -1)
        self.no_limit.param.watch(lambda e: self._set_unlimited(e.new), "value")
        self.weight = self._slider("over_quota_weight", "Over-quota weight", 0, 10, 0.5)
        self.priority = pn.widgets.IntInput(**widget_args(label="Queue priority"), value=m.priority, step=10, width=140)
        self.priority.param.watch(lambda e: self._set("priority", int(e.new)), "value")
        self.pool = pn.widgets.Select.from_param(m.param.pool, **widget_args(label="Node pool"))
        self.nodes = pn.widgets.IntSlider(**widget_args(label="Nodes added (+) / removed (-)"), start=-16, end=16,
                                          value=0,
                                          sizing_mode="stretch_width")
        self._on_release(self.nodes, "node_delta", int)
        self.placement = pn.widgets.Select.from_param(m.param.placement_gpu,
                                                      **widget_args(label="GPU placement strategy"))
        self.order = pn.widgets.RadioButtonGroup.from_param(m.param.gpu_device_order, **widget_args(
            label="GPU device order", button_type="primary", button_style="outline"))
        self.replace = pn.widgets.Checkbox.from_param(
            m.param.replace_running,
            **widget_args(label="re-place running work (compare clusters placed from scratch)"))
        self.k_value = pn.widgets.FloatSlider(**widget_args(label="k-value (time-based fair share)"), start=0, end=10,
                                              step=0.1,
                                              value=1.0, sizing_mode="stretch_width")
        self._on_release(self.k_value, "k_value")
        self.demand = pn.widgets.FloatSlider(**widget_args(label="Pending demand ×"), start=0, end=4, step=0.25,
                                             value=1.0,
                                             sizing_mode="stretch_width")
        self._on_release(self.demand, "demand_scale")
        m.param.watch(lambda e: self._rerun(), ["placement_gpu", "gpu_device_order", "replace_running"])
        m.param.watch(lambda e: self._load_sliders(), ["queue", "pool"])
        self.download = download_button(self._modified_yaml, "whatif-snapshot.yaml",
                                        "Save what-if as snapshot (YAML)", sizing_mode="stretch_width")
        self.range_note = pn.pane.HTML("", sizing_mode="stretch_width")
        controls = pn.Column(
            self.base_info, pn.Row(self.pin_btn, self.reset_btn),
            pn.pane.HTML("<b>Queue</b>"), self.queue, self.quota, self.limit, self.no_limit, self.weight,
            self.priority, self.range_note,
            pn.pane.HTML("<b>Nodes</b>"), self.pool, self.nodes,
            pn.pane.HTML("<b>Placement</b> (GPU strategy, GPU device order)"), self.placement,
            pn.pane.HTML('<div style="margin-bottom:-6px">GPU device order</div>'), self.order,
            self.replace, pn.pane.HTML(f'<div class="kd-muted" style="font-size:12px">{PLACEMENT_NOTE}</div>'),
            pn.pane.HTML("<b>Fair share and demand</b>"), self.k_value, self.demand,
            self.download, width=CONTROLS_WIDTH)
        self.changes = pn.pane.HTML("", sizing_mode="stretch_width")
        self.outcome = pn.pane.HTML("", sizing_mode="stretch_width")
        self.summary = table(pd.DataFrame(columns=["metric", "before", "after", "delta"]), height=None,
                             titles={"delta": "Δ"}, name="whatif-summary", widths={"metric": 360},
                             layout="fit_columns",
                             text_align={"before": "right", "after": "right", "delta": "right"},
                             empty="No result: see the message above")
        self.queues = table(pd.DataFrame(columns=WhatIfModel.QUEUE_DIFF_COLUMNS), height=None, name="whatif-queues",
                            titles=QUEUE_TITLES, groups=GROUPS, frozen_columns=["queue"], layout="fit_columns",
                            widths=QUEUE_WIDTHS,
                            configuration={"columnDefaults": {"headerWordWrap": True, "minWidth": 42,
                                                              "tooltip": True, "headerSort": False}},
                            formatters=number_formatters(["fair_share_before", "fair_share_after",
                                                          "fair_share_delta"]),
                            empty="No result: see the message above")
        self.bars = GroupedBars({"before": "#9ca3af", "after": "#56b4e9"}, "GPU fair share", height=260)
        self.jobs = table(pd.DataFrame(columns=["job", "queue", "before", "after", "explanation"]), height=220,
                          name="whatif-jobs",
                          empty="No job changes outcome")
        self.status = pn.pane.HTML("", sizing_mode="stretch_width")
        self.card_summary = pn.Card(self.summary, title=CARD_TITLES[0], sizing_mode="stretch_width",
                                    collapsible=False)
        self.card_queues = pn.Card(self.queues, title=CARD_TITLES[1], sizing_mode="stretch_width",
                                   collapsible=False)
        self.card_bars = pn.Card(pn.pane.Bokeh(self.bars.fig, sizing_mode="stretch_width"), title=CARD_TITLES[2],
                                 sizing_mode="stretch_width", collapsible=False)
        self.card_jobs = pn.Card(self.jobs, title=CARD_TITLES[3], sizing_mode="stretch_width", collapsible=False)
        self.cards = pn.Column(self.card_summary, self.card_queues, self.card_bars, self.card_jobs,
                               sizing_mode="stretch_width", margin=0)
        self.result = result = pn.Column(self.changes, self.status, self.outcome, self.cards,
                                         sizing_mode="stretch_width")
        self._ticker = None
        self._loading = False
        self._session_hooked = False
        self._pending_lock = threading.Lock()
        self._pending: WhatIfUpdate | None = None
        self._drain_scheduled = False
        self._load_sliders()
        return pn.Row(controls, result, sizing_mode="stretch_width")

    def _slider(self, name: str, label: str, start: float, end: float, step: float) -> pn.widgets.FloatSlider:
        value = float(getattr(self.model, name))
        w = pn.widgets.FloatSlider(**widget_args(label=label), start=start, end=max(end, value), step=step,
                                   value=min(max(value, start), max(end, value)), sizing_mode="stretch_width")
        self._on_release(w, name)
        return w

    def _on_release(self, w: pn.widgets.Widget, name: str, cast=float) -> None:
        """Set the model's ``name`` (and re-run) when the slider ``w`` is released.

        The browser sends ``value_throttled`` on release only when it differs from the last one it sent; after
        Pin or Reset moved the slider back, releasing it where it was last released sends only the ``value``
        it slid to. A slid-to value equal to the last release is therefore taken as that release (a drag that
        merely passes it re-runs once more; the release that follows supersedes that run)."""
        w.param.watch(lambda e: self._set(name, cast(e.new)), "value_throttled")
        w.param.watch(lambda e: self._set(name, cast(e.new)) if e.new == w.value_throttled else None, "value")

    # ---------------------------------------------------------------------------------------- events

    def _set(self, name: str, value) -> None:
        if self._loading:               # widgets following the model, not the user
            return
        if getattr(self.model, name) != value:
            setattr(self.model, name, value)
            self._rerun()

    def _set_unlimited(self, unlimited: bool) -> None:
        self.limit.visible = not unlimited
        if unlimited:
            self._set("limit", -1.0)
        elif self.model.limit == -1:
            self._set("limit", float(self.limit.value))

    def _pin(self) -> None:
        self.model.pin()
        self._load_sliders()
        self._rerun()

    def _reset(self) -> None:
        self.model.reset()
        self._load_sliders()
        self._rerun()

    def _load_sliders(self) -> None:
        """Slider ranges from the pinned cluster (0 … its GPUs), values from the selected queue and pool.

        Setting the widgets here does not count as the user's edits (``_set`` ignores them meanwhile)."""
        self._loading = True
        try:
            self._load_slider_values()
        finally:
            self._loading = False

    def _load_slider_values(self) -> None:
        m = self.model
        total = max(1.0, m.cluster_gpus())
        for w, name in ((self.quota, "quota"), (self.limit, "limit")):
            v = float(getattr(m, name))
            w.end = max(total, v)
            if v >= 0:
                w.value = v
        unlimited = m.limit == -1
        self.no_limit.value = unlimited
        self.limit.visible = not unlimited
        self.weight.value = float(m.over_quota_weight)
        self.priority.value = int(m.priority)
        snap = m.pinned
        if snap is not None and m.pool is not None:
            in_pool = sum(1 for n in snap.nodes if n.pool == m.pool)
            self.nodes.start = -in_pool
            self.nodes.end = max(16, in_pool)
        self.nodes.value = int(m.node_delta)
        kv = m.k_value if m.k_value is not None else (snap.config.k_value if snap is not None else 1.0)
        self.k_value.value = float(kv)
        self.demand.value = float(m.demand_scale)
        self.range_note.object = (f'<div class="kd-muted" style="font-size:12px">GPU sliders run from 0 to the '
                                  f'cluster\'s {display.gpus(total)} GPUs (a quota or limit above that changes '
                                  f'nothing).</div>')

    def _rerun(self) -> None:
        """Re-run for the current edits: on this model's worker thread when served (the page shows progress and
        each cycle's interim diff; a newer move supersedes this one), else here (a notebook, a test)."""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            self.model.run()
            self._render()
            return
        if not self._session_hooked:
            self._session_hooked = True
            doc.on_session_destroyed(lambda ctx: self.model.cancel())
        self.model.submit(partial(self._notify, doc))
        self._render()
        if self.model.running:
            self._start_ticker()

    def _notify(self, doc, update: WhatIfUpdate) -> None:
        # worker thread: the document may only be touched from its event loop. One drain callback at a time
        # takes the newest update: a slow page skips interim diffs instead of queueing them behind each other.
        with self._pending_lock:
            self._pending = update
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            doc.add_next_tick_callback(partial(self._drain, doc))
        except Exception:
            with self._pending_lock:
                self._drain_scheduled = False
            raise

    def _drain(self, doc) -> None:
        with self._pending_lock:
            update, self._pending, self._drain_scheduled = self._pending, None, False
        if update is None:
            return
        with set_curdoc(doc):
            if self.model.accept(update):
                self._render()
            if not self.model.running:
                self._stop_ticker()

    def _start_ticker(self) -> None:
        if self._ticker is None:
            # background: the line itself shows the work, the header's busy spinner need not blink with it
            self._ticker = PeriodicCallback(callback=self._tick_progress, period=PROGRESS_MS, background=True)
            self._ticker.start()

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def _tick_progress(self) -> None:
        if self.model.running:
            self.status.object = self._status_html()
        else:
            self._stop_ticker()

    def _modified_yaml(self):
        return io.StringIO(self.model.modified_snapshot_text("yaml"))

    # ---------------------------------------------------------------------------------------- render

    def fold(self):
        # first screen: the controls and the before | after tables; the fair-share chart and job changes below
        return [(self.cards, 2)]

    def _update(self):
        # The what-if works on its pinned base: new live ticks do not move it (press "Pin latest live state").
        if self.model.diff is None and not self.model.error and not self.model.running:
            self._rerun()

    def refresh(self, force: bool = False) -> bool:
        self.model.sync()
        if force or (self.model.diff is None and not self.model.error):
            self._update()
        return False

    def _render(self) -> None:
        m = self.model
        self.base_info.object = (f'<div class="kd-muted">Base: {html.escape(m.base_label)}. Your what-if only: '
                                 f'nobody else sees these edits.</div>')
        self.status.object = self._status_html()
        self.cards.styles = DIMMED if (m.phase == COMPUTING and m.diff is not None) else {"opacity": "1"}
        if m.error or (m.diff is None and not m.running):
            self.changes.object = (f'<div class="kd-banner" data-whatif="error">The what-if could not run: '
                                   f'{html.escape(m.error or "no result")}. Nothing below is a result; change the '
                                   f'input or press Reset edits.</div>')
            self.outcome.object = ""
            self._show(pd.DataFrame(columns=["metric", "before", "after"]), m.queue_diff(), m.job_changes())
            return
        described = (m.requested if m.requested is not None else m.diff.overrides).describe()
        what = "; ".join(html.escape(x) for x in described) if described else "no change (before = after)"
        self.changes.object = (f'<div class="kd-explain"><b>What-if:</b> <span data-whatif="overrides">{what}</span>'
                               f'</div>')
        why = m.nothing_started() if m.phase == STEADY else None     # "starts nothing" only once settled
        self.outcome.object = (f'<div class="kd-note" data-whatif="nothing">{html.escape(why)}</div>' if why else "")
        if m.diff is None or m.phase == COMPUTING:
            return                      # the previous result stays (dimmed) until this run's first cycle lands
        self._show(m.summary(), m.queue_diff(), m.job_changes(), interim=m.phase == INTERIM)

    def _status_html(self) -> str:
        """The run's state in one line, with a ``data-whatif`` marker: computing, interim or steady."""
        m = self.model
        if m.phase not in _STATUS_STYLE:
            return ""
        if m.phase == COMPUTING:
            first = (f"cycle {m.cycle + 1} of the base (the pinned state as it is; once per pin)"
                     if m.side == "base" else "cycle 1")
            shown = (" The tables below still show the previous what-if (dimmed) until cycle 1 lands."
                     if m.diff is not None else "")
            text = (f'<b>Computing…</b> {first}, {m.elapsed_ms():,.0f} ms so far.'
                    f'<span class="kd-muted">{shown}</span>')
        elif m.phase == INTERIM:
            text = (f'<b>Interim: cycle {m.cycle} of up to {m.cycles}, still settling</b> · '
                    f'{m.elapsed_ms():,.0f} ms so far. The after column can still change; the final result '
                    f'replaces it.')
        else:
            how = "from this pin's cache (computed before)" if m.cached else "computed now"
            if m.diff is not None and m.diff.overrides.is_empty():
                how = "no edits yet: the pinned state itself, so before = after · " + how
            text = (f'<b>Steady state after {m.cycle} cycle{"s" if m.cycle != 1 else ""} in {m.run_ms:,.0f} ms</b>'
                    f' <span class="kd-muted">· {how}</span>')
        now = m.activity()   # while computing: the long part of a heavy cycle, which preemptor's victims
        if now:
            text += f'<div class="kd-muted" data-whatif="activity">Now: {html.escape(now)}</div>'
        return (f'<div data-whatif="{m.phase}" role="status" style="padding:6px 12px;border-radius:4px;'
                f'{_STATUS_STYLE[m.phase]}">{text}</div>')

    def _show(self, summary: pd.DataFrame, queues: pd.DataFrame, jobs: pd.DataFrame, interim: bool = False) -> None:
        titles = [t.format(n=self.model.cycle) for t in INTERIM_TITLES] if interim else CARD_TITLES
        for card, title in zip((self.card_summary, self.card_queues, self.card_bars, self.card_jobs), titles):
            card.title = title
        update_table(self.summary, summary_rows(summary, interim))
        update_table(self.queues, keyed(queues, "queue"))
        self.bars.update(list(queues["queue"]), {"before": list(queues["fair_share_before"]),
                                                 "after": list(queues["fair_share_after"])})
        update_table(self.jobs, keyed(jobs, "job"))


__all__ = ["WhatIfView", "summary_rows"]
