"""The pytest plugin (the top-level module ``_arrayrope_pytest``): skipped backends with their reasons, and the
``backend``/``xp`` fixtures served to a suite outside this one through the entry point."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

import _arrayrope_pytest as pytest_plugin


def test_plugin_skips_a_missing_library_with_its_reason(monkeypatch, missing_library):
    missing_library("fancyarrays")
    monkeypatch.setenv("ARRAYROPE_BACKENDS", "numpy,fancyarrays")
    monkeypatch.setattr(pytest_plugin, "_params", None)
    params = pytest_plugin.backend_params()
    monkeypatch.setattr(pytest_plugin, "_params", None)
    assert [p.id for p in params] == ["numpy", "fancyarrays"]
    (mark,) = params[1].marks
    assert mark.name == "skip" and "No module named 'fancyarrays'" in mark.kwargs["reason"]


def test_plugin_serves_a_downstream_suite_through_its_entry_point(tmp_path):
    points = importlib.metadata.entry_points(group="pytest11")
    if "_arrayrope_pytest" not in [p.value for p in points]:
        pytest.skip("arrayrope is installed without its entry-point metadata; reinstall it")
    (tmp_path / "test_downstream.py").write_text(
        textwrap.dedent("""
        def test_uses_fixtures(xp, backend):
            x = backend.asarray([1.0, 2.0], dtype="float32")
            assert float(xp.sum(x)) == 3.0
    """)
    )
    (tmp_path / "test_own_fixture.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.fixture
        def backend():
            return "the suite's own"

        def test_own_backend_fixture_is_left_alone(backend):
            assert backend == "the suite's own"
    """)
    )
    pytest.importorskip("array_api_strict")
    env = {"ARRAYROPE_BACKENDS": "numpy,array_api_strict", "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # where the libraries come from a path rather than site-packages
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
