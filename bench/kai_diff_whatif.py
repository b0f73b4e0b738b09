"""The differential test on the states the what-if view reaches: every cycle of every slider, against KAI.

    python -m bench.kai_diff --whatif-states --snapshot-tool /tmp/kai/snapshot-tool --kai-runs 3
    python -m bench.kai_diff --whatif-states --snapshot-tool BIN --kai-cache DIR --json OUT --keep-failures DIR
    python -m bench.kai_diff --whatif-states --sliders "demand x1.5"        # without KAI: self-checks only

The what-if view runs scheduling cycles to steady state on the 64-node demo cluster
(:func:`bench.whatif_latency.cluster_64`, one run per slider of :data:`bench.whatif_latency.SLIDERS` and one for
the cluster as it is). The states those cycles reach (half-placed gangs, releasing victims, pipelined tasks,
a cluster over its fair shares after a slider moved) are cases the random generator of :mod:`bench.kai_diff_gen`
does not produce. For each case this follows kaidash's own trajectory (:func:`trajectory`: the cycles
:func:`scheduler.whatif.run_to_steady_state` itself runs, seen through its ``on_session`` hook), writes each
cycle's *input* state as a KAI ``/get-snapshot`` zip (:func:`scheduler.sources.kai_export.write_kai_zip`, the
snapshot's own action list: KAI's default one, without consolidation under spread placement), and compares
kaidash's decisions on that zip with ``--kai-runs`` runs of KAI's ``snapshot-tool`` as :mod:`bench.kai_diff`
does (identical, identical to one of KAI's runs, per type).

kaidash's self-checks run with or without KAI: its decisions on the exported zip equal the in-memory session's
on that state, or, where they do not, equal the in-memory session's on the state changed as a KAI zip changes it
(:func:`format_limits_explaining`: jobs in key order, whole-GPU device indices dropped; ``docs/snapshot-format.md``).
A state that neither explains is a self-check failure: the export or import lost something else. With ``--kai-cache DIR`` KAI's runs are kept per state under
``DIR/whatif/<case>/cycle-<n>-<sha256 of the zip>.json`` and reused. ``--job-orders N`` re-runs kaidash on every
state that differs from all of KAI's runs with N random orders of its jobs (:func:`job_orders_matching`), to tell
KAI's Go-map-order nondeterminism from a real difference.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

BASE = "base"


def cases(selected: Optional[set[str]] = None) -> list[tuple[str, object]]:
    """``(label, WhatIf or None)``: the cluster as it is (``base``), then every slider of the latency bench."""
    from .whatif_latency import SLIDERS

    out = [(BASE, None)] + list(SLIDERS.items())
    if selected is not None:
        unknown = selected - {label for label, _ in out}
        if unknown:
            raise ValueError(f"unknown slider(s) {sorted(unknown)}; known: {[label for label, _ in out]}")
        out = [(label, w) for label, w in out if label in selected]
    return out


def case_snapshot(whatif) -> object:
    """The state the what-if view starts the case's cycles from (the demo cluster, overridden)."""
    from .whatif_latency import cluster_64

    snap = cluster_64()
    return snap if whatif is None else whatif.apply(snap)


def trajectory(snapshot, cycles: int = 10) -> list[tuple[object, object]]:
    """``(input state, session result)`` of every cycle :func:`run_to_steady_state` runs on ``snapshot``."""
    from scheduler.whatif import run_to_steady_state

    out: list[tuple[object, object]] = []
    run_to_steady_state(snapshot, cycles, on_session=lambda state, result: out.append((state, result)))
    return out


def _renamed(decisions: dict, tasks: dict[str, str]) -> dict:
    out = dict(decisions)
    for key in ("allocated", "pipelined", "evicted"):
        out[key] = {tasks.get(t, t): v for t, v in decisions[key].items()}
    return out


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def run_state(case: str, cycle: int, state, result, opts: dict) -> dict:
    """One cycle's input state: kaidash on its zip (and its self-check), KAI's runs, the comparison."""
    from scheduler.sources.kai_export import export_kai_zip_bytes, kai_names

    from .kai_diff import against_kai_runs, cached_kai_runs, compare, object_features
    from .kai_diff_kaidash import kaidash_decisions, result_decisions

    data = export_kai_zip_bytes(state)
    digest = hashlib.sha256(data).hexdigest()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        features = object_features(json.loads(zf.read("snapshot.json")))
    record: dict = {"case": case, "cycle": cycle, "zip_sha256": digest,
                    "tasks": sum(len(j.tasks) for j in state.jobs)}
    in_memory = _renamed(result_decisions(state, result), kai_names(state)[1])
    with tempfile.TemporaryDirectory(prefix="kai-diff-whatif-") as tmp:
        zpath = Path(tmp) / f"{_slug(case)}-cycle-{cycle}.zip"
        zpath.write_bytes(data)
        kd = kaidash_decisions(str(zpath))
        record["kaidash"] = kd
        record["invariant_failures"] = []
        if not compare(kd, in_memory, {})["identical"]:
            explained = format_limits_explaining(state, kd)
            if explained:
                record["zip_format_limits"] = explained
            else:
                record["invariant_failures"] = [
                    "kaidash's decisions on the exported zip differ from its in-memory session"]
        if not opts.get("binary"):
            record["status"] = "ok"
            return record
        cache_file = None
        if opts.get("kai_cache"):
            cache_file = Path(opts["kai_cache"]) / "whatif" / _slug(case) / f"cycle-{cycle}-{digest[:16]}.json"
        kai, seconds, log, error = cached_kai_runs(opts["binary"], zpath, opts["kai_runs"], cache_file)
        if error is not None:
            record.update(status="kai-error", kai_error=error)
            return record
        record.update(against_kai_runs(kd, kai, features), kai_seconds=seconds, status="ok")
        differs = not (record["identical"] or record["matches_other_kai_run"])
        if differs and opts.get("job_orders"):
            record["job_orders"] = opts["job_orders"]
            record["job_orders_matching_kai"] = job_orders_matching(str(zpath), kai, opts["job_orders"])
        if opts.get("keep") and differs:
            _keep(Path(opts["keep"]), zpath, log, record, opts["binary"])
    return record


