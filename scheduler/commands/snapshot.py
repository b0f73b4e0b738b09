"""``kaidash snapshot``: bring a cluster into kaidash's snapshot format, and check snapshot files.

- ``kaidash snapshot import kai.zip -o cluster.yaml``: a KAI ``/get-snapshot`` zip → our format;
- ``kaidash snapshot capture [--kubeconfig F] [--context X | --in-cluster] -o cluster.yaml``: a live cluster,
  read-only (one list of each resource);
- ``kaidash snapshot export FILE --format kai-zip -o kai.zip``: any snapshot → a KAI ``/get-snapshot`` zip that
  KAI's own ``snapshot-tool`` replays (``--actions allocate`` to replay only some actions);
- ``kaidash snapshot validate FILE``: ``ok: N nodes, M queues, K jobs`` or every problem with its path;
- ``kaidash snapshot generate --seed 1 --nodes 64 -o cluster.yaml``: a synthetic busy cluster.

Objects skipped or adjusted on the way in are listed on stderr (``warning: Pod ns/name field ...``).
Output format follows the extension (``.json`` or YAML); ``-o -`` writes YAML to stdout.
"""

from __future__ import annotations

import sys
from typing import Iterable

from ..errors import SnapshotError
from ..model import Snapshot
from ..preflight import check_output_file

NAME = "snapshot"
HELP = "import or export a KAI snapshot zip, capture a live cluster, validate or generate a snapshot file"
DESCRIPTION = __doc__.split("\n\n")[0]


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="snapshot_command", metavar="ACTION", required=True)

    p = sub.add_parser("import", help="convert a KAI /get-snapshot zip into a kaidash snapshot")
    p.add_argument("zip", metavar="KAI_ZIP", help="the zip KAI's scheduler serves at /get-snapshot")
    p.add_argument("-o", "--output", required=True, help="output file (.yaml/.yml/.json, or - for stdout)")
    p.add_argument("--time", type=float, default=None,
                   help="snapshot time in seconds since the epoch (default: newest timestamp in the zip)")

    p = sub.add_parser("export", help="write a snapshot as a KAI /get-snapshot zip (replayable by KAI's snapshot-tool)")
    p.add_argument("file", metavar="FILE", help="a snapshot file (YAML, JSON or KAI zip)")
    p.add_argument("--format", choices=("kai-zip",), default="kai-zip", help="output format (default kai-zip)")
    p.add_argument("--actions", default=None,
                   help="comma-separated actions for the zip's config (default: the snapshot's config.actions)")
    p.add_argument("-o", "--output", required=True, help="output zip")

    p = sub.add_parser("capture", help="save a live cluster (read-only: get/list only) as a kaidash snapshot")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current context)")
    p.add_argument("--in-cluster", action="store_true", help="use the pod's service account instead of a kubeconfig")
    p.add_argument("--scheduler-name", default="kai-scheduler", help="KAI's scheduler name (default kai-scheduler)")
    p.add_argument("-o", "--output", required=True, help="output file (.yaml/.yml/.json, or - for stdout)")

    p = sub.add_parser("validate", help="check a snapshot file (YAML, JSON or KAI zip)")
    p.add_argument("file", metavar="FILE")

    p = sub.add_parser("generate", help="generate a synthetic busy cluster (seeded, reproducible)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--nodes", type=int, default=64, help="number of nodes (default 64)")
    p.add_argument("-o", "--output", required=True, help="output file (.yaml/.yml/.json, or - for stdout)")


def _summary(snap: Snapshot) -> str:
    return f"{len(snap.nodes)} nodes, {len(snap.queues)} queues, {len(snap.jobs)} jobs"


def _print_warnings(warnings: Iterable) -> int:
    n = 0
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
        n += 1
    return n


def _write(snap: Snapshot, output: str) -> None:
    from ..snapshot_io import dumps_snapshot, save_snapshot

    if output == "-":
        sys.stdout.write(dumps_snapshot(snap, "yaml"))
    else:
        save_snapshot(snap, output)


def _done(snap: Snapshot, output: str, n_warnings: int) -> None:
    if output != "-":
        extra = f" ({n_warnings} warning{'s' if n_warnings != 1 else ''})" if n_warnings else ""
        print(f"wrote {output}: {_summary(snap)}{extra}")


def _export(args) -> int:
    from ..model import ACTIONS
    from ..snapshot_io import load_snapshot
    from ..sources.kai_export import write_kai_zip

    snap = load_snapshot(args.file)
    if args.actions is not None:
        names = [a.strip() for a in args.actions.split(",") if a.strip()]
        unknown = [a for a in names if a not in ACTIONS]
        if unknown or not names:
            raise SnapshotError("--actions", f"unknown action(s) {', '.join(unknown) or '(none given)'} "
                                             f"(known: {', '.join(ACTIONS)})")
        snap.config.actions = names
    write_kai_zip(snap, args.output)
    print(f"wrote {args.output}: {_summary(snap)} as a KAI /get-snapshot zip")
    return 0


def run(args) -> int:
    action = args.snapshot_command
    if action in ("import", "capture", "generate"):
        check_output_file(args.output, "-o")   # before the work: a typo in the directory costs nothing
    if action == "import":
        from ..sources.kai_snapshot import import_kai_snapshot

        conv = import_kai_snapshot(args.zip, time=args.time)
        n = _print_warnings(conv.warnings)
        _write(conv.snapshot, args.output)
        _done(conv.snapshot, args.output, n)
        return 0
    if action == "export":
        return _export(args)
    if action == "capture":
        from ..sources.kube import KubeSource

        if args.in_cluster:
            if args.kubeconfig or args.context:
                raise SnapshotError("capture", "--in-cluster excludes --kubeconfig and --context")
            source = KubeSource.in_cluster(scheduler_name=args.scheduler_name)
        else:
            source = KubeSource.from_kubeconfig(args.kubeconfig, args.context, scheduler_name=args.scheduler_name)
        conv = source.capture()
        n = _print_warnings(conv.warnings)
        _write(conv.snapshot, args.output)
        _done(conv.snapshot, args.output, n)
        return 0
    if action == "validate":
        from ..snapshot_io import load_snapshot

        if str(args.file).endswith(".zip"):
            from ..sources.kai_snapshot import import_kai_snapshot

            conv = import_kai_snapshot(args.file)
            snap, n = conv.snapshot, _print_warnings(conv.warnings)
        else:
            snap, n = load_snapshot(args.file), 0
        extra = f" ({n} object{'s' if n != 1 else ''} skipped or adjusted, see warnings)" if n else ""
        print(f"ok: {_summary(snap)}{extra}")
        return 0
    if action == "generate":
        from ..sources.synthetic import generate_scenario

        if args.nodes < 1:
            raise SnapshotError("--nodes", f"must be at least 1, got {args.nodes}")
        scenario = generate_scenario(seed=args.seed, nodes=args.nodes)
        _write(scenario.snapshot, args.output)
        _done(scenario.snapshot, args.output, 0)
        return 0
    raise SnapshotError("snapshot", f"unknown action {action!r}")
