"""``kaidash fairshare FILE``: KAI's fair-share calculator on its own (like KAI's ``cmd/fairshare-simulator``).

Input (YAML or JSON)::

    total: {gpu: 10, cpu: 64000, memory: 549755813888}
    k_value: 1.0
    queues:
      - {name: A, parent: null, priority: 100, creation_time: 0,
         gpu: {quota: 2, limit: -1, over_quota_weight: 1, request: 8, usage: 0}}

``total`` is required (at least one resource; a resource left out is 0). A parent's ``request`` defaults to
the sum of its children's. Quantities are taken as given (no unit
conversion). Output (``--format json``): ``{"fair_share": {queue: {gpu, cpu, memory}}, "remaining": {gpu, cpu,
memory}}`` where ``remaining`` is what the top level did not hand out. ``--format table`` shows per queue
deserved -> fair share -> requested; ``--explain`` prints the phase-by-phase division of every level.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

from .. import safe_io
from ..errors import SnapshotError, problem_text
from ..fairshare import DivisionTrace, QueueShare, divide_tree
from ..model import DEFAULT_QUEUE_PRIORITY, RESOURCES, UNLIMITED, Queue
from ..queue_tree import levels, tree_order, tree_problems

NAME = "fairshare"
HELP = "compute KAI fair share for a queue tree (YAML/JSON input), optionally explaining each phase"
DESCRIPTION = __doc__.split("\n\n")[0]

UNITS = {"gpu": "GPUs", "cpu": "millicores", "memory": "bytes"}
TOP_KEYS = {"total", "k_value", "queues"}
QUEUE_KEYS = {"name", "parent", "priority", "creation_time", *RESOURCES}
RESOURCE_KEYS = {"quota", "limit", "over_quota_weight", "request", "usage"}


class FairShareInputError(SnapshotError):
    """The calculator's input document is invalid; ``problems`` lists ``(path, message)``."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__(problems)
        self.args = (problem_text("invalid fair-share input", self.problems),)

    def __str__(self) -> str:
        return self.args[0]


class FairShareProblem:
    """A parsed calculator input: the queue tree, per-queue shares, the totals and the k-value."""

    def __init__(self, total: dict[str, float], k_value: float, queues: list[Queue],
                 shares: dict[str, dict[str, QueueShare]]):
        self.total, self.k_value, self.queues, self.shares = total, k_value, queues, shares

    def solve(self, traces: Optional[dict] = None) -> dict[str, float]:
        """Divide the totals; fills ``shares[..].fair_share`` and returns the top level's remaining."""
        return divide_tree(self.total, self.queues, self.shares, self.k_value, traces)


# ---------------------------------------------------------------------------------------------- parsing

def _number(value: Any, path: str, problems: list, *, allow_unlimited: bool = False,
            integer: bool = False, allow_negative: bool = False) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append((path, f"expected a number, got {value!r}"))
        return None
    v = float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf   # no OverflowError
    if math.isnan(v) or math.isinf(v):
        problems.append((path, f"expected a finite number, got {value!r}"))
        return None
    if v < 0 and not allow_negative and not (allow_unlimited and v == UNLIMITED):
        hint = " (use -1 for unlimited)" if allow_unlimited else ""
        problems.append((path, f"negative quantity {value!r}{hint}"))
        return None
    if integer and v != int(v):
        problems.append((path, f"expected a whole number, got {value!r}"))
        return None
    return v


def _unknown_keys(doc: dict, allowed: set[str], path: str, problems: list) -> None:
    for key in doc:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            problems.append((where, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})"))


