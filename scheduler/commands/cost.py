"""``kaidash cost SNAPSHOT``: what the GPUs cost per hour, and what idle, stranded and unused-quota GPUs waste.

Prices per GPU-hour come from ``--prices FILE`` (YAML: ``gpu_hour: {H100: 4.0, ...}``, ``default_gpu_hour``,
``currency``) and ``--gpu-hour MODEL=PRICE``; without either, the documented example prices (not claims).
Idleness comes from the pods' recorded usage in the snapshot (judged at that instant); a live dashboard uses
DCGM. ``--ledger CSV`` prints the daily and 30-day totals of a saved cost ledger instead. ``--format
table|json|csv``.
"""

from __future__ import annotations

import json
import sys

NAME = "cost"
HELP = "GPU cost per queue and category: allocated, idle, stranded, unused quota (per hour, per day)"
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(p) -> None:
    p.add_argument("snapshot", nargs="?", help="snapshot file (.yaml, .json, or a KAI /get-snapshot .zip)")
    p.add_argument("--prices", metavar="FILE", help="GPU prices (YAML); default: the documented example prices")
    p.add_argument("--gpu-hour", action="append", default=[], metavar="MODEL=PRICE",
                   help="price per GPU-hour for GPU models containing MODEL (repeatable; MODEL 'default' for the "
                        "rest)")
    p.add_argument("--ledger", metavar="CSV", help="summarise a saved cost ledger (CostLedger.to_csv) instead")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")


def prices_from_args(args):
    """:class:`~scheduler.cost.GpuPrices` from ``--prices`` and ``--gpu-hour``."""
    from ..cost import GpuPrices

    prices = GpuPrices.load(args.prices) if args.prices else GpuPrices()
    return prices.with_overrides(args.gpu_hour) if args.gpu_hour else prices


def run(args) -> int:
    from ..cost import CostLedger, cost_rates
    from ..snapshot_io import load_snapshot

    if args.ledger:
        ledger = CostLedger.from_csv(args.ledger)
        return _print_ledger(ledger, args.format)
    if not args.snapshot:
        print("kaidash cost: error: give a SNAPSHOT (or --ledger CSV)", file=sys.stderr)
        return 2
    prices = prices_from_args(args)
    snapshot = load_snapshot(args.snapshot)
    rates = cost_rates(snapshot, prices)
    if args.format == "csv":
        rates.to_csv(sys.stdout)
    elif args.format == "json":
        json.dump({"time": rates.time, "currency": rates.currency, "idle_basis": rates.idle_basis,
                   "prices": {"gpu_hour": prices.gpu_hour, "default_gpu_hour": prices.default_gpu_hour,
                              "source": prices.source},
                   "cluster_per_hour": rates.cluster(),
                   "per_queue_per_hour": rates.per_queue().round(6).to_dict(orient="index"),
                   "rows": rates.frame.to_dict(orient="records"), "notes": rates.notes}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_table(rates, prices))
    return 0


def render_table(rates, prices) -> str:
    from ..cost import CATEGORIES
    from .schedule import _table

    cur = rates.currency
    out = [f"GPU cost at the snapshot's moment ({prices.source} prices, {cur} per GPU-hour; idleness from "
           f"{rates.idle_basis})\n\n"]
    rows = [[c, f"{rates.gpus(c):.2f}", f"{v:,.2f}", f"{v * 24:,.0f}"] for c, v in rates.cluster().items()
            if c in CATEGORIES]
    out.append(_table(["CATEGORY", "GPUS", f"{cur}/HOUR", f"{cur}/DAY"], rows))
    per = rates.per_queue()
    if len(per):
        out.append(f"\nPer queue ({cur}/hour)\n")
        out.append(_table(["QUEUE", "ALLOCATED", "IDLE ALLOCATED", "UNUSED QUOTA"],
                          [[q, f"{r.allocated:,.2f}", f"{r.idle_allocated:,.2f}", f"{r.unused_quota:,.2f}"]
                           for q, r in per.iterrows()]))
    models = rates.per_model()
    models = models[models["gpu_model"] != "(quota)"]
    if len(models):
        out.append(f"\nPer GPU model (GPUs, {cur}/hour at {', '.join(_price_list(models, prices))})\n")
        pivot = models.pivot_table(index="gpu_model", columns="category", values="gpus", aggfunc="sum",
                                   fill_value=0.0)
        cols = [c for c in ("capacity", "allocated", "idle_allocated", "stranded", "free", "unavailable")
                if c in pivot]
        out.append(_table(["GPU MODEL", *[c.upper().replace("_", " ") for c in cols]],
                          [[m, *[f"{pivot.at[m, c]:.2f}" for c in cols]] for m in pivot.index]))
    out.append("\nCategories overlap: idle_allocated is part of allocated; unused_quota may be lent to other "
               "queues. See docs/cost.md.\n")
    for note in rates.notes:
        out.append(f"note: {note}\n")
    return "".join(out)


def _price_list(models, prices) -> list[str]:
    return [f"{m} {prices.price(m):g}" for m in sorted(set(models["gpu_model"]))]


def _print_ledger(ledger, fmt: str) -> int:
    from .schedule import _table

    if fmt == "csv":
        sys.stdout.write(ledger.to_csv())
        return 0
    now = None
    daily = ledger.daily()
    if len(daily):
        from datetime import datetime, timezone
        now = datetime.strptime(daily["day"].max(), "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() + 43200
    totals = {p: ledger.totals(d, now) for p, d in (("last day", 1), ("30 days", 30))}
    if fmt == "json":
        json.dump({p: {"covered_h": t.attrs.get("covered_h", 0.0),
                       "cost": dict(zip(t["category"], t["cost"]))} for p, t in totals.items()} |
                  {"currency": ledger.currency}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    out = []
    for period, t in totals.items():
        out.append(f"{period} ({t.attrs.get('covered_h', 0.0):.1f} h observed), {ledger.currency}\n")
        out.append(_table(["CATEGORY", "GPU-HOURS", "COST"], [[c, f"{g:,.1f}", f"{v:,.2f}"] for c, g, v in
                                                              zip(t["category"], t["gpu_hours"], t["cost"])]) + "\n")
    sys.stdout.write("".join(out) or "empty ledger\n")
    return 0
