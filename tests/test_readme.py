"""Every code block of the README runs as pasted and prints what the README shows.

Blocks run in order in one temporary folder (a later block may read a file an earlier one
wrote), Python blocks in one interpreter each, shell blocks line by line in bash. A
```` ```text ```` block right after a code block is what that block prints, compared as
doctest compares (``...`` stands for any text, runs of whitespace are equal); blocks
without one may print anything. A block whose Python imports a library that is not
installed here is skipped with the reason, and so are the blocks after it in the same
section that may read what it wrote.

What is not run as written, and why:

* The Quickstart's install commands build a virtual environment from a clone: the main
  job's last step (``arrayrope demo``) runs here, and the test command is checked to be the
  very line ``.ci/run`` runs, which is where it runs as written.
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
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", flags=re.S | re.M)


def blocks():
    """(language, code, expected output or None, section title, line) for each code block, in order."""
    text = README.read_text()
    found = list(FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        lang, code = m.group(1), m.group(2)
        if lang not in ("python", "bash"):
            continue
        expected = None
        nxt = found[i + 1] if i + 1 < len(found) else None
        if nxt is not None and nxt.group(1) == "text" and not text[m.end() : nxt.start()].strip():
            expected = nxt.group(2)
        section = next((h for h in reversed(re.findall(r"^#+ (.+)$", text[: m.start()], flags=re.M))), "")
        out.append((lang, code, expected, section, text[: m.start()].count("\n") + 1))
    return out


BLOCKS = blocks()
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


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


#: Sections in which a block was skipped: the blocks after it there may need what it would have written.
SKIPPED_SECTIONS: set[str] = set()


def shell_lines(code: str) -> list[str]:
    """The commands of a shell block (comments and blank lines dropped)."""
    return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def as_run_here(line: str, folder: pathlib.Path) -> tuple[str, pathlib.Path] | None:
    """The command as this test runs it, and where, or None for the test command, which CI runs as written
    (see the module docstring for what differs and why)."""
    words = shlex.split(line, comments=True)
    if "pip" in words and "install" in words:  # the Quickstart: run its last step in this environment
        last = line.rsplit("&&", 1)[1].strip()
        return None if last == "python -m pytest" else (last, folder)
    if words[:3] == [sys.executable.rsplit("/", 1)[-1], "-m", "bench"] or words[:3] == ["python", "-m", "bench"]:
        rest = [w for w in words[3:] if w not in ("--quick", "--tiny")]
        if "--out" in rest:
            i = rest.index("--out")
            del rest[i : i + 2]
        return shlex.join([sys.executable, "-m", "bench", "--tiny", *rest, "--out", str(folder / "bench")]), ROOT
    return line, folder


def test_the_readme_has_blocks_of_both_kinds_and_outputs():
    langs = [b[0] for b in BLOCKS]
    assert langs.count("python") >= 8 and langs.count("bash") >= 4
    assert sum(b[2] is not None for b in BLOCKS) >= 3


@pytest.mark.parametrize("lang, code, expected, section, line", BLOCKS, ids=[f"line{b[4]}-{b[0]}" for b in BLOCKS])
def test_readme_block_runs_as_pasted(lang, code, expected, section, line, folder, monkeypatch):
    monkeypatch.chdir(folder)
    if section in SKIPPED_SECTIONS:
        pytest.skip(f"an earlier block of section {section!r} was skipped")
    if lang == "python":
        missing = missing_library(code)
        if missing:
            SKIPPED_SECTIONS.add(section)
            pytest.skip(f"{missing} is not installed")
        out = io.StringIO()
        # a module of its own, as a pasted script's __main__ is: the classes it defines pickle (torch.save)
        module = types.ModuleType("__readme__")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        try:
            with redirect_stdout(out):
                exec(compile(code, f"{README}:{line}", "exec"), module.__dict__)
        except ModuleNotFoundError as exc:  # an optional library that a module the block imports needs
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            SKIPPED_SECTIONS.add(section)
            pytest.skip(f"{exc.name} is not installed")
        got = out.getvalue()
    else:
        got = ""
        env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        for command in shell_lines(code):
            needs_onnx = shlex.split(command, comments=True)[:2] in (["arrayrope", "export"], ["arrayrope", "check"])
            if needs_onnx and importlib.util.find_spec("onnx") is None:
                pytest.skip("onnx is not installed")
            here = as_run_here(command, folder)
            if here is None:
                continue
            run, cwd = here
            done = subprocess.run(["bash", "-c", run], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (command, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
            got += done.stdout
    if expected is not None:
        assert same(expected, got), f"README line {line} shows\n{expected}\nbut the block printed\n{got}"


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


def test_output_blocks_are_compared_strictly_enough():
    """The comparison the blocks above rely on: ``...`` for any text, nothing else loose."""
    assert same("verdict: PASS: ... checks agree\n", "verdict: PASS: 12 numeric checks agree\n")
    assert not same(
        "['RotaryEmbedding', 'RotaryEmbedding']\n", "['Clip', 'Mod', 'RotaryEmbedding', 'RotaryEmbedding']\n"
    )
