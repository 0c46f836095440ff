import numpy as np
import pytest
from hypothesis import given, strategies as st

import arrayrope as ar
from arrayrope.testing import default_tolerance, to_numpy
from helpers import check_like, rope_by_complex, rope_by_matrix, ulps, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

LAYOUTS = ("half", "interleaved")


def _case(shape, rotary_dim=None, base=10000.0, seed=0, start=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    f = ar.rope_frequencies(shape[-1], base=base, rotary_dim=rotary_dim)
    positions = np.arange(start, start + shape[-2])
    return x, f, positions


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape, rotary_dim", [((2, 3, 5, 8), None), ((1, 1, 7, 6), 4), ((4, 1, 12), None), ((3, 10), 2)])
def test_matches_explicit_rotation_matrix(backend, layout, shape, rotary_dim):
    x, f, pos = _case(shape, rotary_dim, start=37)
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
    x, f, pos = _case((2, 4, 9, 16), start=1000)
    cos, sin = ar.rope_tables(f, backend.asarray(pos), dtype=backend.xp.float64)
    y = ar.apply_rotary(backend.asarray(x), cos, sin, layout="interleaved")
    xp_assert_close(y, rope_by_complex(x, pos, f.inv_freq), backend, "float64", rtol=1e-12, atol=1e-12)


def test_partial_rotary_passes_the_rest_through_bit_for_bit(backend):
    x, f, pos = _case((2, 3, 4, 10), rotary_dim=6)
    xb = backend.asarray(x, dtype="float32")
    cos, sin = ar.rope_tables(f, backend.asarray(pos))
    for layout in LAYOUTS:
        y = to_numpy(ar.apply_rotary(xb, cos, sin, layout=layout))
        np.testing.assert_array_equal(y[..., 6:], to_numpy(xb)[..., 6:])


def test_input_is_not_modified(backend):
    x, f, pos = _case((1, 2, 4, 8))
    xb = backend.asarray(x, dtype="float32")
    before = to_numpy(xb).copy()
    cos, sin = ar.rope_tables(f, backend.asarray(pos))
    for layout in LAYOUTS:
        ar.apply_rotary(xb, cos, sin, layout=layout)
    np.testing.assert_array_equal(to_numpy(xb), before)


def test_tables_broadcast_per_batch(backend):
    """cos/sin (B, 1, S, h) against x (B, H, S, D): each batch row at its own positions."""
    x, f, _ = _case((2, 3, 4, 8))
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
    x, f, pos = _case((3, 6, 32), start=123456)
    xb = backend.asarray(x, dtype="float32")
    c, s = ar.rope_tables(f, backend.asarray(pos))
    cn, sn = ar.rope_tables(f, backend.asarray(-pos))
    for layout in LAYOUTS:
        y = ar.apply_rotary(xb, c, s, layout=layout)
        np.testing.assert_allclose(np.linalg.norm(to_numpy(y), axis=-1), np.linalg.norm(x, axis=-1), rtol=2e-6)
        back = ar.apply_rotary(y, cn, sn, layout=layout)
        xp_assert_close(back, x, backend, "float32", rtol=3e-6, atol=3e-6)


def test_layouts_agree_through_the_permutation(backend):
    x, f, pos = _case((2, 5, 12), rotary_dim=8)
    xb = backend.asarray(x, dtype="float32")
    c, s = ar.rope_tables(f, backend.asarray(pos))
    inter = ar.apply_rotary(ar.to_interleaved(xb, rotary_dim=8), c, s, layout="interleaved")
    half = ar.apply_rotary(xb, c, s, layout="half")
    # one rotation, computed by different kernels: equal to within float32 rounding
    np.testing.assert_allclose(to_numpy(ar.to_half(inter, rotary_dim=8)), to_numpy(half), rtol=5e-7, atol=5e-7)
    # the permutation itself, against its definition P = [0, 2, 4, ..., 1, 3, 5, ...]
    P = np.r_[0:8:2, 1:8:2, 8:12]
    np.testing.assert_array_equal(to_numpy(ar.to_half(xb, rotary_dim=8)), to_numpy(xb)[..., P])


@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    seq=st.integers(1, 5),
    half=st.integers(1, 4),
    extra=st.sampled_from([0, 2, 6]),
    layout=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(["float16", "float32", "float64"]),
    start=st.integers(-(2**20), 2**20),
)
def test_shapes_layouts_dtypes_property(lead, seq, half, extra, layout, dtype, start):
    d = 2 * half + extra
    x, f, pos = _case(lead + (seq, d), rotary_dim=2 * half, start=start)
    x = x.astype(dtype)
    cos, sin = ar.rope_tables(f, pos)
    y = ar.apply_rotary(x, cos, sin, layout=layout)
    assert y.shape == x.shape and y.dtype == x.dtype
    ref = rope_by_matrix(x.astype(np.float64), pos, f.inv_freq, layout)
    rtol, atol = default_tolerance(dtype)
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=rtol, atol=max(atol, 4e-7))


