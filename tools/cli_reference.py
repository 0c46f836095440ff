"""Write what ``arrayrope <command> --help`` prints into ``docs/reference/cli.md``, so that the page reads in full
wherever it is read (the site, or the repository's own view of the Markdown).

Each block follows a marker ``<!-- help: NAME -->`` (``arrayrope``, a command, or ``export-fuse``) and is the
parser's help at a width of 80 columns. Run after changing an option: ``python tools/cli_reference.py``;
``tests/test_docs.py`` compares the page with the parsers under the Python minor version named at its top
(argparse's layout changes between versions).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"
BLOCK = re.compile(r"(<!-- help: (?P<name>[\w-]+) -->\n```text\n)(?P<body>.*?)(```)", re.S)
VERSION = re.compile(r"<!-- help of Python (\d+\.\d+) -->")


def helps() -> dict[str, str]:
    """Every parser's help: ``arrayrope``, each command, ``export-fuse`` for the nested one."""
    from arrayrope.cli import build_parser

    out: dict[str, str] = {}
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse wraps at the terminal's width: the same on every machine
    try:

        def walk(parser: argparse.ArgumentParser, name: str) -> None:
            out[name] = parser.format_help()
            for action in parser._actions:  # argparse has no public list of a parser's subcommands
                if isinstance(action, argparse._SubParsersAction):
                    for command, sub in action.choices.items():
                        walk(sub, command if name == "arrayrope" else f"{name}-{command}")

        walk(build_parser(), "arrayrope")
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return out


def rendered(page: str) -> str:
    """``page`` with each marked block holding its parser's help, and the Python version named."""
    found = helps()
    page = VERSION.sub(f"<!-- help of Python {sys.version_info[0]}.{sys.version_info[1]} -->", page)
    return BLOCK.sub(lambda m: m.group(1) + found[m.group("name")] + m.group(4), page)


def main() -> int:
    PAGE.write_text(rendered(PAGE.read_text()))
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
