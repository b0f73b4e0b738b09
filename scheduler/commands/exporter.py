"""``kaidash exporter``: a simulated dcgm-exporter for a snapshot or a synthetic scenario, for a real Prometheus.

    kaidash exporter --port 9400 --snapshot examples/small-cluster.yaml
    kaidash exporter --port 9400 --seed 7 --nodes 16 --variant 4.9.0
    kaidash exporter --port 9400 --demo-extensions   # + the demo's MIG pool: per-MIG-instance series

Serves ``/metrics`` in dcgm-exporter's format (see :mod:`scheduler.metrics.exporter`) until interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import SourceError
from ..metrics import variants as V
from ..metrics.exporter import ExporterServer, ExporterState

NAME = "exporter"
HELP = "serve simulated dcgm-exporter metrics for a snapshot or synthetic scenario"
DESCRIPTION = __doc__.splitlines()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9400, help="TCP port (dcgm-exporter's default: 9400)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, loopback only; 0.0.0.0 for all interfaces, "
                             "e.g. in a container scraped by Prometheus)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--snapshot", metavar="FILE", help="snapshot file (YAML/JSON) whose tasks' usage to export")
    source.add_argument("--seed", type=int, default=None, help="synthetic scenario seed (default when no snapshot: 0)")
    parser.add_argument("--nodes", type=int, default=8, help="nodes in the synthetic scenario (default 8)")
    parser.add_argument("--demo-extensions", action="store_true",
                        help="synthetic scenario: add the demo's topology, MIG and DRA pools (MIG nodes get "
                             "per-instance series, GPU_I_PROFILE/GPU_I_ID)")
    parser.add_argument("--variant", choices=sorted(V.EXPORTER_VARIANTS), default=V.DEFAULT_EXPORTER_VARIANT,
                        help="dcgm-exporter naming variant to emit (default: classic)")
    parser.add_argument("--per-pod", action="store_true",
                        help="emit per-pod FB_USED/GPU_UTIL like --kubernetes-virtual-gpus with per-process data")


def _load(args: argparse.Namespace):
    if args.snapshot:
        from ..snapshot_io import load_snapshot
        return load_snapshot(args.snapshot)
    try:
        synthetic = importlib.import_module("scheduler.sources.synthetic")
    except ModuleNotFoundError as exc:
        raise SourceError("synthetic scenarios need scheduler.sources.synthetic, which is not available; "
                          "pass --snapshot FILE") from exc
    scenario = synthetic.generate_scenario(args.seed if args.seed is not None else 0, args.nodes,
                                           extensions=args.demo_extensions)
    return getattr(scenario, "snapshot", scenario)  # a Scenario carries the t=0 snapshot


def run(args: argparse.Namespace) -> int:
    snapshot = _load(args)
    state = ExporterState(snapshot, variant=args.variant, per_pod=args.per_pod)
    try:
        server = ExporterServer(state, host=args.host, port=args.port)
    except OSError as exc:
        raise SourceError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    gpus = sum(n.gpus for n in snapshot.nodes)
    mig = f" ({len(state.instances())} MIG instances)" if state.instances() else ""
    print(f"kaidash exporter: {gpus} GPUs{mig} on {len(snapshot.nodes)} nodes, variant {args.variant}, "
          f"serving http://{args.host}:{server.port}/metrics", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
