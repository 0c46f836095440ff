"""Cos/sin tables (``tables.py``) against ``p * theta`` from the formula, cos and sin taken by Python's math
element by element, on every backend, with and without float64."""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import given
from hypothesis import strategies as st

import arrayrope as ar
from arrayrope import backends, rope_tables
from arrayrope.testing import assert_close, to_numpy
from helpers import check_like, exact_cos_sin, inv_freq_formula, xp_assert_close

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


# -- positions anywhere in the int64 range: the precision the documentation states -----------------

PRECISION_PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "precision.md"
F128 = ar.rope_frequencies(128)


def stated_precision() -> list[tuple[int, float, float, float]]:
    """The precision table of docs/guide/precision.md: (bits, float32 tables with float64, without float64,
    float64 tables) per row ``|p| < 2**bits``."""
    cell = r" \| ([\d.e-]+)"
    sup = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")  # the page writes 2¹² (superscripts)
    rows = re.findall(
        r"^\s*\| \\\|p\\\|&nbsp;<&nbsp;2([⁰¹²³⁴⁵⁶⁷⁸⁹]+)" + 3 * cell + r" \|$", PRECISION_PAGE.read_text(), re.M
    )
    assert len(rows) >= 4, "the precision table of docs/guide/precision.md is missing"
    return [(int(b.translate(sup)), float(a), float(c), float(d)) for b, a, c, d in rows]


def band(bits: int, low: int) -> np.ndarray:
    """Positions with ``2**low <= |p| < 2**bits`` (both signs), the band's ends included; fixed by the seed."""
    rng = np.random.default_rng(bits)
    hi = 2**bits - 1 if bits < 64 else 2**63 - 1
    pos = np.concatenate([[2**low, hi], rng.integers(2**low, hi, 24, dtype=np.int64, endpoint=True)])
    out = np.concatenate([pos, -pos, [-(2**63)] if bits == 63 else []]).astype(np.int64)
    return np.unique(out)


