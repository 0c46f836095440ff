"""The README's Python examples run as written (those whose libraries are installed)."""

import importlib.util
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code, tmp_path, monkeypatch):
    for module in re.findall(r"^\s*import (\w+)", code, flags=re.M) + re.findall(r"^\s*from (\w+)", code, flags=re.M):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})


def test_ci_runs_the_quickstart_test_command():
    """The Quickstart's two commands: the main job needs no PyTorch; CI runs the test command as written."""
    quick = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)[0].splitlines()
                if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    main, tests = commands
    assert main.endswith("arrayrope demo") and "torch" not in main, main
    assert tests.endswith("python -m pytest") and "download.pytorch.org/whl/cpu" in tests, tests
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert tests in ci, "'.ci/run' must run the README's test command as written"
