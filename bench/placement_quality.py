"""Placement quality on the Alibaba GPU trace (FGD protocol): reproduce the FGD study, compare policies.

    python -m bench.placement_quality                          # all policies, default + gpushare*, seeds 42..51
    python -m bench.placement_quality --variants default --seeds 42,43 --policies fgd,kaidash
    python -m bench.placement_quality --dask tcp://scheduler:8786 --out bench/results/placement

Writes ``summary.csv`` (one row per replay), ``curves.csv`` (per arrived-%), ``table.md`` (ours vs the
published means) and PNG plots into ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from scheduler.quality.policies import POLICIES, PUBLISHED_NAMES
from scheduler.quality.sweep import SEEDS, published, run_sweep, summarise

DEFAULT_VARIANTS = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100")


def _seeds(text: str) -> list[int]:
    if ".." in text:
        a, b = text.split("..")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",") if s]


def comparison_table(summary: pd.DataFrame, pub: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, policy): our mean unallocated % at 100% arrival next to the published mean."""
    ours = summarise(summary)
    p100 = pub[pub["arrived_pct"] == 100][["variant", "policy", "unalloc_pct"]].rename(
        columns={"unalloc_pct": "published_pct"})
    t = ours.merge(p100, on=["variant", "policy"], how="left")
    t["diff_pp"] = t["unalloc_pct"] - t["published_pct"]
    return t


def markdown_table(t: pd.DataFrame, policies: list[str]) -> str:
    """One row per policy, one column pair (ours / published) per variant."""
    variants = list(dict.fromkeys(t["variant"]))
    head = "| policy | " + " | ".join(f"{v} ours | {v} published" for v in variants) + " |"
    sep = "|---|" + "---|---|" * len(variants)
    lines = [head, sep]
    for p in policies:
        cells = []
        for v in variants:
            r = t[(t["variant"] == v) & (t["policy"] == p)]
            if r.empty:
                cells += ["", ""]
                continue
            r = r.iloc[0]
            cells.append(f"{r.unalloc_pct:.2f} ± {r.unalloc_sd:.2f}" if pd.notna(r.unalloc_sd) else f"{r.unalloc_pct:.2f}")
            cells.append("" if pd.isna(r.published_pct) else f"{r.published_pct:.2f}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pods_table(t: pd.DataFrame, policies: list[str]) -> str:
    variants = list(dict.fromkeys(t["variant"]))
    lines = ["| policy | " + " | ".join(variants) + " | replay s (mean) |", "|---|" + "---|" * (len(variants) + 1)]
    for p in policies:
        sub = t[t["policy"] == p]
        cells = [f"{sub[sub['variant'] == v]['pods_placed'].mean():.1f}" for v in variants]
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {sub['seconds'].mean():.1f} |")
    return "\n".join(lines)


def plot(curves: pd.DataFrame, pub: pd.DataFrame, out: Path, variant: str = "default") -> list[Path]:
    """Unallocated-GPU and fragmentation curves vs arrived workload for one variant (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = curves[curves["variant"] == variant].groupby(["policy", "arrived_pct"]).mean(numeric_only=True).reset_index()
    pv = pub[pub["variant"] == variant]
    files = []
    for col, ylabel, fname, xlim in [
        ("unalloc_pct", "unallocated GPU (% of capacity)", f"unalloc_{variant}.png", (80, 130)),
        ("frag_pct", "fragmented GPU (% of capacity)", f"frag_{variant}.png", (0, 130)),
    ]:
        fig, ax = plt.subplots(figsize=(8, 5))
        for pol, g in c.groupby("policy"):
            line, = ax.plot(g["arrived_pct"], g[col], label=pol, lw=2 if pol in ("kaidash", "fgd") else 1)
            pg = pv[pv["policy"] == pol]
            if not pg.empty:
                ax.plot(pg["arrived_pct"], pg[col], ls=":", color=line.get_color(), lw=1)
        if col == "unalloc_pct":
            x = range(80, 131)
            ax.plot(list(x), [max(0, 100 - a) for a in x], color="grey", lw=0.8, ls="--", label="ideal")
            ax.set_ylim(0, 25)
        ax.set_xlim(*xlim)
        ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{variant}: ours (solid) vs FGD authors' published (dotted)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        path = out / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated, from: " + ", ".join(POLICIES))
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="trace pod-list variants")
    ap.add_argument("--seeds", default=f"{SEEDS[0]}..{SEEDS[-1]}", help="e.g. 42..51 or 42,43")
    ap.add_argument("--dask", default=None, help="Dask scheduler address (default: a local cluster)")
    ap.add_argument("--workers", type=int, default=None, help="local cluster worker processes (default: cores)")
    ap.add_argument("--trace-dir", default=None, help="trace CSV directory (default: KAIDASH_TRACE_DIR or ../shared)")
    ap.add_argument("--out", default="bench/results/placement_quality", help="output directory")
    args = ap.parse_args(argv)

    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies: {', '.join(unknown)}")
    variants = [v for v in args.variants.split(",") if v]
    seeds = _seeds(args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    summary, curves = run_sweep(policies, variants, seeds, client=args.dask, n_workers=args.workers,
                                trace_dir=args.trace_dir)
    wall = time.time() - t0
    summary.to_csv(out / "summary.csv", index=False)
    curves.to_csv(out / "curves.csv", index=False)
    pub = published()
    t = comparison_table(summary, pub)
    t.to_csv(out / "table.csv", index=False)
    md = [f"Seeds: {seeds[0]}..{seeds[-1]} ({len(seeds)}); {len(summary)} replays in {wall:.0f} s wall.", "",
          "Unallocated GPU % at 100% arrival (mean ± sd over seeds; published = FGD authors' mean):", "",
          markdown_table(t, policies), "", "Pods placed (mean over seeds) and replay time:", "",
          pods_table(summary, policies)]
    (out / "table.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        for v in variants:
            for f in plot(curves, pub, out, v):
                print(f"wrote {f}")
    except ImportError:
        print("matplotlib not installed: no plots", file=sys.stderr)
    base = t[t["policy"].isin(PUBLISHED_NAMES) & (t["variant"] == "default")]
    if not base.empty:
        worst = base["diff_pp"].abs().max()
        print(f"default trace: largest |ours - published| over the FGD baselines = {worst:.2f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
