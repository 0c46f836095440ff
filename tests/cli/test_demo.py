"""``arrayrope demo`` (``cli/demo.py``): the rows, the export row in each of its states, and the verdict."""

from __future__ import annotations

import subprocess
import sys

import pytest

from arrayrope import cli
from arrayrope.cli import demo as _demo


def test_demo_verdict_and_export_row(capsys, monkeypatch):
    from arrayrope.testing import Report, Row

    row = Row("onnxruntime", "cpu", "float32", 2e-7, 1e-7, 1e-6, True, "", "ONNX export")
    monkeypatch.setattr(_demo, "_export_case", lambda **kw: Report((row,)))
    assert cli.main(["demo", "--backends", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "[6/6] " in out and "onnxruntime  cpu     float32     2.00e-07" in out
    assert "[5/6] 2-D axial RoPE" in out
    assert out.rstrip().splitlines()[-1] == "verdict: verified: 8 numeric checks agree (numpy cpu, onnxruntime cpu)"


def test_demo_failing_export_is_a_failed_row(capsys, monkeypatch):
    pytest.importorskip("onnx")
    import arrayrope.export

    def refuse(model, **kw):
        raise RuntimeError("onnxruntime refused the model")

    monkeypatch.setattr(arrayrope.export, "validate", refuse)
    assert cli.main(["demo", "--backends", "numpy"]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith(
        "verdict: failed: 1 of 8 checks disagree (ONNX export, validated on ONNX Runtime: raised "
        "RuntimeError: onnxruntime refused the model"
    ), last


def test_demo_lists_the_export_row_when_onnx_is_missing(capsys, monkeypatch):
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "arrayrope.export":
                raise ModuleNotFoundError("No module named 'onnx'", name="onnx")

    monkeypatch.delitem(sys.modules, "arrayrope.export", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert cli.main(["demo", "--backends", "numpy"]) == 0
    out = capsys.readouterr().out
    assert (
        "not run here: ONNX export, validated on ONNX Runtime: No module named 'onnx' (install the 'onnx' extra)"
    ) in out


def test_cli_demo_runs_and_agrees():
    out = subprocess.run(
        [sys.executable, "-m", "arrayrope", "demo", "--backends", "numpy"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "numpy" in out.stdout and "float32" in out.stdout


def test_demo_of_a_backend_that_is_not_here_is_not_verified(capsys, monkeypatch, missing_library):
    """Nothing that was asked for ran: "not verified" and exit status 3, whatever else ran beside it."""
    from arrayrope.testing import Report, Row

    missing_library("cupy")
    row = Row("onnxruntime", "cpu", "float32", 2e-7, 1e-7, 1e-6, True, "", "ONNX export")
    monkeypatch.setattr(_demo, "_export_case", lambda **kw: Report((row,)))
    assert cli.main(["demo", "--backends", "cupy"]) == 3
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith(
        "verdict: not verified: --backends cupy could not run here (cupy unavailable: "
        "ImportError: No module named 'cupy'); what ran: 1 numeric check agrees"
    ), last
    monkeypatch.setattr(_demo, "_export_case", lambda **kw: Report())
    assert cli.main(["demo", "--backends", "cupy"]) == 3
    assert (
        capsys.readouterr()
        .out.rstrip()
        .splitlines()[-1]
        .startswith(
            "verdict: not verified: --backends cupy could not run here (cupy unavailable: ImportError: No module named "
            "'cupy'); no numeric check could run here; not run here: cupy"
        )
    )
    assert cli.main(["demo", "--backends", "numpy,cupy"]) == 3


def test_demo_help_lists_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["demo", "--help"])
    out = capsys.readouterr().out
    for status in ("0  verified", "1  failed", "2  usage or input error", "3  not verified"):
        assert status in out
