"""Hypothesis strategies for snapshot format v1 documents: valid ones, and valid ones with one mutation.

``snapshot_docs()`` builds documents the loader must accept and the engine must handle:

- nodes with whole GPUs of one memory size, CPU and memory, sometimes written with unit suffixes
  (``64Gi``, ``8000m``, ``80Gi`` of GPU memory);
- a queue *tree* (every parent exists, no cycles), listed in shuffled order;
- jobs only in leaf queues, 1..N tasks, ``min_available`` within the task count, unique names;
- tasks that request nothing, whole GPUs, a fraction of one or two GPUs, or GPU memory; placed tasks
  (running, binding, releasing) sit on existing nodes **within capacity**: CPU, memory, pod slots, and per
  device GPU share never exceed the node's, and each placed GPU task names its device indices (and its
  GPU group when it shares a device).

``invalid_docs()`` takes such a document and applies exactly one mutation, returning the document and an
:class:`Expectation` saying which object and field the loader's error must name.

``hostile_snapshot_texts()``, ``hostile_fairshare_texts()`` and ``hostile_kai_zips()`` (end of the file) put one
hostile or broken part into a valid input: a YAML alias bomb, nesting hundreds of levels deep, a 6,000-digit
integer, a YAML tag, damaged bytes, a truncated file, a zip whose headers lie, a zip bomb, a thousand members.

The engine property tests reuse ``snapshot_docs`` (and ``snapshots``) to check invariants on random clusters.
"""

from __future__ import annotations

import copy
import io
import json
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, Optional

import yaml
from hypothesis import strategies as st

from scheduler.model import ACTIONS, memory_to_fraction

GIB = 2**30
GPU_MEMORY_SIZES_MIB = (16384, 24576, 40960, 81920)
FRACTIONS = (0.25, 0.5, 0.75)
PLACED_STATUSES = ("running", "running", "binding", "releasing")
UNPLACED_STATUSES = ("pending",) * 6 + ("failed", "succeeded")
EPS = 1e-9


# ---------------------------------------------------------------------------------------------- helpers

def _bytes(draw, gib: int) -> Any:
    """A byte count as a plain number or as a ``Gi`` quantity string."""
    return draw(st.sampled_from([gib * GIB, f"{gib}Gi"]))


def _millis(draw, millis: int) -> Any:
    return draw(st.sampled_from([millis, f"{millis}m"]))


@dataclass
class _NodeRoom:
    """What is still free on a node while tasks are being placed on it."""

    name: str
    gpus: int
    gpu_memory_mib: float
    cpu_millis: float
    memory_bytes: float
    pods: int
    gpu_free: list[float]

    def fits_host(self, cpu: float, mem: float) -> bool:
        return self.pods >= 1 and cpu <= self.cpu_millis + EPS and mem <= self.memory_bytes + EPS

    def take_host(self, cpu: float, mem: float) -> None:
        self.pods -= 1
        self.cpu_millis -= cpu
        self.memory_bytes -= mem


# ---------------------------------------------------------------------------------------------- valid parts

@st.composite
def _node(draw, index: int) -> tuple[dict, _NodeRoom]:
    name = f"n{index}"
    gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
    cpu = draw(st.integers(4, 256)) * 1000
    mem_gib = draw(st.integers(16, 2048))
    pods = draw(st.integers(4, 110))
    doc: dict[str, Any] = {"name": name, "gpus": gpus}
    gpu_mib = 0.0
    if gpus:
        gpu_mib = draw(st.sampled_from(GPU_MEMORY_SIZES_MIB))
        doc["gpu_memory_mib"] = draw(st.sampled_from([gpu_mib, f"{gpu_mib // 1024}Gi"]))
        if draw(st.booleans()):
            doc["gpu_model"] = {16384: "T4", 24576: "L4", 40960: "A100-40GB", 81920: "H100"}[gpu_mib]
    doc["cpu_millis"] = _millis(draw, cpu)
    doc["memory_bytes"] = _bytes(draw, mem_gib)
    doc["pods"] = pods
    if draw(st.booleans()):
        doc["labels"] = {"kai.scheduler/node-pool": draw(st.sampled_from(["pool-a", "pool-b"]))}
    if draw(st.integers(0, 9)) == 0:
        doc["ready"] = False
    room = _NodeRoom(name, gpus, gpu_mib, cpu, mem_gib * GIB, pods, [1.0] * gpus)
    return doc, room


