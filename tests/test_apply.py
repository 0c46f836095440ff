"""Rotary application and the layout converters (``apply.py``) against explicit rotation matrices, the
complex form, and the row permutation of Meta's checkpoint conversion."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import given
from hypothesis import strategies as st

import arrayrope as ar
from arrayrope import apply_rotary
from arrayrope.testing import assert_close, default_tolerance, to_numpy
from helpers import around, check_like, random_case, rope_by_complex, rope_by_matrix, ulps, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(apply_rotary)

LAYOUTS = ("half", "interleaved")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "shape, rotary_dim", [((2, 3, 5, 8), None), ((1, 1, 7, 6), 4), ((4, 1, 12), None), ((3, 10), 2)]
)
def test_matches_explicit_rotation_matrix(backend, layout, shape, rotary_dim):
    x, f, pos = random_case(shape, rotary_dim, start=37)
    expected = rope_by_matrix(x, pos, f.inv_freq, layout)
    for dtype in backend.dtypes:
        xb = backend.asarray(x, dtype=dtype)
        cos, sin = ar.rope_tables(f, backend.asarray(pos), dtype=getattr(backend.xp, dtype))
        y = ar.apply_rotary(xb, cos, sin, layout=layout)
        # the oracle sees the same rounded inputs; the result may differ by a few ulps of dtype
        ref = rope_by_matrix(to_numpy(xb).astype(np.float64), pos, f.inv_freq, layout)
        xp_assert_close(y, ref, backend, dtype, **(ulps(dtype) if dtype == "float64" else {}))
        assert np.abs(ref - expected).max() <= 4 * default_tolerance(dtype)[0] * 4


def test_interleaved_equals_complex_form(backend):
    if "float64" not in backend.dtypes:
        pytest.skip(f"{backend.name} has no float64 to compare at 1e-12")
    x, f, pos = random_case((2, 4, 9, 16), start=1000)
    cos, sin = ar.rope_tables(f, backend.asarray(pos), dtype=backend.xp.float64)
    y = ar.apply_rotary(backend.asarray(x), cos, sin, layout="interleaved")
    xp_assert_close(y, rope_by_complex(x, pos, f.inv_freq), backend, "float64", rtol=1e-12, atol=1e-12)


def test_partial_rotary_passes_the_rest_through_bit_for_bit(backend):
    x, f, pos = random_case((2, 3, 4, 10), rotary_dim=6)
    xb = backend.asarray(x, dtype="float32")
    cos, sin = ar.rope_tables(f, backend.asarray(pos))
    for layout in LAYOUTS:
        y = to_numpy(ar.apply_rotary(xb, cos, sin, layout=layout))
        np.testing.assert_array_equal(y[..., 6:], to_numpy(xb)[..., 6:])


def test_input_is_not_modified(backend):
    x, f, pos = random_case((1, 2, 4, 8))
    xb = backend.asarray(x, dtype="float32")
    before = to_numpy(xb).copy()
    cos, sin = ar.rope_tables(f, backend.asarray(pos))
    for layout in LAYOUTS:
        ar.apply_rotary(xb, cos, sin, layout=layout)
    np.testing.assert_array_equal(to_numpy(xb), before)


def test_tables_broadcast_per_batch(backend):
    """cos/sin (B, 1, S, h) against x (B, H, S, D): each batch row at its own positions."""
    x, f, _ = random_case((2, 3, 4, 8))
    pos = np.array([[0, 1, 2, 3], [50, 51, 52, 53]])
    cos, sin = ar.rope_tables(f, backend.asarray(pos))
    y = ar.apply_rotary(backend.asarray(x, dtype="float32"), cos[:, None, ...], sin[:, None, ...])
    ref = np.stack([rope_by_matrix(x[b], pos[b], f.inv_freq, "half") for b in range(2)])
    xp_assert_close(y, ref, backend, "float32", rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("m, n", [(0, 5), (1000, 3), (2**20 - 7, 2**20 + 9)])
def test_score_depends_only_on_relative_position(backend, m, n):
    """<R_m q, R_n k> == <R_(m-n) q, k>, also near 2**20 in float32."""
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 64))
    f = ar.rope_frequencies(64)
    pos = backend.asarray(np.array([m, n, m - n, 0]))
    cos, sin = ar.rope_tables(f, pos)
    for layout in LAYOUTS:
        qs = ar.apply_rotary(backend.asarray(np.stack([q, q, q, q]), dtype="float32"), cos, sin, layout=layout)
        ks = ar.apply_rotary(backend.asarray(np.stack([k, k, k, k]), dtype="float32"), cos, sin, layout=layout)
        qs, ks = to_numpy(qs).astype(np.float64), to_numpy(ks).astype(np.float64)
        np.testing.assert_allclose(qs[0] @ ks[1], qs[2] @ ks[3], atol=2e-5)


def test_norm_preserved_and_negative_positions_undo(backend):
    x, f, pos = random_case((3, 6, 32), start=123456)
    xb = backend.asarray(x, dtype="float32")
    c, s = ar.rope_tables(f, backend.asarray(pos))
    cn, sn = ar.rope_tables(f, backend.asarray(-pos))
    for layout in LAYOUTS:
        y = ar.apply_rotary(xb, c, s, layout=layout)
        np.testing.assert_allclose(np.linalg.norm(to_numpy(y), axis=-1), np.linalg.norm(x, axis=-1), rtol=2e-6)
        back = ar.apply_rotary(y, cn, sn, layout=layout)
        xp_assert_close(back, x, backend, "float32", rtol=3e-6, atol=3e-6)


def test_layouts_agree_through_the_permutation(backend):
    x, f, pos = random_case((2, 5, 12), rotary_dim=8)
    xb = backend.asarray(x, dtype="float32")
    c, s = ar.rope_tables(f, backend.asarray(pos))
    inter = ar.apply_rotary(ar.to_interleaved(xb, rotary_dim=8), c, s, layout="interleaved")
    half = ar.apply_rotary(xb, c, s, layout="half")
    # one rotation, computed by different kernels: equal to within float32 rounding
    np.testing.assert_allclose(to_numpy(ar.to_half_split(inter, rotary_dim=8)), to_numpy(half), rtol=5e-7, atol=5e-7)
    # the permutation itself, against its definition P = [0, 2, 4, ..., 1, 3, 5, ...]
    P = np.r_[0:8:2, 1:8:2, 8:12]
    np.testing.assert_array_equal(to_numpy(ar.to_half_split(xb, rotary_dim=8)), to_numpy(xb)[..., P])


@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    seq=st.integers(1, 5),
    half=st.integers(1, 4),
    extra=st.sampled_from([0, 2, 6]),
    layout=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(["float16", "float32", "float64"]),
    # positions up to 2**20 in magnitude take float64 angles, beyond it exact turns; digits of 1024
    start=around(-(2**20) - 4, -(2**20), -1024, -4, 1020, 1024, 2**20 - 4, 2**20, lo=-(2**21), hi=2**21, spread=2),
)
def test_shapes_layouts_dtypes_property(lead, seq, half, extra, layout, dtype, start):
    d = 2 * half + extra
    x, f, pos = random_case((*lead, seq, d), rotary_dim=2 * half, start=start)
    x = x.astype(dtype)
    cos, sin = ar.rope_tables(f, pos)
    y = ar.apply_rotary(x, cos, sin, layout=layout)
    assert y.shape == x.shape and y.dtype == x.dtype
    ref = rope_by_matrix(x.astype(np.float64), pos, f.inv_freq, layout)
    rtol, atol = default_tolerance(dtype)
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=rtol, atol=max(atol, 4e-7))


def test_low_precision_inputs_round_once():
    """float16 x with float32 tables: the result is the float64 answer rounded once (<= 1/2 ulp + table error)."""
    x, f, pos = random_case((4, 64, 32), start=5000)
    x16 = x.astype(np.float16)
    c, s = ar.rope_tables(f, pos)
    y = ar.apply_rotary(x16, c, s)
    ref = rope_by_matrix(x16.astype(np.float64), pos, f.inv_freq, "half")
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y.astype(np.float64) - ref) <= 0.5 * ulp + 1e-6)


@pytest.mark.parametrize(
    "shape, rotary_dim, layout",
    [((2, 2, 6, 8), 6, "half"), ((2, 2, 6, 8), 6, "interleaved"), ((4, 2, 8, 16), None, "interleaved")],
)
def test_lazy_backends_neither_compute_nor_break_under_jit(xp, backend, shape, rotary_dim, layout):
    """Dask builds the rotation without computing anything (from several chunks too), JAX traces it under
    jax.jit; on every backend the result is the rotation matrices' and the eager call's."""
    x, f, pos = random_case(shape, rotary_dim=rotary_dim)
    xb = backend.asarray(x, dtype="float32")
    if backend.library == "dask":
        xb = xb.rechunk((1, *shape[1:]))
    c, s = ar.rope_tables(f, backend.asarray(pos))
    y = apply_rotary(xb, c, s, layout=layout)  # tagged: under the no-compute scheduler or jax.jit
    xp_assert_close(y, rope_by_matrix(x, pos, f.inv_freq, layout), backend, "float32", rtol=1e-7, atol=2e-6)
    assert_close(y, ar.apply_rotary(xb, c, s, layout=layout), rtol=1e-7, atol=1e-6)


# ---- bad input ------------------------------------------------------------------------------


def test_bad_inputs_name_the_argument(backend):
    xp = backend.xp
    x, f, pos = random_case((2, 4, 8))
    xb = backend.asarray(x, dtype="float32")
    c, s = ar.rope_tables(f, backend.asarray(pos))
    with pytest.raises(ValueError, match="layout must be one of"):
        ar.apply_rotary(xb, c, s, layout="neox")
    with pytest.raises(TypeError, match="x must have a real floating dtype"):
        ar.apply_rotary(backend.asarray(np.ones((2, 4, 8), dtype=np.int32)), c, s)
    with pytest.raises(ValueError, match="cos and sin must have one shape"):
        ar.apply_rotary(xb, c, s[:2, ...])
    with pytest.raises(ValueError, match="do not broadcast against x"):
        ar.apply_rotary(xb, c[:3, ...], s[:3, ...])
    wide = ar.rope_tables(ar.rope_frequencies(16), backend.asarray(pos))
    with pytest.raises(ValueError, match=r"rotates 16 features but x has 8.*<= 4 \(x.shape\[-1\] // 2"):
        ar.apply_rotary(xb, *wide)
    with pytest.raises(ValueError, match="do not broadcast"):
        ar.apply_rotary(xb[0, ...], c[None, None, ...], s[None, None, ...])
    with pytest.raises(TypeError, match="x must be an array"):
        ar.apply_rotary([[1.0, 2.0]], c, s)
    with pytest.raises(TypeError, match="cos must have a real floating dtype"):
        ar.apply_rotary(xb, xp.astype(c, xp.int32), s)


def test_mixed_namespaces_and_devices():
    torch = pytest.importorskip("torch")
    strict = pytest.importorskip("array_api_strict")
    f = ar.rope_frequencies(8)
    c, s = ar.rope_tables(f, 4)
    with pytest.raises(TypeError, match="cos is a numpy array but x is a torch array"):
        ar.apply_rotary(torch.ones(4, 8), c, s)
    x = strict.ones((4, 8), device=strict.Device("device1"))
    cs = ar.rope_tables(f, 4, xp=strict, device=strict.Device("device2"))
    with pytest.raises(ValueError, match=r"cos is on device .*device2.* but x is on device .*device1"):
        ar.apply_rotary(x, *cs)


# ---- converters between the layouts, and of checkpoint rows ---------------------------------


def _meta_to_hf(w, n_heads):
    """The row permutation used to convert Meta's interleaved Llama q/k weights to half-split form."""
    dim1, dim2 = w.shape
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)


