import doctest
import importlib
import os
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import arrayrope

OPTIONAL = ("torch", "jax", "dask", "cupy", "onnx", "onnxruntime", "array_api_strict", "matplotlib")


def test_import_loads_no_optional_backend():
    code = (
        "import sys, arrayrope, arrayrope.testing\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def _new_modules(code: str) -> set[str]:
    """Modules a fresh interpreter holds after ``import numpy`` and then ``code``, beyond numpy's."""
    probe = (
        "import sys, numpy\nbefore = set(sys.modules)\n" + code +
        "\nprint('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_import_stays_light():
    """Start-up: nothing of NumPy's testing or build tools, no ONNX, no array_api_compat wrapper, few modules."""
    new = _new_modules("import arrayrope")
    heavy = {m for m in new if m.split(".")[0] in ("unittest", "email", "onnx", *OPTIONAL)
             or m.startswith(("numpy.testing", "numpy.f2py", "array_api_compat.numpy"))}
    assert not heavy, sorted(heavy)
    assert len([m for m in new if not m.startswith("arrayrope")]) < 30, sorted(new)


def test_pytest_plugin_imports_neither_arrayrope_nor_numpy():
    """pytest loads the plugin in every run of every project with arrayrope installed."""
    code = ("import sys, _arrayrope_pytest\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('arrayrope', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_export_is_a_subpackage_only(tmp_path):
    """The installed distribution provides ``arrayrope.export``, never a top-level ``export``. Judged in a fresh
    interpreter outside the checkout (whose own ``export/`` folder is importable from its root whatever the folder
    is named) by where ``export`` would come from, not by the text of a path."""
    pytest.importorskip("onnx")
    import arrayrope.export

    assert arrayrope.export.__name__ == "arrayrope.export"
    folder = pathlib.Path(arrayrope.export.__file__).resolve().parent
    code = "import importlib.util as u; s = u.find_spec('export'); print(s.origin if s and s.origin else '')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    origin = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert not origin or pathlib.Path(origin).resolve().parent != folder, origin


def _modules():
    yield "arrayrope"
    for info in pkgutil.walk_packages(arrayrope.__path__, "arrayrope."):
        if not info.name.endswith("__main__"):
            yield info.name
    # arrayrope.export is installed from the top-level export/ folder, outside arrayrope.__path__
    export = importlib.util.find_spec("arrayrope.export")
    if export is not None and export.submodule_search_locations:
        yield "arrayrope.export"
        for info in pkgutil.iter_modules(export.submodule_search_locations, "arrayrope.export."):
            yield info.name


@pytest.mark.parametrize("name", list(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:  # a backend module (or the export layer) whose library is not installed here
        if name.startswith(("arrayrope.backends.", "arrayrope.export")) and exc.name in OPTIONAL:
            pytest.skip(f"{name} needs {exc.name}, which is not installed")
        raise
    if name.startswith("arrayrope.export") and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the export layer's examples run models on onnxruntime, which is not installed")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0