@st.composite
def _queue_resource(draw, unit_scale: float) -> dict:
    quota = draw(st.sampled_from([-1, None]) | st.integers(0, 16).map(lambda x: x * unit_scale))
    out: dict[str, Any] = {}
    if quota is not None:
        out["quota"] = quota
    if draw(st.booleans()):
        base = quota if quota is not None and quota >= 0 else 0
        out["limit"] = draw(st.sampled_from([-1, -1, base, base + 4 * unit_scale, base + 8 * unit_scale]))
        if quota == -1:
            out["limit"] = -1
    if draw(st.booleans()):
        out["over_quota_weight"] = draw(st.sampled_from([0, 1, 2, 3, 0.5]))
    return out


@st.composite
def _queues(draw, max_queues: int) -> tuple[list[dict], set[str]]:
    """A queue tree in shuffled order, and the names of its leaves."""
    count = draw(st.integers(1, max_queues))
    docs = []
    for i in range(count):
        doc: dict[str, Any] = {"name": f"q{i}"}
        if i and draw(st.booleans()):
            doc["parent"] = f"q{draw(st.integers(0, i - 1))}"
        if draw(st.booleans()):
            doc["priority"] = draw(st.sampled_from([50, 100, 100, 150]))
        if draw(st.booleans()):
            doc["creation_time"] = 1_767_000_000 + i
        for resource, scale in (("gpu", 1), ("cpu", 4000), ("memory", 16 * GIB)):
            if draw(st.booleans()):
                doc[resource] = draw(_queue_resource(scale))
        docs.append(doc)
    parents = {d["parent"] for d in docs if "parent" in d}
    leaves = {d["name"] for d in docs} - parents
    return draw(st.permutations(docs)), leaves


def _place_gpu(kind: str, gpu: float, devices: int, mib: Optional[float], room: _NodeRoom) -> Optional[tuple[list[int], float]]:
    """Device indices for a GPU request on ``room`` (and the share per device), or ``None`` if it does not fit."""
    if room.gpus == 0:
        return None
    if kind == "whole":
        free = [i for i, f in enumerate(room.gpu_free) if f >= 1.0 - EPS]
        return (free[: int(gpu)], 1.0) if len(free) >= gpu else None
    if kind == "gpu_memory":
        if mib > room.gpu_memory_mib:
            return None
        share = memory_to_fraction(mib, room.gpu_memory_mib)
    else:
        share = gpu
    free = [i for i, f in enumerate(room.gpu_free) if f >= share - EPS]
    return (free[:devices], share) if len(free) >= devices else None


@st.composite
def _task(draw, name: str, rooms: list[_NodeRoom], subgroup: Optional[str]) -> dict:
    kind = draw(st.sampled_from(["cpu", "whole", "fraction", "gpu_memory", "multi_fraction"]))
    doc: dict[str, Any] = {"name": name}
    gpu, devices, mib = 0.0, 1, None
    if kind == "whole":
        gpu = draw(st.sampled_from([1, 1, 2, 4, 8]))
        doc["gpu"] = gpu
    elif kind in ("fraction", "multi_fraction"):
        gpu = draw(st.sampled_from(FRACTIONS))
        doc["gpu"] = gpu
        if kind == "multi_fraction":
            devices = 2
            doc["gpu_devices"] = 2
    elif kind == "gpu_memory":
        mib = draw(st.sampled_from([4096, 8192, 10000, 20480]))
        doc["gpu_memory_mib"] = mib
    cpu = draw(st.integers(0, 16)) * 500
    mem_gib = draw(st.integers(0, 64))
    doc["cpu_millis"] = _millis(draw, cpu)
    doc["memory_bytes"] = _bytes(draw, mem_gib)
    if subgroup is not None:
        doc["subgroup"] = subgroup

    if rooms and draw(st.booleans()):
        start = draw(st.integers(0, len(rooms) - 1))
        for room in rooms[start:] + rooms[:start]:  # first node from `start` on where the task fits
            if not room.fits_host(cpu, mem_gib * GIB):
                continue
            placement = ([], 0.0) if kind == "cpu" else _place_gpu(kind, gpu, devices, mib, room)
            if placement is None:
                continue
            indices, share = placement
            room.take_host(cpu, mem_gib * GIB)
            for i in indices:
                room.gpu_free[i] -= share
            doc["status"] = draw(st.sampled_from(PLACED_STATUSES))
            doc["node"] = room.name
            if indices:
                doc["gpu_index"] = indices[0] if len(indices) == 1 else indices
            if indices and kind != "whole":
                groups = [f"{room.name}-gpu{i}" for i in indices]
                doc["gpu_group"] = groups[0] if len(groups) == 1 else groups
            return doc
    status = draw(st.sampled_from(UNPLACED_STATUSES))
    if status != "pending" or draw(st.booleans()):
        doc["status"] = status
    return doc


