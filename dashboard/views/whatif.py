"""What-if: sliders and selectors over a pinned snapshot (live or a saved file); the engine re-runs to steady
state as they move (throttled: on release) and the diff shows before and after side by side."""

from __future__ import annotations

import html
import io

import pandas as pd
import panel as pn

from ..models import WhatIfModel
from .base import View
from .common import fmt, number_formatters, table
from .plots import grouped_bars

SUMMARY_LABELS = {"gpu_total": "GPUs", "gpu_allocated": "GPUs allocated", "gpu_utilisation": "GPU utilisation",
                  "cycles_run": "cycles to steady state", "jobs_started": "jobs started", "jobs_pending": "jobs pending",
                  "tasks_evicted": "tasks evicted", "idle_gpus": "idle GPUs", "free_on_shared_gpus": "free on shared GPUs",
                  "shared_free_fraction": "free fraction of shared GPUs", "nodes_unable_to_host":
                  "nodes unable to host the common shape", "largest_free_block": "largest free block (GPUs)"}


def fair_share_bars(df: pd.DataFrame):
    """Fair share per queue, before (grey) and after (blue)."""
    return grouped_bars(list(df["queue"]), {"before": list(df["fair_share_before"]),
                                            "after": list(df["fair_share_after"])},
                        {"before": "#8c8c8c", "after": "#4e79a7"}, "GPU fair share", height=260)


