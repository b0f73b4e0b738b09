"""One-line summaries of Pending's long texts: the expected start and the explainer's "would start if".

The table shows these (every row one line tall, so an on-call engineer sees a screenful of waiting jobs); the
full sentences stay the cells' values, shown as their tooltips, and the card of the selected job says them. The
summaries keep the numbers a person acts on (how much quota, how many GPUs, which queue or pool) and drop the
explanation around them. Texts come from :mod:`scheduler.explain` (counterfactuals),
:class:`scheduler.eta.report.EtaEstimate` (expected start) and :func:`dashboard.frames.next_cycle` (the
engine's binds this cycle); a text in none of the known shapes is cut to its first clause.
"""

from __future__ import annotations

import re

from scheduler.explain import NOT_PROVEN_MINIMAL

MAX_CHARS = 30
"""Longest summary: about what the narrowest "would start if" cell (1280 px wide window) shows in one line."""

_NUM = r"[\d.,]+"
_LIMIT = re.compile(rf"^over the queue limit by (?P<x>{_NUM}) (?P<unit>\w+): queue (?P<q>\S+)")
_QUOTA = re.compile(rf"^non-preemptible job over quota by (?P<x>{_NUM}) (?P<unit>\w+): queue (?P<q>\S+)")
_RELEASE = re.compile(rf"^would start if queue (?P<q>\S+) released (?P<x>{_NUM} \w+) \((?P<jobs>[^)]*)\)")
_NODES = re.compile(r"^would start with (?P<n>\d+) more nodes? like \S+ in pool (?P<pool>\S+)")
_FRAGMENTED = re.compile(r"^needs (?P<n>\d+) whole GPUs on one node; largest free block is (?P<best>\d+)")
_LARGER = re.compile(r"^needs (?P<n>\d+) whole GPUs on one node; the largest Ready node has (?P<have>\d+)")
_CONSOLIDATE = re.compile(r"^fits on node \S+ after consolidation: moving (?P<n>\d+) preemptible task")
_TOPOLOGY = re.compile(r"^no (?P<level>\S+) (with (?P<need>[\d.]+) free GPUs|can hold all (?P<pods>\d+) pods)")
_STILL_WAITS = "; even then it would wait"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _first_clause(text: str) -> str:
    """The text up to its first ``;``, ``:`` or `` (``, cut to :data:`MAX_CHARS` with an ellipsis."""
    head = re.split(r"; |: | \(", text, maxsplit=1)[0].strip().rstrip(",")
    return head if len(head) <= MAX_CHARS else head[:MAX_CHARS - 1].rstrip() + "…"


def short_counterfactual(text: str, queue: str = "") -> str:
    """``"analytics limit +0.75 GPUs"`` for "over the queue limit by 0.75 GPUs: … with the limit raised to
    21.75 GPUs it would start"; ``"llm frees 32 GPUs"``, ``"llm frees 64 GPUs (3 jobs)"`` (``"llm frees ≤184 GPUs
    (13 jobs)"`` when the search's budget ran out before the set was proven the smallest), ``"+2 nodes in pool
    a100-80"``, … ("…: not enough" when the explainer's re-run showed the change would not start it by itself).
    ``queue``: the job's own queue, left out of a limit or quota change of that queue (the row names it):
    ``"limit +0.75 GPUs"``."""
    text = (text or "").strip()
    if not text:
        return ""
    for pattern, what in ((_LIMIT, "limit"), (_QUOTA, "quota")):
        if m := pattern.match(text):
            whose = "" if m["q"] == queue else f"{m['q']} "
            # the explainer's re-run: the change alone leaves it waiting (for GPUs, most often)
            return (f"{whose}{what} +{m['x']} {m['unit']}: not enough" if _STILL_WAITS in text else
                    f"{whose}{what} +{m['x']} {m['unit']}")
    if m := _RELEASE.match(text):
        jobs = len([j for j in m["jobs"].split(", ") if j])
        more = re.search(r" and (\d+) more jobs", m["jobs"])
        jobs += int(more[1]) if more else 0
        # "≤": a set the explainer's budget left unminimised (some of its jobs may not be needed)
        at_most = "≤" if NOT_PROVEN_MINIMAL in text else ""
        return f"{m['q']} frees {at_most}{m['x']}" + (f" ({jobs} jobs)" if jobs > 1 else "")
    if m := _NODES.match(text):
        return f"+{_plural(int(m['n']), 'node')} in pool {m['pool']}"
    if text.startswith("even 16 more nodes"):
        return "more nodes alone would not help"
    if m := _LARGER.match(text):
        return f"needs a {m['n']}-GPU node (max {m['have']})"
    if m := _FRAGMENTED.match(text):
        return f"{m['n']} GPUs on 1 node; max free {m['best']}"
    if m := _CONSOLIDATE.match(text):
        return f"consolidate: move {_plural(int(m['n']), 'pod')}"
    if m := _TOPOLOGY.match(text):
        return (f"no {m['level']} with {m['need']} free GPUs" if m["need"] else
                f"no {m['level']} holds its {m['pods']} pods")
    if text.startswith("no single change found"):
        return "no single change found"
    if text.startswith("nothing: "):
        return "nothing: starts this cycle"
    if text.startswith("placed on resources that are being released"):
        return "nothing: resources being freed"
    if text.startswith("no node passes pod"):
        return "no node passes its constraints"
    if " mounts ConfigMap(s) that do not exist" in text:
        return "create its missing ConfigMap(s)"
    if text.startswith("waiting for the pod-grouper"):
        return "needs a PodGroup (pod-grouper)"
    return _first_clause(text)


_STARTS_IN = re.compile(r"^(?P<likely>likely )?starts in (?P<when>~[^,(]+?)(?P<range> \([^)]*\))?(,|$)")


def short_eta(text: str) -> str:
    """``"~40 min"`` for "starts in ~40 min (20 min–1.5 h), after llm/train-7 finishes" (the range and what it
    waits for are in the tooltip and the detail card), ``"likely ~6.6 h"``, ``"next cycle"``, ``"> 24.0 h"`` (not
    within the horizon), ``"cannot start"`` (on this cluster at all), ``"this cycle"`` for the engine's bind this
    cycle (a prediction: the reason cell says so)."""
    text = (text or "").strip()
    if not text:
        return ""
    if m := _STARTS_IN.match(text):
        return f"{'likely ' if m['likely'] else ''}{m['when']}"
    if text.startswith("KAI would bind") or text.startswith("KAI would pipeline"):
        return "this cycle"
    if re.match(r"^(likely )?starts at the next cycle", text):
        return "next cycle"
    if m := re.match(r"^not within (\S+ \w+)", text):
        return f"> {m[1]}"
    if text.startswith("cannot start on this cluster"):
        return "cannot start"
    return _first_clause(text)


__all__ = ["MAX_CHARS", "short_counterfactual", "short_eta"]
