"""View models: one ``param.Parameterized`` per view, over a :class:`~dashboard.state.LiveState`.

No Panel import. A model holds a view's selection and filters and turns the tick it renders into frames
(through :mod:`dashboard.frames`); the Panel views in :mod:`dashboard.views` only draw them. Each model
renders the tick it last ``sync()``-ed, so a session decides when to pick up a new tick (the active view,
every period) and the loop thread never touches a session.

Frames derived from a tick are cached per tick in the process (:func:`per_tick`): ten sessions on the
same view cost one computation per tick.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, Callable, Optional

import pandas as pd
import param

from scheduler.model import RESOURCES
from scheduler.overlay import OVERLAY_COLUMNS, session_overlay
from scheduler.placement import NODE_STRATEGIES
from scheduler.waits import QUEUE_STATUS_COLUMNS

from . import display, frames
from .insight import with_eta
from .state import LiveState, Tick, gpu_tables, tick_allocations
from .whatif_jobs import COMPUTING, ERROR, INTERIM, STEADY, LatestWins, ResultCache, WhatIfUpdate, overrides_key

VIEWS = ("overview", "queues", "gpus", "pending", "whatif", "timeline", "snapshot", "settings")
VIEW_TITLES = {"overview": "Overview", "queues": "Queues", "gpus": "GPUs", "pending": "Pending",
               "whatif": "What-if", "timeline": "Timeline", "snapshot": "Snapshot", "settings": "Settings"}

_CACHE: "OrderedDict[tuple, Any]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_ITEMS = 64


def per_tick(tick: Optional[Tick], name: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` computed once per (tick, name) in this process; a few recent ticks are kept."""
    if tick is None:
        return fn()
    key = (id(tick), tick.index, name)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    value = fn()
    with _CACHE_LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_ITEMS:
            _CACHE.popitem(last=False)
    return value


class Selection(param.Parameterized):
    """What the URL carries so an on-call engineer can share a link: the view and what is selected."""

    view = param.Selector(default="overview", objects=list(VIEWS))
    queue = param.String(default="", doc="selected queue (queues view, filters)")
    node = param.String(default="", doc="selected node (GPUs view)")
    job = param.String(default="", doc="selected job (pending view)")

    URL_PARAMS = ("view", "queue", "node", "job")

    def to_query(self) -> dict[str, str]:
        """The non-default selection as URL query parameters."""
        return {p: getattr(self, p) for p in self.URL_PARAMS if getattr(self, p) != self.param[p].default}

    def update_from_query(self, query: dict[str, str]) -> None:
        """Apply URL query parameters (unknown views are ignored rather than failing the page)."""
        values = {k: v for k, v in query.items() if k in self.URL_PARAMS}
        if values.get("view") not in VIEWS:
            values.pop("view", None)
        self.param.update(**values)


class ViewModel(param.Parameterized):
    """Base: the live state, the tick being rendered, and the shared selection."""

    state = param.ClassSelector(class_=LiveState, doc="the live state the loop publishes")
    tick = param.Parameter(default=None, doc="the Tick this model renders")
    selection = param.ClassSelector(class_=Selection)

    def __init__(self, state: LiveState, selection: Optional[Selection] = None, **params):
        super().__init__(state=state, selection=selection or Selection(), **params)
        self.tick = state.tick

    def sync(self) -> bool:
        """Pick up the latest published tick; True when it changed (views then re-render)."""
        latest = self.state.tick
        if latest is not self.tick:
            self.tick = latest
            return True
        return False

    @property
    def snapshot(self):
        return self.tick.scheduled if self.tick is not None else None

    @property
    def observed(self):
        """The cluster as the source observed it (the session's input): what counts, pending and allocated
        figures are computed from; the engine's decisions over it are predictions (``next_cycle``)."""
        return self.tick.snapshot if self.tick is not None else None

    @property
    def result(self):
        return self.tick.result if self.tick is not None else None

    def _cached(self, name: str, fn: Callable[[], Any]) -> Any:
        return per_tick(self.tick, name, fn)


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


# ------------------------------------------------------------------------------------------------ overview

