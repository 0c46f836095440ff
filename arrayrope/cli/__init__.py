"""Command line: ``arrayrope <command>``; each command lives in its own module.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``, and ``VERDICT = True`` when it gives a verdict. Modules are
imported only when their command is parsed, so ``arrayrope --help`` stays fast and
imports no backend.

The commands that give a verdict (``check``, ``demo``, ``parity``, ``export fuse``;
:mod:`arrayrope.cli._verdict`) print ``verdict: <word>: ...``, the word one of
``Report.status``, and exit by it: 0 ``verified`` (numeric checks ran and agreed),
1 ``failed`` (a numeric check disagreed), 3 ``not verified`` (nothing numeric could
run, or something named on the command line could not run); 2 is a usage or input
error. Other commands exit 0 or 2. Every error, from the arguments or while a
command runs, is one line on stderr, ``arrayrope <command>: error: ...``, naming
the option as it is typed (``--max-positions``, not ``max_positions``), never a
traceback; a missing optional library names the extra that installs it.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import textwrap
from typing import Any, NoReturn

from ..backends._libraries import TABLE
from ._verdict import USAGE, epilog

# command name -> module implementing it
COMMANDS: dict[str, str] = {
    "demo": "arrayrope.cli.demo",
    "parity": "arrayrope.cli.parity",
    "export": "arrayrope.cli.export",
    "check": "arrayrope.cli.check",
    "audit": "arrayrope.cli.audit",
    "repair": "arrayrope.cli.repair",
    "plot": "arrayrope.cli.plot",
}

#: Optional libraries and the extra of arrayrope that installs each (the array libraries' from their table).
EXTRAS = {
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "ml_dtypes": "onnx",
    "matplotlib": "plot",
    **{lib.name: lib.extra for lib in TABLE if lib.extra is not None},
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, unless the help already says it; the description and the epilog
    as written, each line that runs past the width wrapped under itself (an exit status's text under its text)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        hang = -1  # the indent of the text of the exit status being read (its continuation lines join it)
        for line in text.splitlines():
            tag = re.match(r"\s*\d\s+", line)
            if not tag and hang > 0 and lines and line.strip() and len(line) - len(line.lstrip()) == hang:
                lines[-1] += " " + line.strip()
                continue
            hang = tag.end() if tag else -1
            lines.append(line)
        out = []
        for line in lines:
            if len(indent + line) <= width:
                out.append(indent + line)
                continue
            lead = line[: len(line) - len(line.lstrip())]
            tag = re.match(r"\s*\d\s+", line)  # "  0  verified: ...": the text hangs under its first word
            under = " " * tag.end() if tag else lead
            out += textwrap.wrap(
                line.strip(),
                width,
                initial_indent=indent + lead,
                subsequent_indent=indent + under,
                break_on_hyphens=False,
            )
        return "\n".join(out) + ("\n" if text.endswith("\n") else "")

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.help is argparse.SUPPRESS or "default" in text or not action.option_strings:
            return action.help
        if action.nargs == 0:  # a flag
            return f"{text} (default: off)" if isinstance(action.default, bool) else action.help
        if action.default is None:  # "None" says nothing: such help says in words what happens without the option
            return action.help
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_command(sub: Any, name: str, module: Any, prog: str) -> argparse.ArgumentParser:
    """The parser of one command (``module`` defines it), with the exit statuses in its help when it gives a verdict."""
    verdict = getattr(module, "VERDICT", False)
    cmd: argparse.ArgumentParser = sub.add_parser(
        name,
        help=module.HELP,
        description=module.HELP,
        formatter_class=HelpFormatter,
        epilog=getattr(module, "EPILOG", None)
        or (epilog(prog.removeprefix("arrayrope ")) if verdict else "exit status: 0 done, 2 usage or input error"),
    )
    module.add_arguments(cmd)
    cmd.set_defaults(_run=module.run, _prog=prog, _parser=cmd, _names=getattr(module, "PYTHON_NAMES", {}))
    return cmd


def build_parser() -> argparse.ArgumentParser:
    from arrayrope import __version__

    parser = _Parser(
        prog="arrayrope", description="Positional encodings for attention models.", formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"arrayrope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, module_name in COMMANDS.items():
        add_command(sub, name, importlib.import_module(module_name), f"arrayrope {name}")
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


def as_typed(message: str, parser: argparse.ArgumentParser | None, names: dict[str, str] | None = None) -> str:
    """``message`` with the Python names of the command's options replaced by the options as typed:
    ``max_positions=2`` becomes ``--max-positions 2`` and ``base must`` becomes ``--base must``.
    ``names`` adds names the options go by in messages (``{"providers": "--provider"}``)."""
    if parser is None:
        return message
    names = dict(names or {})
    flags = set()
    for action in parser._actions:  # argparse offers no public list of a parser's options
        longest = max(action.option_strings, key=len, default=None)
        if longest is not None and longest.startswith("--"):
            names.setdefault(action.dest, longest)
            if action.nargs == 0:
                flags.add(longest)

    def typed(option: str, value: str) -> str:
        return option if option in flags and value == "True" else f"{option} {value}"

    for name, option in sorted(names.items(), key=lambda kv: -len(kv[0])):
        word = re.escape(name)

        def assigned(m: re.Match[str], option: str = option) -> str:
            return typed(option, m.group(1) if m.group(1) is not None else m.group(2))

        message = re.sub(rf"(?<![\w./-]){word}=(?:'([^']*)'|([^\s,;)]+))", assigned, message)
        message = re.sub(rf"(?<![\w./-]){word}(?=:| (?:must|is|needs|applies|<=|>=|<|>) )", option, message)
        message = re.sub(rf"\b(pass|needs|leave) {word}=?(?![\w=-])", rf"\1 {option}", message)  # pass max_positions
    return message


def fail(args: argparse.Namespace, message: str) -> int:
    """Print ``arrayrope <command>: error: message`` (one line, the options as typed); the usage status."""
    prog = getattr(args, "_prog", f"arrayrope {args.command}")
    text = as_typed(" ".join(message.split()), getattr(args, "_parser", None), getattr(args, "_names", None))
    print(f"{prog}: error: {text}", file=sys.stderr)
    return USAGE


#: The status of a command whose reader closed the pipe before the end (``| head``): as a shell reports a
#: process ended by SIGPIPE, with nothing printed.
PIPE_CLOSED = 128 + 13


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll says so of its descriptor, writing nothing)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout without a descriptor
        return False


def _stdout_to_nowhere() -> None:
    """Point stdout at the null device, so that the interpreter's flush at exit finds no closed pipe."""
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured)
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
        if extra:  # said by the command's own parser, in its form: 'arrayrope audit: error: ...'
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help or --version (0) or an argument error, already printed (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else USAGE
    if args.command is None:  # one line, as every usage error: the commands, and where each is described
        print(
            f"arrayrope: error: name a command: {', '.join(COMMANDS)} (arrayrope --help says what each does)",
            file=sys.stderr,
        )
        return USAGE
    try:
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # here, where a reader that went away (``| head``) is answered below
        return status
    except BrokenPipeError as exc:
        if not _stdout_closed():  # another pipe broke (an output file that is a FIFO, a worker): an error
            return fail(args, describe(exc))
        _stdout_to_nowhere()
        return PIPE_CLOSED
    except KeyboardInterrupt:
        print(f"{getattr(args, '_prog', 'arrayrope')}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return fail(args, describe(exc))
