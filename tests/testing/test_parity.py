"""check_parity: correct implementations pass on every backend, broken ones are reported.

The reference for RoPE rows is the explicit rotation matrix of tests/helpers.py, so a
passing row means "equals R(p) x", not "equals arrayrope".
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import arrayrope
from arrayrope.backends import namespace
from arrayrope.testing import ParityCase, check_parity
from helpers import inv_freq_formula, rope_by_matrix

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

HEAD_DIM = 16
POSITIONS = np.arange(1000, 1012, dtype=np.int64)
X = np.random.default_rng(0).standard_normal((2, 3, len(POSITIONS), HEAD_DIM))


def generic_rope(*, base=10000.0, layout="half", shift=0, float16_tables=False):
    """RoPE for any backend, built from arrayrope's stages, with optional deliberate faults."""
    freqs = arrayrope.rope_frequencies(HEAD_DIM, base=base)

    def fn(x, positions):
        xp = array_api_compat.array_namespace(x)
        if float16_tables:  # angles and tables in float16, as a cache built for float16 models might be
            inv = xp.asarray(freqs.inv_freq, dtype=xp.float16, device=array_api_compat.device(x))
            angles = xp.astype(positions, xp.float16)[:, None] * inv
            cos, sin = xp.cos(angles), xp.sin(angles)
        else:
            table_dtype = xp.float64 if x.dtype == xp.float64 else xp.float32
            cos, sin = arrayrope.rope_tables(freqs, positions + shift, dtype=table_dtype)
        return arrayrope.apply_rotary(x, cos, sin, layout=layout)

    return fn


def oracle(x, positions):
    return rope_by_matrix(x, positions, inv_freq_formula(HEAD_DIM, 10000.0), "half")


def test_correct_rope_passes_on_every_backend_and_dtype(backend):
    report = check_parity(generic_rope(), X, POSITIONS, backends=[backend], reference=oracle)
    assert report.ok, report
    expected_dtypes = [d for d in ("float32", "float64", "float16", "bfloat16") if d in backend.dtypes]
    assert [r.dtype for r in report.rows] == expected_dtypes
    scale = np.max(np.abs(oracle(X, POSITIONS)))
    for row in report.rows:
        assert row.backend == backend.name and 0 <= row.max_abs_error <= row.tolerance
        assert row.max_rel_error == pytest.approx(row.max_abs_error / scale, rel=0.01)


def test_rotary_embedding_matches_the_rotation_matrix_everywhere(backend):
    rope = arrayrope.RotaryEmbedding(HEAD_DIM, layout="interleaved", rotary_dim=8)
    ref = lambda x, p: rope_by_matrix(x, p, inv_freq_formula(8, 10000.0), "interleaved")
    report = check_parity(lambda x, p: rope(x, positions=p), X, POSITIONS, backends=[backend], reference=ref)
    assert report.ok, report


@pytest.mark.parametrize(
    "broken, smallest_error",
    [
        (generic_rope(layout="interleaved"), 0.5),  # wrong layout
        (generic_rope(base=10100.0), 1e-2),  # base off by 1%
        (generic_rope(shift=1), 0.5),  # position off by one
    ],
    ids=["wrong-layout", "base-1%", "off-by-one"],
)
def test_broken_rope_fails_every_row(backend, broken, smallest_error):
    report = check_parity(broken, X, POSITIONS, backends=[backend], reference=oracle)
    assert not report.ok and report.rows and report.failures == report.rows
    for row in report.rows:
        assert row.max_abs_error > max(smallest_error, row.tolerance), row
        assert row.note == "error above tolerance"
    assert "FAIL" in str(report)


def test_float16_tables_at_large_positions_are_caught(backend):
    if "float16" not in backend.dtypes:
        pytest.skip(f"{backend.name} has no float16")
    far = np.arange(30000, 30012, dtype=np.int64)
    ref = lambda x, p: rope_by_matrix(x, p, inv_freq_formula(HEAD_DIM, 10000.0), "half")
    fine = check_parity(generic_rope(), X, far, backends=[backend], dtypes=["float16"], reference=ref)
    assert fine.ok, fine
    broken = generic_rope(float16_tables=True)
    report = check_parity(broken, X, far, backends=[backend], dtypes=["float16"], reference=ref)
    (row,) = report.rows
    assert not report.ok and row.max_abs_error > 0.1, row  # angles off by radians, not rounding