@functools.lru_cache(maxsize=32)
def exact_tables(positions: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of p * theta for the float64 inv_freq of F128, to 200 bits (mpmath), rounded to float64."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workprec(200):
        theta = [mpmath.mpf(float(t)) for t in F128.inv_freq]
        c = [[float(mpmath.cos(mpmath.mpf(p) * t)) for t in theta] for p in positions]
        s = [[float(mpmath.sin(mpmath.mpf(p) * t)) for t in theta] for p in positions]
    return np.array(c), np.array(s)


def _error(tables, positions) -> float:
    c, s = exact_tables(tuple(int(p) for p in positions))
    cos, sin = (to_numpy(t).astype(np.float64) for t in tables)
    return max(np.abs(cos - c).max(), np.abs(sin - s).max())


def test_precision_by_position_as_the_readme_states(backend):
    """float32 tables (and float64 ones where the device has them) at positions up to the int64 range,
    against 200-bit references: within the documented figure for each magnitude."""
    wide = backends.has_int64(backend.xp, backend.device)
    float64 = "float64" in backend.dtypes
    low = 0
    for bits, with64, without64, table64 in stated_precision():
        if bits > 31 and not wide:
            break  # int32 positions only (JAX without x64)
        pos = band(bits, low)
        arr = backend.xp.asarray(pos.astype(np.int64 if wide else np.int32), device=backend.device)
        err = _error(ar.rope_tables(F128, arr), pos)
        assert err <= (with64 if float64 else without64), (bits, err)
        if float64:
            assert _error(ar.rope_tables(F128, arr, dtype=backend.xp.float64), pos) <= table64, bits
        low = bits


def test_devices_without_float64_at_the_int32_and_float32_extremes():
    """The exact float32 method (array_api_strict's no_float64 device; JAX without x64 is the same code):
    -2**31 (whose magnitude int32 cannot hold) and float32 positions of 2**31 and beyond."""
    xs = pytest.importorskip("array_api_strict")
    dev = xs.Device("no_float64")
    bound = next(b for bits, _, b, _ in stated_precision() if bits >= 63)
    ints = np.array([-(2**31), 2**31 - 1, -1, 0, 1], dtype=np.int32)
    assert _error(ar.rope_tables(F128, xs.asarray(ints, device=dev)), ints) <= bound
    floats = np.array([2.0**31, -(2.0**31), 3e9, 1e12, -(2.0**62), 12345.5], dtype=np.float32)
    got = ar.rope_tables(F128, xs.asarray(floats, device=dev))
    whole = floats[:-1].astype(np.int64)  # all but the last are integers in float32
    c, s = exact_tables(tuple(int(p) for p in whole))
    assert max(np.abs(to_numpy(got[0])[:-1] - c).max(), np.abs(to_numpy(got[1])[:-1] - s).max()) <= bound
    half = np.cos(12345.5 * F128.inv_freq)
    assert np.abs(to_numpy(got[0])[-1] - half).max() <= 2e-7


@pytest.mark.parametrize("count", [2**20, 2**20 + 1])
def test_a_count_at_the_edge_of_float64_angles_and_one_past_it(count):
    """Up to 2**20 positions a count takes float64 angles (NumPy's fast path), beyond it the exact turns: the
    rows at the digit boundaries and the last ones, float32 and float64, within the documented figures."""
    bound32, _, bound64 = next((a, b, c) for bits, a, b, c in stated_precision() if bits > 20)
    f = ar.rope_frequencies(4)
    rows = np.array([0, 1023, 1024, 2**20 - 1, count - 1])
    c, s = exact_cos_sin(rows, f.inv_freq)
    for dtype, bound in ((np.float32, bound32), (np.float64, bound64)):
        cos, sin = ar.rope_tables(f, count, dtype=dtype)
        assert cos.shape == (count, 2) and cos.dtype == dtype
        err = max(np.abs(cos[rows] - c).max(), np.abs(sin[rows] - s).max())
        assert err <= bound, (dtype, err)


def test_positions_outside_the_int64_range_are_refused():
    f = ar.rope_frequencies(8)
    for bad in (np.array([2.0**63]), np.array([-(2.0**64)]), np.array([2**63], dtype=np.uint64)):
        with pytest.raises(ValueError, match=r"positions must lie in the int64 range \[-2\*\*63, 2\*\*63\)"):
            ar.rope_tables(f, bad)
    c, _ = ar.rope_tables(f, np.array([-(2.0**63)]))  # the lower end is in
    assert np.isfinite(c).all()


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_every_integer_dtype_at_its_extremes(dtype):
    info = np.iinfo(dtype)
    pos = np.array([info.min, info.max, 0, 1, info.max // 3], dtype=dtype)
    if dtype == "uint64":
        pos[1] = 2**63 - 1  # the int64 range
    err = _error(ar.rope_tables(F128, pos), pos.astype(object))
    assert err <= stated_precision()[0][1], err


# -- the attention factor reaches every path that makes tables --------------------------------------

FACTOR = 1.25
SCALED = ar.RopeFrequencies(inv_freq=ar.rope_frequencies(8).inv_freq, head_dim=8, rotary_dim=8, attention_factor=FACTOR)


def _scaled_paths():
    """(name, cos, positions) from every way tables are made."""
    xs = pytest.importorskip("array_api_strict")
    pos = np.array([3, 70000, -5, 2**33])
    yield "count, NumPy blocks", ar.rope_tables(SCALED, 5)[0], np.arange(5)
    yield "count, float64", ar.rope_tables(SCALED, 5, dtype="float64")[0], np.arange(5)
    yield "count beyond 2**20", ar.rope_tables(SCALED, 2**20 + 2)[0][-2:], np.arange(2**20, 2**20 + 2)
    yield "array, float64 angles and turns", ar.rope_tables(SCALED, pos)[0], pos
    yield "array, no float64", ar.rope_tables(SCALED, xs.asarray(pos, device=xs.Device("no_float64")))[0], pos
    near = pos[:3]  # xPos scales leave float64's range far from the center
    q_cos = ar.xpos_tables(SCALED, near, dtype="float64")[0]
    yield "xpos", q_cos / ar.xpos_scales(SCALED, near, dtype="float64")[0], near  # the scales taken out again


def test_attention_factor_on_every_table_path():
    for name, cos, pos in _scaled_paths():
        expected = FACTOR * np.cos(pos.astype(np.float64)[:, None] * SCALED.inv_freq)
        assert np.abs(to_numpy(cos) - expected).max() <= 2e-6, name
    without = ar.rope_tables(SCALED, 5, apply_attention_factor=False)[0]
    np.testing.assert_allclose(without, np.cos(np.arange(5)[:, None] * SCALED.inv_freq), atol=1e-7)


def test_attention_factor_on_every_rotary_embedding_path():
    rope = ar.RotaryEmbedding(8, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    factor, inv = rope.freqs.attention_factor, rope.freqs.inv_freq
    assert factor == pytest.approx(0.1 * math.log(4.0) + 1)
    q = np.zeros((2, 1, 3, 8))
    q[..., 0] = 1.0  # pair 0's first feature: the rotated value is factor * (cos, sin) of the angle

    def check(out, positions, name):
        angles = np.asarray(positions, dtype=np.float64) * inv[0]  # (B, S)
        got = to_numpy(out)[:, 0]  # (B, S, 8); features 0 and 4 form pair 0 (half-split)
        assert np.abs(got[..., 0] - factor * np.cos(angles)).max() <= 2e-6, name
        assert np.abs(got[..., 4] - factor * np.sin(angles)).max() <= 2e-6, name

    for dtype in (np.float32, np.float64):
        x = q.astype(dtype)
        check(rope(x, offset=10), np.broadcast_to(np.arange(10, 13), (2, 3)), f"cached {dtype}")
        check(rope(x, offset=2**40), np.broadcast_to(np.arange(2**40, 2**40 + 3), (2, 3)), f"far {dtype}")
        check(rope(x, positions=np.array([5, 1, 9])), np.broadcast_to([5, 1, 9], (2, 3)), f"positions {dtype}")
        off = np.array([7, 300])
        check(rope(x, offset=off), off[:, None] + np.arange(3), f"offsets {dtype}")
