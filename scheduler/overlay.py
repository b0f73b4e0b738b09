"""The engine's next-cycle decisions as an overlay on the observed cluster ("KAI would bind ...").

The live views draw the cluster as the source observed it; what the shadow session decided is a separate,
marked layer built here from the observed snapshot and the session's result. Only decisions are listed:
a pending task the session binds or pipelines, a holding task it evicts (reclaim, preempt, consolidation,
stale gang). Device indices the session wrote on tasks that did not move (its bookkeeping for running pods
whose device the source did not report) are not decisions and are not listed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .model import Snapshot

OVERLAY_COLUMNS = ["task", "job", "queue", "action", "node", "gpu_index", "gpu_group", "from_node", "cause",
                   "text"]
"""One row per decision: ``action`` is ``bind``, ``pipeline`` or ``evict``; ``node``/``gpu_index``/``gpu_group``
are where the session would put the task (``gpu_index`` -1 when it chose none); ``from_node`` is where an
evicted task runs now; ``cause`` the eviction's action and preemptor; ``text`` the sentence for a tooltip or an
export column, always starting with "KAI would"."""

_HOLDING = frozenset({"running", "binding", "releasing"})


def _where(node: str, indices: list[int]) -> str:
    if not indices:
        return node
    return f"{node} GPU {','.join(map(str, indices))}"


def session_overlay(observed: Snapshot, result: Any) -> pd.DataFrame:
    """The session's decisions over ``observed`` (:data:`OVERLAY_COLUMNS`, one row per task and device)."""
    after = getattr(result, "snapshot", None)
    if after is None:
        return pd.DataFrame(columns=OVERLAY_COLUMNS)
    before = {t.name: t for _, t in observed.iter_tasks()}
    evictions = {e.task: e for e in getattr(result, "evicted", None) or []}
    rows = []
    for job, t in after.iter_tasks():
        was = before.get(t.name)
        if was is None:
            continue
        if was.status == "pending" and t.status in ("binding", "pipelined") and t.node:
            action = "bind" if t.status == "binding" else "pipeline"
            verb = "bind" if action == "bind" else "pipeline (bind once resources are released)"
            text = f"KAI would {verb} {t.name} to {_where(t.node, t.gpu_indices)}"
            for k in range(max(len(t.gpu_indices), 1)):
                idx = t.gpu_indices[k] if k < len(t.gpu_indices) else -1
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
