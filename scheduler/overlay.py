"""The engine's next-cycle decisions as an overlay on the observed cluster ("KAI would bind ...").

The live views draw the cluster as the source observed it; what the shadow session decided is a separate,
marked layer built here from the observed snapshot and the session's result. Only decisions are listed:
a pending task the session binds or pipelines, a holding task it evicts (reclaim, preempt, consolidation,
stale gang). Device indices the session wrote on tasks that did not move (its bookkeeping for running pods
whose device the source did not report) are not decisions and are not listed.

Devices: KAI binds a whole-GPU pod to a node and the kubelet's device plugin picks its GPUs; a fractional pod
that opens a new GPU group gets its device the same way (through its reservation pod). Only a fractional pod
joining a group whose device is observed has a known device. Every other bind carries ``gpu_index = -1`` and
says so ("the device plugin picks the GPUs"), never the session's own bookkeeping index, which on a node whose
whole-GPU holders have no observed device would point at a busy GPU.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .metrics.allocation import group_indices_from_tasks
from .model import Snapshot

OVERLAY_COLUMNS = ["task", "job", "queue", "action", "node", "gpu_index", "gpu_group", "from_node", "cause",
                   "text"]
"""One row per decision: ``action`` is ``bind``, ``pipeline`` or ``evict``; ``node``/``gpu_index``/``gpu_group``
are where the session would put the task (``gpu_index`` -1 when it chose none); ``from_node`` is where an
evicted task runs now; ``cause`` the eviction's action and preemptor; ``text`` the sentence for a tooltip or an
export column, always starting with "KAI would"."""

_HOLDING = frozenset({"running", "binding", "releasing"})


def _where(node: str, indices: list[int], devices: int) -> str:
    known = [i for i in indices if i >= 0]
    if known and len(known) == len(indices):
        return f"{node} GPU {','.join(map(str, known))}"
    if devices <= 0:
        return node
    return f"{node} ({devices} GPU{'s' if devices > 1 else ''}; the device plugin picks which)"


def session_overlay(observed: Snapshot, result: Any) -> pd.DataFrame:
    """The session's decisions over ``observed`` (:data:`OVERLAY_COLUMNS`, one row per task and device)."""
    after = getattr(result, "snapshot", None)
    if after is None:
        return pd.DataFrame(columns=OVERLAY_COLUMNS)
    before = {t.name: t for _, t in observed.iter_tasks()}
    groups = group_indices_from_tasks(observed)   # devices of GPU groups as observed
    evictions = {e.task: e for e in getattr(result, "evicted", None) or []}
    rows = []
    for job, t in after.iter_tasks():
        was = before.get(t.name)
        if was is None:
            continue
        if was.status == "pending" and t.status in ("binding", "pipelined") and t.node:
            action = "bind" if t.status == "binding" else "pipeline"
            verb = "bind" if action == "bind" else "pipeline (bind once resources are released)"
            devices = max(t.gpu_devices, 1) if t.is_fractional else int(t.gpu) if t.is_gpu else 0
            known = [groups.get((t.node, g), -1) for g in t.gpu_groups] if t.is_fractional else []
            text = f"KAI would {verb} {t.name} to {_where(t.node, known, devices)}"
            for k in range(max(devices, 1)):
                idx = known[k] if k < len(known) else -1
                grp = t.gpu_groups[k] if k < len(t.gpu_groups) else ""
                rows.append((t.name, job.key, job.queue, action, t.node, idx, grp, "", "", text))
        elif was.status in _HOLDING and was.status != "releasing" and (
                t.status in ("releasing", "pending") or t.name in evictions):
            e = evictions.get(t.name)
            cause = (e.action + (f" for {e.preemptor}" if e.preemptor else "")) if e else ""
            moved = f", moving it to {e.moved_to}" if e is not None and e.moved_to else ""
            text = f"KAI would evict {t.name} from {was.node}" + (f" ({cause})" if cause else "") + moved
            rows.append((t.name, job.key, job.queue, "evict", (e.moved_to if e and e.moved_to else "") or "", -1,
                         "", was.node or "", cause, text))
    frame = pd.DataFrame(rows, columns=OVERLAY_COLUMNS)
    return frame.astype({"gpu_index": "int64"})
