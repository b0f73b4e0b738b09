"""Soak: the dashboard's live loop for 24 simulated hours, as fast as it goes; memory must stay flat.

Drives :meth:`dashboard.loop.LiveLoop.step` (the loop thread's tick function) directly in sim mode on the
synthetic scenario, with a simulated clock: each tick advances the cluster by ``--sim-step`` seconds (the
simulator) and the loop's wall clock by ``--period`` seconds (tick times, data age, history). "Simulated
hours" are cluster hours, so 24 h at the default 30 s step is 2,880 ticks, each a full tick: scheduling
session, why-pending explanations, simulated DCGM frame, history record, kaidash's own metrics, the arrival
refill when the scenario runs out.

Every simulated hour it samples RSS (``/proc/self/statm``), tracemalloc's current traced size, and the sizes
of every structure the loop keeps (and ``sys.getallocatedblocks()``, a free proxy for the Python heap when
tracemalloc is off) (history, per-tick frame cache, simulator records, live jobs, queued
events). It prints a table, writes JSON (``--json``) and a PNG of the curve (``--png``, when matplotlib is
installed), and reports the growth from hour 2 to the last hour.

Run: ``python bench/soak.py [--hours 24] [--nodes 64] [--seed 7] [--sim-step 30] [--period 2]
[--actions allocate,reclaim,preempt,stalegangeviction] [--explain-jobs 12] [--no-tracemalloc]
[--json artifacts/soak.json] [--png docs/img/soak-memory.png]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import time as _real_time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dashboard.loop as loop_module  # noqa: E402
from dashboard import models  # noqa: E402
from dashboard.loop import LiveLoop  # noqa: E402
from dashboard.options import SourceOptions  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


class SimClock:
    """Stands in for the ``time`` module inside :mod:`dashboard.loop`: ``time()`` is simulated (advanced by
    the driver), durations (``perf_counter``, ``monotonic``) stay real so tick costs are measured."""

    def __init__(self, start: float):
        self.now = start

    def time(self) -> float:
        return self.now

    perf_counter = staticmethod(_real_time.perf_counter)
    monotonic = staticmethod(_real_time.monotonic)
    sleep = staticmethod(_real_time.sleep)


def rss_mib() -> float:
    """Resident set size of this process (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / MIB


def structure_sizes(loop: LiveLoop) -> dict:
    """Lengths of everything the loop keeps between ticks (each must stay bounded)."""
    feed = loop.feed
    sim = getattr(feed, "sim", None)
    out = {"history_fine": len(loop.state.history.fine), "history_coarse": len(loop.state.history.coarse),
           "frame_cache": len(models._CACHE), "explanations": len(loop.state.tick.explanations)
           if loop.state.tick is not None else 0}
    if sim is not None:
        out.update(live_jobs=len(sim.snapshot.jobs), events_queued=len(sim.events),
                   recorder_ticks=len(getattr(sim.recorder, "times", []) or []))
    return out


def balance(tick) -> dict:
    """Whether the demo stays realistic: pending and running jobs, GPUs requested / allocated / idle-allocated,
    and how many waiting jobs have a counterfactual that answers (a change that would start them)."""
    from dashboard.state import record_from_tick

    totals = record_from_tick(tick).totals
    stats = getattr(tick.result, "queue_stats", None) or {}
    leaves = {q.name for q in tick.scheduled.leaf_queues()}
    requested = sum(float(v.get("gpu", {}).get("requested", 0.0)) for q, v in stats.items() if q in leaves)
    texts = [str(getattr(getattr(e, "counterfactual", None), "message", "") or "") for e in tick.explanations.values()]
    answered = sum(1 for t in texts if t and "no single change" not in t)
    return {"pending_jobs": int(totals["pending_jobs"]), "running_jobs": int(totals["running_jobs"]),
            "gpus_requested": requested, "gpus_allocated": totals["gpus_allocated"],
            "gpus_idle_allocated": totals["gpus_idle_allocated"], "explained": len(texts), "answered": answered}


def soak(hours: float, nodes: int, seed: int, sim_step: float, period: float, actions: str = "",
         explain_jobs: int = 12, trace: bool = True, sample_every_h: float = 1.0, log=print,
         on_sample=None, explain_between_ms: float = 0.0) -> list[dict]:
    """Run the loop for ``hours`` cluster hours; one sample dict per ``sample_every_h`` (plus hour 0).
    ``on_sample(samples)`` is called after each sample (the CLI writes its JSON as it goes).

    ``explain_between_ms`` > 0 runs the loop as its thread does: each tick without inline explanations, then
    why-pending searches for that long (real time) before the next tick."""
    clock = SimClock(1_767_225_600.0)
    real_time = loop_module._time
    loop_module._time = clock
    try:
        loop = LiveLoop(SourceOptions(source="sim", nodes=nodes, seed=seed, period_s=period, sim_step_s=sim_step))
        feed = loop.feed
        if feed is None:
            raise SystemExit(f"no feed: {loop.state.error or loop._feed_error}")
        if actions:
            feed.sim.snapshot.config.actions = [a.strip() for a in actions.split(",") if a.strip()]
        loop.explain_jobs = explain_jobs
        if trace:
            tracemalloc.start(1)
        ticks_per_sample = max(1, round(sample_every_h * 3600 / sim_step))
        total = round(hours * 3600 / sim_step)
        samples: list[dict] = []
        started = time.perf_counter()
        window: list[float] = []
        failures = 0

        def sample(tick_no: int) -> None:
            gc.collect()
            row = {"hour": tick_no * sim_step / 3600, "ticks": tick_no, "rss_mib": rss_mib(),
                   "traced_mib": tracemalloc.get_traced_memory()[0] / MIB if trace else float("nan"),
                   "py_blocks_k": sys.getallocatedblocks() / 1000,
                   "tick_ms_mean": sum(window) / len(window) if window else float("nan"),
                   "tick_ms_max": max(window) if window else float("nan"), "failures": failures,
                   "tick_ms_p50": sorted(window)[len(window) // 2] if window else float("nan"),
                   "wall_s": time.perf_counter() - started, **structure_sizes(loop),
                   **(balance(loop.state.tick) if loop.state.tick is not None else {})}
            samples.append(row)
            window.clear()
            log(format_row(row), flush=True)
            if on_sample is not None:
                on_sample(samples)

        log(header(), flush=True)
        sample(0)
        for i in range(1, total + 1):
            clock.now += period
            t0 = time.perf_counter()
            if loop.step(explain=explain_between_ms <= 0) is None:
                failures += 1
            window.append((time.perf_counter() - t0) * 1000)
            if explain_between_ms > 0:
                loop.explain_between_ticks(time.monotonic() + explain_between_ms / 1000)
            if i % ticks_per_sample == 0 or i == total:
                sample(i)
        loop.stop()
        return samples
    finally:
        loop_module._time = real_time
        if trace and tracemalloc.is_tracing():
            tracemalloc.stop()


BALANCE_COLUMNS = [("hour", "{:>5.1f}"), ("pending_jobs", "{:>5d}"), ("running_jobs", "{:>5d}"),
                   ("gpus_requested", "{:>7.0f}"), ("gpus_allocated", "{:>7.1f}"), ("gpus_idle_allocated", "{:>5.0f}"),
                   ("explained", "{:>4d}"), ("answered", "{:>4d}"), ("tick_ms_p50", "{:>6.0f}")]
"""The demo's balance over the soak (``docs/dashboard.md``): does it stay realistic?"""

COLUMNS = [("hour", "{:>5.1f}"), ("ticks", "{:>6d}"), ("rss_mib", "{:>8.1f}"), ("traced_mib", "{:>8.1f}"), ("py_blocks_k", "{:>8.0f}"),
           ("tick_ms_mean", "{:>8.0f}"), ("history_fine", "{:>6d}"), ("history_coarse", "{:>6d}"),
           ("frame_cache", "{:>5d}"), ("live_jobs", "{:>5d}"), ("events_queued", "{:>6d}"),
           ("recorder_ticks", "{:>6d}"), ("failures", "{:>4d}"), ("wall_s", "{:>7.0f}")]


def header() -> str:
    return " ".join(f"{name[:14]:>{len(fmt.format(0) if 'd' in fmt else fmt.format(0.0))}}" for name, fmt in COLUMNS)


def format_row(row: dict) -> str:
    return " ".join(fmt.format(row.get(name, 0)) for name, fmt in COLUMNS)


def markdown_table(samples: list[dict], columns=COLUMNS) -> str:
    names = [n for n, _ in columns]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for row in samples:
        lines.append("| " + " | ".join(fmt.format(row.get(n, 0)).strip() for n, fmt in columns) + " |")
    return "\n".join(lines)


def plot_balance(samples: list[dict], path: str) -> bool:
    """Pending jobs, GPUs requested / allocated / idle-allocated per simulated hour (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    hours = [s["hour"] for s in samples]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for key, label in (("gpus_requested", "GPUs requested"), ("gpus_allocated", "GPUs allocated"),
                       ("gpus_idle_allocated", "GPUs allocated but idle")):
        ax.plot(hours, [s.get(key, float("nan")) for s in samples], marker=".", label=label)
    ax.set_ylabel("GPUs")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("synthetic demo over a long soak: demand, allocation and waiting jobs stay level")
    ax2.plot(hours, [s.get("pending_jobs", float("nan")) for s in samples], marker=".", color="tab:orange",
             label="pending jobs")
    ax2.set_ylabel("pending jobs")
    ax2.set_xlabel("simulated hours (cluster time)")
    ax2.set_ylim(bottom=0)
    ax2.grid(alpha=0.3)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def growth(samples: list[dict], from_hour: float = 2.0) -> dict:
    """RSS and traced growth from the sample at ``from_hour`` to the last one."""
    base = next((s for s in samples if s["hour"] >= from_hour - 1e-9), samples[0])
    last = samples[-1]
    return {"from_hour": base["hour"], "to_hour": last["hour"],
            "rss_mib": last["rss_mib"] - base["rss_mib"], "traced_mib": last["traced_mib"] - base["traced_mib"]}


def plot(samples: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    hours = [s["hour"] for s in samples]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(hours, [s["rss_mib"] for s in samples], marker="o", label="RSS (MiB)")
    traced = [s["traced_mib"] for s in samples]
    if any(t == t for t in traced):          # not all NaN
        ax.plot(hours, traced, marker="s", label="tracemalloc current (MiB)")
    if "py_blocks_k" in samples[0]:
        ax2 = ax.twinx()
        ax2.plot(hours, [s["py_blocks_k"] for s in samples], color="tab:green", marker=".", label="Python blocks (k)")
        ax2.set_ylabel("allocated Python blocks (thousands)")
        ax2.set_ylim(bottom=0)
        ax2.legend(loc="lower right")
    ax.set_xlabel("simulated hours (cluster time)")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.set_title("kaidash live loop soak: memory per simulated hour")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", type=float, default=24.0, help="simulated (cluster) hours")
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sim-step", type=float, default=30.0, help="cluster seconds per tick (the dashboard's default)")
    p.add_argument("--period", type=float, default=2.0, help="loop period: simulated wall seconds per tick")
    p.add_argument("--actions", default="", help="override the scenario's action list (comma-separated)")
    p.add_argument("--explain-jobs", type=int, default=12, help="why-pending explanations per tick (loop default)")
    p.add_argument("--sample-every", type=float, default=1.0, metavar="HOURS")
    p.add_argument("--no-tracemalloc", action="store_true", help="RSS only (tracemalloc slows every allocation)")
    p.add_argument("--json", default="", help="write the samples and growth here")
    p.add_argument("--png", default="", help="write the memory curve here (needs matplotlib)")
    p.add_argument("--balance-png", default="", help="write the demo's balance curve here (needs matplotlib)")
    p.add_argument("--explain-between-ms", type=float, default=0.0,
                   help="run as the loop thread does: why-pending searches for this long (real ms) after each tick")
    args = p.parse_args(argv)

    def write_json(samples: list[dict]) -> None:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"args": vars(args), "samples": samples,
                                                   "growth": growth(samples)}, indent=1))

    samples = soak(args.hours, args.nodes, args.seed, args.sim_step, args.period, args.actions, args.explain_jobs,
                   not args.no_tracemalloc, args.sample_every, on_sample=write_json,
                   explain_between_ms=args.explain_between_ms)
    g = growth(samples)
    print(f"\ngrowth hour {g['from_hour']:g} → {g['to_hour']:g}: RSS {g['rss_mib']:+.1f} MiB, "
          f"traced {g['traced_mib']:+.2f} MiB")
    print("\n" + markdown_table(samples))
    print("\n" + markdown_table(samples, BALANCE_COLUMNS))
    if args.balance_png:
        print(("wrote " + args.balance_png) if plot_balance(samples, args.balance_png) else "no matplotlib: no PNG")
    if args.png:
        print(("wrote " + args.png) if plot(samples, args.png) else "matplotlib not installed: no PNG")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
