"""The registry of backends (``backends/registry.py``): ``available``, ``Backend`` and ``to_numpy``.

Probes are replaced by stand-ins where the answer must not depend on this machine
(a missing library, a missing GPU); the expected names, orders, reasons and values
are written out here.
"""

from __future__ import annotations

import numpy as np
import pytest

from arrayrope.backends import ENV_VAR, LIBRARIES, VARIANTS, Backend, available, to_numpy
from arrayrope.backends import registry as _registry


def test_libraries_and_variants_are_the_package_modules():
    assert LIBRARIES == ("numpy", "array_api_strict", "torch", "jax", "dask", "cupy")
    assert set(_registry.PROBES) == set(LIBRARIES)
    assert {name.split("-")[0] for name in VARIANTS} <= set(LIBRARIES)
    assert _registry.library_module("numpy").__name__ == "arrayrope.backends.numpy"  # type: ignore[attr-defined]


def test_every_list_of_libraries_derives_from_the_one_table():
    """The table of ``backends/_libraries.py`` names each library once; what else lists them agrees with it."""
    import ast
    import pathlib
    import tomllib

    from arrayrope import cli
    from arrayrope.backends import _libraries, _namespace, _protocol, dispatch
    from arrayrope.backends._libraries import TABLE, by_name

    names = tuple(lib.name for lib in TABLE)
    assert names == LIBRARIES and len(set(names)) == len(names)
    assert VARIANTS is _libraries.VARIANTS and {variant.split("-")[0] for variant in VARIANTS} <= set(names)
    assert {module: lib.name for lib in TABLE for module in lib.modules} == _namespace._MODULES
    assert {lib.name for lib in TABLE if lib.one_device} == _namespace._ONE_DEVICE
    assert {lib.name for lib in TABLE if lib.device_attribute} == _namespace._DEVICE_ATTRIBUTE
    assert {lib.name: lib.import_name for lib in TABLE} == dispatch._IMPORT_NAMES
    assert all(cli.EXTRAS[lib.name] == lib.extra for lib in TABLE if lib.extra is not None)
    assert by_name("dask").import_name == "dask.array"
    # the extras exist, each library has its module here, and mypy checks the contract of each (and of no other)
    root = pathlib.Path(_protocol.__file__).parent
    pyproject = tomllib.loads((root.parent.parent / "pyproject.toml").read_text())
    assert {lib.extra for lib in TABLE if lib.extra} <= set(pyproject["project"]["optional-dependencies"])
    assert all((root / f"{name}.py").is_file() for name in names)
    checked = {
        alias.name
        for node in ast.walk(ast.parse((root / "_protocol.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None
        for alias in node.names
    }
    assert checked == set(names)


def test_numpy_is_always_there():
    (b,) = available(["numpy"])
    assert (b.name, b.library, b.device, b.dtypes, b.lazy) == (
        "numpy",
        "numpy",
        "cpu",
        ("float16", "float32", "float64"),
        False,
    )
    assert b.native is np and str(b) == "numpy" and b.device_label == "cpu"


def test_names_are_listed_in_the_order_asked_once_each(monkeypatch):
    monkeypatch.setitem(_registry.PROBES, "torch", lambda: [Backend("torch", None, "cpu", ("float32",))])
    names = [b.name for b in available(["torch", "numpy", "torch", "numpy"])]
    assert names == ["torch", "numpy"]
    assert [b.name for b in available(" numpy , torch ,")] == ["numpy", "torch"]  # a string is split at commas


def test_default_is_the_environment_variable_then_every_library(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "numpy")
    assert [b.name for b in available()] == ["numpy"]
    for lib in LIBRARIES:
        monkeypatch.setitem(_registry.PROBES, lib, lambda lib=lib: [Backend(lib, None, "cpu", ("float32",))])
    monkeypatch.setenv(ENV_VAR, " ")
    assert [b.name for b in available()] == list(LIBRARIES)
    monkeypatch.delenv(ENV_VAR)
    assert [b.name for b in available()] == list(LIBRARIES)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(
        ValueError,
        match=r"^unknown backends \['nmupy', 'torch-mps'\]; known: \['numpy', "
        r"'array_api_strict', 'torch', 'jax', 'dask', 'cupy'\] or one device of "
        r"them: \['torch-cuda', 'jax-cuda', 'array_api_strict-no_float64'\]$",
    ):
        available(["numpy", "nmupy", "torch-mps"])
    with pytest.raises(ValueError, match=r"unknown backends \[3\]"):
        available([3])  # type: ignore[list-item]


def test_a_library_that_fails_to_load_is_missing_with_its_reason(missing_library):
    missing_library("torch")
    found, missing = available(["numpy", "torch", "torch-cuda"], with_reasons=True)
    assert [b.name for b in found] == ["numpy"]
    reason = "torch unavailable: ImportError: No module named 'torch'"
    assert missing == {"torch": reason, "torch-cuda": reason}
    assert [b.name for b in available(["numpy", "torch"])] == ["numpy"]  # without reasons: just the found ones


def test_a_missing_device_of_an_installed_library_says_which(monkeypatch):
    cpu = Backend("torch", None, "cpu", ("float32",))
    monkeypatch.setitem(_registry.PROBES, "torch", lambda: [cpu])
    found, missing = available(["torch-cuda"], with_reasons=True)
    assert found == [] and missing == {"torch-cuda": "torch-cuda unavailable: no CUDA device for PyTorch"}
    gpu = Backend("torch-cuda", None, "cuda", ("float32",))
    monkeypatch.setitem(_registry.PROBES, "torch", lambda: [cpu, gpu])
    assert available(["torch-cuda"], with_reasons=True) == ([gpu], {})
    assert available(["torch"]) == [cpu, gpu]  # a library name: all its devices


def test_array_api_strict_has_a_device_without_float64():
    strict = pytest.importorskip("array_api_strict")
    both = available(["array_api_strict"])
    assert [b.name for b in both] == ["array_api_strict", "array_api_strict-no_float64"]
    (only,) = available(["array_api_strict-no_float64"])
    assert only.device == strict.Device("no_float64") and only.dtypes == ("float32",)
    assert only.device_label == "no_float64" and only.library == "array_api_strict"


def test_every_declared_dtype_exists_on_its_device(backend):
    for name in backend.dtypes:
        x = backend.asarray(np.array([1.5, -2.0]), dtype=name)
        assert str(x.dtype).split(".")[-1] == name
        np.testing.assert_array_equal(to_numpy(x).astype(np.float64), [1.5, -2.0])  # exact in every dtype


def test_asarray_keeps_integers_and_floats_and_converts_when_asked(backend):
    ints = backend.asarray(np.arange(3))
    assert str(ints.dtype).split(".")[-1] in ("int32", "int64") and to_numpy(ints).tolist() == [0, 1, 2]
    floats = backend.asarray(np.array([0.5, 1.5], dtype=np.float32))
    assert str(floats.dtype).split(".")[-1] == "float32"
    lists = backend.asarray([[1.0, 2.0]], dtype="float32")
    assert tuple(lists.shape) == (1, 2) and to_numpy(lists).tolist() == [[1.0, 2.0]]


def test_to_numpy_of_every_backend(backend):
    values = np.array([[0.25, -1.0, 3.0]])
    for name in backend.dtypes:
        host = to_numpy(backend.asarray(values, dtype=name))
        assert isinstance(host, np.ndarray) and host.shape == (1, 3)
        assert host.dtype == np.dtype("float32" if name == "bfloat16" else name)  # bfloat16 comes back as float32
        np.testing.assert_array_equal(host, values)


def test_to_numpy_of_numpy_and_plain_data():
    a = np.ones(3)
    assert to_numpy(a) is a
    np.testing.assert_array_equal(to_numpy([1, 2]), np.array([1, 2]))
    assert to_numpy(2.5).shape == ()


def test_device_labels():
    assert Backend("torch-cuda", None, "cuda:0", ()).device_label == "cuda:0"
    assert Backend("x", None, "Device('no_float64')", ()).device_label == "no_float64"
    assert Backend("torch-cuda", None, "cuda:0", ()).library == "torch"
