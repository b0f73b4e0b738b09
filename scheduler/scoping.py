"""Per-queue scoping of what kaidash says: names of queues a user may not see, and their jobs and pods, never
appear in a text, a table cell or an explanation shown to that user.

Pure functions; the dashboard's one filter (``dashboard/auth.py: scope_tick``) drops the hidden queues' rows
and passes every remaining text and explanation through a :class:`Redactor`:

* a hidden queue's name becomes "a queue you cannot see", a hidden job's key or name or a hidden pod's name
  "a job of a queue you cannot see" (whole names only; text around them is kept);
* a why-pending counterfactual about a hidden queue is rewritten without its holdings, fair share or job
  names: "would start if a queue you cannot see released 4 GPUs";
* dictionaries (explanation numbers, decision details) lose the entries keyed by a hidden name.

Limit: one-letter names and a few short English words ("to", "in", "the", ...) are never redacted in free
text (they would garble every sentence); rows and dictionary keys of such queues are still dropped.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable

from .model import Snapshot

HIDDEN_QUEUE = "a queue you cannot see"
HIDDEN_JOB = "a job of a queue you cannot see"

_NOT_NAMES = frozenset({"gpu", "cpu", "memory", "GPU", "CPU", "an", "as", "at", "by", "if", "in", "is", "it", "no",
                        "of", "on", "or", "to", "the", "and", "for", "not", "was", "has"})
"""Never treated as names: resource words and short English words (a one-letter name is never redacted)."""
_EDGE = r"[\w.\-/]"


class Redactor:
    """Redacts the names of every queue outside ``visible`` (and of their jobs and pods) from values."""

    def __init__(self, snapshot: Snapshot, visible: Iterable[str]):
        visible = set(visible)
        queues = {q.name for q in snapshot.queues}
        hidden_queues = queues - visible
        hidden_jobs: set[str] = set()
        for job in snapshot.jobs:
            if job.queue in visible:
                continue
            if job.queue not in queues:     # a job in a queue that does not exist is another team's too
                hidden_queues.add(job.queue)
            hidden_jobs.update({job.key, job.name})
            hidden_jobs.update(t.name for t in job.tasks)
            hidden_jobs.update(t.name.split("/", 1)[1] for t in job.tasks if "/" in t.name)
        shown = visible | {j.key for j in snapshot.jobs if j.queue in visible} | {
            j.name for j in snapshot.jobs if j.queue in visible}
        self.hidden = {n: HIDDEN_QUEUE for n in hidden_queues - _NOT_NAMES if len(n) > 1}
        self.hidden.update({n: HIDDEN_JOB for n in hidden_jobs - _NOT_NAMES - shown - set(self.hidden) if len(n) > 1})
        names = sorted(self.hidden, key=len, reverse=True)
        self._pattern = (re.compile(f"(?<!{_EDGE})(" + "|".join(map(re.escape, names)) + f")(?!{_EDGE})")
                         if names else None)

    @property
    def active(self) -> bool:
        """Whether anything is hidden at all."""
        return self._pattern is not None

    def text(self, value: str) -> str:
        """``value`` with every hidden name replaced."""
        if self._pattern is None or not value:
            return value
        return self._pattern.sub(lambda m: self.hidden[m.group(1)], value)

    def value(self, obj: Any) -> Any:
        """Strings redacted, dict entries keyed by a hidden name dropped, lists/tuples/dataclasses walked."""
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in obj.items()
                    if not (isinstance(k, str) and k in self.hidden)}
        if isinstance(obj, (list, tuple)):
            out = [self.value(v) for v in obj]
            return type(obj)(out) if isinstance(obj, tuple) else out
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.replace(obj, **{f.name: self.value(getattr(obj, f.name))
                                               for f in dataclasses.fields(obj) if f.init})
        return obj

    def counterfactual(self, cf: Any) -> Any:
        """A counterfactual that names a hidden queue or job says only what the user's job would need."""
        if cf is None or self._pattern is None:
            return cf
        about_hidden = (getattr(cf, "queue", None) in self.hidden
                        or any(j in self.hidden for j in getattr(cf, "jobs", None) or [])
                        or any(m and m[0] in self.hidden for m in getattr(cf, "moves", None) or []))
        if not about_hidden:
            return self.value(cf)
        amount = getattr(cf, "amount", None)
        what = f"{amount:g} GPU{'s' if amount != 1 else ''}" if isinstance(amount, (int, float)) else "resources"
        kind = getattr(cf, "kind", "")
        if kind == "release":
            message = f"would start if {HIDDEN_QUEUE} released {what}"
        elif kind == "consolidate":
            message = f"would start if pods of {HIDDEN_QUEUE} moved to other nodes"
        else:
            message = f"would start after a change in {HIDDEN_QUEUE}"
        return dataclasses.replace(cf, message=message, queue=HIDDEN_QUEUE if cf.queue in self.hidden else cf.queue,
                                   jobs=[j for j in cf.jobs if j not in self.hidden],
                                   moves=[m for m in cf.moves if not (m and m[0] in self.hidden)])

    def explanation(self, exp: Any) -> Any:
        """A why-pending record (``explain.PendingExplanation`` or a dict) with nothing hidden left in it."""
        if exp is None or self._pattern is None:
            return exp
        if isinstance(exp, dict):
            out = self.value({k: v for k, v in exp.items() if k != "counterfactual"})
            if "counterfactual" in exp:
                cf = exp["counterfactual"]
                out["counterfactual"] = self.value(cf) if isinstance(cf, (str, dict)) or cf is None else \
                    self.counterfactual(cf)
            return out
        cf = self.counterfactual(getattr(exp, "counterfactual", None))
        return dataclasses.replace(self.value(dataclasses.replace(exp, counterfactual=None)), counterfactual=cf)