ZIP_FORMAT_LIMITS = ("job order", "whole-GPU device indices")
"""What a KAI zip cannot carry that kaidash's engine reads (``docs/snapshot-format.md``, export to KAI)."""


def as_the_zip_holds(state, limits) -> object:
    """A copy of ``state`` changed as the round trip through a KAI zip changes it in ``limits``
    (:data:`ZIP_FORMAT_LIMITS`): jobs in the import's key order, whole-GPU tasks without device indices."""
    import copy

    from scheduler.sources.kai_export import kai_names

    out = copy.deepcopy(state)
    if "job order" in limits:
        keys = kai_names(state)[0]
        out.jobs.sort(key=lambda j: keys[j.key])
    if "whole-GPU device indices" in limits:
        for _, t in out.iter_tasks():
            if not t.is_fractional:
                t.gpu_indices = []
    return out


def format_limits_explaining(state, zip_decisions: dict) -> list[str]:
    """The fewest of :data:`ZIP_FORMAT_LIMITS` that, applied to ``state`` in memory, make kaidash decide exactly as
    on its exported zip (``zip_decisions``); ``[]`` when none does: the round trip lost something else (a bug)."""
    from itertools import combinations

    from scheduler.engine import run_session
    from scheduler.sources.kai_export import kai_names

    from .kai_diff import compare
    from .kai_diff_kaidash import result_decisions

    tasks = kai_names(state)[1]
    for size in range(1, len(ZIP_FORMAT_LIMITS) + 1):
        for limits in combinations(ZIP_FORMAT_LIMITS, size):
            held = as_the_zip_holds(state, limits)
            if compare(zip_decisions, _renamed(result_decisions(held, run_session(held)), tasks), {})["identical"]:
                return list(limits)
    return []


def job_orders_matching(zip_path: str, kai_runs: list[dict], n: int, seed: int = 7) -> int:
    """Of ``n`` seeded random orders of the zip's jobs, how many make kaidash decide as one of ``kai_runs``.

    KAI inserts jobs into its queue heaps in Go map order (random per run) and the heaps' order can depend on
    it; kaidash inserts in snapshot order. A state where some order reproduces KAI is that nondeterminism (KAI's
    runs just did not show it); where none does, the difference is elsewhere."""
    import copy
    import random

    from scheduler.engine import run_session
    from scheduler.sources.kai_snapshot import import_kai_snapshot

    from .kai_diff import compare
    from .kai_diff_kaidash import result_decisions

    snap = import_kai_snapshot(zip_path).snapshot
    rng = random.Random(seed)
    hits = 0
    for _ in range(n):
        shuffled = copy.copy(snap)
        shuffled.jobs = list(snap.jobs)
        rng.shuffle(shuffled.jobs)
        kd = result_decisions(shuffled, run_session(shuffled))
        hits += any(compare(kd, k, {})["identical"] for k in kai_runs)
    return hits


def _keep(folder: Path, zpath: Path, log: str, record: dict, binary: str) -> None:
    """The zip, a KAI log at verbosity 6 (run again when the runs came from the cache) and the record."""
    from .kai_diff_kai import run_snapshot_tool

    folder.mkdir(parents=True, exist_ok=True)
    stem = zpath.stem
    (folder / zpath.name).write_bytes(zpath.read_bytes())
    if not log:
        log = run_snapshot_tool(binary, zpath).log
    (folder / f"{stem}.kai.log").write_text(log)
    (folder / f"{stem}.json").write_text(json.dumps(record, indent=1, default=str))


