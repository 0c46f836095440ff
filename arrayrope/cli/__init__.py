"""Command line: ``arrayrope <command>``; each command lives in its own module.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported only when their command is parsed, so
``arrayrope --help`` stays fast and imports no backend.

Exit status: 0 success, 1 a verdict that failed (``check`` found the model
invalid, ``parity``/``demo`` rows disagree), 2 an error. Every error, from the
arguments or while a command runs, is one line on stderr, ``arrayrope <command>:
error: ...``, never a traceback; a missing optional library names the extra that
installs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

# command name -> module implementing it
COMMANDS: dict[str, str] = {
    "demo": "arrayrope.cli.demo",
    "parity": "arrayrope.cli.parity",
    "export": "arrayrope.cli.export",
    "check": "arrayrope.cli.check",
    "plot": "arrayrope.cli.plot",
}

#: Optional libraries and the extra of arrayrope that installs each.
EXTRAS = {"onnx": "onnx", "onnxruntime": "onnx", "ml_dtypes": "onnx", "matplotlib": "plot", "torch": "torch",
          "jax": "jax", "dask": "dask", "cupy": "cupy"}


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="arrayrope", description="Positional encodings for attention models.")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def describe(exc: BaseException) -> str:
    """One line that names what went wrong (a missing library with the extra that installs it)."""
    if isinstance(exc, ImportError) and exc.name:
        top = exc.name.split(".")[0]
        extra = EXTRAS.get(top)
        if extra is not None:
            return f"this needs {top}, which is not installed: pip install 'arrayrope[{extra}]'"
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (ValueError, TypeError, OSError)):
        return text
    return f"{type(exc).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help (0) or an argument error, already printed (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"arrayrope {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"arrayrope {args.command}: error: {describe(exc)}", file=sys.stderr)
        return 2
