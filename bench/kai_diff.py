"""Differential test against the real KAI: the same random clusters through kaidash and KAI's ``snapshot-tool``.

    python -m bench.kai_diff --seeds 1000..1099 --snapshot-tool /tmp/kai/snapshot-tool
    python -m bench.kai_diff --seeds 1000..1099 --snapshot-tool BIN --actions default --jobs 2
    python -m bench.kai_diff --seeds 1..20 --keep-failures /tmp/diffs      # zips, logs, decisions of mismatches
    python -m bench.kai_diff --seeds 4000..4199 --snapshot-tool BIN --actions default --kai-runs 10 --kai-cache DIR
    python -m bench.kai_diff --seeds 1000..1099 --snapshot-tool BIN --topology   # clusters with racks and constraints
    python -m bench.kai_diff --seeds 1000..1099 --snapshot-tool BIN --mig        # clusters with MIG nodes and pods
    python -m bench.kai_diff --seeds 1..50                                  # without KAI: kaidash invariants only
    python -m bench.kai_diff --seeds 1..50 --snapshot-tool BIN --kaidash-checkout /tmp/kaidash-base
    python -m bench.kai_diff --whatif-states --snapshot-tool BIN --kai-runs 3   # the what-if view's cycle states

Every seed is one cluster from :mod:`bench.kai_diff_gen` (2-60 nodes; the features are listed there) written as a
KAI ``/get-snapshot`` zip. kaidash imports the zip and runs one session (:mod:`bench.kai_diff_kaidash`); KAI's
``snapshot-tool`` replays it (:mod:`bench.kai_diff_kai`, run ``--kai-runs`` times: when its runs disagree with each
other the cluster is counted as KAI-nondeterministic, shown separately and left out of the second share). Both sides'
decisions are compared as sets, per type: allocation (task → node), pipelining (task → node), evictions (task →
action) and fair share (queue → GPU / CPU cores / memory GB, within KAI's printed precision of 0.001). Each
mismatch is tagged with the features of the objects involved, so the report says where differences come from.

``--actions allocate`` (default) replays the allocate action alone; ``--actions default`` KAI's default list
(allocate, consolidation, reclaim, preempt, stalegangeviction). ``--kaidash-checkout DIR`` measures another kaidash
commit (e.g. the baseline before a fix): its engine runs in a subprocess with ``PYTHONPATH=DIR``.

Without ``--snapshot-tool`` only kaidash is checked: it runs without error, twice gives the same decisions, and the
cluster exported back as a KAI zip (``snapshot export --format kai-zip``) gives the same decisions again.

``--whatif-states`` compares, instead of random clusters, every cycle's input state of the what-if view's runs on
the 64-node demo cluster (one per slider, and the cluster as it is): :mod:`bench.kai_diff_whatif`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Optional

from .kai_diff_gen import generate_document
from .kai_diff_gen_mig import add_mig
from .kai_diff_gen_topology import add_topology

DEFAULT_ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
FAIR_SHARE_TOLERANCE = 0.0011
"""KAI prints fair share truncated to 3 decimals (GPU devices, CPU cores, memory GB)."""
TYPES = ("allocate", "pipeline", "evict", "fair_share")


def parse_seeds(text: str) -> list[int]:
    """``1000..1099`` (inclusive), ``1,5,9`` or a mix."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if ".." in part:
            a, b = part.split("..")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def write_zip(doc: dict, path: Path) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("snapshot.json", json.dumps(doc))


# ---------------------------------------------------------------------------------------------- features