class OverviewModel(ViewModel):
    """Cluster totals, top alerts and loop health."""

    def numbers(self) -> dict:
        if self.tick is None:
            return {}
        return self._cached("overview", lambda: frames.overview_numbers(self.observed, self.result,
                                                                        gpu_table(self.tick)))

    def queue_table(self) -> pd.DataFrame:
        return queue_table(self.tick, "gpu")

    def alerts(self) -> list[dict]:
        out = []
        if self.state.error:
            out.append({"severity": 2, "kind": "source", "subject": self.state.source_kind,
                        "text": f"data stale: {self.state.error}"})
        if self.tick is None:
            return out
        return out + frames.alerts(queue_table(self.tick, "gpu"), pending_table(self.tick), self.numbers())

    def health(self) -> dict:
        return self.state.health()

    def waits_and_cost(self) -> dict:
        """:func:`scheduler.waits.cluster_overview` of the tick ({} before it has waits, ETA and cost)."""
        ins = self.tick.insight if self.tick is not None else None
        return ins.overview(self.observed) if ins is not None else {}


def queue_table(tick: Optional[Tick], resource: str = "gpu") -> pd.DataFrame:
    """The queue frame of a tick (cached per tick): allocated and job counts as observed, the engine's
    after-cycle allocation in ``allocated_next``."""
    if tick is None:
        return _empty(frames.QUEUE_COLUMNS)
    return per_tick(tick, f"queues:{resource}",
                    lambda: frames.queue_frame(tick.snapshot, tick.result, resource, tick_allocations(tick)))


def pending_table(tick: Optional[Tick]) -> pd.DataFrame:
    """Jobs waiting in the observed cluster (cached per tick), with their ETA; a job the engine binds this cycle
    stays listed (the cluster has not run it yet) and its expected start says so."""
    if tick is None:
        return with_eta(_empty(frames.PENDING_COLUMNS), None)
    return per_tick(tick, "pending", lambda: with_prediction(with_eta(
        frames.pending_frame(tick.snapshot, tick.result, tick.explanations,
                            allocated=tick_allocations(tick)[0]), tick.insight)))


def predicts_start(next_cycle: Any) -> bool:
    """Whether a ``next_cycle`` text (:func:`dashboard.frames.next_cycle`) has the engine bind or pipeline (some
    of) the job's pods this cycle."""
    return isinstance(next_cycle, str) and next_cycle.startswith(("KAI would bind", "KAI would pipeline"))


def starts_this_cycle(pending: pd.DataFrame) -> pd.Series:
    """Rows of :func:`pending_table` whose job the engine binds or pipelines (some of its pods) this cycle."""
    return pending["next_cycle"].map(predicts_start).astype(bool)


def with_prediction(pending: pd.DataFrame) -> pd.DataFrame:
    """The expected start of a job the engine binds or pipelines this cycle is that decision (the forward ETA
    runs from the state after it, where the job no longer waits)."""
    predicted = starts_this_cycle(pending)
    if predicted.any():
        pending = pending.copy()
        pending.loc[predicted, "eta"] = pending.loc[predicted, "next_cycle"]
        pending.loc[predicted, "eta_p50_s"] = 0.0
    return pending


def slices_table(tick: Optional[Tick]) -> pd.DataFrame:
    if tick is None:
        return _empty(frames.SLICE_COLUMNS)
    # the observed cluster (gpu_tables): the session's placements are an overlay (overlay_table), never holders
    return gpu_tables(tick)["slices"]


def gpu_table(tick: Optional[Tick]) -> pd.DataFrame:
    if tick is None:
        return _empty(frames.GPU_COLUMNS)
    return gpu_tables(tick)["gpus"]


def overlay_table(tick: Optional[Tick]) -> pd.DataFrame:
    """The engine's next-cycle decisions over the observed cluster ("KAI would bind ..."), cached per tick."""
    if tick is None or tick.result is None:
        return _empty(OVERLAY_COLUMNS)
    return per_tick(tick, "overlay", lambda: session_overlay(tick.snapshot, tick.result))


def jobs_table(tick: Optional[Tick]) -> pd.DataFrame:
    if tick is None:
        return _empty(frames.JOB_COLUMNS)
    return per_tick(tick, "jobs", lambda: frames.jobs_frame(tick.snapshot, tick.result))


# -------------------------------------------------------------------------------------------------- queues

