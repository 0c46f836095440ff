"""The built-in parity cases (``testing/_cases.py``): their rows pass, and their oracles are live."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arrayrope.testing import ParityCase
from arrayrope.testing._cases import _axial_case, builtin_cases

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision


def _perturb(out):
    return tuple(o * 1.001 for o in out) if isinstance(out, tuple) else out * 1.001


def test_builtin_cases_have_independent_references_that_catch_faults():
    # The oracles of the built-in cases are live: perturb each function and its row fails.
    for case in builtin_cases():
        shifted = ParityCase(case.name, lambda *a, f=case.fn: _perturb(f(*a)), case.args, case.reference)
        assert not shifted.run(backends=["numpy"], dtypes=["float64"]).ok, case.name


def test_axial_case_row(backend):
    case = _axial_case(width=6, head_dim=32)
    report = case.run(backends=[backend.name.split("-")[0]])
    rows = [r for r in report.rows if r.backend == backend.name]
    assert rows and all(r.ok for r in rows), report
    # and the row's oracle is a real one: a wrong grid order (y, x) is caught
    wrong = dataclasses.replace(case, fn=lambda x, c: case.fn(x, c[:, ::-1]))
    assert not wrong.run(backends=["numpy"]).ok


def test_exact_angles_against_mpmath():
    """The oracles' angles: exact reduction of p * theta (theta's float64 value) before one rounding."""
    mpmath = pytest.importorskip("mpmath")
    from arrayrope.testing import exact_angles

    theta = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    p = np.array([0, 1, -1, 4095, 2**20 - 1, 70000, -(2**40) + 3, 2**62, -(2**63)], dtype=np.int64)
    got = exact_angles(p, theta)
    assert got.shape == (9, 64) and np.all((got >= 0) & (got < 2 * np.pi))
    with mpmath.workprec(400):
        two_pi = 2 * mpmath.pi
        for i, pi in enumerate(p):
            for j, t in enumerate(theta):
                want = float(mpmath.fmod(mpmath.mpf(int(pi)) * mpmath.mpf(float(t)), two_pi) % two_pi)
                assert got[i, j] == want, (int(pi), float(t))
    naive = np.float64(2**20 - 1) * theta
    assert np.max(np.abs(np.cos(naive) - np.cos(got[4]))) > 2**-40  # the naive float64 angle: beyond the tolerance
