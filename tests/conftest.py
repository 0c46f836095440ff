"""Suite-wide settings and fixtures. The ``backend`` fixture comes from arrayrope's pytest plugin.

The plugin (the top-level module ``_arrayrope_pytest``, entry point ``pytest11``) runs
every test that takes ``backend`` or ``xp`` on every installed backend;
``ARRAYROPE_BACKENDS=numpy,torch`` narrows the set, and a missing library is a
skipped parameter with the reason.

``xp`` is redefined here: besides the backend's namespace it applies
array-api-extra's :func:`~array_api_extra.testing.patch_lazy_xp_functions`, so that
in a test taking ``xp`` every function its module tags with
:func:`~array_api_extra.testing.lazy_xp_function` runs under a Dask scheduler that
fails on any ``compute()`` (building a result must compute nothing) and under
``jax.jit`` on JAX (it must trace). ``missing_library`` makes a library look
uninstalled. ``thresholds`` runs a test with the kernels' size thresholds and without
them (every array then takes the blocked kernels, in tiny blocks). Oracles shared by
the test modules live in ``helpers.py``.
"""

from __future__ import annotations

import inspect
import os

import pytest
from array_api_extra.testing import patch_lazy_xp_functions
from hypothesis import settings

# CI: at least 500 examples for every property (each drawn case is kept cheap: see test_dispatch's JAX cases);
# "dev" for quicker local runs (HYPOTHESIS_PROFILE=dev).
settings.register_profile("ci", max_examples=500, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    # Installed arrayrope registers the plugin itself; a checkout whose metadata predates it loads it here.
    if not config.pluginmanager.has_plugin("arrayrope"):
        config.pluginmanager.import_plugin("_arrayrope_pytest")


# array-api-extra up to 0.7 patches through a required monkeypatch and returns None; later releases return a
# context manager and deprecate the monkeypatch argument (a DeprecationWarning in every test taking xp)
_MONKEYPATCH_REQUIRED = (
    inspect.signature(patch_lazy_xp_functions).parameters["monkeypatch"].default is inspect.Parameter.empty
)


@pytest.fixture
def xp(backend, request, monkeypatch):
    """The namespace of ``backend``, with the test module's ``lazy_xp_function`` tags in force."""
    if _MONKEYPATCH_REQUIRED:
        patch_lazy_xp_functions(request, monkeypatch, xp=backend.xp)
        yield backend.xp
        return
    with patch_lazy_xp_functions(request, xp=backend.xp):
        yield backend.xp


@pytest.fixture
def missing_library(monkeypatch):
    """``missing_library(name)``: from now on, in this test, ``name``'s backends fail to load as an
    uninstalled library does (its registry probe raises ImportError ``No module named 'name'``)."""
    from arrayrope.backends import registry

    def register(name: str) -> str:
        message = f"No module named {name!r}"

        def probe():
            raise ImportError(message)

        monkeypatch.setitem(registry.PROBES, name, probe)
        return message

    return register


@pytest.fixture(params=["default", "forced"])
def thresholds(request, monkeypatch):
    """Default size thresholds, or none: every array takes the blocked/PyTorch kernels, in tiny blocks."""
    if request.param == "forced":
        from arrayrope.backends import numpy as _np_kernels

        monkeypatch.setattr(_np_kernels, "_SMALL", 0)
        monkeypatch.setattr(_np_kernels, "_SMALL_HALF", 0)
        monkeypatch.setattr(_np_kernels, "BLOCK_BYTES", 96)
        try:
            from arrayrope.backends import torch as _torch_kernels
        except ImportError:  # no torch here: only the NumPy thresholds matter
            return request.param
        monkeypatch.setattr(_torch_kernels, "GRAIN", 0)  # one-row blocks, on every thread PyTorch may use
        monkeypatch.setattr(_torch_kernels, "ONE_THREAD_BLOCK", 0)
        monkeypatch.setattr(_torch_kernels, "CAST_BLOCK", 0)
        monkeypatch.setattr(_torch_kernels, "HELPERS_MIN", 0)
        monkeypatch.setattr(_torch_kernels, "WHOLE_HALF", 0)
        monkeypatch.setattr(_torch_kernels, "WHOLE_INTERLEAVED", 0)
    return request.param
