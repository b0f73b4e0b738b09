"""Eviction agreement with KAI, from the JSON files of :mod:`bench.kai_diff` runs.

    python -m bench.kai_diff --seeds 5000..5199 --snapshot-tool BIN --actions default --json default.json
    python -m bench.kai_diff --seeds 5000..5199 --snapshot-tool BIN --actions allocate --kai-runs 1 --json alloc.json
    python -m bench.kai_diff_evictions default.json --allocate alloc.json

Figures, over the clusters compared (and again over the clusters whose allocate-only run was identical, so that
allocation differences do not count against evictions):

- **pairs**: (task, action) eviction pairs equal on both sides / pairs on either side (summed over clusters);
  on a cluster where KAI's own runs differ (``--kai-runs``), against the KAI run closest to kaidash;
- **evictions equal**: clusters whose eviction sets are equal;
- **identical**: clusters whose full decision sets (allocate, pipeline, evict, fair share) are equal; a cluster on
  which KAI's own runs disagree counts as identical when kaidash matches one of them.

Mismatching eviction pairs are listed per kind (kaidash only, KAI only, different action) with the action.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Optional


def kai_evictions(record: dict) -> dict:
    """KAI's evictions to compare with: its first run's, or — on a cluster where KAI's own runs differ — the run
    closest to kaidash's (most equal pairs, then fewest pairs in all): KAI's outcome there is one of several,
    each as much KAI's decision as the other."""
    a = record["kaidash"].get("evicted", {})
    runs = [record["kai"].get("evicted", {})] + list(record.get("kai_other_evicted") or [])

    def score(b: dict) -> tuple:
        return (-len(set(a.items()) & set(b.items())), len(set(a.items()) | set(b.items())))

    return min(runs, key=score)


def eviction_pairs(record: dict) -> tuple[int, int]:
    """``(equal pairs, pairs on either side)`` of one compared cluster."""
    a = record["kaidash"].get("evicted", {})
    b = kai_evictions(record)
    union = set(a.items()) | set(b.items())
    equal = set(a.items()) & set(b.items())
    return len(equal), len(union)


def figures(records: list[dict]) -> dict:
    """The figures of the module doc over ``records`` (compared clusters only)."""
    ok = [r for r in records if r.get("status") == "ok"]
    eq = un = 0
    kinds: Counter = Counter()
    for r in ok:
        e, u = eviction_pairs(r)
        eq, un = eq + e, un + u
        a, b = r["kaidash"].get("evicted", {}), kai_evictions(r)
        for task in set(a) | set(b):
            if a.get(task) == b.get(task):
                continue
            if task in a and task in b:
                kinds[f"different action: kaidash {a[task]}, KAI {b[task]}"] += 1
            elif task in a:
                kinds[f"kaidash only: {a[task]}"] += 1
            else:
                kinds[f"KAI only: {b[task]}"] += 1
    return {"clusters": len(ok), "pairs_equal": eq, "pairs": un,
            "evictions_equal": sum(1 for r in ok if kai_evictions(r) == r["kaidash"].get("evicted", {})),
            "identical": sum(1 for r in ok if r["identical"] or r.get("matches_other_kai_run")),
            "kai_evictions": sum(len(r["kai"].get("evicted", {})) for r in ok),
            "mismatch_kinds": dict(kinds.most_common()),
            "failing_seeds": [r["seed"] for r in ok if not (r["identical"] or r.get("matches_other_kai_run"))]}


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.1f} %)" if b else "0/0"


def print_figures(title: str, f: dict) -> None:
    print(f"{title}: {f['clusters']} clusters, {f['kai_evictions']} KAI evictions")
    print(f"  eviction pairs equal   {_pct(f['pairs_equal'], f['pairs'])}")
    print(f"  evictions equal        {_pct(f['evictions_equal'], f['clusters'])} clusters")
    print(f"  identical decisions    {_pct(f['identical'], f['clusters'])} clusters")
    for k, c in f["mismatch_kinds"].items():
        print(f"    {c:4d}  {k}")
    if f["failing_seeds"]:
        print(f"  not identical: {' '.join(map(str, f['failing_seeds']))}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m bench.kai_diff_evictions")
    ap.add_argument("default_json", help="--json of a kai_diff run with --actions default")
    ap.add_argument("--allocate", default=None, metavar="JSON",
                    help="--json of a kai_diff run with --actions allocate on the same seeds")
    args = ap.parse_args(argv)
    records = json.load(open(args.default_json))["records"]
    print_figures("all clusters", figures(records))
    if args.allocate:
        alloc = {r["seed"]: r for r in json.load(open(args.allocate))["records"]}
        agree = {s for s, r in alloc.items() if r.get("status") == "ok" and r.get("identical")}
        print_figures("clusters whose allocate-only decisions agree",
                      figures([r for r in records if r["seed"] in agree]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
