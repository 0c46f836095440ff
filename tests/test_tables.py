"""Cos/sin tables (``tables.py``) against ``p * theta`` from the formula, cos and sin taken by Python's math
element by element, on every backend, with and without float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import given
from hypothesis import strategies as st

import arrayrope as ar
from arrayrope import rope_tables
from arrayrope.testing import assert_close, to_numpy
from helpers import check_like, inv_freq_formula, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(rope_tables)


def _oracle(positions, rotary_dim, base):
    """cos/sin of p * theta from the formula, float64, via Python's math on each element."""
    theta = inv_freq_formula(rotary_dim, base)
    p = np.asarray(positions, dtype=np.float64)
    ang = p[..., None] * theta
    return np.vectorize(math.cos, otypes=[float])(ang), np.vectorize(math.sin, otypes=[float])(ang)


def _int_dtype(backend):
    return "int32" if backend.name == "jax" else "int64"


def test_tables_from_count_match_formula(xp, backend):
    f = ar.rope_frequencies(16)
    cos, sin = rope_tables(f, 7, xp=backend.xp, device=backend.device)
    c, s = _oracle(np.arange(7), 16, 10000.0)
    check_like(cos, backend, "float32", (7, 8))
    check_like(sin, backend, "float32", (7, 8))
    np.testing.assert_allclose(to_numpy(cos), c, atol=1e-7, rtol=0)
    np.testing.assert_allclose(to_numpy(sin), s, atol=1e-7, rtol=0)


def test_float32_tables_stay_exact_at_large_positions(xp, backend):
    """<= 1e-6 up to 2**20 (the float32 angle recipe is off by 6e-2 there), also without float64."""
    f = ar.rope_frequencies(128)
    pos = np.array([0, 1, 4095, 32767, 131071, 2**20 - 1, 2**20, 2**20 + 12345, 2**24 + 1, 10**9])
    cos, sin = rope_tables(f, backend.asarray(pos.astype(_int_dtype(backend))))
    c, s = _oracle(pos, 128, 10000.0)
    err = max(np.abs(to_numpy(cos) - c).max(), np.abs(to_numpy(sin) - s).max())
    assert err <= 1e-6, err
    # and the imprecise recipe really is imprecise here, so the bound above means something
    naive = np.cos(pos[:, None].astype(np.float32) * f.inv_freq.astype(np.float32))
    assert np.abs(naive - c).max() > 1e-3


def test_negative_and_multidimensional_positions(xp, backend):
    f = ar.rope_frequencies(8, base=100.0)
    pos = np.array([[-5, 0, 3], [2**20, -(2**20), 7]])
    cos, sin = rope_tables(f, backend.asarray(pos.astype(_int_dtype(backend))))
    c, s = _oracle(pos, 8, 100.0)
    check_like(cos, backend, "float32", (2, 3, 4))
    np.testing.assert_allclose(to_numpy(cos), c, atol=2e-7, rtol=0)
    np.testing.assert_allclose(to_numpy(sin), s, atol=2e-7, rtol=0)


def test_fractional_positions(xp, backend):
    f = ar.rope_frequencies(8)
    pos = np.array([0.25, 1.5, -2.75, 1000.125, 65536.5], dtype=np.float32)
    cos, sin = rope_tables(f, backend.asarray(pos))
    c, s = _oracle(pos.astype(np.float64), 8, 10000.0)
    np.testing.assert_allclose(to_numpy(cos), c, atol=2e-7, rtol=0)
    np.testing.assert_allclose(to_numpy(sin), s, atol=2e-7, rtol=0)


def test_requested_dtype(xp, backend):
    f = ar.rope_frequencies(8)
    for name in backend.dtypes:
        cos, sin = rope_tables(f, backend.asarray(np.arange(4)), dtype=getattr(backend.xp, name))
        check_like(cos, backend, name, (4, 4))
        np.testing.assert_allclose(to_numpy(sin).astype(np.float64), _oracle(np.arange(4), 8, 1e4)[1], atol=1e-2)