class WhatIfView(View):
    """Controls on the left; before/after diff on the right."""

    model_class = WhatIfModel
    title = "What-if"

    def _build(self):
        m = self.model
        self.base_info = pn.pane.HTML("", sizing_mode="stretch_width")
        self.pin_btn = pn.widgets.Button(name="Pin latest live state", button_type="primary", button_style="outline")
        self.pin_btn.on_click(lambda e: self._pin())
        self.reset_btn = pn.widgets.Button(name="Reset edits", button_type="warning", button_style="outline")
        self.reset_btn.on_click(lambda e: self._reset())
        self.queue = pn.widgets.Select.from_param(m.param.queue, name="Queue")
        self.quota = self._slider("quota", "GPU quota (deserved)", 0, 64, 0.5)
        self.limit = self._slider("limit", "GPU limit (-1 = unlimited)", -1, 128, 0.5)
        self.weight = self._slider("over_quota_weight", "Over-quota weight", 0, 10, 0.5)
        self.priority = pn.widgets.IntInput(name="Queue priority", value=m.priority, step=10, width=140)
        self.priority.param.watch(lambda e: self._set("priority", int(e.new)), "value")
        self.pool = pn.widgets.Select.from_param(m.param.pool, name="Node pool")
        self.nodes = pn.widgets.IntSlider(name="Nodes added (+) / removed (-)", start=-16, end=16, value=0,
                                          sizing_mode="stretch_width")
        self.nodes.param.watch(lambda e: self._set("node_delta", int(e.new)), "value_throttled")
        self.placement = pn.widgets.RadioButtonGroup.from_param(m.param.placement_gpu, button_type="primary",
                                                                button_style="outline")
        self.order = pn.widgets.RadioButtonGroup.from_param(m.param.gpu_device_order, button_type="primary",
                                                            button_style="outline")
        self.k_value = pn.widgets.FloatSlider(name="k-value (time-based fair share)", start=0, end=10, step=0.1,
                                              value=1.0, sizing_mode="stretch_width")
        self.k_value.param.watch(lambda e: self._set("k_value", float(e.new)), "value_throttled")
        self.demand = pn.widgets.FloatSlider(name="Pending demand ×", start=0, end=4, step=0.25, value=1.0,
                                             sizing_mode="stretch_width")
        self.demand.param.watch(lambda e: self._set("demand_scale", float(e.new)), "value_throttled")
        m.param.watch(lambda e: self._rerun(), ["placement_gpu", "gpu_device_order"])
        m.param.watch(lambda e: self._load_sliders(), ["queue", "pool"])
        self.download = pn.widgets.FileDownload(callback=self._modified_yaml, filename="whatif-snapshot.yaml",
                                                label="Save what-if as snapshot (YAML)", button_type="success",
                                                button_style="outline", sizing_mode="stretch_width")
        controls = pn.Column(
            self.base_info, pn.Row(self.pin_btn, self.reset_btn),
            pn.pane.HTML("<b>Queue</b>"), self.queue, self.quota, self.limit, self.weight, self.priority,
            pn.pane.HTML("<b>Nodes</b>"), self.pool, self.nodes,
            pn.pane.HTML("<b>Placement</b> (GPU strategy, GPU device order)"), self.placement,
            pn.pane.HTML("<small><i>fragaware</i>: what if KAI placed fragmentation-aware? kaidash's policy "
                         "(not KAI): FGD's node choice, fractions paired by the GPU they would strand "
                         "(docs/placement-quality.md)</small>", styles={"color": "#b0b0b0"}), self.order,
            pn.pane.HTML("<b>Fair share and demand</b>"), self.k_value, self.demand,
            self.download, width=360)
        self.changes = pn.pane.HTML("", sizing_mode="stretch_width")
        self.summary = table(pd.DataFrame(columns=["metric", "before", "after"]), height=None, layout="fit_columns",
                             formatters=number_formatters(["before", "after"], 3), name="whatif-summary")
        self.queues = table(pd.DataFrame(), height=None, name="whatif-queues", layout="fit_columns",
                            formatters=number_formatters(["fair_share_before", "fair_share_after", "fair_share_delta"]),
                            titles={"fair_share_before": "fair share before", "fair_share_after": "fair share after",
                                    "fair_share_delta": "Δ fair share", "started_before": "started before",
                                    "started_after": "started after", "evicted_before": "evicted before",
                                    "evicted_after": "evicted after", "pending_before": "pending before",
                                    "pending_after": "pending after"})
        self.bars = pn.pane.Bokeh(None, sizing_mode="stretch_width", min_height=260)
        self.jobs = table(pd.DataFrame(columns=["job", "queue", "before", "after", "explanation"]), height=220)
        result = pn.Column(self.changes,
                           pn.Row(pn.Card(self.summary, title="Cluster: before → after", width=480,
                                          collapsible=False),
                                  pn.Card(self.bars, title="GPU fair share per queue", sizing_mode="stretch_width",
                                          collapsible=False), sizing_mode="stretch_width"),
                           pn.Card(self.queues, title="Per queue: fair share and jobs started / evicted / pending",
                                   sizing_mode="stretch_width", collapsible=False),
                           pn.Card(self.jobs, title="Jobs whose outcome changes", sizing_mode="stretch_width",
                                   collapsible=False),
                           sizing_mode="stretch_width")
        self._load_sliders()
        return pn.Row(controls, result, sizing_mode="stretch_width")

    def _slider(self, name: str, label: str, start: float, end: float, step: float) -> pn.widgets.FloatSlider:
        w = pn.widgets.FloatSlider(name=label, start=start, end=end, step=step, value=float(getattr(self.model, name)),
                                   sizing_mode="stretch_width")
        w.param.watch(lambda e: self._set(name, float(e.new)), "value_throttled")
        return w

    # ---------------------------------------------------------------------------------------- events

    def _set(self, name: str, value) -> None:
        if getattr(self.model, name) != value:
            setattr(self.model, name, value)
            self._rerun()

    def _pin(self) -> None:
        self.model.pin()
        self._load_sliders()
        self._rerun()

    def _reset(self) -> None:
        self.model.reset()
        self._load_sliders()
        self._rerun()

    def _load_sliders(self) -> None:
        m = self.model
        for w, name in ((self.quota, "quota"), (self.limit, "limit"), (self.weight, "over_quota_weight")):
            v = float(getattr(m, name))
            if v > w.end:
                w.end = max(v * 2, w.end)
            w.value = v
        self.priority.value = int(m.priority)
        self.nodes.value = int(m.node_delta)
        snap = m.pinned
        if snap is not None and m.pool is not None:
            in_pool = sum(1 for n in snap.nodes if n.pool == m.pool)
            self.nodes.start = -in_pool
            self.nodes.end = max(16, in_pool)
        kv = m.k_value if m.k_value is not None else (snap.config.k_value if snap is not None else 1.0)
        self.k_value.value = float(kv)
        self.demand.value = float(m.demand_scale)

    def _rerun(self) -> None:
        self.model.run()
        self._render()

    def _modified_yaml(self):
        return io.StringIO(self.model.modified_snapshot_text("yaml"))

    # ---------------------------------------------------------------------------------------- render

    def _update(self):
        # The what-if works on its pinned base: new live ticks do not move it (press "Pin latest live state").
        if self.model.diff is None:
            self._rerun()

    def refresh(self, force: bool = False) -> bool:
        self.model.sync()
        if force or self.model.diff is None:
            self._update()
        return False

    def _render(self) -> None:
        m = self.model
        self.base_info.object = f'<div class="kd-muted">Base: {html.escape(m.base_label)}</div>'
        if m.error:
            self.changes.object = f'<div class="kd-banner">{html.escape(m.error)}</div>'
            return
        described = m.diff.overrides.describe() if m.diff is not None else []
        what = "; ".join(html.escape(x) for x in described) if described else "no change (before = after)"
        self.changes.object = (f'<div class="kd-explain"><b>What-if:</b> <span data-whatif="overrides">{what}</span>'
                               f' <span class="kd-muted">· re-run to steady state in {m.run_ms:,.0f} ms</span></div>')
        s = m.summary()
        s["metric"] = s["metric"].map(lambda k: SUMMARY_LABELS.get(k, k))
        self.summary.value = s
        q = m.queue_diff()
        self.queues.value = q
        self.bars.object = fair_share_bars(q)
        self.jobs.value = m.job_changes()


__all__ = ["WhatIfView", "fmt"]
