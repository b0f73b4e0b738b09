"""Server-side cost of the dashboard: building each view for 64 and 1,000 nodes, and what-if slider → diff.

Per view also "page": the whole page a new browser session gets (template, header, navigation and the view,
as a Bokeh document), which is what the server does before the browser receives any HTML.

For each size: one static tick of the seeded synthetic scenario (engine session, why-pending, simulated
DCGM frame), then per view the time to construct it and render its Bokeh models (what a new browser session
pays), and the time to re-render it on a new tick (what every session pays each period). What-if: one slider
move on 64 nodes = overrides → engine to steady state → diff → tables. Medians over repeats.

    python bench/dashboard_views.py [--repeats 5] [--sizes 64,1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import panel as pn  # noqa: E402

from dashboard.app import configure_panel  # noqa: E402
from dashboard.loop import LiveLoop  # noqa: E402
from dashboard.models import WhatIfModel, per_tick  # noqa: E402,F401
from dashboard.options import SourceOptions  # noqa: E402
from dashboard.views import (GpusView, OverviewView, PendingView, QueuesView, TimelineView,  # noqa: E402
                             WhatIfView)

VIEWS = {"overview": OverviewView, "queues": QueuesView, "gpus": GpusView, "pending": PendingView,
         "timeline": TimelineView, "whatif": WhatIfView}


CPU: dict[str, float] = {}
"""CPU time (``time.thread_time``) of the last :func:`median_ms` call: what it costs on an idle core, since wall time
on a shared machine also counts the time other processes held the CPU."""


def median_ms(fn, repeats: int) -> float:
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    CPU["last"] = statistics.median(cpu)
    return statistics.median(times)


def bench_size(nodes: int, repeats: int) -> dict:
    loop = LiveLoop(SourceOptions(source="sim", nodes=nodes, seed=7))
    t0 = time.perf_counter()
    loop.step()
    first_tick_ms = (time.perf_counter() - t0) * 1000
    tick_ms = median_ms(lambda: loop.step(explain=False), max(1, repeats // 2))   # as the loop thread ticks
    state = loop.state
    out = {"nodes": nodes, "tick_ms": tick_ms, "first_tick_ms": first_tick_ms,
           "jobs": len(state.tick.snapshot.jobs), "gpus": sum(n.gpus for n in state.tick.snapshot.nodes)}
    for name, cls in VIEWS.items():
        def build(cls=cls):
            import dashboard.models as M

            M._CACHE.clear()             # a cold tick: frames computed, not cached
            state.tick.tables.clear()
            view = cls(state)
            view.__panel__().get_root()
        out[f"build_{name}_ms"] = median_ms(build, repeats)
        out[f"build_{name}_cpu_ms"] = CPU["last"]
        view = cls(state)
        view.__panel__().get_root()

        def rerender(view=view):
            import dashboard.models as M

            M._CACHE.clear()
            state.tick.tables.clear()
            view.refresh(force=True)
        out[f"refresh_{name}_ms"] = median_ms(rerender, repeats)
        out[f"refresh_{name}_cpu_ms"] = CPU["last"]

        def page(name=name):
            from bokeh.document import Document

            from dashboard.app import Dashboard
            from dashboard.models import Selection

            Dashboard(state, loop, selection=Selection(view=name)).template().server_doc(Document())
        out[f"page_{name}_ms"] = median_ms(page, repeats)
        out[f"page_{name}_cpu_ms"] = CPU["last"]
    return out


def bench_whatif(repeats: int) -> dict:
    loop = LiveLoop(SourceOptions(source="sim", nodes=64, seed=7))
    loop.step()
    model = WhatIfModel(loop.state)
    model.run()                                   # base side, once per pinned snapshot
    queues = [q for q in model.param.queue.objects]
    results = {}
    values = iter(range(1, 10_000))

    def move_quota():
        model.queue = queues[1]
        model.quota = float(next(values) % 40 + 1)
        model.run()
        model.queue_diff(), model.summary(), model.job_changes()
    results["whatif_quota_slider_ms"] = median_ms(move_quota, repeats)

    def move_nodes():
        model.pool = model.param.pool.objects[0]
        model.node_delta = next(values) % 8 + 1
        model.run()
        model.queue_diff(), model.summary(), model.job_changes()
    results["whatif_add_nodes_ms"] = median_ms(move_nodes, repeats)

    def move_demand():
        model.demand_scale = 1.0 + (next(values) % 4) * 0.25
        model.run()
        model.queue_diff(), model.summary(), model.job_changes()
    results["whatif_demand_ms"] = median_ms(move_demand, repeats)
    view = WhatIfView(loop.state)
    view.__panel__().get_root()

    def slider_to_screen():
        view._set("quota", float(next(values) % 40 + 1))
    results["whatif_slider_to_tables_ms"] = median_ms(slider_to_screen, repeats)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="64,1000")
    args = parser.parse_args()
    configure_panel()
    for size in (int(s) for s in args.sizes.split(",")):
        r = bench_size(size, args.repeats)
        print(f"\n{size} nodes ({r['gpus']} GPUs, {r['jobs']} jobs): loop tick {r['tick_ms']:.0f} ms "
              f"(first {r['first_tick_ms']:.0f} ms)")
        print(f"  {'view':<10} {'build ms':>9} {'(CPU)':>7} {'refresh ms':>11} {'(CPU)':>7} {'page ms':>8} "
              f"{'(CPU)':>7}")
        for name in VIEWS:
            print(f"  {name:<10} {r[f'build_{name}_ms']:>9.0f} {r[f'build_{name}_cpu_ms']:>7.0f} "
                  f"{r[f'refresh_{name}_ms']:>11.0f} {r[f'refresh_{name}_cpu_ms']:>7.0f} "
                  f"{r[f'page_{name}_ms']:>8.0f} {r[f'page_{name}_cpu_ms']:>7.0f}")
    w = bench_whatif(args.repeats)
    print("\nwhat-if on 64 nodes (median; budget 300 ms):")
    for k, v in w.items():
        print(f"  {k:<30} {v:>7.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