class QueuesModel(ViewModel):
    """The queue hierarchy with the deserved → fair share → allocated → requested chain per queue."""

    resource = param.Selector(default="gpu", objects=list(RESOURCES))
    only_active = param.Boolean(default=False, doc="hide queues with nothing requested")

    def frame(self) -> pd.DataFrame:
        df = queue_table(self.tick, self.resource)
        if self.only_active and len(df):
            df = df[(df["requested"] > 0) | (df["allocated"] > 0)]
        return df

    def status(self) -> pd.DataFrame:
        """Per leaf queue: depth, waits (started jobs, estimated), gangs, evictions and waste cost
        (:func:`scheduler.waits.queue_status`); empty before the first tick."""
        ins = self.tick.insight if self.tick is not None else None
        if ins is None:
            return _empty(QUEUE_STATUS_COLUMNS)
        return ins.queue_status(self.observed)

    def currency(self) -> str:
        ins = self.tick.insight if self.tick is not None else None
        return ins.costs.currency if ins is not None and ins.costs is not None else "USD"

    def descendants(self, queue: str) -> list[str]:
        """The queue and every queue below it."""
        snap = self.snapshot
        if snap is None:
            return []
        children = snap.children()
        out, todo = [], [queue]
        while todo:
            q = todo.pop()
            if q in out:
                continue
            out.append(q)
            todo.extend(c.name for c in children.get(q, []))
        return out

    def jobs(self, queue: Optional[str] = None) -> pd.DataFrame:
        """Jobs of the selected queue's subtree (all jobs when none is selected)."""
        queue = self.selection.queue if queue is None else queue
        df = jobs_table(self.tick)
        if queue:
            df = df[df["queue"].isin(self.descendants(queue))]
        return df.reset_index(drop=True)

    def history(self, queue: Optional[str] = None) -> pd.DataFrame:
        """The selected queue's allocated / fair share / deserved / requested over time."""
        queue = self.selection.queue if queue is None else queue
        df = self.state.history.queues_frame()
        return df[df["queue"] == queue].reset_index(drop=True) if queue else df.iloc[0:0]


# ---------------------------------------------------------------------------------------------------- GPUs

