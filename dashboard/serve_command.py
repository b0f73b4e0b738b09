"""``kaidash serve``: the dashboard on a Panel server, with the live loop, ``/metrics`` and ``/healthz``.

With no arguments it serves the embedded simulated cluster. Panel is imported only when the command runs, so
other ``kaidash`` commands never load the UI stack.
"""

from __future__ import annotations

import argparse
import os
import sys

from scheduler import preflight

from .options import SourceOptions, add_source_arguments

NAME = "serve"
HELP = "serve the dashboard (default: an embedded simulated cluster) on http://ADDRESS:PORT/"
DESCRIPTION = ("Serve the kaidash dashboard with one live scheduler loop. Sources: the embedded synthetic cluster "
               "(default), --source kube [--context X] (read-only shadow scheduling), --snapshot FILE (ours or a "
               "KAI /get-snapshot zip), --trace alibaba. GPU usage from --prometheus URL (dcgm-exporter series). "
               "Also serves kaidash's own Prometheus metrics at /metrics and a health probe at /healthz.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=5006, help="port (default 5006; 0 = any free port)")
    parser.add_argument("--address", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    parser.add_argument("--allow-websocket-origin", action="append", default=None, metavar="HOST[:PORT]",
                        help="extra hosts browsers may connect from (behind a proxy or ingress)")
    parser.add_argument("--show", action="store_true", help="open a browser tab")
    parser.add_argument("--data-dir", action="append", default=None, metavar="DIR",
                        help="a directory the server may read snapshot files from (--snapshot, the Settings "
                             "page); repeat for more. Default: the working directory")
    add_source_arguments(parser)
    from .auth import add_auth_arguments   # --basic-auth, --oauth-*, --cookie-secret, --access-map

    add_auth_arguments(parser)


def run(args: argparse.Namespace) -> int:
    options = SourceOptions.from_namespace(args, base=SourceOptions.from_env())
    data_dirs = preflight.data_dirs(args.data_dir)
    os.environ.update(options.to_env())
    os.environ.update(data_dirs.to_env())
    # Everything that can be wrong with the command line is said before the server starts.
    preflight.check_port(args.address, args.port)
    if options.prometheus:
        for warning in preflight.check_prometheus_url(options.prometheus):
            print(f"kaidash serve: warning: {warning}", file=sys.stderr, flush=True)
    from .feeds import make_feed

    feed = make_feed(options) if options.source == "snapshot" else None   # a refused or invalid file: exit 1
    from .insight import load_prices

    load_prices(options.prices)               # a bad price file: exit 1 before serving (the loop reads it again)
    import panel as pn

    from .app import build_app, configure_panel
    from .loop import get_loop
    from .server import extra_patterns

    from .auth import access_map_from, configure_access, serve_kwargs

    from .quiet_log import quiet_closed_sessions

    quiet_closed_sessions()                    # a closed browser tab is not an error (dashboard/quiet_log.py)
    auth = serve_kwargs(args)                  # Panel's basic auth / OAuth options (dashboard/auth.py)
    configure_access(access_map_from(args))    # optional per-user queue scopes
    configure_panel()
    loop = get_loop(options, start=False)
    if feed is not None:
        loop.switch(feed=feed)                 # the snapshot read above, not read twice
    loop.step()                                # the first page shows data, not a spinner
    loop.start()
    origins = list(args.allow_websocket_origin or [])
    if args.address not in ("127.0.0.1", "localhost", "0.0.0.0", ""):
        origins.append(f"{args.address}:{args.port}")
    try:
        server = pn.serve({"/": lambda: build_app(loop)}, port=args.port, address=args.address, show=args.show,
                          title="kaidash", websocket_origin=origins or None, extra_patterns=extra_patterns(loop),
                          start=False, threaded=False, **auth)
    except OSError as exc:                     # the port was taken since the check
        loop.stop()
        raise preflight.listen_error(args.address, args.port, exc) from None
    port = server.port
    print(f"kaidash: serving {options.label()} on http://{args.address}:{port}/ "
          f"(metrics at /metrics, health at /healthz)", flush=True)
    try:
        server.start()
        server.io_loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        loop.stop()
    return 0
