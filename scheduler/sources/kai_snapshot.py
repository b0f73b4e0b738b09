"""Import the zip KAI's scheduler serves at ``/get-snapshot`` (kai-semantics §h) as a snapshot.

The zip holds one ``snapshot.json``: ``config`` (the SchedulerConfiguration: actions, plugin tiers and their
arguments), ``schedulerParams`` (scheduler name, consolidation and staleness knobs, durations in nanoseconds) and
``rawObjects`` (pods, nodes, queues, podGroups, bindRequests, priorityClasses, ... as full Kubernetes JSON).
Raw objects go through the same converter as the live kube source; the scheduler config becomes
:class:`~scheduler.model.SchedulerConfig`:

======================================== ==============================================
KAI                                      kaidash ``config``
======================================== ==============================================
``config.actions``                       ``actions``
plugin ``nodeplacement`` args gpu / cpu  ``placement.gpu`` / ``placement.cpu``
plugin ``gpupack`` / ``gpuspread``       ``gpu_device_order`` pack / spread
plugin ``proportion`` arg ``kValue``     ``k_value``
plugin ``minruntime`` args               ``default_{preempt,reclaim}_min_runtime_s``, ``min_runtime_resolve``
``globalDefaultStalenessGracePeriod``    ``stale_grace_period_s`` (ns → s)
``maxNumberConsolidationPreemptees``     ``max_consolidation_preemptees``
``allowConsolidatingReclaim``            ``allow_consolidating_reclaim``
``schedulePeriod``                       ``schedule_period_s`` (ns → s)
``useSchedulingSignatures``              ``use_scheduling_signatures``
======================================== ==============================================

Structural problems (not a zip, truncated, no ``snapshot.json``, invalid JSON, a section of the wrong type, a bad
config value) raise :class:`SnapshotError` naming the member and field; a malformed object is skipped with a
warning, as in every source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from .. import safe_io
from ..errors import SnapshotError
from ..model import ACTIONS, PLACEMENT_STRATEGIES, SchedulerConfig, Snapshot
from .k8s_convert import DEFAULT_QUEUE_LABEL_KEY, DEFAULT_SCHEDULER_NAME, Conversion, RawObjects, convert
from .k8s_parse import BadField, duration, timestamp
from .warnings import SourceWarning

MEMBER = "snapshot.json"
RAW_KEYS = {"nodes": "nodes", "pods": "pods", "queues": "queues", "podGroups": "podgroups",
            "priorityClasses": "priorityclasses", "bindRequests": "bindrequests", "configMaps": "configmaps",
            "topologies": "topologies", "resourceClaims": "resourceclaims", "resourceSlices": "resourceslices"}
"""``rawObjects`` keys kaidash reads → :class:`RawObjects` fields; the others (storage, DeviceClasses: KAI tells a
GPU class by its name) are ignored."""

NS_PER_S = 1e9


def read_kai_zip(path: str | Path) -> dict:
    """The parsed ``snapshot.json`` of a KAI snapshot zip, read within :mod:`scheduler.safe_io`'s limits; raises
    :class:`SnapshotError` on any structural problem."""
    archive = safe_io.open_zip(path)
    names = archive.names
    member = MEMBER if MEMBER in names else next((n for n in names if n.endswith(".json")), None)
    if member is None:
        raise SnapshotError(str(path), f"no {MEMBER} in the zip (members: {', '.join(names) or 'none'}); "
                                       "is this a KAI /get-snapshot archive?")
    where = f"{path}:{member}"
    doc = safe_io.parse_json(archive.read(member), where)
    if not isinstance(doc, dict):
        raise SnapshotError(where, f"expected a JSON object with config, schedulerParams, rawObjects; "
                                   f"got {type(doc).__name__}")
    return doc


def _section(doc: dict, key: str, where: str, required: bool = False) -> dict:
    value = doc.get(key)
    if value is None:
        if required:
            raise SnapshotError(f"{where}: {key}", "required section is missing")
        return {}
    if not isinstance(value, dict):
        raise SnapshotError(f"{where}: {key}", f"expected an object, got {type(value).__name__}")
    return value


def raw_objects(doc: dict, where: str = MEMBER) -> RawObjects:
    """``rawObjects`` as :class:`RawObjects` (each list checked to be a list)."""
    raw = _section(doc, "rawObjects", where, required=True)
    out = RawObjects()
    for key, attr in RAW_KEYS.items():
        items = raw.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise SnapshotError(f"{where}: rawObjects.{key}", f"expected a list of objects, got {type(items).__name__}")
        setattr(out, attr, items)
    return out


def _plugins(config: dict, where: str) -> dict[str, dict]:
    """Plugin name → its arguments (all tiers)."""
    tiers = config.get("tiers") or []
    if not isinstance(tiers, list):
        raise SnapshotError(f"{where}: config.tiers", f"expected a list, got {type(tiers).__name__}")
    out: dict[str, dict] = {}
    for i, tier in enumerate(tiers):
        plugins = tier.get("plugins") if isinstance(tier, dict) else None
        if not isinstance(plugins, list):
            raise SnapshotError(f"{where}: config.tiers[{i}].plugins", "expected a list of plugins")
        for j, plugin in enumerate(plugins):
            if not isinstance(plugin, dict) or not isinstance(plugin.get("name"), str):
                raise SnapshotError(f"{where}: config.tiers[{i}].plugins[{j}]", "expected {name, arguments}")
            args = plugin.get("arguments") or {}
            if not isinstance(args, dict):
                raise SnapshotError(f"{where}: config.tiers[{i}].plugins[{j}].arguments",
                                    f"expected an object, got {type(args).__name__}")
            out[plugin["name"]] = args
    return out


def scheduler_config(doc: dict, where: str = MEMBER) -> tuple[SchedulerConfig, list[SourceWarning]]:
    """KAI's ``config`` + ``schedulerParams`` → :class:`SchedulerConfig` (see the module table)."""
    config = _section(doc, "config", where)
    params = _section(doc, "schedulerParams", where)
    cfg = SchedulerConfig()
    notes: list[SourceWarning] = []

    def bad(fld: str, message: str) -> SnapshotError:
        return SnapshotError(f"{where}: {fld}", message)

    actions = config.get("actions")
    if actions is not None:
        if not isinstance(actions, str):
            raise bad("config.actions", f"expected a comma-separated string, got {actions!r}")
        names = [a.strip() for a in actions.split(",") if a.strip()]
        unknown = [a for a in names if a not in ACTIONS]
        if unknown:
            raise bad("config.actions", f"unknown action(s) {', '.join(unknown)} (known: {', '.join(ACTIONS)})")
        cfg.actions = names
    plugins = _plugins(config, where)
    placement = plugins.get("nodeplacement", {})
    for res in ("gpu", "cpu"):
        if res in placement:
            value = placement[res]
            if value not in PLACEMENT_STRATEGIES:
                raise bad(f"config.tiers.nodeplacement.arguments.{res}",
                          f"{value!r} is not one of {', '.join(PLACEMENT_STRATEGIES)}")
            setattr(cfg.placement, res, value)
    if "gpuspread" in plugins:
        cfg.gpu_device_order = "spread"
    elif "gpupack" in plugins:
        cfg.gpu_device_order = "pack"
    else:
        cfg.gpu_device_order = "spread" if cfg.placement.gpu == "spread" else "pack"
    k_value = plugins.get("proportion", {}).get("kValue")
    if k_value is not None:
        try:
            cfg.k_value = max(0.0, float(k_value))  # KAI sets k <= 0 to 0
        except (TypeError, ValueError):
            raise bad("config.tiers.proportion.arguments.kValue", f"expected a number, got {k_value!r}") from None
    minruntime = plugins.get("minruntime", {})
    for arg, attr in (("defaultPreemptMinRuntime", "default_preempt_min_runtime_s"),
                      ("defaultReclaimMinRuntime", "default_reclaim_min_runtime_s")):
        if minruntime.get(arg):
            try:
                setattr(cfg, attr, max(0.0, duration(minruntime[arg], arg)))
            except BadField as exc:
                raise bad(f"config.tiers.minruntime.arguments.{arg}", exc.message) from None
    resolve = minruntime.get("reclaimResolveMethod")
    if resolve:
        if resolve not in ("lca", "queue"):
            raise bad("config.tiers.minruntime.arguments.reclaimResolveMethod", f"expected lca or queue, got {resolve!r}")
        cfg.min_runtime_resolve = resolve

    def ns(key: str, attr: str) -> None:
        value = params.get(key)
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(f"schedulerParams.{key}", f"expected a duration in nanoseconds, got {value!r}")
        setattr(cfg, attr, value / NS_PER_S)

    ns("globalDefaultStalenessGracePeriod", "stale_grace_period_s")
    ns("schedulePeriod", "schedule_period_s")
    if cfg.schedule_period_s <= 0:
        cfg.schedule_period_s = SchedulerConfig().schedule_period_s
    mncp = params.get("maxNumberConsolidationPreemptees")
    if mncp is not None:
        if isinstance(mncp, bool) or not isinstance(mncp, int) or mncp < -1:
            raise bad("schedulerParams.maxNumberConsolidationPreemptees", f"expected a whole number, got {mncp!r}")
        cfg.max_consolidation_preemptees = mncp
    acr = params.get("allowConsolidatingReclaim")
    if acr is not None:
        if not isinstance(acr, bool):
            raise bad("schedulerParams.allowConsolidatingReclaim", f"expected true or false, got {acr!r}")
        cfg.allow_consolidating_reclaim = acr
    uss = params.get("useSchedulingSignatures")
    if uss is not None:
        if not isinstance(uss, bool):
            raise bad("schedulerParams.useSchedulingSignatures", f"expected true or false, got {uss!r}")
        cfg.use_scheduling_signatures = uss
    if params.get("fullHierarchyFairness") is False:
        notes.append(SourceWarning("SchedulerConfig", None, "schedulerParams", "fullHierarchyFairness",
                                   "project-level fairness (false) is not modelled: the full queue hierarchy is used",
                                   skipped=False))
    return cfg, notes