class GpusModel(ViewModel):
    """The node × GPU grid: slices per device, filters, pages for large clusters."""

    colour_by = param.Selector(default="queue", objects=["queue", "utilisation", "memory"],
                               doc="queue: who holds it; utilisation: DCGM GPU util; memory: used / share")
    pool = param.String(default="", doc="only nodes of this pool")
    gpu_model = param.String(default="", doc="only nodes with this GPU model")
    queue = param.String(default="", doc="only nodes holding a slice of this queue")
    flagged_only = param.Boolean(default=False, doc="only nodes with an idle allocation or an over-share pod")
    page = param.Integer(default=0, bounds=(0, None))
    page_size = param.Integer(default=128, bounds=(8, 2000))
    group_by = param.String(default="", doc="a topology level (alias or node label) to group nodes by; empty: none")

    def group_levels(self) -> list[str]:
        """Topology levels the nodes can be grouped by (empty without a Topology in the snapshot)."""
        return frames.topology_levels(self.snapshot) if self.snapshot else []

    def node_domains(self) -> dict[str, str]:
        """Node → its domain at :attr:`group_by` (empty when not grouping)."""
        if not self.group_by or self.snapshot is None:
            return {}
        return frames.node_domains(self.snapshot, self.group_by)

    def domains(self) -> pd.DataFrame:
        """The :attr:`group_by` level's domains: nodes, GPUs, free whole GPUs."""
        if not self.group_by or self.snapshot is None:
            return pd.DataFrame(columns=frames.TOPOLOGY_COLUMNS)
        return frames.domain_frame(self.snapshot, self.gpus(), self.group_by)

    def pending_gangs(self) -> pd.DataFrame:
        """Pending topology-constrained gangs and the domain of their required level with the most free GPUs."""
        if self.snapshot is None:
            return pd.DataFrame(columns=frames.GANG_COLUMNS)
        return frames.gang_domains(self.snapshot, self.gpus())

    def mig_instances(self, nodes: list[str]) -> pd.DataFrame:
        """MIG instances of ``nodes`` and the grid cells they span."""
        if self.snapshot is None:
            return pd.DataFrame(columns=frames.MIG_COLUMNS)
        return frames.mig_frame(self.snapshot, nodes)

    def pools(self) -> list[str]:
        snap = self.snapshot
        return sorted({n.pool for n in snap.nodes if n.gpus}) if snap else []

    def models(self) -> list[str]:
        snap = self.snapshot
        return sorted({n.gpu_model for n in snap.nodes if n.gpus and n.gpu_model}) if snap else []

    def queues(self) -> list[str]:
        snap = self.snapshot
        return sorted(q.name for q in snap.leaf_queues()) if snap else []

    def gpus(self) -> pd.DataFrame:
        return gpu_table(self.tick)

    def slices(self) -> pd.DataFrame:
        return slices_table(self.tick)

    def overlay(self) -> pd.DataFrame:
        """What KAI would do next cycle (bind, pipeline, evict): a layer apart from the observed slices."""
        return overlay_table(self.tick)

    def selected_nodes(self) -> list[str]:
        """Node names passing the filters, in snapshot order (all pages)."""
        snap = self.snapshot
        if snap is None:
            return []
        nodes = [n for n in snap.nodes if n.gpus > 0]
        if self.pool:
            nodes = [n for n in nodes if n.pool == self.pool]
        if self.gpu_model:
            nodes = [n for n in nodes if n.gpu_model == self.gpu_model]
        names = [n.name for n in nodes]
        if self.queue:
            sl = self.slices()
            holding = set(sl.loc[sl["queue"] == self.queue, "node"])
            names = [n for n in names if n in holding]
        if self.flagged_only:
            g = self.gpus()
            flagged = set(g.loc[g["idle_allocated"] | g["over_share"], "node"])
            names = [n for n in names if n in flagged]
        domains = self.node_domains()
        if domains:  # grouped: domain by domain (nodes outside the topology last), snapshot order within one
            names = sorted(names, key=lambda n: (n not in domains, domains.get(n, "")))
        return names

    def pages(self) -> int:
        return max(1, math.ceil(len(self.selected_nodes()) / self.page_size))

    def page_nodes(self) -> list[str]:
        names = self.selected_nodes()
        page = min(self.page, max(0, math.ceil(len(names) / self.page_size) - 1))
        return names[page * self.page_size:(page + 1) * self.page_size]

    def page_frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(GPUs, slices) of the nodes on the current page."""
        nodes = set(self.page_nodes())
        g, s = self.gpus(), self.slices()
        return g[g["node"].isin(nodes)].reset_index(drop=True), s[s["node"].isin(nodes)].reset_index(drop=True)

    def node_summary(self) -> pd.DataFrame:
        """One row per node: GPUs, allocated, utilisation, flags (the aggregate for large clusters)."""
        return self.node_summary_of(self.gpus())

    @staticmethod
    def node_summary_of(g: pd.DataFrame) -> pd.DataFrame:
        """:meth:`node_summary` of some GPUs (e.g. a page of them)."""
        if not len(g):
            return pd.DataFrame(columns=["node", "pool", "gpu_model", "gpus", "allocated", "gpu_util",
                                         "memory_used_mib", "idle_allocated", "over_share"])
        groups = g.groupby(["node", "pool", "gpu_model"], sort=False)
        out = groups.agg(gpus=("gpu_index", "count"), allocated=("allocated", "sum"), gpu_util=("gpu_util", "mean"),
                         idle_allocated=("idle_allocated", "sum"), over_share=("over_share", "sum"))
        out["memory_used_mib"] = groups["memory_used_mib"].sum(min_count=1)
        return out.reset_index()


# ------------------------------------------------------------------------------------------------- pending

STARTS_NOW = "KAI would start this cycle"
"""The Pending summary's key for jobs the engine binds or pipelines this cycle."""


class PendingModel(ViewModel):
    """Every waiting job with its reason, the numbers and a counterfactual."""

    queue = param.String(default="", doc="only jobs of this queue")
    reason = param.String(default="", doc="only jobs with this reason")

    def frame(self) -> pd.DataFrame:
        df = pending_table(self.tick)
        if self.queue:
            df = df[df["queue"] == self.queue]
        if self.reason:
            df = df[df["reason"] == self.reason]
        return df.reset_index(drop=True)

    def reasons(self) -> dict[str, int]:
        """Waiting jobs per KAI reason code; ``(none)`` without one, :data:`STARTS_NOW` for a job the engine binds
        or pipelines this cycle with no reason left (a prediction: it still waits in the cluster)."""
        df = pending_table(self.tick)
        if not len(df):
            return {}
        none = starts_this_cycle(df).map({True: STARTS_NOW, False: "(none)"})
        return df["reason"].where(df["reason"] != "", none).value_counts().to_dict()

    def explanation(self, job: str) -> Any:
        return self.tick.explanations.get(job) if self.tick is not None else None

    def decision(self, job: str) -> Any:
        res = self.result
        return (getattr(res, "jobs", None) or {}).get(job) if res is not None else None


# ------------------------------------------------------------------------------------------------ timeline

