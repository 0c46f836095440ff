"""arrayrope's pytest plugin: the ``backend`` and ``xp`` fixtures over every array library installed.

Installed with arrayrope (entry point ``pytest11``), so any test suite can write::

    def test_my_rope(xp, backend):
        x = backend.asarray(np.ones((2, 8)), dtype="float32")   # on the backend's device
        ...

and the test runs once per backend (NumPy, array_api_strict and its no-float64
device, PyTorch CPU and CUDA, JAX CPU and CUDA, Dask, CuPy). A library that is not installed
is a skipped parameter whose reason says why. ``ARRAYROPE_BACKENDS=numpy,torch``
narrows the set (library names, or single devices such as ``torch-cuda``).

pytest loads this module in every run of every project that has arrayrope
installed, so it is a top-level module outside the package: loading it imports
neither arrayrope nor NumPy. Backends are looked up (and arrayrope imported) only
when a collected test asks for one of the fixtures.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

_params: list[Any] | None = None


def backend_params() -> list[Any]:
    """``pytest.param`` per backend, skipped ones with their reason (computed once)."""
    global _params
    if _params is None:
        # JAX takes 75% of a GPU's memory when it starts unless told not to; the other GPU
        # libraries of the same run (and parallel test workers) would find none left
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        from arrayrope.backends import available

        found, missing = available(with_reasons=True)
        _params = [pytest.param(b, id=b.name) for b in found] + [
            pytest.param(None, id=name, marks=pytest.mark.skip(reason=reason)) for name, reason in missing.items()
        ]
    return _params


def pytest_generate_tests(metafunc: Any) -> None:
    if "backend" not in metafunc.fixturenames or not _ours(metafunc):
        return
    if not any("backend" in _argnames(m) for m in metafunc.definition.iter_markers("parametrize")):
        metafunc.parametrize("backend", backend_params(), indirect=True)


def _ours(metafunc: Any) -> bool:
    """Whether ``backend`` resolves to this plugin's fixture, not to a suite's own of that name."""
    defs = getattr(metafunc, "_arg2fixturedefs", {}).get("backend")
    return not defs or getattr(defs[-1].func, "__module__", __name__) == __name__


def _argnames(mark: Any) -> list[str]:
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


@pytest.fixture
def backend(request: Any) -> Any:
    """One :class:`arrayrope.testing.Backend`: library, namespace, device and dtypes."""
    return request.param


@pytest.fixture
def xp(backend: Any) -> Any:
    """The Array API namespace of ``backend``."""
    return backend.xp
