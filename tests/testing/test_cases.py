"""The built-in parity cases (``testing/_cases.py``): their rows pass, and their oracles are live."""

from __future__ import annotations

import dataclasses

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