class TimelineModel(ViewModel):
    """Allocation per queue, utilisation, pending and wait time over time (the loop's history)."""

    window_s = param.Number(default=0.0, bounds=(0, None), doc="cluster seconds to show (0 = all history)")
    queues = param.ListSelector(default=[], objects=[], doc="queues to plot (empty = leaf queues)")

    def totals(self) -> pd.DataFrame:
        return self._window(self.state.history.totals_frame())

    def per_queue(self) -> pd.DataFrame:
        df = self._window(self.state.history.queues_frame())
        wanted = self.queues or ([q.name for q in self.snapshot.leaf_queues()] if self.snapshot else [])
        return df[df["queue"].isin(wanted)].reset_index(drop=True) if wanted else df

    def _window(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.window_s and len(df):
            df = df[df["time"] >= df["time"].max() - self.window_s]
        df = df.reset_index(drop=True)
        df["at"] = pd.to_datetime(df["time"], unit="s")      # cluster time as a date axis
        return df


# ------------------------------------------------------------------------------------------------- what-if

UNCHANGED = "(unchanged)"


class WhatIfModel(ViewModel):
    """Overrides on a pinned snapshot (the live state when pinned, or a loaded file) and the engine's diff.

    Queue sliders edit the queue named by ``queue``; edits of several queues accumulate in ``queue_edits``.
    :meth:`overrides` is the :class:`scheduler.whatif.WhatIf` mapping; :meth:`run` returns the
    ``WhatIfDiff`` (the base side is computed once per pinned snapshot). :meth:`submit` runs it on a worker
    thread instead (latest request wins, an interim diff after every cycle, finished diffs cached per override
    set until the next pin; :mod:`dashboard.whatif_jobs`) and :meth:`accept` applies its updates.
    """

    base = param.Selector(default="live", objects=["live", "file"], doc="what the what-if starts from")
    queue = param.Selector(default=None, objects=[], allow_None=True, doc="queue the sliders edit")
    quota = param.Number(default=0.0, bounds=(-1, None), doc="GPU quota (deserved); -1 = unlimited")
    limit = param.Number(default=-1.0, bounds=(-1, None), doc="GPU limit; -1 = unlimited")
    over_quota_weight = param.Number(default=1.0, bounds=(0, None))
    priority = param.Integer(default=100)
    pool = param.Selector(default=None, objects=[], allow_None=True, doc="node pool to grow or shrink")
    node_delta = param.Integer(default=0, bounds=(-512, 512), doc="nodes added (+) or removed (-) in the pool")
    # every registered node strategy: binpack, spread, fragaware ("what if KAI placed fragmentation-aware?")
    placement_gpu = param.Selector(default=UNCHANGED, objects=[UNCHANGED, *NODE_STRATEGIES])
    gpu_device_order = param.Selector(default=UNCHANGED, objects=[UNCHANGED, "pack", "spread"])
    k_value = param.Number(default=None, allow_None=True, bounds=(0, None))
    demand_scale = param.Number(default=1.0, bounds=(0, 4))
    replace_running = param.Boolean(default=False, doc="place running work again too (else only pending jobs "
                                                        "follow a new placement strategy)")
    cycles = param.Integer(default=10, bounds=(1, 50), doc="cycles to reach steady state, at most")
    diff = param.Parameter(default=None, doc="the last WhatIfDiff")
    error = param.String(default="")
    run_ms = param.Number(default=0.0)
    base_label = param.String(default="")
    phase = param.String(default="", doc="'' (nothing run yet), computing, interim, steady or error")
    cycle = param.Integer(default=0, doc="cycles run so far (computing: of the base side; interim: modified)")
    cached = param.Boolean(default=False, doc="the steady-state diff came from this pin's result cache")

    def __init__(self, state: LiveState, selection: Optional[Selection] = None, **params):
        super().__init__(state, selection, **params)
        self.queue_edits: dict[str, dict] = {}
        self.pool_edits: dict[str, int] = {}
        self._pinned = None
        self._file_snapshot = None
        self._runner = None
        self._jobs = LatestWins()
        self._cache = ResultCache(self.CACHE_SIZE)
        self.started_at: Optional[float] = None
        self.requested = None          # the WhatIf of the latest run (shown while it computes)
        self.side = ""                 # the side the latest update's cycle belongs to: base or modified
        self._applied = (0, 0)         # (generation, seq) of the update on screen
        self.pin()

    # ------------------------------------------------------------------------------------ base snapshot

    @property
    def pinned(self):
        """The snapshot the what-if modifies (never the live object: the loop may replace it any time)."""
        return self._pinned

    def pin(self, snapshot=None, label: str = "") -> None:
        """Pin the latest live tick (or ``snapshot``, a loaded file) as the base and forget edits."""
        if snapshot is not None:
            self._file_snapshot, self.base = snapshot, "file"
            self._pinned, self.base_label = snapshot, label or "file"
        elif self.base == "file" and self._file_snapshot is not None:
            self._pinned = self._file_snapshot
        else:
            self.base = "live"
            tick = self.state.tick
            self._pinned = tick.snapshot if tick is not None else None
            self.base_label = (f"live state at tick {tick.number:,} (cluster time {display.clock(tick.cluster_time)})"
                               if tick is not None else "no live state yet")
        self._runner = None
        self._jobs.cancel()                    # a run on the old base must not land on the new one
        self._cache = ResultCache(self.CACHE_SIZE)
        self.queue_edits, self.pool_edits = {}, {}
        snap = self._pinned
        queues = [q.name for q in snap.queues] if snap else []
        pools = sorted({n.pool for n in snap.nodes}) if snap else []
        self.param.queue.objects = queues
        self.param.pool.objects = pools
        with param.parameterized.discard_events(self):
            self.param.update(node_delta=0, placement_gpu=UNCHANGED, gpu_device_order=UNCHANGED, k_value=None,
                              demand_scale=1.0, replace_running=False,
                              queue=(self.selection.queue if self.selection.queue in queues
                                     else (queues[0] if queues else None)),
                              pool=pools[0] if pools else None)
        self._load_queue()
        self.diff = None
        self.phase, self.cycle, self.cached, self.requested = "", 0, False, None

    def _load_queue(self) -> None:
        """Set the queue sliders to the selected queue's current (or edited) values."""
        snap = self._pinned
        if snap is None or self.queue is None:
            return
        q = snap.queue_map()[self.queue]
        values = {"quota": q.gpu.quota, "limit": q.gpu.limit, "over_quota_weight": q.gpu.over_quota_weight,
                  "priority": q.priority}
        values.update(self.queue_edits.get(self.queue, {}))
        with param.parameterized.discard_events(self):
            self.param.update(**values)

    @param.depends("queue", watch=True)
    def _on_queue(self) -> None:
        self._load_queue()

    @param.depends("pool", watch=True)
    def _on_pool(self) -> None:
        with param.parameterized.discard_events(self):
            self.node_delta = self.pool_edits.get(self.pool, 0)

    @param.depends("quota", "limit", "over_quota_weight", "priority", watch=True)
    def _record_queue_edit(self) -> None:
        snap = self._pinned
        if snap is None or self.queue is None:
            return
        q = snap.queue_map()[self.queue]
        current = {"quota": q.gpu.quota, "limit": q.gpu.limit, "over_quota_weight": q.gpu.over_quota_weight,
                   "priority": q.priority}
        edits = {k: getattr(self, k) for k in current if getattr(self, k) != current[k]}
        if edits:
            self.queue_edits[self.queue] = edits
        else:
            self.queue_edits.pop(self.queue, None)

    @param.depends("node_delta", watch=True)
    def _record_pool_edit(self) -> None:
        if self.pool is not None:
            if self.node_delta:
                self.pool_edits[self.pool] = self.node_delta
            else:
                self.pool_edits.pop(self.pool, None)

    # ------------------------------------------------------------------------------------ running

    def overrides(self) -> dict:
        """The :class:`scheduler.whatif.WhatIf` mapping for the current edits."""
        queues = {}
        for name, edits in self.queue_edits.items():
            doc: dict = {}
            if "priority" in edits:
                doc["priority"] = int(edits["priority"])
            gpu = {k: float(edits[k]) for k in ("quota", "limit", "over_quota_weight") if k in edits}
            if gpu:
                doc["gpu"] = gpu
            queues[name] = doc
        out: dict = {}
        if queues:
            out["queues"] = queues
        if self.pool_edits:
            out["nodes"] = dict(self.pool_edits)
        if self.placement_gpu != UNCHANGED:
            out["placement_gpu"] = self.placement_gpu
        if self.gpu_device_order != UNCHANGED:
            out["gpu_device_order"] = self.gpu_device_order
        if self.k_value is not None:
            out["k_value"] = float(self.k_value)
        if self.demand_scale != 1.0:
            out["demand_scale"] = float(self.demand_scale)
        if self.replace_running:
            out["replace_running"] = True
        return out

    CACHE_SIZE = 16
    """Finished diffs kept per override set (per pin): moving a slider back shows its result at once."""

    def _prepare(self):
        """``(runner, WhatIf, cache key)`` for the current edits; raises ``KaidashError`` on bad overrides."""
        from scheduler.whatif import WhatIf, WhatIfRunner

        if self._runner is None:
            self._runner = WhatIfRunner(self._pinned, self.cycles)
        edits = self.overrides()
        self.requested = WhatIf.from_dict(edits)
        return self._runner, self.requested, overrides_key(edits, self.cycles)

    def _ensure_pinned(self) -> bool:
        if self._pinned is None:
            self.pin()
            if self._pinned is None:
                self.error, self.phase = "no snapshot to run a what-if on yet", ERROR
                return False
        return True

    def run(self):
        """Re-run the engine to steady state with the current edits, on this thread; sets ``diff`` (or
        ``error``). Supersedes a background run (:meth:`submit`) and fills the result cache."""
        import time

        from scheduler.errors import KaidashError

        generation = self._jobs.cancel()
        if not self._ensure_pinned():
            return None
        t0 = time.perf_counter()
        try:
            runner, overrides, key = self._prepare()
            with self._jobs.gate.hold("what-if"):
                diff = runner.run(overrides)
        except KaidashError as exc:
            self.accept(WhatIfUpdate(generation, ERROR, error=str(exc)))
            return None
        run_ms = (time.perf_counter() - t0) * 1000
        self._cache.put(key, diff, run_ms)
        self.accept(WhatIfUpdate(generation, STEADY, diff.after.cycles_run, self.cycles, run_ms, diff=diff))
        return diff

    def submit(self, notify: Callable[[WhatIfUpdate], None]) -> Optional[WhatIfUpdate]:
        """Start the what-if for the current edits on this model's worker thread and return at once.

        A newer call supersedes a running one (it stops before its next victim scenario or at its next cycle
        boundary, whichever comes first; nothing it produces later is delivered). ``notify(update)`` is called on
        the worker thread after every cycle and at the end; the
        caller hands each update back to :meth:`accept` on its own thread (an override the snapshot rejects
        arrives as an ``error`` update). Returns the final update, already accepted, when the result is known
        without running (a cached override set, no snapshot); ``None`` while it runs (``phase`` is then
        ``computing``)."""
        import time

        from scheduler.errors import KaidashError

        if not self._ensure_pinned():
            return WhatIfUpdate(self._jobs.cancel(), ERROR, error=self.error)
        try:
            runner, overrides, key = self._prepare()
        except KaidashError as exc:
            update = WhatIfUpdate(self._jobs.cancel(), ERROR, error=str(exc))
            self.accept(update)
            return update
        hit = self._cache.get(key)
        if hit is not None:
            diff, run_ms = hit
            update = WhatIfUpdate(self._jobs.cancel(), STEADY, diff.after.cycles_run, self.cycles, run_ms,
                                  diff=diff, cached=True)
            self.accept(update)
            return update
        self.started_at = time.perf_counter()
        self.phase, self.cycle, self.cached, self.side = COMPUTING, 0, False, ""
        self._jobs.submit(runner, overrides, key, self._cache, notify)
        return None

    def accept(self, update: WhatIfUpdate) -> bool:
        """Apply ``update`` if it belongs to the latest request and is newer than the one shown (on the UI's
        thread); returns whether it did.
        An interim update shows its diff; an error clears the result (no stale tables under a banner)."""
        if not self._jobs.is_current(update.generation) or not update.newer_than(self._applied):
            return False
        self._applied = (update.generation, update.seq)
        self.cycle, self.cached, self.side = update.cycle, update.cached, update.side
        if update.phase == ERROR:
            self.error, self.diff = update.error, None
        elif update.diff is not None:
            self.error, self.diff, self.run_ms = "", update.diff, update.elapsed_ms
        self.phase = update.phase
        return True

    def cancel(self) -> None:
        """Abandon a background run (the session closed)."""
        self._jobs.cancel()

    def wait(self, timeout: float = 30.0) -> bool:
        """Block until the background run finished (notebooks, tests); returns whether it did in time."""
        return self._jobs.wait(timeout)

    @property
    def running(self) -> bool:
        """A background run is waiting or running and its result has not landed yet."""
        return self.phase in (COMPUTING, INTERIM)

    activity_after_ms = 150.0
    """A search is named once it has run this long: most searches end well before the status line's next tick."""

    def activity(self) -> str:
        """While a background run computes, the eviction search its engine has been in for at least
        :attr:`activity_after_ms`, as one line; empty otherwise."""
        if not self.running:
            return ""
        search = self._jobs.activity()
        if search is None or search.elapsed_ms() < self.activity_after_ms:
            return ""
        return search.describe()

    def elapsed_ms(self) -> float:
        """Milliseconds since the latest background run was submitted."""
        import time

        return (time.perf_counter() - self.started_at) * 1000 if self.started_at is not None else 0.0

    def reset(self) -> None:
        """Drop every edit (keep the pinned base)."""
        self.queue_edits, self.pool_edits = {}, {}
        with param.parameterized.discard_events(self):
            self.param.update(node_delta=0, placement_gpu=UNCHANGED, gpu_device_order=UNCHANGED, k_value=None,
                              demand_scale=1.0, replace_running=False)
        self._load_queue()

    # ------------------------------------------------------------------------------------ frames

    def cluster_gpus(self) -> float:
        """GPUs of the pinned cluster: the end of every GPU slider (a quota or limit above it changes nothing)."""
        snap = self._pinned
        return float(sum(n.gpus for n in snap.nodes)) if snap is not None else 0.0

    QUEUE_DIFF_COLUMNS = ["queue", "fair_share_before", "fair_share_after", "fair_share_delta", "started_before",
                          "started_after", "started_delta", "evicted_before", "evicted_after", "evicted_delta",
                          "pending_before", "pending_after", "pending_delta"]

    def queue_diff(self) -> pd.DataFrame:
        """Per queue: GPU fair share and jobs started / evicted / pending, before | after | Δ."""
        cols = self.QUEUE_DIFF_COLUMNS
        if self.diff is None:
            return pd.DataFrame(columns=cols)
        rows = []
        for r in self.diff.queue_rows():
            b, a = r["fair_share_gpu_before"], r["fair_share_gpu_after"]
            row = {"queue": r["queue"], "fair_share_before": b, "fair_share_after": a, "fair_share_delta": a - b}
            for k in ("started", "evicted", "pending"):
                kb, ka = int(r[f"{k}_before"] or 0), int(r[f"{k}_after"] or 0)
                row.update({f"{k}_before": kb, f"{k}_after": ka, f"{k}_delta": ka - kb})
            rows.append(row)
        return pd.DataFrame(rows, columns=cols)

    def summary(self) -> pd.DataFrame:
        """Cluster metrics before → after (utilisation, fragmentation, jobs started / pending, evictions)."""
        if self.diff is None:
            return pd.DataFrame(columns=["metric", "before", "after"])
        rows = []
        for k, (b, a) in self.diff.summary().items():
            if isinstance(b, (int, float)) or isinstance(a, (int, float)):
                rows.append({"metric": k, "before": b, "after": a})
        return pd.DataFrame(rows, columns=["metric", "before", "after"])

    def job_changes(self) -> pd.DataFrame:
        if self.diff is None:
            return pd.DataFrame(columns=["job", "queue", "before", "after"])
        return pd.DataFrame(self.diff.job_changes(), columns=["job", "queue", "before", "after", "explanation"])

    def nothing_started(self) -> Optional[str]:
        """When the change starts (or stops) no job: why, in words; ``None`` when it did change outcomes."""
        d = self.diff
        if d is None or d.overrides.is_empty() or d.job_changes():
            return None
        waiting = d.after.waiting
        if not waiting:
            return "This change starts nothing: no job is waiting, before or after."
        reasons: dict[str, int] = {}
        for reason, _ in waiting.values():
            reasons[reason or "no reason recorded"] = reasons.get(reason or "no reason recorded", 0) + 1
        top = ", ".join(f"{k} ({v})" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
        text = f"This change starts nothing: the same {len(waiting)} job(s) still wait afterwards ({top})."
        placement = d.overrides.placement_gpu or d.overrides.placement_cpu or d.overrides.gpu_device_order
        if placement and not d.overrides.replace_running:
            text += (" A placement strategy only places pending jobs; running work stays where it is, so it "
                     "changes nothing until a job starts. Tick \"re-place running work\" to compare clusters "
                     "placed from scratch.")
        return text

    def modified_snapshot_text(self, fmt: str = "yaml") -> str:
        """The modified snapshot (overrides applied, before any cycle) in snapshot format v1."""
        from scheduler.snapshot_io import dumps_snapshot
        from scheduler.whatif import WhatIf

        snap = self.diff.modified if self.diff is not None else WhatIf.from_dict(self.overrides()).apply(self._pinned)
        return dumps_snapshot(snap, fmt)