def run_case(label: str, whatif, opts: dict) -> list[dict]:
    """Every cycle of one case (the cycles ``run_to_steady_state`` runs for the what-if view)."""
    steps = trajectory(case_snapshot(whatif), opts.get("cycles", 10))
    return [run_state(label, k, state, result, opts) for k, (state, result) in enumerate(steps)]


def summarise_case(records: list[dict]) -> dict:
    """Per case: states compared, identical to KAI's first run / to one of its runs, KAI-deterministic ones."""
    ok = [r for r in records if r.get("status") == "ok"]
    out: dict = {"states": len(records), "compared": len(ok),
                 "invariant_failures": sum(len(r.get("invariant_failures", [])) for r in records),
                 "zip_format_limits": [(r["case"], r["cycle"], r["zip_format_limits"]) for r in records
                                       if r.get("zip_format_limits")],
                 "kaidash_evictions": sum(len(r["kaidash"].get("evicted", {})) for r in ok)}
    with_kai = [r for r in ok if "identical" in r]
    if with_kai:
        det = [r for r in with_kai if not r["kai_nondeterministic"]]
        out.update(identical=sum(r["identical"] for r in with_kai),
                   identical_to_a_kai_run=sum(r["identical"] or r["matches_other_kai_run"] for r in with_kai),
                   deterministic=len(det), identical_deterministic=sum(r["identical"] for r in det),
                   per_type={t: sum(r["equal"][t] for r in with_kai)
                             for t in ("allocate", "pipeline", "evict", "fair_share")},
                   kai_evictions=sum(len(r["kai"].get("evicted", {})) for r in with_kai),
                   differing_cycles=[r["cycle"] for r in with_kai
                                     if not (r["identical"] or r["matches_other_kai_run"])],
                   job_order_probes=[(r["cycle"], r["job_orders_matching_kai"], r["job_orders"])
                                     for r in with_kai if "job_orders_matching_kai" in r])
    return out


def print_table(summaries: dict[str, dict]) -> None:
    with_kai = any("identical" in s for s in summaries.values())
    if not with_kai:
        print(f"{'case':>18} {'states':>6} {'evictions':>9}  self-checks")
        for label, s in summaries.items():
            print(f"{label:>18} {s['states']:>6} {s['kaidash_evictions']:>9}  "
                  + ("hold" if not s["invariant_failures"] else f"{s['invariant_failures']} failure(s)")
                  + (f" ({len(s['zip_format_limits'])} state(s) explained by the zip format's limits)"
                     if s["zip_format_limits"] else ""))
        return
    print(f"{'case':>18} {'states':>6} {'= KAI 1st':>9} {'= a KAI run':>11} {'det. =':>7} "
          f"{'alloc':>5} {'pipe':>4} {'evict':>5} {'fair':>4} {'evictions kd/KAI':>16}  differing cycles")
    for label, s in summaries.items():
        if "identical" not in s:
            print(f"{label:>18} {s['states']:>6}  not compared")
            continue
        pt = s["per_type"]
        print(f"{label:>18} {s['compared']:>6} {s['identical']:>9} {s['identical_to_a_kai_run']:>11} "
              f"{s['identical_deterministic']:>3}/{s['deterministic']:<3} {pt['allocate']:>5} {pt['pipeline']:>4} "
              f"{pt['evict']:>5} {pt['fair_share']:>4} {s['kaidash_evictions']:>7}/{s['kai_evictions']:<8}  "
              + (" ".join(map(str, s["differing_cycles"])) or "-")
              + ("" if not s["invariant_failures"] else f"  ({s['invariant_failures']} self-check failure(s))"))
    probed = [(label, r) for label, s in summaries.items() if label != "total" for r in s.get("job_order_probes", [])]
    for label, (cycle, hits, n) in probed:
        print(f"  {label} cycle {cycle}: {hits}/{n} random job orders of kaidash decide as one of KAI's runs")


def run(opts: dict, selected: Optional[set[str]] = None) -> dict:
    """All cases: ``{"summary": {case: figures, "total": figures}, "records": [...]}``; prints the table."""
    records: list[dict] = []
    summaries: dict[str, dict] = {}
    for label, whatif in cases(selected):
        recs = run_case(label, whatif, opts)
        records.extend(recs)
        summaries[label] = summarise_case(recs)
    summaries["total"] = summarise_case(records)
    print_table(summaries)
    for r in records:
        for failure in r.get("invariant_failures", []):
            print(f"  {r['case']} cycle {r['cycle']}: {failure}")
        if r.get("zip_format_limits"):
            print(f"  {r['case']} cycle {r['cycle']}: decisions on the zip differ from in memory, explained by what "
                  f"a KAI zip cannot carry: {', '.join(r['zip_format_limits'])}")
        if r.get("status") == "kai-error":
            print(f"  {r['case']} cycle {r['cycle']}: KAI failed: {r['kai_error'][-300:]}")
    return {"summary": summaries, "records": records}
