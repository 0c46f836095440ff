"""The float32 table method without float64 (``_lib/digits.py``).

Oracles, both free of the code under test: the digit rotations against cos/sin of
the float64 angle ``d * 1024**level * theta`` from Python's math; the float32
tables against ``exact_cos_sin`` (helpers), which takes ``p * theta`` exactly and
reduces it against a 256-bit pi, so that the oracle itself carries no float64
angle error at large positions.
"""

from __future__ import annotations

import array_api_compat.numpy
import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function

import arrayrope
from arrayrope._lib.digits import DIGIT_BITS, digit_rotations, float32_digits
from arrayrope._lib.positions import magnitude_bits
from arrayrope.testing import to_numpy
from helpers import check_like, exact_cos_sin

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision


def float32_tables(xp, inv_freq, positions, device):
    """The digit method on positions as the pipeline passes them: a count n, or an array (bits read from it)."""
    if isinstance(positions, int):
        bits = max(positions - 1, 0).bit_length()
        positions = xp.arange(positions, dtype=xp.int32, device=device)
    else:
        bits = magnitude_bits(xp, positions)
    return float32_digits(xp, inv_freq, positions, device, bits)


# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(float32_tables)

NP = array_api_compat.numpy  # the compliant namespace of NumPy (NumPy 1.26's own has no astype)

INV_FREQ = arrayrope.rope_frequencies(64, base=10000.0).inv_freq
#: float32 tables from float64 digits, composed in float32: within 2.5 float32 ulps at 1 (2**-23 = 1.2e-7)
BOUND = 2.5 * 2.0**-23
#: one digit: the float64 value rounded once to float32, half an ulp at 1
ONE_DIGIT = 2.0**-25


def _error(cos, sin, positions, inv_freq=INV_FREQ):
    c, s = exact_cos_sin(positions, inv_freq)
    return max(np.abs(to_numpy(cos).astype(np.float64) - c).max(), np.abs(to_numpy(sin).astype(np.float64) - s).max())


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_digit_rotations_are_cos_sin_of_the_exact_angles(level):
    """Each digit's rotation is cos/sin of the exact product ``d * 1024**level * theta`` (no float64 angle)."""
    c, s = digit_rotations(INV_FREQ, level)
    assert DIGIT_BITS == 10 and c.shape == s.shape == (1024, 32) and c.dtype == s.dtype == np.float64
    digits = np.array([0, 1, 2, 517, 1023])
    want_c, want_s = exact_cos_sin(digits * 1024**level, INV_FREQ)
    # both sides round a reduced angle of magnitude <= pi to float64 (2**-52 * pi / 2 each) and the result
    np.testing.assert_allclose(c[digits], want_c, rtol=0, atol=2.0**-50)
    np.testing.assert_allclose(s[digits], want_s, rtol=0, atol=2.0**-50)


def test_one_digit_positions_are_rounded_once():
    """|p| < 1024: one table lookup, the float64 value rounded to float32 (negative: sin negated)."""
    positions = np.array([0, 1, 2, 3, 100, 511, 1023], dtype=np.int32)
    cos, sin = float32_tables(NP, INV_FREQ, positions, "cpu")
    assert cos.dtype == sin.dtype == np.float32 and cos.shape == (7, 32)
    assert _error(cos, sin, positions) <= ONE_DIGIT
    # negative ones are signed digits (-1 = -1024 + 1023): composed, within the general bound
    negative = np.array([-1, -700, -1023], dtype=np.int32)
    cos, sin = float32_tables(NP, INV_FREQ, negative, "cpu")
    assert _error(cos, sin, negative) <= BOUND


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_positions_up_to_2_31(dtype):
    rng = np.random.default_rng(11)
    positions = np.concatenate(
        [
            rng.integers(-(2**31) + 1, 2**31, 48),
            [1024, 1025, 2**20 - 1, 2**20, 2**30, 2**31 - 1, -(2**31) + 1],
        ]
    ).astype(dtype)
    cos, sin = float32_tables(NP, INV_FREQ, positions, "cpu")
    assert cos.shape == (55, 32) and cos.dtype == np.float32
    assert _error(cos, sin, positions) <= BOUND


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64"])
def test_narrow_and_unsigned_positions(dtype):
    top = min(int(np.iinfo(dtype).max), 2**31 - 1)  # beyond 2**31 the digit angles themselves round in float64
    positions = np.array([0, 1, 255, top // 3, top - 1, top], dtype=dtype)
    cos, sin = float32_tables(NP, INV_FREQ, positions, "cpu")
    assert _error(cos, sin, positions) <= BOUND


def test_real_positions_round_to_digits_plus_a_fraction():
    rng = np.random.default_rng(12)
    whole = rng.integers(-(2**23), 2**23, 40)
    positions = (whole + rng.integers(-4, 5, 40) / 8).astype(np.float32)  # exact in float32
    positions[:4] = [0.25, -0.5, 0.5, 1023.5]
    cos, sin = float32_tables(NP, INV_FREQ, positions, "cpu")
    assert cos.shape == (40, 32) and cos.dtype == np.float32
    assert _error(cos, sin, positions) <= BOUND


def test_a_count_is_positions_0_to_n_minus_1():
    cos, sin = float32_tables(NP, INV_FREQ, 2100, "cpu")
    assert cos.shape == (2100, 32) and cos.dtype == np.float32
    rows = np.array([0, 1, 2, 1023, 1024, 1025, 1500, 2047, 2048, 2099])  # around the digit boundaries
    assert _error(cos[rows], sin[rows], rows) <= BOUND
    same_c, same_s = float32_tables(NP, INV_FREQ, np.arange(2100, dtype=np.int32), "cpu")
    np.testing.assert_array_equal(cos, same_c)
    np.testing.assert_array_equal(sin, same_s)


def test_positions_of_any_shape(xp, backend):
    """Pure Array API on every backend: built without computing on Dask, traced under jax.jit on JAX."""
    positions = np.array([[5, -1_000_000, 70_000], [2**30 + 12_345, 0, 1023]])
    cos, sin = float32_tables(xp, INV_FREQ, backend.asarray(positions), backend.device)
    check_like(cos, backend, "float32", (2, 3, 32))
    check_like(sin, backend, "float32", (2, 3, 32))
    assert _error(cos, sin, positions) <= BOUND


def test_the_public_tables_use_the_method_without_float64():
    """array_api_strict's no_float64 device: rope_tables' float32 tables are this method's."""
    strict = pytest.importorskip("array_api_strict")
    device = strict.Device("no_float64")
    positions = np.array([3, 2**24 + 7, -(2**30) - 99], dtype=np.int64)
    f = arrayrope.rope_frequencies(64)
    cos, sin = arrayrope.rope_tables(f, strict.asarray(positions, device=device))
    assert _error(cos, sin, positions, f.inv_freq) <= BOUND
    # the float32 product p * theta, which this method replaces, is off by far more here
    naive = np.cos(positions.astype(np.float32)[:, None] * f.inv_freq.astype(np.float32))
    assert np.abs(naive - exact_cos_sin(positions, f.inv_freq)[0]).max() > 0.1