@st.composite
def _job(draw, index: int, leaves: list[str], rooms: list[_NodeRoom], max_tasks: int) -> dict:
    name = f"j{index}"
    doc: dict[str, Any] = {"name": name}
    if draw(st.booleans()):
        doc["namespace"] = draw(st.sampled_from(["team-a", "team-b"]))
    doc["queue"] = draw(st.sampled_from(sorted(leaves)))
    if draw(st.booleans()):
        doc["priority"] = draw(st.sampled_from([25, 50, 50, 75, 100, 125]))
    if draw(st.integers(0, 3)) == 0:
        doc["preemptible"] = draw(st.booleans())
    n_tasks = draw(st.integers(1, max_tasks))
    doc["min_available"] = draw(st.integers(1, n_tasks))
    doc["creation_time"] = 1_767_200_000 + index
    # Sometimes a leader/workers gang: task 0 leads, the others work; each sub-group needs one task.
    with_subgroups = n_tasks >= 2 and draw(st.integers(0, 4)) == 0
    if with_subgroups:
        doc["subgroups"] = [{"name": "leader", "min_available": 1}, {"name": "workers", "min_available": 1}]
    doc["tasks"] = [draw(_task(f"{name}-t{k}", rooms, ("leader" if k == 0 else "workers") if with_subgroups else None))
                    for k in range(n_tasks)]
    return doc


@st.composite
def _config(draw) -> dict:
    doc: dict[str, Any] = {}
    if draw(st.booleans()):
        chosen = [a for a in ACTIONS if draw(st.booleans())] or ["allocate"]
        doc["actions"] = draw(st.sampled_from([chosen, ",".join(chosen)]))
    if draw(st.booleans()):
        doc["placement"] = {"gpu": draw(st.sampled_from(["binpack", "spread"])),
                            "cpu": draw(st.sampled_from(["binpack", "spread"]))}
    if draw(st.booleans()):
        doc["gpu_device_order"] = draw(st.sampled_from(["pack", "spread"]))
    if draw(st.booleans()):
        doc["k_value"] = draw(st.sampled_from([0, 0.5, 1, 2]))
    if draw(st.booleans()):
        doc["stale_grace_period_s"] = draw(st.sampled_from([0, 60, "5m"]))
    return doc


@st.composite
def snapshot_docs(draw, max_nodes: int = 5, max_queues: int = 6, max_jobs: int = 6, max_tasks: int = 4,
                  min_nodes: int = 1, min_jobs: int = 1) -> dict:
    """A valid snapshot format v1 document (plain dict, as YAML or JSON would parse it)."""
    doc: dict[str, Any] = {"version": 1}
    if draw(st.booleans()):
        doc["time"] = 1_767_225_600
    config = draw(_config())
    if config:
        doc["config"] = config
    node_docs, rooms = [], []
    for i in range(draw(st.integers(min_nodes, max_nodes))):
        nd, room = draw(_node(i))
        node_docs.append(nd)
        rooms.append(room)
    doc["nodes"] = node_docs
    queue_docs, leaves = draw(_queues(max_queues))
    doc["queues"] = queue_docs
    doc["jobs"] = [draw(_job(i, sorted(leaves), rooms, max_tasks)) for i in range(draw(st.integers(min_jobs, max_jobs)))]
    if draw(st.integers(0, 3)) == 0:
        names = sorted(q["name"] for q in queue_docs)
        doc["usage"] = {q: {"gpu": draw(st.sampled_from([0, 0.25, 0.5]))} for q in names[: draw(st.integers(1, len(names)))]}
    return doc


