"""Run KAI's offline ``snapshot-tool`` on a ``/get-snapshot`` zip and read its decisions from the log.

The tool replays one scheduling cycle and reports decisions only in its log (stderr, zap console format). At
verbosity 6 the lines that matter are (KAI commit d5bc503):

- ``[<action>] Creating bind request for task <ns/pod> to node <node> gpuGroup: <[...]>`` (``cache/cache.go``,
  V3): a committed allocation;
- ``[<action>] Statement pipelined task: <ns/pod> to node: <node>, gpuGroup: <[...]>`` (``framework/statement.go``,
  V6) records where a pipeline operation put the task, and ``[<action>] Pipelining task: ns/pod`` (V4, at
  ``Statement.Commit``) commits it;
- ``[<action>] Evicting task: ns/pod`` (V4, at commit): an eviction by that action; stale-gang eviction calls
  ``ssn.Evict`` without a statement and logs ``Evicted task: <ns/pod> due its job being a stale job`` (V3);
- ``Resource division result for queue <q>: ... GPU: ... fairShare: <x> CPU (cores): ... fairShare: <y> memory
  (GB): ... fairShare: <z>`` (``resource_division.go``, V3): the fair share of every queue, 3 decimals.

The binary is a reference one runs, never a dependency: its path is an argument.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ACTION = re.compile(r"\] \[(\w+)\] ")
BIND = re.compile(r"Creating bind request for task <([^>]+)> to node <([^>]+)> gpuGroup: <\[([^\]]*)\]>")
PIPELINED = re.compile(r"Statement pipelined task: <([^>]+)> to node: <([^>]+)>, gpuGroup: <\[([^\]]*)\]>")
PIPELINING = re.compile(r"Pipelining task: (\S+)")
EVICTING = re.compile(r"Evicting task: (\S+)")
STALE_EVICTED = re.compile(r"Evicted task: <([^>]+)> due its job being a stale job")
DIVISION = re.compile(r"Resource division result for queue <([^>]+)>: .*?GPU: (.*?) CPU \(cores\): (.*?) "
                      r"memory \(GB\): (.*)$")
FIELD = re.compile(r"(\w+): <([^>]*)>")


@dataclass
class Decisions:
    """What one scheduling cycle decided, in KAI's terms (task = ``ns/pod``)."""

    allocated: dict[str, str] = field(default_factory=dict)       # task -> node (bound this cycle)
    pipelined: dict[str, str] = field(default_factory=dict)       # task -> node
    evicted: dict[str, str] = field(default_factory=dict)         # task -> action
    fair_share: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> gpu/cpu (cores)/memory (GB)
    queue_numbers: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # queue -> res -> numbers
    actions: dict[str, str] = field(default_factory=dict)         # task -> action of its allocate / pipeline

    def to_dict(self) -> dict:
        return {"allocated": self.allocated, "pipelined": self.pipelined, "evicted": self.evicted,
                "fair_share": self.fair_share}


def _number(text: str) -> float:
    return float("inf") if text == "Unlimited" else float(text)


def parse_log(text: str) -> Decisions:
    """The decisions in a ``snapshot-tool`` log (see the module doc for the lines read)."""
    out = Decisions()
    last_pipeline: dict[str, str] = {}
    for raw in text.splitlines():
        if "task" not in raw and "Resource division" not in raw:
            continue
        line = ANSI.sub("", raw)
        m = ACTION.search(line)
        action = m.group(1) if m else ""
        if "Creating bind request" in line:
            b = BIND.search(line)
            if b:
                out.allocated[b.group(1)] = b.group(2)
                out.actions[b.group(1)] = action
        elif "Statement pipelined task" in line:
            p = PIPELINED.search(line)
            if p:
                last_pipeline[p.group(1)] = p.group(2)
        elif "Pipelining task:" in line:
            p = PIPELINING.search(line)
            if p and p.group(1) in last_pipeline:
                out.pipelined[p.group(1)] = last_pipeline[p.group(1)]
                out.actions[p.group(1)] = action
        elif "Evicting task:" in line:
            e = EVICTING.search(line)
            if e:
                out.evicted[e.group(1)] = action
        elif "due its job being a stale job" in line:  # stalegangeviction evicts through ssn.Evict, no statement
            e = STALE_EVICTED.search(line)
            if e:
                out.evicted[e.group(1)] = action
        elif "Resource division result" in line:
            d = DIVISION.search(line)
            if not d:
                continue
            queue = d.group(1)
            numbers = {}
            for res, part in zip(("gpu", "cpu", "memory"), d.groups()[1:]):
                numbers[res] = {k: _number(v) for k, v in FIELD.findall(part)}
            out.queue_numbers[queue] = numbers
            out.fair_share[queue] = {res: numbers[res].get("fairShare", 0.0) for res in numbers}
    # a task both bound and later pipelined in one cycle keeps its last state
    for task in list(out.allocated):
        if task in out.pipelined:
            del out.allocated[task]
    return out


@dataclass
class KaiRun:
    decisions: Optional[Decisions]
    log: str
    error: Optional[str] = None
    seconds: float = 0.0


def run_snapshot_tool(binary: str | Path, zip_path: str | Path, verbosity: int = 6, timeout_s: float = 300) -> KaiRun:
    """Run the tool on one zip; ``decisions`` is None when it failed (``error`` says why)."""
    import time

    start = time.perf_counter()
    try:
        proc = subprocess.run([str(binary), "--filename", str(zip_path), "--verbosity", str(verbosity)],
                              capture_output=True, text=True, timeout=timeout_s, errors="replace")
    except subprocess.TimeoutExpired:
        return KaiRun(None, "", f"timed out after {timeout_s:g} s", time.perf_counter() - start)
    elapsed = time.perf_counter() - start
    log = proc.stderr + proc.stdout
    if proc.returncode != 0:
        tail = ANSI.sub("", log)[-2000:]
        return KaiRun(None, log, f"exit status {proc.returncode}: {tail}", elapsed)
    return KaiRun(with_queue_names(parse_log(log), zip_path), log, None, elapsed)


def queue_names_by_display(zip_path: str | Path) -> dict[str, str]:
    """``display name -> queue name`` of the zip's queues that have a ``spec.displayName`` other than their name
    (and not another queue's name): KAI's resource-division log names a queue by its display name."""
    import json
    import zipfile

    with zipfile.ZipFile(zip_path) as zf:
        doc = json.loads(zf.read(zf.namelist()[0]))
    queues = (doc.get("rawObjects") or {}).get("queues") or []
    names = {q["metadata"]["name"] for q in queues}
    out = {}
    for q in queues:
        shown = (q.get("spec") or {}).get("displayName")
        if shown and shown != q["metadata"]["name"] and shown not in names:
            out[shown] = q["metadata"]["name"]
    return out


def with_queue_names(decisions: Decisions, zip_path: str | Path) -> Decisions:
    """``decisions`` with fair shares keyed by queue name where KAI's log used the display name."""
    rename = queue_names_by_display(zip_path)
    if rename:
        decisions.fair_share = {rename.get(q, q): v for q, v in decisions.fair_share.items()}
        decisions.queue_numbers = {rename.get(q, q): v for q, v in decisions.queue_numbers.items()}
    return decisions