def test_low_precision_inputs_round_once():
    """float16 x with float32 tables: the result is the float64 answer rounded once (<= 1/2 ulp + table error)."""
    x, f, pos = _case((4, 64, 32), start=5000)
    x16 = x.astype(np.float16)
    c, s = ar.rope_tables(f, pos)
    y = ar.apply_rotary(x16, c, s)
    ref = rope_by_matrix(x16.astype(np.float64), pos, f.inv_freq, "half")
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y.astype(np.float64) - ref) <= 0.5 * ulp + 1e-6)


def test_jax_jit_matches_eager():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, f, pos = _case((2, 2, 6, 8), rotary_dim=6)
    c, s = ar.rope_tables(f, jnp.asarray(pos))
    xj = jnp.asarray(x, dtype=jnp.float32)
    for layout in LAYOUTS:
        eager = ar.apply_rotary(xj, c, s, layout=layout)
        jitted = jax.jit(lambda a, b, d: ar.apply_rotary(a, b, d, layout=layout))(xj, c, s)
        np.testing.assert_allclose(np.asarray(jitted), rope_by_matrix(x, pos, f.inv_freq, layout), atol=2e-6)
        np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), atol=1e-6)
    # tables can be built inside jit too (traced positions)
    cj, sj = jax.jit(lambda p: ar.rope_tables(f, p))(jnp.asarray(pos))
    np.testing.assert_allclose(np.asarray(cj), np.asarray(c), atol=1e-7)