def parse_problem(doc: Any) -> FairShareProblem:
    """Validate a calculator document and build a :class:`FairShareProblem`; raises
    :class:`FairShareInputError` listing every problem with the queue and field at fault."""
    problems: list[tuple[str, str]] = []
    if not isinstance(doc, dict):
        raise FairShareInputError([("(document)", f"expected a mapping, got {type(doc).__name__}")])
    _unknown_keys(doc, TOP_KEYS, "", problems)

    total = {r: 0.0 for r in RESOURCES}
    tdoc = doc.get("total", {})
    if not isinstance(tdoc, dict):
        problems.append(("total", f"expected a mapping of gpu/cpu/memory, got {tdoc!r}"))
        tdoc = {}
    elif not any(r in tdoc for r in RESOURCES):
        problems.append(("total", "required: the capacity to divide, at least one of gpu, cpu, memory "
                                  "(e.g. total: {gpu: 8})"))
    _unknown_keys(tdoc, set(RESOURCES), "total", problems)
    for r in RESOURCES:
        if r in tdoc:
            v = _number(tdoc[r], f"total.{r}", problems)
            total[r] = v if v is not None else 0.0

    k_value = 1.0
    if "k_value" in doc:
        k = _number(doc["k_value"], "k_value", problems)
        k_value = k if k is not None else 1.0

    qdocs = doc.get("queues")
    if not isinstance(qdocs, list) or not qdocs:
        problems.append(("queues", "expected a non-empty list of queues"))
        qdocs = []
    queues: list[Queue] = []
    shares: dict[str, dict[str, QueueShare]] = {}
    explicit_request: dict[str, set[str]] = {}
    for i, qd in enumerate(qdocs):
        if not isinstance(qd, dict):
            problems.append((f"queues[{i}]", f"expected a mapping, got {qd!r}"))
            continue
        name = qd.get("name")
        if not isinstance(name, str) or not name:
            problems.append((f"queues[{i}].name", f"expected a queue name, got {name!r}"))
            continue
        path = f"queues[{name}]"
        if name in shares:
            problems.append((f"{path}.name", "duplicate queue name"))
            continue
        _unknown_keys(qd, QUEUE_KEYS, path, problems)
        parent = qd.get("parent")
        if parent is not None and (not isinstance(parent, str) or not parent):
            problems.append((f"{path}.parent", f"expected a queue name or null, got {parent!r}"))
            parent = None
        prio = _number(qd.get("priority", DEFAULT_QUEUE_PRIORITY), f"{path}.priority", problems,
                       integer=True, allow_negative=True)
        ctime = _number(qd.get("creation_time", 0), f"{path}.creation_time", problems, allow_negative=True)
        per_res: dict[str, QueueShare] = {}
        explicit_request[name] = set()
        for r in RESOURCES:
            rd = qd.get(r, {})
            rpath = f"{path}.{r}"
            if not isinstance(rd, dict):
                problems.append((rpath, f"expected a mapping of {', '.join(sorted(RESOURCE_KEYS))}, got {rd!r}"))
                rd = {}
            _unknown_keys(rd, RESOURCE_KEYS, rpath, problems)
            vals = {}
            for key, default, unlimited in (("quota", 0.0, True), ("limit", UNLIMITED, True),
                                            ("over_quota_weight", 1.0, False), ("request", 0.0, False),
                                            ("usage", 0.0, False)):
                v = _number(rd[key], f"{rpath}.{key}", problems, allow_unlimited=unlimited) if key in rd else None
                vals[key] = default if v is None else v
            if "request" in rd:
                explicit_request[name].add(r)
            per_res[r] = QueueShare(deserved=vals["quota"], limit=vals["limit"],
                                    over_quota_weight=vals["over_quota_weight"], requested=vals["request"],
                                    usage=vals["usage"])
        shares[name] = per_res
        queues.append(Queue(name=name, parent=parent, priority=int(prio if prio is not None else DEFAULT_QUEUE_PRIORITY),
                            creation_time=ctime if ctime is not None else 0.0))

    names = {q.name for q in queues}
    parent_of = {q.name: q.parent for q in queues}
    for q in queues:
        if q.parent is not None and q.parent not in names:
            problems.append((f"queues[{q.name}].parent", f"parent queue {q.parent!r} does not exist"))
    for name, message in tree_problems(parent_of):   # cycles, depth limit
        problems.append((f"queues[{name}].parent", message))
    if problems:
        raise FairShareInputError(problems)
    _default_parent_requests(queues, shares, explicit_request)
    return FairShareProblem(total, k_value, queues, shares)


def _default_parent_requests(queues: list[Queue], shares: dict[str, dict[str, QueueShare]],
                             explicit: dict[str, set[str]]) -> None:
    """A parent's request, when not given, is the sum of its children's (bottom-up: deepest queues first)."""
    level, _ = levels({q.name: q.parent for q in queues})
    children: dict[str, list[str]] = {}
    for q in queues:
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q.name)
    for name in sorted(level, key=level.get, reverse=True):
        for r in RESOURCES:
            if name in children and r not in explicit[name]:
                shares[name][r].requested = sum(shares[c][r].requested for c in children[name])