def object_features(doc: dict) -> dict[str, set[str]]:
    """Feature tags of every KAI pod (``ns/name``) and queue in a generated document."""
    raw = doc["rawObjects"]
    groups = {f"{g['metadata']['namespace']}/{g['metadata']['name']}": g for g in raw["podGroups"]}
    nodes_missing_mem = any(n["status"]["allocatable"].get("nvidia.com/gpu") and
                            "nvidia.com/gpu.memory" not in n["metadata"].get("labels", {}) for n in raw["nodes"])
    out: dict[str, set[str]] = {}
    for p in raw["pods"]:
        meta, spec = p["metadata"], p["spec"]
        if spec.get("schedulerName") != "kai-scheduler":
            continue
        tags: set[str] = set()
        ann = meta.get("annotations") or {}
        pg = ann.get("pod-group-name")
        if not pg or f"{meta['namespace']}/{pg}" not in groups:
            tags.add("no-podgroup")
        else:
            g = groups[f"{meta['namespace']}/{pg}"]["spec"]
            if g.get("minMember", 1) > 1:
                tags.add("gang")
            if g.get("subGroups"):
                tags.add("subgroups")
            tc = g.get("topologyConstraint") or {}
            if tc.get("requiredTopologyLevel"):
                tags.add("topology-required")
            if tc.get("preferredTopologyLevel"):
                tags.add("topology-preferred")
        req = spec["containers"][0]["resources"].get("requests", {})
        if any(r.startswith("nvidia.com/mig-") for r in req):
            tags.add("mig")
        if "gpu-fraction" in ann:
            tags.add("fraction")
        elif "gpu-memory" in ann:
            tags.add("gpu-memory")
            if nodes_missing_mem:
                tags.add("gpu-memory+unlabelled-nodes")
        elif "nvidia.com/gpu" in req:
            tags.add("whole-gpu")
        else:
            tags.add("cpu-only")
        if int(ann.get("gpu-fraction-num-devices", "1")) > 1:
            tags.add("multi-device")
        aff = spec.get("affinity") or {}
        if spec.get("nodeSelector"):
            tags.add("node-selector")
        if "nodeAffinity" in aff:
            tags.add("node-affinity")
        if "requiredDuringSchedulingIgnoredDuringExecution" in aff.get("podAffinity", {}):
            tags.add("pod-affinity")
        if "requiredDuringSchedulingIgnoredDuringExecution" in aff.get("podAntiAffinity", {}):
            tags.add("pod-anti-affinity")
        if any("preferredDuringSchedulingIgnoredDuringExecution" in aff.get(k, {})
               for k in ("podAffinity", "podAntiAffinity")):
            tags.add("preferred-pod-affinity")
        if spec.get("tolerations"):
            tags.add("tolerations")
        if any(port.get("hostPort") for c in spec["containers"] for port in c.get("ports") or []):
            tags.add("host-port")
        if spec.get("volumes"):
            tags.add("configmap")
        if (p.get("status") or {}).get("nominatedNodeName"):
            tags.add("nominated")
        out[f"{meta['namespace']}/{meta['name']}"] = tags
    for q in raw["queues"]:
        tags = set()
        res = q["spec"].get("resources") or {}
        if any((r or {}).get("overQuotaWeight", 0) < 0 for r in res.values()):
            tags.add("negative-weight")
        if any((r or {}).get("limit") == 0 for r in res.values()):
            tags.add("zero-limit")
        if q["spec"].get("parentQueue"):
            tags.add("child-queue")
        out[f"queue:{q['metadata']['name']}"] = tags
    if nodes_missing_mem:
        out["cluster"] = {"unlabelled-gpu-memory-nodes"}
    return out


# ---------------------------------------------------------------------------------------------- compare

def compare(kd: dict, kai: dict, features: dict[str, set[str]]) -> dict:
    """Per decision type: equal or not, and the differing items with their feature tags."""
    out: dict = {"equal": {}, "diffs": []}
    for typ, key in (("allocate", "allocated"), ("pipeline", "pipelined"), ("evict", "evicted")):
        a, b = kd.get(key, {}), kai.get(key, {})
        out["equal"][typ] = a == b
        for task in sorted(set(a) | set(b)):
            if a.get(task) != b.get(task):
                tags = sorted(features.get(task, set()))
                if task in a and task in b:
                    kind = f"{typ}: different {'action' if typ == 'evict' else 'node'}"
                elif task in a:
                    kind = f"{typ}: kaidash only"
                else:
                    kind = f"{typ}: KAI only"
                out["diffs"].append({"type": typ, "kind": kind, "task": task, "kaidash": a.get(task),
                                     "kai": b.get(task), "tags": tags})
    fa, fb = kd.get("fair_share", {}), kai.get("fair_share", {})
    fair_equal = True
    for q in sorted(set(fa) | set(fb)):
        if q not in fa or q not in fb:
            fair_equal = False
            out["diffs"].append({"type": "fair_share", "kind": "fair_share: queue on one side only", "queue": q,
                                 "tags": sorted(features.get(f"queue:{q}", set()))})
            continue
        for res in ("gpu", "cpu", "memory"):
            x, y = fa[q].get(res, 0.0), fb[q].get(res, 0.0)
            if math.isinf(y) and math.isinf(x):
                continue
            if not abs(x - y) <= FAIR_SHARE_TOLERANCE + 1e-9 * max(abs(x), abs(y)):
                fair_equal = False
                out["diffs"].append({"type": "fair_share", "kind": f"fair_share: {res} differs", "queue": q,
                                     "kaidash": x, "kai": y, "tags": sorted(features.get(f"queue:{q}", set())
                                                                           | features.get("cluster", set()))})
    out["equal"]["fair_share"] = fair_equal
    out["identical"] = all(out["equal"].values())
    return out