def test_dask_builds_lazily_and_blockwise():
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    calls = []

    def counting_scheduler(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.get(dsk, keys, **kwargs)

    x, f, pos = _case((4, 2, 8, 16))
    xd = da.from_array(x.astype(np.float32), chunks=(1, 2, 8, 16))
    with dask.config.set(scheduler=counting_scheduler):
        c, s = ar.rope_tables(f, da.from_array(pos))
        y = ar.apply_rotary(xd, c, s, layout="interleaved")
        assert calls == [], "building the result computed something"
        assert isinstance(y, da.Array) and y.shape == x.shape
        result = y.compute()
    assert len(calls) == 1
    np.testing.assert_allclose(result, rope_by_matrix(x, pos, f.inv_freq, "interleaved"), atol=2e-6)


def test_torch_autograd_gives_the_inverse_rotation():
    torch = pytest.importorskip("torch")
    x, f, pos = _case((1, 2, 5, 8), rotary_dim=6)
    g = np.random.default_rng(7).standard_normal(x.shape)
    c, s = ar.rope_tables(f, torch.as_tensor(pos), dtype=torch.float64)
    for layout in LAYOUTS:
        xt = torch.tensor(x, requires_grad=True)
        (ar.apply_rotary(xt, c, s, layout=layout) * torch.tensor(g)).sum().backward()
        # d/dx <R x, g> = R^T g = rotation by -p
        expected = rope_by_matrix(g, -pos, f.inv_freq, layout)
        np.testing.assert_allclose(xt.grad.numpy(), expected, atol=1e-12)


def test_torch_compile():
    torch = pytest.importorskip("torch")
    x, f, pos = _case((1, 2, 5, 8))
    c, s = ar.rope_tables(f, torch.as_tensor(pos))
    xt = torch.tensor(x, dtype=torch.float32)
    compiled = torch.compile(lambda a, b, d: ar.apply_rotary(a, b, d), fullgraph=False)
    np.testing.assert_allclose(compiled(xt, c, s).numpy(), rope_by_matrix(x, pos, f.inv_freq, "half"), atol=2e-6)


# ---- bad input ------------------------------------------------------------------------------


def test_bad_inputs_name_the_argument(backend):
    xp = backend.xp
    x, f, pos = _case((2, 4, 8))
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
    with pytest.raises(ValueError, match=r"cos.shape\[-1\]=8 rotates 16 features but x has 8"):
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
    with pytest.raises(ValueError, match="cos is on device .*device2.* but x is on device .*device1"):
        ar.apply_rotary(x, *cs)


def test_converters_bad_input():
    with pytest.raises(ValueError, match="x.shape\\[-1\\]=5 is odd"):
        ar.to_interleaved(np.ones(5))
    with pytest.raises(ValueError, match="rotary_dim must be <= head_dim=4"):
        ar.to_half(np.ones(4), rotary_dim=6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_trailing_rotary_features(backend, layout):
    """DeepSeek's q_pe after q_nope: the last rotary_dim features rotate, the first ones pass through bit for bit."""
    x, f, pos = _case((2, 3, 5, 10), rotary_dim=4, start=11)
    expected = x.copy()
    expected[..., 6:] = rope_by_matrix(x[..., 6:], pos, f.inv_freq, layout)
    for dtype in backend.dtypes:
        xb = backend.asarray(x, dtype=dtype)
        cos, sin = ar.rope_tables(f, backend.asarray(pos), dtype=getattr(backend.xp, dtype))
        out = ar.apply_rotary(xb, cos, sin, layout=layout, rotary_features="trailing")
        xp_assert_close(out, expected, backend, dtype, **ulps(dtype))
        np.testing.assert_array_equal(to_numpy(out)[..., :6], to_numpy(xb)[..., :6])
    dtype = backend.dtypes[0]
    full = ar.apply_rotary(backend.asarray(x[..., 6:], dtype=dtype),
                           *ar.rope_tables(f, backend.asarray(pos), dtype=getattr(backend.xp, dtype)),
                           layout=layout, rotary_features="trailing")  # no pass-through part: plain RoPE
    xp_assert_close(full, expected[..., 6:], backend, dtype, **ulps(dtype))


def test_trailing_permutation_is_the_deepseek_checkpoint_conversion():
    """Rows of q_pe converted to_half: half-split on the trailing features == transformers' interleaved kernel,
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
    theirs = np.concatenate([q[..., :nope], q1 * np.cos(ang) - q2 * np.sin(ang), q2 * np.cos(ang) + q1 * np.sin(ang)],
                            axis=-1)
    w_half = ar.permute_rotary_rows(w, num_heads=heads, head_dim=d, rotary_dim=rope_dim, rotary_features="trailing")
    q_half = (h @ w_half.T).reshape(seq, heads, d).transpose(1, 0, 2)
    ours = ar.apply_rotary(q_half, *ar.rope_tables(f, pos, dtype="float64"), rotary_features="trailing")
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-13)
    back = ar.permute_rotary_rows(w_half, num_heads=heads, head_dim=d, rotary_dim=rope_dim, to="interleaved",
                                  rotary_features="trailing")
    np.testing.assert_array_equal(back, w)


def test_rotary_features_bad_value():
    f = ar.rope_frequencies(4)
    cos, sin = ar.rope_tables(f, 2)
    with pytest.raises(ValueError, match=r"rotary_features must be one of \('leading', 'trailing'\), got 'last'"):
        ar.apply_rotary(np.ones((2, 4), np.float32), cos, sin, rotary_features="last")
    with pytest.raises(ValueError, match="rotary_features"):
        ar.permute_rotary_rows(np.ones(8), num_heads=2, head_dim=4, rotary_features="middle")