def snapshots(**kwargs):
    """Loaded :class:`~scheduler.model.Snapshot` objects built from :func:`snapshot_docs`."""
    from scheduler.snapshot_io import snapshot_from_dict

    return snapshot_docs(**kwargs).map(snapshot_from_dict)


# ---------------------------------------------------------------------------------------------- mutations

@dataclass
class Expectation:
    """What the loader's error must say about a mutated document.

    Some problem's path must contain one of ``objects`` (e.g. ``nodes[n1]``) immediately followed by
    ``.field``; and its message must contain ``words`` when given.
    """

    mutation: str
    objects: tuple[str, ...]
    field: str
    words: str = ""

    def matches(self, path: str, message: str) -> bool:
        return any(f"{obj}.{self.field}" in path for obj in self.objects) and self.words in message


def _targets(doc: dict) -> list[tuple[str, dict, str]]:
    """Every object of a document as ``(kind, object, path)``: nodes, queues, jobs, tasks."""
    out = [("node", n, f"nodes[{n['name']}]") for n in doc["nodes"]]
    out += [("queue", q, f"queues[{q['name']}]") for q in doc["queues"]]
    for j in doc["jobs"]:
        jp = f"jobs[{j['name']}]"
        out.append(("job", j, jp))
        out += [("task", t, f"{jp}.tasks[{t['name']}]") for t in j["tasks"]]
    return out


# Quantity fields per kind, with their unit, and whether -1 is allowed (unlimited).
_QUANTITIES = {
    "node": [("gpus", "devices"), ("gpu_memory_mib", "MiB"), ("cpu_millis", "millicores"),
             ("memory_bytes", "bytes"), ("pods", "count")],
    "task": [("gpu", "devices"), ("cpu_millis", "millicores"), ("memory_bytes", "bytes")],
    "job": [("min_available", "count"), ("preemption_delay_s", "seconds")],
}
_WRONG_UNIT = {"devices": ["1Gi", "2m"], "MiB": ["8Ki", "80G", "8000m"], "millicores": ["4Gi", "4k", "4cores"], "bytes": ["64m", "64h", "8GB"], "count": ["3x", "10Mi"], "seconds": ["5d", "10Gi"]}
_QUEUE_UNITS = {"gpu": "devices", "cpu": "millicores", "memory": "bytes"}

# (kind, field, bad value, words in the message)
_WRONG_TYPES = [
    ("node", "ready", "yes", "expected true or false"),
    ("node", "labels", ["pool-a"], "expected a mapping"),
    ("node", "gpus", [1], "expected a number"),
    ("node", "cpu_millis", {"value": 1}, "expected a number"),
    ("queue", "gpu", 5, "expected a mapping"),
    ("queue", "priority", "high", "expected a number"),
    ("queue", "parent", 7, "expected a non-empty string"),
    ("job", "tasks", {"name": "x"}, "expected a list"),
    ("job", "preemptible", "no", "expected true or false"),
    ("job", "min_available", True, "expected a number"),
    ("job", "queue", ["q0"], "expected a non-empty string"),
    ("task", "status", 3, "expected a non-empty string"),
    ("task", "memory_bytes", None, "expected a number"),
    ("task", "gpu_index", "first", "expected a number"),
]


def _descendants(doc: dict, name: str) -> list[str]:
    children: dict[str, list[str]] = {}
    for q in doc["queues"]:
        if "parent" in q:
            children.setdefault(q["parent"], []).append(q["name"])
    out, todo = [], [name]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _chain_up(doc: dict, start: str, stop: str) -> list[str]:
    """Queue names from ``start`` up the parent links to ``stop`` (inclusive)."""
    parent = {q["name"]: q.get("parent") for q in doc["queues"]}
    out = [start]
    while out[-1] != stop:
        out.append(parent[out[-1]])
    return out