@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    half=st.integers(1, 6),
    base=st.floats(2.0, 1e6),
    seed=st.integers(0, 2**16),
)
def test_any_shape_numpy(shape, half, base, seed):
    pos = np.random.default_rng(seed).integers(-(2**21), 2**21, size=shape)
    f = ar.rope_frequencies(2 * half, base=base)
    cos, sin = ar.rope_tables(f, pos, dtype="float64")
    c, s = _oracle(pos, 2 * half, base)
    assert cos.shape == (*shape, half) and cos.dtype == np.float64
    np.testing.assert_allclose(cos, c, atol=1e-9, rtol=0)
    np.testing.assert_allclose(sin, s, atol=1e-9, rtol=0)


def test_bad_positions(backend):
    f = ar.rope_frequencies(8)
    xp = backend.xp
    with pytest.raises(TypeError, match="positions must have an integer or real floating dtype"):
        ar.rope_tables(f, backend.asarray(np.array([True, False])))
    with pytest.raises(ValueError, match="must be >= 0"):
        ar.rope_tables(f, -3, xp=xp)
    for bad in (1.5, True, None, "3"):
        with pytest.raises(TypeError, match="positions must be"):
            ar.rope_tables(f, bad, xp=xp)
    with pytest.raises(TypeError, match="dtype must be a real floating dtype"):
        ar.rope_tables(f, 3, xp=xp, dtype=xp.int32)
    with pytest.raises(TypeError, match="freqs must be a RopeFrequencies"):
        ar.rope_tables(np.ones(4), 3)


def test_complex_and_non_finite_positions_numpy():
    f = ar.rope_frequencies(8)
    with pytest.raises(TypeError, match="integer or real floating dtype, got complex"):
        ar.rope_tables(f, np.array([1 + 2j]))
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="positions must be finite"):
            ar.rope_tables(f, np.array([0.0, bad]))


def test_non_finite_positions_are_inspected_on_eager_backends_only(xp, backend):
    f = ar.rope_frequencies(8)
    pos = backend.asarray(np.array([0.0, np.nan]), dtype="float32")
    if backend.lazy:  # Dask builds without computing, JAX traces: the values are never looked at
        cos, _ = rope_tables(f, pos)
        assert np.isnan(to_numpy(cos)[1]).all()
    else:
        with pytest.raises(ValueError, match="positions must be finite"):
            rope_tables(f, pos)


def test_lazy_backends_neither_compute_nor_break_under_jit(xp, backend):
    """Tables from position arrays and from a count: built without computing on Dask, traced under jax.jit
    on JAX (traced positions); on every backend the formula's values and the eager call's."""
    f = ar.rope_frequencies(8, rotary_dim=6)
    c, s = _oracle(np.arange(6), 6, 10000.0)
    for positions in (backend.asarray(np.arange(6)), 6):
        cos, sin = rope_tables(f, positions, xp=xp, device=backend.device)
        xp_assert_close(cos, c, backend, "float32", rtol=0.0, atol=1e-7)
        xp_assert_close(sin, s, backend, "float32", rtol=0.0, atol=1e-7)
        eager_cos, eager_sin = ar.rope_tables(f, positions, xp=xp, device=backend.device)
        assert_close(cos, eager_cos, rtol=1e-7, atol=1e-7)
        assert_close(sin, eager_sin, rtol=1e-7, atol=1e-7)


def test_float64_requested_where_missing():
    s = pytest.importorskip("array_api_strict")
    f = ar.rope_frequencies(8)
    with pytest.raises(ValueError, match="float64 is not supported"):
        ar.rope_tables(f, 3, xp=s, device=s.Device("no_float64"), dtype=s.float64)


def test_positions_from_another_namespace_than_xp():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="positions is a torch array but xp=numpy"):
        ar.rope_tables(ar.rope_frequencies(8), torch.arange(3), xp=np)
