"""Placement quality on the Alibaba GPU trace (FGD protocol): reproduce the FGD study, compare policies.

    python -m bench.placement_quality                          # all policies, default + gpushare*, seeds 42..51
    python -m bench.placement_quality --variants default --seeds 42,43 --policies fgd,kaidash
    python -m bench.placement_quality --dask tcp://scheduler:8786 --out bench/results/placement
    python -m bench.placement_quality --paired-from a/summary.csv b/summary.csv --out docs/placement-quality

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


def paired_table(summary: pd.DataFrame, policy: str = "kaidash", baseline: str = "fgd") -> str:
    """Markdown: ``policy`` − ``baseline`` per variant on the same seeds (unallocated pp, wins, pods placed)."""
    lines = [f"| variant | {policy} − {baseline} (pp, mean of paired seeds) | seeds {policy} better "
             f"| pods placed {policy} − {baseline} (mean; worst seed) |", "|---|---|---|---|"]
    for v, g in summary.groupby("variant", sort=False):
        a = g[g["policy"] == policy].set_index("seed")
        b = g[g["policy"] == baseline].set_index("seed")
        seeds = a.index.intersection(b.index)
        if seeds.empty:
            continue
        d = a.loc[seeds, "unalloc_pct_at_100"] - b.loc[seeds, "unalloc_pct_at_100"]
        pods = a.loc[seeds, "pods_placed"] - b.loc[seeds, "pods_placed"]
        lines.append(f"| {v} | {d.mean():+.2f} | {int((d < 0).sum())}/{len(seeds)} | {pods.mean():+.1f}; {int(pods.min()):+d} |")
    return "\n".join(lines)


def plot_paired(summary: pd.DataFrame, out: Path, policy: str = "kaidash", baseline: str = "fgd") -> Path | None:
    """Strip plot of ``policy`` − ``baseline`` unallocated pp per seed, one column per variant (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in dict.fromkeys(summary["variant"])
                if {policy, baseline} <= set(summary[summary["variant"] == v]["policy"])]
    if not variants:
        return None
    fig, ax = plt.subplots(figsize=(1.6 * len(variants) + 2.5, 4))
    for x, v in enumerate(variants):
        g = summary[summary["variant"] == v]
        a = g[g["policy"] == policy].set_index("seed")["unalloc_pct_at_100"]
        b = g[g["policy"] == baseline].set_index("seed")["unalloc_pct_at_100"]
        d = (a - b).dropna()
        ax.scatter([x] * len(d), d, s=18, alpha=0.7)
        ax.plot([x - 0.25, x + 0.25], [d.mean()] * 2, color="black", lw=2)
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel(f"{policy} − {baseline}, unallocated GPU (pp)")
    ax.set_title(f"{policy} vs {baseline} on the same seeds (below 0: {policy} strands less; bar = mean)")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path = out / f"paired_{policy}_vs_{baseline}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    ap.add_argument("--paired-from", nargs="+", metavar="SUMMARY_CSV", default=None,
                    help="replay nothing: write the kaidash-vs-FGD paired table and plot of earlier runs' "
                         "summary.csv files into --out")
    args = ap.parse_args(argv)
    if args.paired_from:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        summary = pd.concat([pd.read_csv(f) for f in args.paired_from], ignore_index=True)
        text = paired_table(summary)
        (out / "paired.md").write_text(text + "\n")
        print(text)
        print(f"wrote {plot_paired(summary, out)}")
        return 0

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
    if {"kaidash", "fgd"} <= set(policies):
        md += ["", "Paired comparison, kaidash vs FGD (same seeds, same arrival sequences):", "",
               paired_table(summary)]
    (out / "table.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        for v in variants:
            for f in plot(curves, pub, out, v):
                print(f"wrote {f}")
        if {"kaidash", "fgd"} <= set(policies):
            print(f"wrote {plot_paired(summary, out)}")
    except ImportError:
        print("matplotlib not installed: no plots", file=sys.stderr)
    base = t[t["policy"].isin(PUBLISHED_NAMES) & (t["variant"] == "default")]
    if not base.empty:
        worst = base["diff_pp"].abs().max()
        print(f"default trace: largest |ours - published| over the FGD baselines = {worst:.2f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
