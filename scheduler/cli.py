"""The ``kaidash`` command line.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. The dashboard's ``serve`` command is a module of the ``dashboard`` package that imports
Panel only when it runs, so engine commands never load the UI.

Every error is one message on stderr (``kaidash CMD: error: ...``: the file, object, field or limit) and exit
code 1; ``--debug`` anywhere on the line (or ``KAIDASH_DEBUG=1``) prints the traceback as well.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from .errors import KaidashError

DEBUG_ENV = "KAIDASH_DEBUG"

COMMAND_MODULES = [
    "scheduler.commands.schedule",
    "scheduler.commands.fairshare",
    "scheduler.commands.snapshot",
    "scheduler.commands.simulate",
    "scheduler.commands.exporter",
    "scheduler.commands.eta",
    "scheduler.commands.cost",
    "dashboard.serve_command",
]


def _load_commands():
    commands = []
    for path in COMMAND_MODULES:
        try:
            commands.append(importlib.import_module(path))
        except ModuleNotFoundError as exc:
            if exc.name != path:  # a real missing dependency inside the module: surface it
                raise
    return commands


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="kaidash", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help=f"print the traceback of an error (anywhere on the line, or {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers = {}
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.add_arguments(p)
        handlers[mod.NAME] = mod.run
    return parser, handlers


def _take_debug(argv: list[str]) -> bool:
    """Remove ``--debug`` wherever it appears before ``--`` (so ``kaidash schedule x --debug`` works too)."""
    end = argv.index("--") if "--" in argv else len(argv)
    found = "--debug" in argv[:end]
    argv[:end] = [a for a in argv[:end] if a != "--debug"]
    return found


def error_line(exc: BaseException) -> str:
    """What the CLI prints for an error: kaidash's own message, else a one-line account of what went wrong."""
    if isinstance(exc, KaidashError):
        return str(exc)
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    if isinstance(exc, MemoryError):
        return "out of memory (is the input larger than this machine can hold? see docs/snapshot-format.md, Limits)"
    return (f"internal error: {type(exc).__name__}: {exc} (a bug in kaidash: run again with --debug for the "
            "traceback and report it)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _take_debug(argv) or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(handlers[args.command](args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head`: not an error worth a message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # noqa: BLE001 — every error is one clear message; --debug adds the traceback
        if debug:
            traceback.print_exc()
        print(f"kaidash {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