@st.composite
def _mutate(draw, doc: dict) -> tuple[dict, Expectation]:
    doc = copy.deepcopy(doc)
    targets = _targets(doc)
    mutations = ["unknown_key", "negative", "wrong_unit", "dangling_parent", "cycle", "wrong_type"]
    if doc["jobs"]:
        mutations.append("unknown_node")
    non_leaf = sorted({q["parent"] for q in doc["queues"] if "parent" in q})
    if non_leaf:
        mutations.append("non_leaf_queue")
    mutation = draw(st.sampled_from(mutations))

    if mutation == "unknown_key":
        # None of these keys is valid on any object (quota belongs inside gpu/cpu/memory of a queue).
        kind, obj, path = draw(st.sampled_from(targets + [("config", doc.setdefault("config", {}), "config")]))
        key = draw(st.sampled_from(["gpus_requested", "Priority", "node_name", "quota", "extra"]))
        obj[key] = 1
        return doc, Expectation(mutation, (path,), key, "unknown key")

    if mutation == "negative":
        kind, obj, path = draw(st.sampled_from(targets))
        if kind == "queue":
            resource = draw(st.sampled_from(["gpu", "cpu", "memory"]))
            # a negative over-quota weight is a valid Queue (KAI's CRD has no minimum; issue 13): not a mutation
            field = draw(st.sampled_from(["quota", "limit"]))
            value = draw(st.sampled_from([-2, -0.5, -100]))
            obj.setdefault(resource, {})[field] = value
            return doc, Expectation(mutation, (f"{path}.{resource}",), field, "negative")
        field, _ = draw(st.sampled_from(_QUANTITIES[kind]))
        obj[field] = draw(st.sampled_from([-1, -2, -0.5, -4096]))
        return doc, Expectation(mutation, (path,), field, "negative")

    if mutation == "wrong_unit":
        kind, obj, path = draw(st.sampled_from(targets))
        if kind == "queue":
            resource = draw(st.sampled_from(["gpu", "cpu", "memory"]))
            obj.setdefault(resource, {})["quota"] = draw(st.sampled_from(_WRONG_UNIT[_QUEUE_UNITS[resource]]))
            return doc, Expectation(mutation, (f"{path}.{resource}",), "quota", "wrong unit")
        field, unit = draw(st.sampled_from(_QUANTITIES[kind]))
        obj[field] = draw(st.sampled_from(_WRONG_UNIT[unit]))
        return doc, Expectation(mutation, (path,), field, "wrong unit")

    if mutation == "dangling_parent":
        q = draw(st.sampled_from(doc["queues"]))
        q["parent"] = "no-such-queue"
        return doc, Expectation(mutation, (f"queues[{q['name']}]",), "parent", "does not exist")

    if mutation == "cycle":
        q = draw(st.sampled_from(doc["queues"]))
        target = draw(st.sampled_from([q["name"]] + _descendants(doc, q["name"])))
        members = _chain_up(doc, target, q["name"])  # the loop: q -> target -> ... -> q
        q["parent"] = target
        return doc, Expectation(mutation, tuple(f"queues[{m}]" for m in members), "parent", "cycle")

    if mutation == "unknown_node":
        job = draw(st.sampled_from(doc["jobs"]))
        task = draw(st.sampled_from(job["tasks"]))
        task["node"] = "ghost-node"
        task["status"] = draw(st.sampled_from(["running", "binding", "pending"]))
        return doc, Expectation(mutation, (f"jobs[{job['name']}].tasks[{task['name']}]",), "node", "unknown node")

    if mutation == "non_leaf_queue":
        job = draw(st.sampled_from(doc["jobs"]))
        job["queue"] = draw(st.sampled_from(non_leaf))
        return doc, Expectation(mutation, (f"jobs[{job['name']}]",), "queue", "not a leaf queue")

    assert mutation == "wrong_type"
    kind, field, value, words = draw(st.sampled_from(_WRONG_TYPES))
    _, obj, path = draw(st.sampled_from([t for t in targets if t[0] == kind]))
    obj[field] = value
    return doc, Expectation(mutation, (path,), field, words)


def invalid_docs(**kwargs) -> st.SearchStrategy[tuple[dict, Expectation]]:
    """A valid document with exactly one mutation, and what the loader must report about it."""
    return snapshot_docs(**kwargs).flatmap(_mutate)


def dump(doc: dict, fmt: str) -> str:
    """Document text in ``yaml`` or ``json``, as a user would write it."""
    if fmt == "json":
        return json.dumps(doc, indent=1)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)



# ---------------------------------------------------------------------------------------------- hostile input
# Documents, fair-share inputs and KAI zips with one hostile or broken part, for the fuzz tests
# (tests/test_fuzz_loaders.py). The loaders must return or raise a KaidashError, within the limits.

