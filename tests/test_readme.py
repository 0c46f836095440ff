"""Every code block of the README and of the documentation's pages (``docs/**/*.md``) runs as
pasted and prints what the page shows.

The blocks of a page run in order in one temporary folder of the page's own (a later block may
read a file an earlier one wrote), Python blocks in one interpreter each, shell blocks line by
line in bash. A
```` ```text ```` block right after a code block is what that block prints, compared as
doctest compares (``...`` stands for any text, runs of whitespace are equal); blocks
without one may print anything. A block whose Python imports a library that is not
installed here is skipped with the reason, and so are the blocks after it in the same
section that may read what it wrote.

What is not run as written, and why:

* The Quickstart's install commands build a virtual environment from a clone: the main
  job's last step (``arrayrope demo``) runs here, and the test command is checked to be the
  very line ``.ci/run`` runs, which is where it runs as written. So is the command that builds
  the documentation. Other install commands (``pip install``, ``python3 -m venv``) change the
  environment the tests run in and are not run here.
* Benchmark runs of minutes (``python -m bench``, ``--quick``) run in ``--tiny`` form, the
  same code over every section in seconds, into the temporary folder (``--out``), so that no
  test rewrites the committed results.
"""

from __future__ import annotations

import doctest
import importlib.util
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
import types
from contextlib import redirect_stdout

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The pages whose blocks run: the README and every page of the documentation (not the generated tables
#: it includes, nor a build's output).
NOT_PAGES = {"_build", "_generated", "_includes"}
PAGES = [README, *sorted(p for p in DOCS.rglob("*.md") if not NOT_PAGES & set(p.relative_to(DOCS).parts))]
#: The docs build command, as the README and the installation page give it, and as CI runs it.
DOCS_BUILD = "sphinx-build -W --keep-going -b html docs docs/_build/html"


def fences(text: str) -> list[tuple[str, str, int, int]]:
    """(info string, body, first line, line after the closing fence) of each fenced block, in order; the lines
    of a block are never read as fences (MyST directives such as ```` ```{figure} ```` are blocks too)."""
    lines = text.splitlines(keepends=True)
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start = lines[i][3:].strip(), i
            i += 1
            while i < len(lines) and lines[i].rstrip("\n") != "```":
                i += 1
            out.append((info, "".join(lines[start + 1 : i]), start + 1, i + 1))
        i += 1
    return out


def blocks(page: pathlib.Path = README):
    """(language, code, expected output or None, section title, line) for each code block of ``page``, in order."""
    text = page.read_text()
    lines = text.splitlines()
    found = fences(text)
    out = []
    for i, (lang, code, line, end) in enumerate(found):
        if lang not in ("python", "bash"):
            continue
        expected = None
        nxt = found[i + 1] if i + 1 < len(found) else None
        if nxt is not None and nxt[0] == "text" and not "".join(lines[end : nxt[2] - 1]).strip():
            expected = nxt[1]
        inside = {n for _, _, a, b in found for n in range(a, b)}
        heads = [h for n, h in enumerate(lines[: line - 1], 1) if re.match(r"^#+ ", h) and n not in inside]
        section = heads[-1].split(" ", 1)[1] if heads else ""
        out.append((lang, code, expected, section, line))
    return out


BLOCKS = [(page, *block) for page in PAGES for block in blocks(page)]
#: Libraries the README's blocks may need through arrayrope's optional layers.
OPTIONAL = {
    "onnx",
    "onnxruntime",
    "onnxscript",
    "ml_dtypes",
    "torch",
    "jax",
    "dask",
    "cupy",
    "matplotlib",
    "transformers",
    "mpmath",
}
CHECKER = doctest.OutputChecker()
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def same(expected: str, got: str) -> bool:
    return CHECKER.check_output(expected, got, OPTIONS)


def missing_library(code: str) -> str | None:
    names = re.findall(r"^\s*import ([\w, ]+)", code, flags=re.M) + re.findall(r"^\s*from (\w+)", code, flags=re.M)
    for name in (n.split()[0].split(".")[0] for group in names for n in group.split(",") if n.strip()):
        if name and importlib.util.find_spec(name) is None:
            return name
    return None


FOLDERS: dict[pathlib.Path, pathlib.Path] = {}


@pytest.fixture
def folder(page, tmp_path_factory):
    """The page's own folder, shared by its blocks."""
    if page not in FOLDERS:
        FOLDERS[page] = tmp_path_factory.mktemp(page.stem)
    return FOLDERS[page]


#: Sections in which a block was skipped: the blocks after it there may need what it would have written.
SKIPPED_SECTIONS: set[tuple[pathlib.Path, str]] = set()


def shell_lines(code: str) -> list[str]:
    """The commands of a shell block (comments and blank lines dropped)."""
    return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def as_run_here(line: str, folder: pathlib.Path) -> tuple[str, pathlib.Path] | None:
    """The command as this test runs it, and where, or None for the test command, which CI runs as written
    (see the module docstring for what differs and why)."""
    words = shlex.split(line, comments=True)
    if ("pip" in words and "install" in words) or words[:3] == ["python3", "-m", "venv"]:
        # an install: run its last step in this environment, unless it installs too or CI runs it as written
        last = line.split("#", 1)[0].rsplit("&&", 1)[-1].strip()
        installs = last.startswith(("pip ", "python3 -m venv", ". ")) or "&&" not in line
        return None if installs or last in ("python -m pytest", DOCS_BUILD) else (last, folder)
    if words[:3] == [sys.executable.rsplit("/", 1)[-1], "-m", "bench"] or words[:3] == ["python", "-m", "bench"]:
        rest = [w for w in words[3:] if w not in ("--quick", "--tiny")]
        if "--out" in rest:
            i = rest.index("--out")
            del rest[i : i + 2]
        return shlex.join([sys.executable, "-m", "bench", "--tiny", *rest, "--out", str(folder / "bench")]), ROOT
    return line, folder


def test_the_pages_have_blocks_of_both_kinds_and_outputs():
    readme = [b for b in BLOCKS if b[0] == README]
    assert [b[1] for b in readme].count("python") >= 3 and [b[1] for b in readme].count("bash") >= 3
    langs = [b[1] for b in BLOCKS]
    assert langs.count("python") >= 20 and langs.count("bash") >= 6
    assert sum(b[3] is not None for b in BLOCKS) >= 12
    assert {b[0].name for b in BLOCKS} >= {"README.md", "rope.md", "scaling.md", "onnx.md", "testing.md", "dask.md"}


def test_fences_are_read_as_blocks_whole():
    """A directive's fence is a block of its own: its closing fence opens nothing."""
    text = "```{figure} a.png\n:alt: a\n```\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n"
    assert [(info, body) for info, body, _, _ in fences(text)] == [
        ("{figure} a.png", ":alt: a\n"),
        ("python", "print(1)\n"),
        ("text", "1\n"),
    ]


@pytest.mark.parametrize(
    "page, lang, code, expected, section, line",
    BLOCKS,
    ids=[f"{b[0].relative_to(ROOT)}:{b[5]}-{b[1]}" for b in BLOCKS],
)
def test_block_runs_as_pasted(page, lang, code, expected, section, line, folder, monkeypatch):
    monkeypatch.chdir(folder)
    if (page, section) in SKIPPED_SECTIONS:
        pytest.skip(f"an earlier block of section {section!r} was skipped")
    if lang == "python":
        missing = missing_library(code)
        if missing:
            SKIPPED_SECTIONS.add((page, section))
            pytest.skip(f"{missing} is not installed")
        if 'if __name__ == "__main__":' in code:  # a script that starts processes: run as one, as pasted
            script = folder / "script.py"
            script.write_text(code)
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            if expected is not None:
                assert same(expected, done.stdout), f"{page.name} line {line}: {done.stdout!r}"
            return
        out = io.StringIO()
        # a module of its own, as a pasted script's __main__ is: the classes it defines pickle (torch.save)
        module = types.ModuleType("__readme__")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        try:
            with redirect_stdout(out):
                exec(compile(code, f"{page}:{line}", "exec"), module.__dict__)
        except ModuleNotFoundError as exc:  # an optional library that a module the block imports needs
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            SKIPPED_SECTIONS.add((page, section))
            pytest.skip(f"{exc.name} is not installed")
        got = out.getvalue()
    else:
        got = ""
        env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        ran: set[tuple[str, pathlib.Path]] = set()  # bench lines that differ in size only run as one --tiny run
        for command in shell_lines(code):
            onnx_commands = ("export", "check", "audit", "repair")  # their models are ONNX
            needs_onnx = shlex.split(command, comments=True)[:2] in [["arrayrope", c] for c in onnx_commands]
            if needs_onnx and importlib.util.find_spec("onnx") is None:
                pytest.skip("onnx is not installed")
            here = as_run_here(command, folder)
            if here is None:
                continue
            run, cwd = here
            if (run, cwd) in ran:
                continue
            ran.add((run, cwd))
            done = subprocess.run(["bash", "-c", run], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (command, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
            got += done.stdout
    if expected is not None:
        assert same(expected, got), f"{page.name} line {line} shows\n{expected}\nbut the block printed\n{got}"


def test_ci_runs_the_quickstart_test_command():
    """The Quickstart's two commands: the main job needs no PyTorch; CI runs the test command as written."""
    quick = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [
        line
        for line in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)[0].splitlines()
        if line and not line.startswith("#")
    ]
    assert len(commands) == 2, commands
    main, tests = commands
    assert main.endswith("arrayrope demo") and "torch" not in main, main
    assert tests.endswith("python -m pytest") and "download.pytorch.org/whl/cpu" in tests, tests
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert tests in ci, "'.ci/run' must run the README's test command as written"


def test_ci_builds_the_docs_as_the_pages_say():
    """The command that builds the documentation, in the README and on the installation page, is the one CI
    runs (with warnings as errors), which is where it runs as written."""
    for page in (README, DOCS / "install.md"):
        commands = [c for lang, c, *_ in blocks(page) if lang == "bash" and DOCS_BUILD in c]
        assert commands, f"{page.name} gives no command that builds the documentation"
    ci = (ROOT / ".ci" / "run").read_text()
    assert DOCS_BUILD in ci and "-b doctest" in ci and "-b linkcheck" in ci


def test_output_blocks_are_compared_strictly_enough():
    """The comparison the blocks above rely on: ``...`` for any text, nothing else loose."""
    assert same("verdict: verified: ... checks agree\n", "verdict: verified: 12 numeric checks agree\n")
    assert not same(
        "['RotaryEmbedding', 'RotaryEmbedding']\n", "['Clip', 'Mod', 'RotaryEmbedding', 'RotaryEmbedding']\n"
    )
