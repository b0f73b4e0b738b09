"""The ``kaidash`` command line.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. The dashboard's ``serve`` command is a module of the ``dashboard`` package that imports
Panel only when it runs, so engine commands never load the UI.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import KaidashError

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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers = {}
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.add_arguments(p)
        handlers[mod.NAME] = mod.run
    return parser, handlers


def main(argv: list[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(handlers[args.command](args) or 0)
    except KaidashError as exc:
        print(f"kaidash {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