SENTINEL = "__HOSTILE_VALUE__"


def _alias_bomb(levels: int, fanout: int) -> str:
    """A flow-style YAML mapping whose last entry expands to ``fanout ** levels`` strings."""
    parts = ["b0: &b0 [" + ", ".join(["lol"] * fanout) + "]"]
    parts += [f"b{k}: &b{k} [" + ", ".join([f"*b{k - 1}"] * fanout) + "]" for k in range(1, levels)]
    return "{" + ", ".join(parts) + "}"


@st.composite
def _hostile_fragment(draw, fmt: str) -> str:
    """One hostile value, as text in ``fmt``: an alias bomb (YAML), deep nesting, huge or odd numbers, tags."""
    kinds = ["deep_list", "deep_map", "big_int", "odd_number", "long_string", "wide_list"]
    if fmt == "yaml":
        kinds += ["alias_bomb", "alias_bomb", "recursive_alias", "tag", "anchor_reuse"]
    kind = draw(st.sampled_from(kinds))
    if kind == "deep_list":
        depth = draw(st.integers(1, 400))
        return "[" * depth + "]" * depth
    if kind == "deep_map":
        depth = draw(st.integers(1, 300))
        return '{"k": ' * depth + "1" + "}" * depth
    if kind == "big_int":
        return ("-" if draw(st.booleans()) else "") + "9" * draw(st.integers(300, 6000))
    if kind == "odd_number":
        return draw(st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "0.0000001", "1e-400", "0x10", ".inf",
                                     "1_000", "0o17", "-0"]))
    if kind == "long_string":
        return json.dumps("x" * draw(st.integers(1000, 200_000)))
    if kind == "wide_list":
        return "[" + ", ".join(["1"] * draw(st.integers(100, 20_000))) + "]"
    if kind == "alias_bomb":
        return _alias_bomb(draw(st.integers(2, 12)), draw(st.integers(2, 12)))
    if kind == "recursive_alias":
        return "&r [1, *r]"
    if kind == "anchor_reuse":
        return "[&a 1, &a 2, *a, *undefined]"
    return draw(st.sampled_from(["!!binary aGVsbG8=", "!!binary '%%%'", "!!timestamp 2001-12-14", "2001-13-45",
                                 "!!set {a, b}", "!!python/object:os.system ls", "!!float nan", "!!int '12x'",
                                 "!!omap [a: 1]", "!!str", "!<tag:yaml.org,2002:map> {}"]))


def _holders(doc: dict) -> list[dict]:
    out = [doc]
    for key in ("nodes", "queues", "jobs"):
        out += [x for x in doc.get(key, []) if isinstance(x, dict)]
    out += [t for j in doc.get("jobs", []) for t in j.get("tasks", []) if isinstance(t, dict)]
    out += [x for q in doc.get("queues", []) for x in (q.get("gpu"), q.get("total")) if isinstance(x, dict)]
    return out


@st.composite
def _with_hostile_part(draw, doc: dict, fmt: str) -> str:
    """``doc`` as ``fmt`` text with one hostile change: a hostile value in a field, or damaged text."""
    doc = copy.deepcopy(doc)
    how = draw(st.sampled_from(["value", "value", "value", "truncate", "bytes", "repeat"]))
    if how == "value":
        holder = draw(st.sampled_from(_holders(doc)))
        key = draw(st.sampled_from(sorted(map(str, holder))) | st.sampled_from(["labels", "extra", "name"]))
        holder[key] = SENTINEL
        text = dump(doc, fmt)
        return text.replace(json.dumps(SENTINEL) if fmt == "json" else SENTINEL, draw(_hostile_fragment(fmt)), 1)
    text = dump(doc, fmt)
    if how == "truncate":
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if how == "repeat":  # many copies of one bad object: thousands of problems
        return text + ("\n" if fmt == "yaml" else "") + draw(st.sampled_from(["", "x: [" + "1, " * 5000 + "1]"]))
    raw = bytearray(text.encode())
    for _ in range(draw(st.integers(1, 8))):
        if raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return raw.decode("latin-1")


@st.composite
def hostile_snapshot_texts(draw) -> tuple[str, str]:
    """``(text, fmt)``: a small valid snapshot written as ``fmt`` with one hostile part."""
    fmt = draw(st.sampled_from(["yaml", "json"]))
    doc = draw(snapshot_docs(max_nodes=3, max_queues=3, max_jobs=3, max_tasks=2))
    return draw(_with_hostile_part(doc, fmt)), fmt


