"""Start-up as users meet it: ``import arrayrope`` against ``import numpy``, and the pytest plugin's cost.

Each variant is a fresh interpreter (wall time, the variants interleaved round by
round); the figures kept are medians. The modules an import loads come from one
more interpreter that lists them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._config import Config
from ._records import Record, Say

#: Top-level modules that importing arrayrope must leave alone (loaded only when used).
HEAVY = ("torch", "jax", "dask", "cupy", "onnx", "onnxruntime", "array_api_strict", "matplotlib", "unittest", "email")
#: Submodules likewise (NumPy's test and build tools, array_api_compat's NumPy wrapper).
HEAVY_SUBMODULES = ("numpy.testing", "numpy.f2py", "array_api_compat.numpy")

_LIST = "import sys, numpy\nbefore = set(sys.modules)\n{code}\nprint('\\n'.join(sorted(set(sys.modules) - before)))"


def _wall(argv: list[str], cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - t0


def _modules_beyond_numpy(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _LIST.format(code=code)], capture_output=True, text=True, check=True)
    return out.stdout.split()


def startup(config: Config, say: Say) -> list[Record]:
    """Import and pytest-plugin times, medians of ``rounds`` fresh interpreters per variant."""
    rounds = {"full": 15, "quick": 5}.get(config.mode, 1)
    py = sys.executable
    say(f"startup: import numpy / arrayrope, pytest with and without the plugin, {rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="arrayrope-startup-") as tmp:
        folder = Path(tmp)
        (folder / "test_nothing.py").write_text("def test_nothing():\n    assert True\n")
        pytest_argv = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)]
        variants = {
            "python": [py, "-c", "pass"],
            "import numpy": [py, "-c", "import numpy"],
            "import arrayrope": [py, "-c", "import arrayrope"],
            "pytest": pytest_argv,
            "pytest -p no:arrayrope": [*pytest_argv[:-1], "-p", "no:arrayrope", str(folder)],
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        if rounds > 1:
            for argv in variants.values():  # warm the file cache once
                _wall(argv, folder)
        for _ in range(rounds):
            for name, argv in variants.items():
                times[name].append(_wall(argv, folder))
    seconds = {k: statistics.median(v) for k, v in times.items()}
    new = _modules_beyond_numpy("import arrayrope")
    probe = (
        "import sys, _arrayrope_pytest\n"
        "print('\\n'.join(m for m in sys.modules if m.split('.')[0] in ('arrayrope', 'numpy')))"
    )
    plugin = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    heavy = [m for m in new if m.split(".")[0] in HEAVY or m.startswith(HEAVY_SUBMODULES)]
    return [
        {
            "section": "startup",
            "backend": "python",
            "shape": [],
            "layout": "-",
            "dtype": "-",
            "rotary_dim": 0,
            "seconds": seconds,
            "rounds": rounds,
            "import_over_numpy_ms": (seconds["import arrayrope"] - seconds["import numpy"]) * 1e3,
            "plugin_ms": (seconds["pytest"] - seconds["pytest -p no:arrayrope"]) * 1e3,
            "modules_beyond_numpy": len(new),
            "heavy_modules": heavy,
            "plugin_loads": plugin,
        }
    ]