def load_problem(path: str | Path) -> FairShareProblem:
    """Read a calculator input file (YAML or JSON; JSON is YAML) within :mod:`scheduler.safe_io`'s limits,
    and parse it."""
    try:
        doc = safe_io.load_document(path)
    except SnapshotError as exc:
        raise FairShareInputError(exc.problems) from None
    return parse_problem(doc)


# ---------------------------------------------------------------------------------------------- output

def _clean(x: float) -> float | int:
    r = round(x, 6)
    return int(r) if r == int(r) and abs(r) < 2**53 else r


def result_document(problem: FairShareProblem, remaining: dict[str, float]) -> dict:
    """The ``--format json`` document."""
    return {"fair_share": {q.name: {r: _clean(problem.shares[q.name][r].fair_share) for r in RESOURCES}
                           for q in problem.queues},
            "remaining": {r: _clean(remaining[r]) for r in RESOURCES}}


def _tree_order(queues: list[Queue]) -> list[tuple[int, Queue]]:
    return tree_order(queues, lambda q: q.name, lambda q: q.parent)


def _num(x: float) -> str:
    if x == UNLIMITED:
        return "unlimited"
    r = round(x, 6)
    return f"{int(r):,}" if r == int(r) else f"{r:,.6g}"


def render_table(problem: FairShareProblem, remaining: dict[str, float], resources: list[str]) -> str:
    """One table per resource: queue tree, priority, weight, limit, deserved -> fair share -> requested."""
    blocks = []
    rows_order = _tree_order(problem.queues)
    for r in resources:
        header = ["queue", "priority", "weight", "limit", "deserved", "fair share", "requested", "usage"]
        rows = []
        for depth, q in rows_order:
            s = problem.shares[q.name][r]
            rows.append(["  " * depth + q.name, str(q.priority), _num(s.over_quota_weight), _num(s.limit),
                         _num(s.deserved), _num(s.fair_share), _num(s.requested), _num(s.usage)])
        widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
        lines = [f"{r.upper()} ({UNITS[r]}): total {_num(problem.total[r])}, k-value {_num(problem.k_value)}, "
                 f"not handed out at the top level {_num(remaining[r])}"]
        fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        lines.append(fmt(header))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(fmt(row) for row in rows)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_explain(problem: FairShareProblem, traces: dict, resources: list[str]) -> str:
    """The phase-by-phase division of every level (top level first, then each parent's children)."""
    parents: list[Optional[str]] = [None] + [q.name for _, q in _tree_order(problem.queues)]
    blocks = []
    for r in resources:
        for parent in parents:
            trace: Optional[DivisionTrace] = traces.get((parent, r))
            if trace is None:
                continue
            where = "top-level queues" if parent is None else f"children of {parent} (its fair share)"
            blocks.append(f"== {r.upper()}: {where} ==\n" + "\n".join(trace.lines(UNITS[r])))
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------- command

def add_arguments(parser) -> None:
    parser.add_argument("file", help="fair-share input (YAML or JSON): total, k_value, queues")
    parser.add_argument("--format", choices=("json", "table"), default="table", help="output format (default table)")
    parser.add_argument("--explain", action="store_true",
                        help="also print the phase-by-phase division (deserved, over-quota rounds, remainders)")
    parser.add_argument("--resource", choices=RESOURCES, action="append",
                        help="only show this resource in the table/explanation (repeatable; default all requested)")


def _shown_resources(problem: FairShareProblem, chosen: Optional[list[str]]) -> list[str]:
    if chosen:
        return [r for r in RESOURCES if r in chosen]
    used = [r for r in RESOURCES if problem.total[r] > 0 or any(
        s[r].requested > 0 or s[r].deserved != 0 for s in problem.shares.values())]
    return used or list(RESOURCES)


def run(args) -> int:
    problem = load_problem(args.file)
    traces: dict = {} if args.explain else None
    remaining = problem.solve(traces)
    resources = _shown_resources(problem, args.resource)
    if args.format == "json":
        json.dump(result_document(problem, remaining), sys.stdout, indent=2)
        sys.stdout.write("\n")
        if args.explain:
            print(render_explain(problem, traces, resources), file=sys.stderr)
        return 0
    print(render_table(problem, remaining, resources))
    if args.explain:
        print()
        print(render_explain(problem, traces, resources))
    return 0