@st.composite
def fairshare_docs(draw) -> dict:
    """A valid fair-share calculator input: a small queue tree with quotas, weights, limits and requests."""
    queues, _ = draw(_queues(4))
    out = []
    for q in queues:
        res = {"quota": draw(st.integers(0, 8)), "over_quota_weight": draw(st.integers(0, 4)),
               "limit": draw(st.sampled_from([-1, 4, 16])), "request": draw(st.integers(0, 16))}
        out.append({"name": q["name"], "parent": q.get("parent"), "gpu": res})
    return {"total": {"gpu": draw(st.integers(0, 64))}, "k_value": 1.0, "queues": out}


@st.composite
def hostile_fairshare_texts(draw) -> tuple[str, str]:
    """``(text, fmt)``: a fair-share input with one hostile part."""
    fmt = draw(st.sampled_from(["yaml", "json"]))
    return draw(_with_hostile_part(draw(fairshare_docs()), fmt)), fmt


def _zip_of(member_bytes: bytes, name: str = "snapshot.json", extra: int = 0, stored: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, member_bytes)
        for i in range(extra):
            zf.writestr(f"extra-{i}.txt", b"")
    return buf.getvalue()


@st.composite
def hostile_kai_zips(draw, base_doc: dict) -> bytes:
    """A KAI ``/get-snapshot`` zip of ``base_doc`` with one hostile part: in the JSON (a hostile value in a
    raw object, damaged text), in the archive (member names and counts, lying sizes, flipped bytes, flags,
    compression method, truncation), or a bomb."""
    where = draw(st.sampled_from(["json", "json", "archive", "bomb"]))
    if where == "bomb":
        size = draw(st.sampled_from([2**20, 3 * 2**20, 9 * 2**20]))
        return _zip_of(b'{"rawObjects": {"pods": [' + b" " * size + b"]}}")
    if where == "json":
        doc = copy.deepcopy(base_doc)
        pods = doc["rawObjects"]["pods"]
        holders = [doc, doc["rawObjects"], doc["config"], doc["schedulerParams"]] + pods[:3]
        holders += [p.get("metadata") for p in pods[:3] if isinstance(p.get("metadata"), dict)]
        holders += [p.get("spec") for p in pods[:3] if isinstance(p.get("spec"), dict)]
        holder = draw(st.sampled_from(holders))
        holder[draw(st.sampled_from(sorted(holder)) | st.just("extra"))] = SENTINEL
        text = json.dumps(doc).replace(json.dumps(SENTINEL), draw(_hostile_fragment("json")), 1)
        if draw(st.booleans()):
            text = text[: draw(st.integers(0, len(text)))]
        return _zip_of(text.encode(errors="surrogatepass"), stored=draw(st.booleans()))
    data = bytearray(_zip_of(json.dumps(base_doc).encode(),
                             name=draw(st.sampled_from(["snapshot.json", "other.json", "dir/snapshot.json", "a.txt",
                                                        "snapshot.json/../x.json", "ñ.json"])),
                             extra=draw(st.sampled_from([0, 0, 3, 1100]))))
    change = draw(st.sampled_from(["flip", "truncate", "sizes", "flags", "method"]))
    central = data.rfind(b"PK\x01\x02")
    if change == "flip":
        for _ in range(draw(st.integers(1, 16))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif change == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif change == "sizes" and central > 0:
        first_central = data.find(b"PK\x01\x02")
        value = draw(st.sampled_from([0, 1, 1024, 2**31, 2**32 - 1]))
        struct.pack_into("<I", data, 22, value)
        struct.pack_into("<I", data, first_central + 24, value)
    elif change == "flags":
        flags = draw(st.sampled_from([1, 8, 0x41, 0xFFFF]))
        struct.pack_into("<H", data, 6, flags)
    else:
        method = draw(st.sampled_from([1, 6, 9, 12, 14, 98, 99, 0xFFFF]))
        struct.pack_into("<H", data, 8, method)
        first_central = data.find(b"PK\x01\x02")
        if first_central > 0:
            struct.pack_into("<H", data, first_central + 10, method)
    return bytes(data)