def test_a_function_raising_on_one_backend_fails_that_row_only():
    pytest.importorskip("array_api_strict")

    def numpy_only(x):
        if not isinstance(x, np.ndarray):
            raise RuntimeError("only NumPy arrays, please")
        return x * 2.0

    report = check_parity(numpy_only, X, backends=["numpy", "array_api_strict"], dtypes=["float32"])
    by_name = {r.backend: r for r in report.rows}
    assert by_name["numpy"].ok
    for name in ("array_api_strict", "array_api_strict-no_float64"):
        assert not by_name[name].ok and by_name[name].note == "raised RuntimeError: only NumPy arrays, please"
    assert not report.ok and "raised RuntimeError" in str(report)


def test_outputs_of_wrong_namespace_shape_or_dtype_are_reported():
    pytest.importorskip("array_api_strict")
    from arrayrope.testing import to_numpy

    cases = {
        "is a numpy ndarray, expected an array of array_api_strict": lambda x: to_numpy(x) * 1.0,
        "has shape (2, 3, 12, 15), the reference (2, 3, 12, 16)": (
            lambda x: x[..., 1:] if not isinstance(x, np.ndarray) else x
        ),
        "has dtype float64, expected float32": (
            lambda x: x if isinstance(x, np.ndarray) else namespace(x).astype(x, namespace(x).float64)
        ),
        "returned 2 outputs, the reference 1": lambda x: x if isinstance(x, np.ndarray) else (x, x),
        "has NaN where the reference has none": lambda x: x if isinstance(x, np.ndarray) else x / 0.0 * 0.0,
    }
    for note, fn in cases.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            report = check_parity(
                fn, X, backends=["numpy", "array_api_strict"], dtypes=["float32"], reference=lambda x: x
            )
        strict = next(r for r in report.rows if r.backend == "array_api_strict")
        assert not strict.ok and note in strict.note, (note, strict.note)
        assert [r.ok for r in report.rows if r.backend == "numpy"] == [True]


def test_missing_backend_is_skipped_with_its_reason(missing_library):
    missing_library("fancyarrays")
    report = check_parity(lambda x: x + 1.0, X, backends=["numpy", "fancyarrays"], dtypes=["float64"])
    assert report.ok and [r.backend for r in report.rows] == ["numpy"]
    assert report.skipped == (("fancyarrays", "fancyarrays unavailable: ImportError: No module named 'fancyarrays'"),)
    assert "skipped fancyarrays: fancyarrays unavailable" in str(report)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown backends \['nump'\]; known: \['numpy'"):
        check_parity(lambda x: x, X, backends=["nump"])
    with pytest.raises(ValueError, match=r"dtypes must be a non-empty selection of \['float32'"):
        check_parity(lambda x: x, X, backends=["numpy"], dtypes=["float8"])
    with pytest.raises(TypeError, match="fn must be callable"):
        check_parity("not a function", X)
    with pytest.raises(ValueError, match="reference must be 'float64' or a callable"):
        check_parity(lambda x: x, X, reference="float32")


def test_reference_run_errors_propagate():
    with pytest.raises(ZeroDivisionError):
        check_parity(lambda x: x, X, backends=["numpy"], reference=lambda x: 1 / 0)


@given(
    layout=st.sampled_from(["half", "interleaved"]),
    shift=st.integers(-3, 3),
    base=st.sampled_from([100.0, 10000.0, 500000.0]),
    dtype=st.sampled_from(["float32", "float64", "float16"]),
)
def test_any_shift_is_caught_and_no_shift_passes(layout, shift, base, dtype):
    ref = lambda x, p: rope_by_matrix(x, p, inv_freq_formula(HEAD_DIM, base), layout)
    fn = generic_rope(base=base, layout=layout, shift=shift)
    report = check_parity(fn, X, POSITIONS, backends=["numpy"], dtypes=[dtype], reference=ref)
    assert report.ok == (shift == 0), report


def test_default_device_index_counts_as_the_same_device():
    from arrayrope.testing._parity import _same_device

    assert _same_device("cuda:0", "cuda") and _same_device("cpu", "cpu")
    assert not _same_device("cuda:1", "cuda") and not _same_device("cpu", "cuda")


def test_case_run_in_dtypes_it_does_not_have_runs_nothing():
    case = ParityCase("float32 only", lambda x: x, (X,), dtypes=("float32",))
    assert case.run(backends=["numpy"], dtypes=["float64"]).rows == ()
    (row,) = case.run(backends=["numpy"], dtypes=["float32", "float64"]).rows
    assert (row.case, row.dtype, row.ok) == ("float32 only", "float32", True)
