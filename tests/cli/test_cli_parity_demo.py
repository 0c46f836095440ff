"""``arrayrope parity``, ``arrayrope demo`` and the pytest plugin, run on NumPy (fast)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import _arrayrope_pytest as pytest_plugin
from arrayrope import cli
from arrayrope.backends import registry as _backends
from arrayrope.cli import demo as _demo
from arrayrope.testing import ParityCase
from arrayrope.testing._cases import builtin_cases


def test_parity_command_prints_the_table_and_passes(capsys):
    assert cli.main(["parity", "--backends", "numpy", "--dtypes", "float32,float16"]) == 0
    out = capsys.readouterr().out
    assert "[1/5] RoPE half-split" in out and "[4/5] token embeddings + sinusoidal embedding" in out
    assert "[5/5] 2-D axial RoPE" in out
    assert out.count("numpy ") == 10 and "FAIL" not in out
    assert "10 of 10 rows agree with the float64 references" in out


def test_parity_command_exits_1_when_a_row_fails(capsys, monkeypatch):
    broken = ParityCase("doubled", lambda x: 2 * x, (np.ones(4),), reference=lambda x: x)
    monkeypatch.setattr("arrayrope.testing._cases.builtin_cases", lambda: [broken])
    assert cli.main(["parity", "--backends", "numpy", "--dtypes", "float64"]) == 1
    assert "FAIL: error above tolerance" in capsys.readouterr().out


def test_parity_command_rejects_unknown_names(capsys):
    assert cli.main(["parity", "--backends", "numpy,nmupy"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend(s) ['nmupy']; known: ['numpy', 'array_api_strict', 'torch'" in err
    assert cli.main(["parity", "--dtypes", "float8"]) == 2
    assert "dtypes must be a non-empty selection" in capsys.readouterr().err


def test_builtin_cases_have_independent_references_that_catch_faults():
    # The oracles of the built-in cases are live: perturb each function and its row fails.
    for case in builtin_cases():
        shifted = ParityCase(case.name, lambda *a, f=case.fn: _perturb(f(*a)), case.args, case.reference)
        assert not shifted.run(backends=["numpy"], dtypes=["float64"]).ok, case.name


def _perturb(out):
    return tuple(o * 1.001 for o in out) if isinstance(out, tuple) else out * 1.001


def _extra_module(monkeypatch, name, make):
    module = types.ModuleType(name)
    if make is not None:
        module._demo_case = make
    monkeypatch.setitem(sys.modules, name, module)


def test_demo_verdict_and_export_row(capsys, monkeypatch):
    from arrayrope.testing import Report, Row

    row = Row("onnxruntime", "cpu", "float32", 2e-7, 1e-7, 1e-6, True, "", "ONNX export")
    monkeypatch.setattr(_demo, "_export_case", lambda **kw: Report((row,)))
    assert cli.main(["demo", "--backends", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "[6/6] " in out and "onnxruntime  cpu     float32     2.00e-07" in out
    assert "[5/6] 2-D axial RoPE" in out
    assert out.rstrip().splitlines()[-1].startswith("verdict: PASS: all 8 rows agree")


def test_demo_failing_export_is_a_failed_row(capsys, monkeypatch):
    import arrayrope.export

    def refuse(model, **kw):
        raise RuntimeError("onnxruntime refused the model")

    monkeypatch.setattr(arrayrope.export, "validate", refuse)
    assert cli.main(["demo", "--backends", "numpy"]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("verdict: FAIL: 1 of 8 rows disagree (ONNX export, validated on ONNX Runtime on - -: raised "
                           "RuntimeError: onnxruntime refused the model")


def test_demo_lists_the_export_row_when_onnx_is_missing(capsys, monkeypatch):
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "arrayrope.export":
                raise ModuleNotFoundError("No module named 'onnx'", name="onnx")

    monkeypatch.delitem(sys.modules, "arrayrope.export", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder()] + sys.meta_path)
    assert cli.main(["demo", "--backends", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "not run here: ONNX export, validated on ONNX Runtime: No module named 'onnx' (install the 'onnx' extra)" in out


def test_plugin_skips_a_missing_library_with_its_reason(monkeypatch):
    def absent():
        raise ImportError("No module named 'fancyarrays'")

    monkeypatch.setitem(_backends.PROBES, "fancyarrays", absent)
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
    (tmp_path / "test_downstream.py").write_text(textwrap.dedent("""
        def test_uses_fixtures(xp, backend):
            x = backend.asarray([1.0, 2.0], dtype="float32")
            assert float(xp.sum(x)) == 3.0
    """))
    (tmp_path / "test_own_fixture.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def backend():
            return "the suite's own"

        def test_own_backend_fixture_is_left_alone(backend):
            assert backend == "the suite's own"
    """))
    env = {"ARRAYROPE_BACKENDS": "numpy,array_api_strict", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