def _decisions_only(d: dict) -> dict:
    return {k: d.get(k) for k in ("allocated", "pipelined", "evicted", "fair_share")}


def _same_kai(a: dict, b: dict) -> bool:
    return compare(a, b, {})["identical"]


# ---------------------------------------------------------------------------------------------- one seed

def run_seed(seed: int, opts: dict) -> dict:
    """Generate, run both schedulers (or kaidash's self-checks), compare; a JSON-able record."""
    actions = DEFAULT_ACTIONS if opts["actions"] == "default" else opts["actions"]
    now = time.time()
    doc = generate_document(seed, now, actions)
    if opts.get("topology"):
        add_topology(doc, seed)
    if opts.get("mig"):
        add_mig(doc, seed, float(int(now)))
    features = object_features(doc)
    record: dict = {"seed": seed, "nodes": len(doc["rawObjects"]["nodes"]),
                    "pods": sum(1 for p in doc["rawObjects"]["pods"] if p["spec"].get("schedulerName") == "kai-scheduler")}
    with tempfile.TemporaryDirectory(prefix=f"kai-diff-{seed}-") as tmp:
        zpath = Path(tmp) / f"seed-{seed}.zip"
        write_zip(doc, zpath)
        kd = opts["kaidash"](str(zpath))
        record["kaidash"] = kd
        if "error" in kd:
            record["status"] = "kaidash-error"
        elif opts.get("binary"):
            kai, seconds, log, error = _kai_runs(seed, zpath, opts)
            if error is not None:
                record["status"] = "kai-error"
                record["kai_error"] = error
            else:
                record.update(against_kai_runs(kd, kai, features), kai_seconds=seconds, status="ok")
                if not record["identical"] and opts.get("keep"):
                    _keep(opts["keep"], seed, zpath, log, record)
        else:
            record.update(_self_check(str(zpath), kd, opts))
            if record.get("invariant_failures") and opts.get("keep"):
                _keep(opts["keep"], seed, zpath, "", record)
    return record


def against_kai_runs(kd: dict, kai: list[dict], features: dict[str, set[str]]) -> dict:
    """kaidash's decisions against KAI's runs of one cluster: the comparison with the first run (``equal``,
    ``identical``, ``diffs``), whether another run matches, how many do, and KAI's own outcome counts."""
    cmp = compare(kd, kai[0], features)
    others = [compare(kd, k, {})["identical"] for k in kai[1:]]   # each run compared once (30 runs, 200 clusters)
    out = {"kai": kai[0], "kai_runs": len(kai), "kai_nondeterministic": any(not _same_kai(kai[0], k) for k in kai[1:]),
           "kai_outcomes": _outcome_counts(kai), "equal": cmp["equal"], "identical": cmp["identical"],
           "diffs": cmp["diffs"], "matches_other_kai_run": any(others),
           "kaidash_outcome_runs": int(cmp["identical"]) + sum(others)}
    if out["kai_nondeterministic"]:
        # the other runs' evictions, so that eviction agreement can be read against each KAI outcome
        out["kai_other_evicted"] = [k.get("evicted", {}) for k in kai[1:]]
    return out


def _kai_runs(seed: int, zpath: Path, opts: dict) -> tuple[list[dict], float, str, Optional[str]]:
    """``--kai-runs`` decision sets of KAI on one cluster, the first run's seconds and log, or an error.

    With ``--kai-cache DIR`` the runs of earlier invocations are reused (one JSON file per seed, actions and
    generator options) and only the missing ones are run, so KAI's outcome distribution can be gathered once
    (say 10 runs per cluster) and every kaidash commit scored against it. The cluster is regenerated with a new
    ``now``; the generator places every timestamp relative to it, so the zip KAI saw differs only by that shift.
    """
    cache_file = None
    if opts.get("kai_cache"):
        tag = "-".join([opts["actions"].replace(",", "").replace(" ", "_")]
                       + [k for k in ("topology", "mig") if opts.get(k)])
        cache_file = Path(opts["kai_cache"]) / tag / f"seed-{seed}.json"
    return cached_kai_runs(opts["binary"], zpath, opts["kai_runs"], cache_file)