def test_permute_rows_matches_the_checkpoint_conversion(backend):
    w = np.random.default_rng(0).standard_normal((4 * 8, 6)).astype(np.float32)
    out = ar.permute_rotary_rows(backend.asarray(w), num_heads=4, head_dim=8)
    check_like(out, backend, "float32", w.shape)
    np.testing.assert_array_equal(to_numpy(out), _meta_to_hf(w, 4))
    back = ar.permute_rotary_rows(out, num_heads=4, head_dim=8, to="interleaved")
    np.testing.assert_array_equal(to_numpy(back), w)


@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_permuted_checkpoint_gives_the_same_scores(rotary_dim):
    """q.k with interleaved weights + interleaved RoPE == permuted weights + half RoPE (GQA: k has 2 heads)."""
    rng = np.random.default_rng(3)
    heads, kv_heads, d, hidden, seq = 4, 2, 8, 12, 6
    wq, wk = rng.standard_normal((heads * d, hidden)), rng.standard_normal((kv_heads * d, hidden))
    bq = rng.standard_normal(heads * d)
    h = rng.standard_normal((seq, hidden))
    f = ar.rope_frequencies(d, rotary_dim=rotary_dim)
    pos = np.arange(seq)

    def scores(wq, bq, wk, layout):
        q = (h @ wq.T + bq).reshape(seq, heads, d).transpose(1, 0, 2)
        k = (h @ wk.T).reshape(seq, kv_heads, d).transpose(1, 0, 2)
        q, k = rope_by_matrix(q, pos, f.inv_freq, layout), rope_by_matrix(k, pos, f.inv_freq, layout)
        k = np.repeat(k, heads // kv_heads, axis=0)
        return q @ k.transpose(0, 2, 1)

    conv = dict(head_dim=d, rotary_dim=rotary_dim)
    wq2 = ar.permute_rotary_rows(wq, num_heads=heads, **conv)
    bq2 = ar.permute_rotary_rows(bq, num_heads=heads, **conv)
    wk2 = ar.permute_rotary_rows(wk, num_heads=kv_heads, **conv)
    np.testing.assert_allclose(scores(wq2, bq2, wk2, "half"), scores(wq, bq, wk, "interleaved"), atol=1e-10)


def test_permute_rows_bad_input():
    with pytest.raises(ValueError, match="w must have num_heads \\* head_dim = 32 rows"):
        ar.permute_rotary_rows(np.ones((30, 2)), num_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="to must be one of"):
        ar.permute_rotary_rows(np.ones((32, 2)), num_heads=4, head_dim=8, to="neox")
    with pytest.raises(ValueError, match="num_heads must be positive"):
        ar.permute_rotary_rows(np.ones((32, 2)), num_heads=0, head_dim=8)


def test_converters_bad_input():
    with pytest.raises(ValueError, match=r"x.shape\[-1\]=5 is odd"):
        ar.to_interleaved(np.ones(5))
    with pytest.raises(ValueError, match="rotary_dim must be <= head_dim=4"):
        ar.to_half_split(np.ones(4), rotary_dim=6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_trailing_rotary_features(backend, layout):
    """DeepSeek's q_pe after q_nope: the last rotary_dim features rotate, the first ones pass through bit for bit."""
    x, f, pos = random_case((2, 3, 5, 10), rotary_dim=4, start=11)
    expected = x.copy()
    expected[..., 6:] = rope_by_matrix(x[..., 6:], pos, f.inv_freq, layout)
    for dtype in backend.dtypes:
        xb = backend.asarray(x, dtype=dtype)
        cos, sin = ar.rope_tables(f, backend.asarray(pos), dtype=getattr(backend.xp, dtype))
        out = ar.apply_rotary(xb, cos, sin, layout=layout, rotary_features="trailing")
        xp_assert_close(out, expected, backend, dtype, **ulps(dtype))
        np.testing.assert_array_equal(to_numpy(out)[..., :6], to_numpy(xb)[..., :6])
    dtype = backend.dtypes[0]
    full = ar.apply_rotary(
        backend.asarray(x[..., 6:], dtype=dtype),
        *ar.rope_tables(f, backend.asarray(pos), dtype=getattr(backend.xp, dtype)),
        layout=layout,
        rotary_features="trailing",
    )  # no pass-through part: plain RoPE
    xp_assert_close(full, expected[..., 6:], backend, dtype, **ulps(dtype))


def test_trailing_permutation_is_the_deepseek_checkpoint_conversion():
    """Rows of q_pe converted to_half_split: half-split on the trailing features == transformers' interleaved kernel,
    whose output is the half-split order of interleaved pairs (written out here with slices)."""
    rng = np.random.default_rng(5)
    heads, nope, rope_dim, hidden, seq = 2, 6, 8, 5, 7
    d = nope + rope_dim
    w, h = rng.standard_normal((heads * d, hidden)), rng.standard_normal((seq, hidden))
    f = ar.rope_frequencies(d, rotary_dim=rope_dim, base=10000.0)
    pos = np.arange(3, 3 + seq)
    ang = pos[:, None] * f.inv_freq
    q = (h @ w.T).reshape(seq, heads, d).transpose(1, 0, 2)
    q1, q2 = q[..., nope::2], q[..., nope + 1 :: 2]  # interleaved pairs of q_pe
    theirs = np.concatenate(
        [q[..., :nope], q1 * np.cos(ang) - q2 * np.sin(ang), q2 * np.cos(ang) + q1 * np.sin(ang)], axis=-1
    )
    w_half = ar.permute_rotary_rows(w, num_heads=heads, head_dim=d, rotary_dim=rope_dim, rotary_features="trailing")
    q_half = (h @ w_half.T).reshape(seq, heads, d).transpose(1, 0, 2)
    ours = ar.apply_rotary(q_half, *ar.rope_tables(f, pos, dtype="float64"), rotary_features="trailing")
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-13)
    back = ar.permute_rotary_rows(
        w_half, num_heads=heads, head_dim=d, rotary_dim=rope_dim, to="interleaved", rotary_features="trailing"
    )
    np.testing.assert_array_equal(back, w)


def test_rotary_features_bad_value():
    f = ar.rope_frequencies(4)
    cos, sin = ar.rope_tables(f, 2)
    with pytest.raises(ValueError, match=r"rotary_features must be one of \('leading', 'trailing'\), got 'last'"):
        ar.apply_rotary(np.ones((2, 4), np.float32), cos, sin, rotary_features="last")
    with pytest.raises(ValueError, match="rotary_features"):
        ar.permute_rotary_rows(np.ones(8), num_heads=2, head_dim=4, rotary_features="middle")
