"""The API reference covers the public API: every name in the ``__all__`` of a public module
(``arrayrope``, ``arrayrope.export``, ``arrayrope.testing``, ``arrayrope.config``, ``arrayrope.scaling``)
has a page or an entry in ``docs/reference`` (and nothing else is listed there), read from the reference
pages' sources without building the site."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

REFERENCE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reference"
MODULES = ("arrayrope", "arrayrope.export", "arrayrope.testing", "arrayrope.config", "arrayrope.scaling")


def listed(module: str) -> list[str]:
    """The names a reference page lists: its autosummary entries, its autodata directives and the
    autoclass/autofunction directives of its pages."""
    text = (REFERENCE / f"{module.rsplit('.', 1)[-1]}.rst").read_text()
    names = re.findall(r"^\.\. autodata:: (\w+)", text, flags=re.M)
    for block in re.findall(r"^\.\. autosummary::\n((?:   .*\n|\n)+)", text, flags=re.M):
        names += [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith(":")]
    for page in re.findall(r"^   (\w+)$", text, flags=re.M):  # pages of their own in a toctree
        source = REFERENCE / f"{page}.rst"
        if source.exists():
            names += re.findall(r"^\.\. auto(?:class|function|data):: (\w+)", source.read_text(), flags=re.M)
    return names


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_has_a_page(module):
    names = listed(module)
    assert len(names) == len(set(names)), f"listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    assert sorted(names) == sorted(importlib.import_module(module).__all__)


def test_the_reference_pages_are_read_as_listed():
    """The reader above finds what a page lists: a mutation of a page changes what it returns."""
    assert "rope_tables" in listed("arrayrope") and "fuse_rotary" in listed("arrayrope.export")
    assert "Report" in listed("arrayrope.testing") and "Report" not in listed("arrayrope.export")
    assert "ROPE_TYPES" in listed("arrayrope.scaling") and "CONFIG_KEYS" in listed("arrayrope.config")


def slug(heading: str) -> str:
    """The anchor MyST gives a heading (GitHub's rule): lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_to_pages_and_headings_that_exist():
    """The README's links into the documentation (the site's build checks the links between its pages)."""
    root = REFERENCE.parent.parent
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", (root / "README.md").read_text())
    assert len(links) >= 10
    for path, anchor in links:
        page = root / path
        assert page.is_file(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
            assert anchor in {slug(h) for h in headings}, (path, anchor)
    assert slug("Verdicts and exit statuses") == "verdicts-and-exit-statuses"
    assert slug("A RotaryEmbedding in a model") == "a-rotaryembedding-in-a-model"


def test_the_cli_reference_holds_what_each_command_s_help_prints():
    """docs/reference/cli.md holds every parser's help (written by tools/cli_reference.py), under the Python
    version named on the page (argparse lays help out differently across versions); every command has a block."""
    import importlib.util
    import sys

    tool = REFERENCE.parent.parent / "tools" / "cli_reference.py"
    spec = importlib.util.spec_from_file_location("cli_reference", tool)
    assert spec is not None and spec.loader is not None
    cli_reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli_reference)
    page = cli_reference.PAGE.read_text()
    version = cli_reference.VERSION.search(page)
    assert version is not None
    if version.group(1) != f"{sys.version_info[0]}.{sys.version_info[1]}":
        pytest.skip(f"the page holds the help of Python {version.group(1)}; run tools/cli_reference.py to compare")
    assert {m.group("name") for m in cli_reference.BLOCK.finditer(page)} == set(cli_reference.helps())
    assert cli_reference.rendered(page) == page, "run python tools/cli_reference.py"


def test_the_cli_reference_fits_80_columns():
    """Every line of help (descriptions and exit statuses too) fits the 80 columns it is laid out for, so that
    neither a terminal nor the page wraps it again; an exit status's text continues under its text."""
    import re

    page = REFERENCE / "cli.md"
    blocks = re.findall(r"```text\n(.*?)```", page.read_text(), re.S)
    assert blocks
    long = [line for block in blocks for line in block.splitlines() if len(line) > 80]
    assert not long, long[:3]
    assert "  2  usage or input error (one line on stderr: 'arrayrope audit: error: ...'):" in page.read_text()


def test_python_examples_fit_the_page_column():
    """Every line of the Python examples in the README and the pages is at most 92 characters, the width the site's
    code column shows unwrapped (docs/_static/arrayrope.css)."""
    import re

    root = REFERENCE.parent.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "docs" / "guide").glob("*.md"))]
    long = [
        f"{page.name}: {line[:60]}..."
        for page in pages
        for block in re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
        for line in block.splitlines()
        if len(line) > 92
    ]
    assert not long, long[:5]