def cached_kai_runs(binary: str, zpath: Path, wanted: int,
                    cache_file: Optional[Path]) -> tuple[list[dict], float, str, Optional[str]]:
    """``wanted`` decision sets of KAI on ``zpath``, reusing and extending the runs kept in ``cache_file``."""
    from .kai_diff_kai import run_snapshot_tool

    cached: dict = {"runs": [], "seconds": 0.0}
    if cache_file is not None and cache_file.exists():
        cached = json.loads(cache_file.read_text())
    runs = list(cached["runs"])
    seconds, log = cached["seconds"], ""
    wanted = max(1, wanted)
    while len(runs) < wanted:
        r = run_snapshot_tool(binary, zpath)
        if r.decisions is None:
            return [], 0.0, r.log, r.error
        if not runs:
            seconds, log = r.seconds, r.log
        runs.append(r.decisions.to_dict())
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            # logs run to hundreds of MB at verbosity 6: not kept (a cached first run has no log to keep)
            cache_file.write_text(json.dumps({"runs": runs, "seconds": seconds}))
    return runs[:wanted], seconds, log, None


def _outcome_counts(runs: list[dict]) -> list[int]:
    """How many of KAI's runs gave each distinct decision set, most frequent first."""
    outcomes: list[list] = []
    for run in runs:
        for group in outcomes:
            if _same_kai(group[0], run):
                group.append(run)
                break
        else:
            outcomes.append([run])
    return sorted((len(g) for g in outcomes), reverse=True)


def _self_check(zip_path: str, kd: dict, opts: dict) -> dict:
    """kaidash alone: deterministic, and the same decisions on its own export of the cluster."""
    from scheduler.snapshot_io import validate
    from scheduler.engine import run_session
    from scheduler.sources.kai_export import write_kai_zip
    from scheduler.sources.kai_snapshot import import_kai_snapshot

    failures = []
    again = opts["kaidash"](zip_path)
    if _decisions_only(again) != _decisions_only(kd):
        failures.append("two runs on the same zip differ")
    snap = import_kai_snapshot(zip_path).snapshot
    try:
        validate(run_session(snap).snapshot)
    except Exception as exc:  # noqa: BLE001 - reported as an invariant failure
        failures.append(f"the snapshot after the session does not validate: {exc}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export.zip"
        write_kai_zip(snap, out)
        exported = opts["kaidash"](str(out))
    if not compare(kd, exported, {})["identical"]:
        failures.append("decisions differ on kaidash's own export of the cluster")
    return {"status": "ok", "invariant_failures": failures}


def _keep(folder: str, seed: int, zpath: Path, log: str, record: dict) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"seed-{seed}.zip").write_bytes(zpath.read_bytes())
    if log:
        (out / f"seed-{seed}.kai.log").write_text(log)
    (out / f"seed-{seed}.json").write_text(json.dumps(record, indent=1, default=str))


def _in_process(zip_path: str) -> dict:
    from .kai_diff_kaidash import kaidash_decisions

    try:
        return kaidash_decisions(zip_path)
    except Exception as exc:  # noqa: BLE001 - one cluster's failure is reported, the run goes on
        return {"error": f"{type(exc).__name__}: {exc}"}


