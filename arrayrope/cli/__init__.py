"""Command line: ``arrayrope <command>``; each command lives in its own module.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported only when their command is parsed, so
``arrayrope --help`` stays fast and imports no backend.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module implementing it
COMMANDS: dict[str, str] = {
    "demo": "arrayrope.cli.demo",
    "parity": "arrayrope.cli.parity",
    "export": "arrayrope.cli.export",
    "check": "arrayrope.cli.check",
    "plot": "arrayrope.cli.plot",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arrayrope", description="Positional encodings for attention models.")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args._run(args) or 0)
