"""The live loop's tick on the simulated cluster: engine session + why-pending + GPU frame + history record.

Runs :class:`dashboard.loop.LiveLoop` the way its thread does (``step(explain=False)``, then why-pending
searches in part of the idle time) for ``--ticks`` ticks after ``--warmup`` ticks, and reports per tick the
median and 90th percentile of

* wall time of each part (``LiveLoop.last_timings``: session, why-pending lookup, GPU frame, history) and of the
  whole tick;
* the CPU time the loop thread used for the tick (``time.thread_time``): what the tick costs when the machine
  is not shared, since wall time on a loaded machine also counts the time other processes held the CPU;

and, over the run, how many waiting jobs got an explanation between ticks and how many of those have a
counterfactual that answers (a change that would start the job), with the search time per period.

    python bench/loop_tick.py [--sizes 64,1000] [--ticks 40] [--warmup 20] [--period 2] [--share 0.35]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard.loop import LiveLoop  # noqa: E402
from dashboard.options import SourceOptions  # noqa: E402

PARTS = ("session_ms", "explain_ms", "gpu_frame_ms", "history_ms", "tick_ms")


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run(nodes: int, ticks: int, warmup: int, period: float, share: float, seed: int = 7) -> dict:
    loop = LiveLoop(SourceOptions(source="sim", nodes=nodes, seed=seed, period_s=period), publish_metrics=False)
    t0 = time.perf_counter()
    loop.step(explain=False)
    first_ms = (time.perf_counter() - t0) * 1000
    for _ in range(warmup):
        loop.step(explain=False)
    rows, cpu, search_ms = [], [], []
    for _ in range(ticks):
        c0 = time.thread_time()
        loop.step(explain=False)
        cpu.append((time.thread_time() - c0) * 1000)
        rows.append(dict(loop.last_timings))
        took = loop.last_timings["tick_ms"] / 1000
        if took < period:
            loop.explain_between_ticks(time.monotonic() + share * (period - took))
            search_ms.append(loop.explain_ms_last)
    tick = loop.state.tick
    texts = [str(getattr(getattr(e, "counterfactual", None), "message", "") or "") for e in tick.explanations.values()]
    waiting = sum(1 for d in tick.result.jobs.values() if d.status in ("pending", "pipelined"))
    out = {"nodes": nodes, "gpus": sum(n.gpus for n in tick.scheduled.nodes), "jobs": len(tick.scheduled.jobs),
           "first_ms": first_ms, "cpu_p50": statistics.median(cpu), "cpu_p90": _p(cpu, 0.9),
           "waiting": waiting, "explained": len(texts),
           "answered": sum(1 for t in texts if t and "no single change" not in t),
           "search_ms_per_period": statistics.median(search_ms) if search_ms else 0.0,
           "load": os.getloadavg()[0]}
    for part in PARTS:
        values = [r[part] for r in rows]
        out[f"{part}_p50"], out[f"{part}_p90"] = statistics.median(values), _p(values, 0.9)
    loop.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,1000")
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--period", type=float, default=2.0)
    parser.add_argument("--share", type=float, default=0.35, help="share of the idle time given to why-pending")
    args = parser.parse_args()
    results = []
    for nodes in (int(s) for s in args.sizes.split(",")):
        r = run(nodes, args.ticks, args.warmup, args.period, args.share)
        results.append(r)
        print(f"{nodes} nodes ({r['gpus']} GPUs, {r['jobs']} jobs; first tick {r['first_ms']:,.0f} ms; load "
              f"{r['load']:.1f}): tick {r['tick_ms_p50']:,.0f} ms median, {r['tick_ms_p90']:,.0f} ms p90 wall; "
              f"{r['cpu_p50']:,.0f} ms median CPU · session {r['session_ms_p50']:,.0f} · why-pending lookup "
              f"{r['explain_ms_p50']:,.0f} · GPU frame {r['gpu_frame_ms_p50']:,.0f} · history "
              f"{r['history_ms_p50']:,.0f}"
              f" · between ticks: {r['explained']}/{r['waiting']} waiting jobs explained, {r['answered']} answered, "
              f"{r['search_ms_per_period']:,.0f} ms searching per period", flush=True)
    print("\n| nodes | tick median (wall) | tick p90 (wall) | tick median (CPU) | session | why-pending lookup | "
          "GPU frame | history | explained / waiting | answered |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['nodes']:,} | {r['tick_ms_p50']:,.0f} ms | {r['tick_ms_p90']:,.0f} ms | {r['cpu_p50']:,.0f} ms | "
              f"{r['session_ms_p50']:,.0f} ms | {r['explain_ms_p50']:,.1f} ms | {r['gpu_frame_ms_p50']:,.0f} ms | "
              f"{r['history_ms_p50']:,.0f} ms | {r['explained']} / {r['waiting']} | {r['answered']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