class _Checkout:
    """kaidash of another checkout, one subprocess per zip (``PYTHONPATH=DIR``)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.script = str(Path(__file__).with_name("kai_diff_kaidash.py"))

    def __call__(self, zip_path: str) -> dict:
        env = dict(os.environ, PYTHONPATH=self.folder)
        proc = subprocess.run([sys.executable, self.script, zip_path], capture_output=True, text=True, env=env,
                              cwd=self.folder)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            return {"error": f"kaidash checkout failed: {proc.stderr[-500:]}"}
        return json.loads(lines[-1])


def _worker(args: tuple) -> dict:
    seed, opts = args
    opts = dict(opts)
    opts["kaidash"] = _Checkout(opts["checkout"]) if opts.get("checkout") else _in_process
    try:
        return run_seed(seed, opts)
    except Exception as exc:  # noqa: BLE001 - a generator or harness bug for one seed is reported
        return {"seed": seed, "status": "harness-error", "error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------------------------------- report

def summarise(records: list[dict], with_kai: bool) -> dict:
    """Counts per decision type, identical shares (all clusters, and KAI-deterministic ones), mismatch classes."""
    ok = [r for r in records if r.get("status") == "ok"]
    errors = Counter(r.get("status") for r in records if r.get("status") != "ok")
    summary: dict = {"clusters": len(records), "compared": len(ok), "errors": dict(errors)}
    if not with_kai:
        failing = [r for r in ok if r.get("invariant_failures")]
        summary["invariant_failures"] = {r["seed"]: r["invariant_failures"] for r in failing}
        summary["decisions"] = sum(len(r["kaidash"].get("allocated", {})) + len(r["kaidash"].get("pipelined", {}))
                                   + len(r["kaidash"].get("evicted", {})) for r in ok)
        return summary
    summary["identical"] = sum(1 for r in ok if r["identical"])
    summary["per_type"] = {t: sum(1 for r in ok if r["equal"][t]) for t in TYPES}
    nondet = [r for r in ok if r.get("kai_nondeterministic")]
    det = [r for r in ok if not r.get("kai_nondeterministic")]
    summary["kai_nondeterministic"] = len(nondet)
    summary["kai_nondeterministic_matching_a_run"] = sum(1 for r in nondet if r["identical"]
                                                         or r.get("matches_other_kai_run"))
    summary["identical_to_a_kai_run"] = sum(1 for r in ok if r["identical"] or r.get("matches_other_kai_run"))
    summary["kai_runs"] = max((r.get("kai_runs", 1) for r in ok), default=0)
    # kaidash against KAI's outcome distribution: the share of KAI's runs whose decisions kaidash reproduces
    summary["kai_run_agreement"] = (sum(r.get("kaidash_outcome_runs", int(r["identical"])) / r.get("kai_runs", 1)
                                        for r in ok) / len(ok)) if ok else 0.0
    summary["identical_deterministic"] = sum(1 for r in det if r["identical"])
    summary["deterministic"] = len(det)
    evict_actions = Counter(a for r in ok for a in r["kai"].get("evicted", {}).values())
    summary["kai_evictions_by_action"] = dict(evict_actions)
    kinds: Counter = Counter()
    tags: Counter = Counter()
    for r in det:
        if r["identical"]:
            continue
        seen_kinds = {d["kind"] for d in r["diffs"]}
        kinds.update(seen_kinds)
        seen_tags = set()
        for d in r["diffs"]:
            seen_tags.update(d.get("tags") or ["(no tag)"])
        tags.update(seen_tags)
    summary["mismatch_kinds"] = dict(kinds.most_common())
    summary["mismatch_tags"] = dict(tags.most_common())
    summary["failing_seeds"] = [r["seed"] for r in det if not r["identical"]]
    summary["kai_seconds_median"] = _median([r["kai_seconds"] for r in ok])
    summary["kaidash_seconds_median"] = _median([r["kaidash"].get("seconds", 0.0) for r in ok])
    return summary


def _median(values: list[float]) -> float:
    values = sorted(values)
    if not values:
        return 0.0
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.1f} %)" if b else "0/0"


def print_report(s: dict, opts: dict, seeds: list[int]) -> None:
    span = f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ",".join(map(str, seeds))
    print(f"seeds {span}: {s['clusters']} clusters, actions: {opts['actions']}"
          + (f", kaidash from {opts['checkout']}" if opts.get("checkout") else ""))
    if s["errors"]:
        print(f"  not compared: {s['errors']}")
    if "identical" not in s:
        print(f"kaidash only (no --snapshot-tool): {s['compared']} clusters ran, {s['decisions']} decisions")
        if s["invariant_failures"]:
            for seed, fails in s["invariant_failures"].items():
                print(f"  seed {seed}: " + "; ".join(fails))
        else:
            print("  invariants hold: deterministic, same decisions on kaidash's own kai-zip export, "
                  "after-snapshot validates")
        return
    n = s["compared"]
    print(f"identical decision sets: {_pct(s['identical'], n)} (against KAI's first run)")
    print(f"  identical to one of KAI's {s['kai_runs']} run(s): {_pct(s['identical_to_a_kai_run'], n)};"
          f" share of KAI's runs reproduced exactly: {100.0 * s['kai_run_agreement']:.1f} %")
    print(f"  KAI-deterministic clusters: {_pct(s['identical_deterministic'], s['deterministic'])}"
          f"  (KAI's own runs differed on {s['kai_nondeterministic']} cluster(s), "
          f"{s['kai_nondeterministic_matching_a_run']} of them matching one of KAI's runs)")
    for t in TYPES:
        print(f"  {t:<11} {_pct(s['per_type'][t], n)}")
    if s["kai_evictions_by_action"]:
        print(f"  KAI evictions by action: {s['kai_evictions_by_action']}")
    if s["mismatch_kinds"]:
        print("mismatches (clusters, KAI-deterministic ones):")
        for k, c in s["mismatch_kinds"].items():
            print(f"  {c:4d}  {k}")
        print("features of the objects in mismatches (clusters):")
        for k, c in s["mismatch_tags"].items():
            print(f"  {c:4d}  {k}")
        print(f"failing seeds: {' '.join(map(str, s['failing_seeds']))}")
    print(f"median seconds per cluster: KAI {s['kai_seconds_median']:.2f}, kaidash {s['kaidash_seconds_median']:.2f}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m bench.kai_diff")
    ap.add_argument("--seeds", default="1000..1099", help="seeds: 1000..1099, 1,2,3 or a mix (default 1000..1099)")
    ap.add_argument("--snapshot-tool", default=None, help="path of KAI's snapshot-tool binary (omit: kaidash only)")
    ap.add_argument("--actions", default="allocate", help="allocate (default), default (KAI's list) or a list")
    ap.add_argument("--kai-runs", type=int, default=2, help="KAI runs per cluster to detect its nondeterminism")
    ap.add_argument("--jobs", type=int, default=1, help="clusters in parallel (default 1)")
    ap.add_argument("--keep-failures", default=None, metavar="DIR", help="save zip, KAI log, decisions of mismatches")
    ap.add_argument("--kai-cache", default=None, metavar="DIR",
                    help="keep KAI's runs per cluster in DIR and reuse them (only missing runs are run)")
    ap.add_argument("--kaidash-checkout", default=None, metavar="DIR", help="measure the kaidash in DIR instead")
    ap.add_argument("--json", default=None, metavar="FILE", help="write every record and the summary as JSON")
    ap.add_argument("--topology", action="store_true",
                    help="add racks, a Topology and PodGroup topology constraints (bench/kai_diff_gen_topology.py)")
    ap.add_argument("--mig", action="store_true",
                    help="slice some GPU nodes into MIG instances and add MIG pods (bench/kai_diff_gen_mig.py)")
    ap.add_argument("--whatif-states", action="store_true",
                    help="compare the states the what-if sliders' cycles reach on the 64-node demo (not --seeds)")
    ap.add_argument("--sliders", default=None,
                    help="with --whatif-states: comma-separated cases (base and slider labels; default all)")
    ap.add_argument("--cycles", type=int, default=10, help="with --whatif-states: cycles per case (default 10)")
    ap.add_argument("--job-orders", type=int, default=0, metavar="N",
                    help="with --whatif-states: on states that differ from every KAI run, try N random job orders")
    args = ap.parse_args(argv)
    if args.snapshot_tool and not os.access(args.snapshot_tool, os.X_OK):
        ap.error(f"--snapshot-tool {args.snapshot_tool}: not an executable file")
    if args.whatif_states:
        return _whatif_states(args)
    seeds = parse_seeds(args.seeds)
    if not seeds:
        ap.error("no seeds")
    opts = {"actions": args.actions, "binary": args.snapshot_tool, "kai_runs": args.kai_runs,
            "keep": args.keep_failures, "kai_cache": args.kai_cache, "checkout": args.kaidash_checkout, "topology": args.topology,
            "mig": args.mig}
    work = [(s, opts) for s in seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            records = list(pool.map(_worker, work))
    else:
        records = [_worker(w) for w in work]
    summary = summarise(records, bool(args.snapshot_tool))
    print_report(summary, opts, seeds)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "records": records}, indent=1, default=str))
    for r in records:
        if r.get("status") == "harness-error":
            print(f"seed {r['seed']}: harness error: {r['error']}", file=sys.stderr)
    return 0


def _whatif_states(args: argparse.Namespace) -> int:
    from .kai_diff_whatif import run

    opts = {"binary": args.snapshot_tool, "kai_runs": args.kai_runs, "kai_cache": args.kai_cache,
            "keep": args.keep_failures, "cycles": args.cycles, "job_orders": args.job_orders}
    selected = None if args.sliders is None else {x.strip() for x in args.sliders.split(",") if x.strip()}
    out = run(opts, selected)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
