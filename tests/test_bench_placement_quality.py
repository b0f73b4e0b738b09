"""The paired kaidash-vs-FGD report of ``bench/placement_quality.py`` on a hand-made summary."""

import pandas as pd

from bench.placement_quality import main, paired_table


def _summary():
    rows = []
    # variant a: kaidash 0.2 pp better on seed 1, 0.1 pp worse on seed 2; pods +5 and -1
    for seed, (k, f, kp, fp) in {1: (4.0, 4.2, 105, 100), 2: (4.5, 4.4, 99, 100)}.items():
        rows += [{"variant": "a", "policy": "kaidash", "seed": seed, "unalloc_pct_at_100": k, "pods_placed": kp},
                 {"variant": "a", "policy": "fgd", "seed": seed, "unalloc_pct_at_100": f, "pods_placed": fp}]
    # variant b: FGD only on seed 3 (no pair) -> no row
    rows += [{"variant": "b", "policy": "fgd", "seed": 3, "unalloc_pct_at_100": 5.0, "pods_placed": 10}]
    return pd.DataFrame(rows)


def test_paired_table_means_wins_and_worst_seed():
    lines = paired_table(_summary()).splitlines()
    assert len(lines) == 3                              # header, separator, variant a only
    assert lines[2] == "| a | -0.05 | 1/2 | +2.0; -1 |"


def test_paired_from_writes_table_and_plot(tmp_path):
    csv = tmp_path / "summary.csv"
    _summary().to_csv(csv, index=False)
    assert main(["--paired-from", str(csv), "--out", str(tmp_path / "out")]) == 0
    assert "| a | -0.05 | 1/2 |" in (tmp_path / "out" / "paired.md").read_text()
    assert (tmp_path / "out" / "paired_kaidash_vs_fgd.png").stat().st_size > 1000
