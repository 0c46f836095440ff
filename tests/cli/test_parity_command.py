"""``arrayrope parity`` (``cli/parity.py``): the table of the built-in cases, its exit status and its errors.

Run on NumPy only, so the command takes a fraction of a second.
"""

from __future__ import annotations

import numpy as np

from arrayrope import cli
from arrayrope.testing import ParityCase


def test_parity_command_prints_the_table_and_passes(capsys):
    assert cli.main(["parity", "--backends", "numpy", "--dtypes", "float32,float16"]) == 0
    out = capsys.readouterr().out
    assert "[1/5] RoPE half-split" in out and "[4/5] token embeddings + sinusoidal embedding" in out
    assert "[5/5] 2-D axial RoPE" in out
    assert out.count("    numpy ") == 10 and "FAIL" not in out
    assert out.splitlines()[-1] == "verdict: verified: 10 numeric checks agree (numpy cpu)"


def test_parity_passes_in_float64_at_far_positions(capsys):
    """The oracles reduce p * theta exactly: a float64 oracle's own rounding (6e-11 at 2**20) would exceed the
    float64 tolerance and fail a correct library."""
    assert cli.main(["parity", "--backends", "numpy", "--dtypes", "float64"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.splitlines()[-1] == "verdict: verified: 5 numeric checks agree (numpy cpu)"


def test_parity_of_nothing_here_is_not_verified(capsys, missing_library):
    missing_library("cupy")
    assert cli.main(["parity", "--backends", "cupy"]) == 3
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith(
            "verdict: not verified: --backends cupy could not run here (cupy unavailable: ImportError: No module named "
            "'cupy'); no numeric check could run here; not run here: cupy"
        )
    )
    assert cli.main(["parity", "--backends", "numpy,cupy", "--dtypes", "float32"]) == 3
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith(
            "verdict: not verified: --backends cupy could not run here (cupy unavailable: ImportError: No module named "
            "'cupy'); what ran: 5 numeric checks agree (numpy cpu)"
        )
    )


def test_parity_command_exits_1_when_a_row_fails(capsys, monkeypatch):
    broken = ParityCase("doubled", lambda x: 2 * x, (np.ones(4),), reference=lambda x: x)
    monkeypatch.setattr("arrayrope.testing._cases.builtin_cases", lambda: [broken])
    assert cli.main(["parity", "--backends", "numpy", "--dtypes", "float64"]) == 1
    assert "FAIL: error above tolerance" in capsys.readouterr().out


def test_parity_command_rejects_unknown_names(capsys):
    assert cli.main(["parity", "--backends", "numpy,nmupy"]) == 2
    err = capsys.readouterr().err
    assert "arrayrope parity: error: --backends: unknown backends ['nmupy']; known: ['numpy', " in err
    assert cli.main(["parity", "--dtypes", "float8"]) == 2
    assert "arrayrope parity: error: --dtypes must be a non-empty selection" in capsys.readouterr().err