def _latest_time(raw: RawObjects) -> float:
    """The newest timestamp in the objects: the best estimate of when the snapshot was taken."""
    latest = 0.0

    def see(value: Any) -> None:
        nonlocal latest
        if isinstance(value, str):
            try:
                latest = max(latest, timestamp(value, ""))
            except BadField:
                pass

    for group in (raw.nodes, raw.pods, raw.podgroups, raw.queues):
        for obj in group:
            if not isinstance(obj, dict):
                continue
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            see(meta.get("creationTimestamp"))
            status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
            for cond in status.get("conditions") or []:
                if isinstance(cond, dict):
                    see(cond.get("lastHeartbeatTime"))
                    see(cond.get("lastTransitionTime"))
    return latest


def import_kai_snapshot(path: str | Path, *, time: Optional[float] = None) -> Conversion:
    """Read a KAI snapshot zip: the snapshot with KAI's config, plus warnings and KAI's scheduling conditions.

    ``time`` is the moment the snapshot describes; by default the newest timestamp among its objects (node
    heartbeats are the freshest), since the archive itself carries no capture time.
    """
    doc = read_kai_zip(path)
    where = f"{Path(path)}:{MEMBER}"
    raw = raw_objects(doc, where)
    cfg, notes = scheduler_config(doc, where)
    params = _section(doc, "schedulerParams", where)
    name = params.get("schedulerName") or DEFAULT_SCHEDULER_NAME
    label_key = params.get("queueLabelKey") or DEFAULT_QUEUE_LABEL_KEY
    if not isinstance(name, str) or not isinstance(label_key, str):
        raise SnapshotError(f"{where}: schedulerParams", "schedulerName and queueLabelKey must be strings")
    conv = convert(raw, scheduler_name=name, time=_latest_time(raw) if time is None else time, config=cfg,
                   queue_label_key=label_key)
    conv.warnings[:0] = notes
    return conv


def load_kai_snapshot(path: str | Path, *, time: Optional[float] = None) -> Snapshot:
    """The snapshot in a KAI ``/get-snapshot`` zip (what ``load_snapshot`` calls for ``.zip`` paths)."""
    return import_kai_snapshot(path, time=time).snapshot
