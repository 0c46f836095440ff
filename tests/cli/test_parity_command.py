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
    assert "unknown backends ['nmupy']; known: ['numpy', 'array_api_strict', 'torch'" in err
    assert cli.main(["parity", "--dtypes", "float8"]) == 2
    assert "dtypes must be a non-empty selection" in capsys.readouterr().err
