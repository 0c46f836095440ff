"""Rotation into the caller's arrays: ``apply_rotary(..., out=)`` and ``RotaryEmbedding(..., q_out=, k_out=)``.

Every backend either writes (NumPy, CuPy, PyTorch) or refuses with a ``TypeError`` that says what to do
instead (JAX, Dask, array_api_strict). Destinations: ``x`` itself, a fresh buffer, the slice of a KV cache
for the call's positions in both cache layouts, and a view with strided features; every kernel path
(the size thresholds on and off), both layouts, partial and trailing rotary features, each dtype.

Oracles: explicit rotation matrices on float64 angles (``helpers.rope_by_matrix``), within the dtype's
tolerance; and, to the bit, the fresh-output call on the same inputs (whose own values the dispatch and
kernel tests check against the same matrices): a destination changes where the result goes, never its
values. Elements of a buffer outside the destination keep a sentinel value.
"""

from __future__ import annotations

import numpy as np
import pytest

import arrayrope
from _arrayrope_pytest import backend_params
from arrayrope.testing import assert_close, default_tolerance, to_numpy
from helpers import rope_by_matrix

WRITABLE = ("numpy", "torch", "cupy")
#: The backends whose arrays take out= (a missing one skipped with its reason); the others refuse it
#: (test_out_is_refused_where_arrays_are_immutable).
writable = pytest.mark.parametrize(
    "backend", [p for p in backend_params() if p.id.split("-")[0] in WRITABLE], indirect=True
)
SENTINEL = 7.0
D = 16


def _oracle(x, positions, rotary_dim, layout, features):
    """``x`` (B, H, S, D) float64, its rotary features rotated by explicit matrices."""
    inv = arrayrope.rope_frequencies(rotary_dim).inv_freq
    part = slice(0, rotary_dim) if features == "leading" else slice(D - rotary_dim, D)
    want = np.array(x, dtype=np.float64)
    want[..., part] = rope_by_matrix(want[..., part], positions, inv, layout)
    return want


def _tolerance(dtype):
    rtol, atol = default_tolerance(dtype)
    return {"rtol": 4 * rtol, "atol": 4 * atol}


def _destination(backend, kind, x, dtype):
    """(out, buffer it lies in, index of out in the buffer's bhsd view or None)."""
    b, h, s, d = x.shape
    if kind == "x":
        return x, None, None
    if kind == "fresh":
        buf = backend.asarray(np.full((b, h, s, d), SENTINEL), dtype)
        return buf, buf, None
    if kind == "cache bhsd":  # (B, H, S_max, D) sliced on the sequence: leading axes that do not flatten
        buf = backend.asarray(np.full((b, h, s + 5, d), SENTINEL), dtype)
        return buf[:, :, 3 : 3 + s], buf, (slice(None), slice(None), slice(3, 3 + s))
    if kind == "cache bshd":  # (B, S_max, H, D) seen as (B, H, S_max, D)
        buf = backend.asarray(np.full((b, s + 5, h, d), SENTINEL), dtype)
        return backend.xp.permute_dims(buf, (0, 2, 1, 3))[:, :, 2 : 2 + s], buf, None
    # strided features: every other element of a twice-as-wide last axis
    buf = backend.asarray(np.full((b, h, s, 2 * d), SENTINEL), dtype)
    return buf[..., ::2], buf, None


@writable
@pytest.mark.parametrize("kind", ["x", "fresh", "cache bhsd", "cache bshd", "strided features"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("features,rotary_dim", [("leading", D), ("leading", D // 2), ("trailing", D // 2)])
@pytest.mark.parametrize("seq", [1, 40])
def test_out_matches_fresh_result_and_rotation_matrices(backend, thresholds, kind, layout, features, rotary_dim, seq):
    rng = np.random.default_rng(seq)
    positions = np.arange(seq) + 1000
    f = arrayrope.rope_frequencies(D, rotary_dim=rotary_dim)
    x_np = rng.standard_normal((2, 3, seq, D))
    for dtype in backend.dtypes:
        table_dtype = "float64" if dtype == "float64" else "float32"
        cos, sin = arrayrope.rope_tables(f, backend.asarray(positions), dtype=table_dtype)
        x = backend.asarray(x_np, dtype)
        fresh = arrayrope.apply_rotary(x, cos, sin, layout=layout, rotary_features=features)
        if kind == "x":
            x = backend.xp.asarray(x, copy=True)
        out, buf, _ = _destination(backend, kind, x, dtype)
        got = arrayrope.apply_rotary(x, cos, sin, layout=layout, rotary_features=features, out=out)
        assert got is out, (dtype, kind)
        np.testing.assert_array_equal(to_numpy(out), to_numpy(fresh), err_msg=f"{dtype} {kind}")
        want = _oracle(to_numpy(backend.asarray(x_np, dtype)), positions, rotary_dim, layout, features)
        assert_close(to_numpy(out).astype(np.float64), want, check_namespace=False, **_tolerance(dtype))
        if buf is not None:  # the rest of the buffer is untouched
            whole = to_numpy(buf).astype(np.float64)
            mask = np.ones(whole.shape, bool)
            if kind == "fresh":
                mask[...] = False
            elif kind == "cache bhsd":
                mask[:, :, 3 : 3 + seq] = False
            elif kind == "cache bshd":
                mask[:, 2 : 2 + seq] = False
            else:
                mask[..., ::2] = False
            assert (whole[mask] == SENTINEL).all(), (dtype, kind)


@writable
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_large_arrays_into_cache_slices(backend, layout):
    """Sizes above the kernels' thresholds with their default blocks: the blocked kernels write into x itself
    and into cache slices of both layouts (NumPy writes a bhsd slice in pieces of whole periods)."""
    seq, d = 300, 128
    x_np = np.random.default_rng(5).standard_normal((2, 6, seq, d))
    for dtype in [t for t in ("float32", "float16", "bfloat16") if t in backend.dtypes]:
        cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(d), backend.asarray(np.arange(seq)))
        x = backend.asarray(x_np, dtype)
        fresh = to_numpy(arrayrope.apply_rotary(x, cos, sin, layout=layout))
        bhsd = backend.asarray(np.zeros((2, 6, seq + 8, d)), dtype)
        bshd = backend.asarray(np.zeros((2, seq + 8, 6, d)), dtype)
        arrayrope.apply_rotary(x, cos, sin, layout=layout, out=bhsd[:, :, 8:])
        arrayrope.apply_rotary(x, cos, sin, layout=layout, out=backend.xp.permute_dims(bshd, (0, 2, 1, 3))[:, :, 8:])
        arrayrope.apply_rotary(x, cos, sin, layout=layout, out=x)
        for got in (to_numpy(bhsd)[:, :, 8:], np.swapaxes(to_numpy(bshd), 1, 2)[:, :, 8:], to_numpy(x)):
            np.testing.assert_array_equal(got, fresh, err_msg=dtype)
        assert not to_numpy(bhsd)[:, :, :8].any() and not to_numpy(bshd)[:, :8].any()
        want = rope_by_matrix(
            to_numpy(backend.asarray(x_np, dtype)), np.arange(seq), arrayrope.rope_frequencies(d).inv_freq, layout
        )
        assert_close(fresh.astype(np.float64), want, check_namespace=False, **_tolerance(dtype))


def test_out_is_refused_where_arrays_are_immutable(backend):
    """JAX, Dask and array_api_strict refuse out= and say what to do instead; the others return out."""
    f = arrayrope.rope_frequencies(8)
    cos, sin = arrayrope.rope_tables(f, backend.asarray(np.arange(3)))
    x = backend.asarray(np.ones((3, 8)), "float32")
    out = backend.asarray(np.zeros((3, 8)), "float32")
    if backend.library in WRITABLE:
        assert arrayrope.apply_rotary(x, cos, sin, out=out) is out
        return
    advice = {"jax": r"immutable.*at\[", "dask": "lazy graph.*store", "array_api_strict": "undefined.*returned"}
    with pytest.raises(TypeError, match=rf"out= .*{advice[backend.library]}"):
        arrayrope.apply_rotary(x, cos, sin, out=out)
    rope = arrayrope.RotaryEmbedding(8)
    q = backend.asarray(np.ones((1, 2, 3, 8)), "float32")
    with pytest.raises(TypeError, match=r"k_out= (cannot|is refused)"):
        rope(q, q, k_out=q)


@writable
def test_mismatched_destinations_are_refused(backend):
    f = arrayrope.rope_frequencies(8)
    cos, sin = arrayrope.rope_tables(f, backend.asarray(np.arange(3)))
    x = backend.asarray(np.ones((2, 3, 8)), "float32")
    with pytest.raises(TypeError, match=r"out must have x's dtype .*float32 \(the result's\), got .*float64"):
        arrayrope.apply_rotary(x, cos, sin, out=backend.asarray(np.zeros((2, 3, 8)), "float64"))
    with pytest.raises(ValueError, match=r"out must have x's shape \(2, 3, 8\) \(no broadcasting\), got \(1, 3, 8\)"):
        arrayrope.apply_rotary(x, cos, sin, out=backend.asarray(np.zeros((1, 3, 8)), "float32"))
    with pytest.raises(TypeError, match="out must be an array"):
        arrayrope.apply_rotary(x, cos, sin, out=[[0.0] * 8] * 3)
    if backend.library != "numpy":
        with pytest.raises(TypeError, match="out is a numpy array but x is"):
            arrayrope.apply_rotary(x, cos, sin, out=np.zeros((2, 3, 8), np.float32))


@writable
def test_overlap_other_than_identity_is_refused(backend):
    """Shifted, reversed and transposed views of x, and views of the tables, are refused before anything is
    written; views that interleave with x without a common element are accepted (NumPy and PyTorch on the
    CPU decide exactly)."""
    xp = backend.xp
    f = arrayrope.rope_frequencies(8)
    cos, sin = arrayrope.rope_tables(f, backend.asarray(np.arange(4)))
    buf = backend.asarray(np.random.default_rng(0).standard_normal((5, 8)), "float32")
    x = buf[:4]
    before = to_numpy(buf).copy()
    shifted = buf[1:]
    for out in [shifted] + ([xp.flip(buf[:4], axis=0)] if backend.library != "torch" else []):  # no negative strides
        with pytest.raises(ValueError, match="out shares memory with x without being x itself"):
            arrayrope.apply_rotary(x, cos, sin, out=out)
    square = backend.asarray(np.random.default_rng(2).standard_normal((8, 8)), "float32")
    cos8, sin8 = arrayrope.rope_tables(f, backend.asarray(np.arange(8)))
    with pytest.raises(ValueError, match="out shares memory with x without being x itself"):
        arrayrope.apply_rotary(square, cos8, sin8, out=square.T)  # the same memory, other strides
    table = backend.asarray(np.zeros((4, 8)), "float32")
    c, s = table[:, :4], table[:, 4:]
    with pytest.raises(ValueError, match="out shares memory with cos"):
        arrayrope.apply_rotary(x, c, s, out=table)
    np.testing.assert_array_equal(to_numpy(buf), before)
    if backend.library in ("numpy", "torch") and backend.device_label == "cpu":
        pairs = backend.asarray(np.random.default_rng(1).standard_normal((4, 2, 8)), "float32")
        fresh = to_numpy(arrayrope.apply_rotary(pairs[:, 0], cos, sin))
        arrayrope.apply_rotary(pairs[:, 0], cos, sin, out=pairs[:, 1])  # interleaved rows, no common element
        np.testing.assert_array_equal(to_numpy(pairs[:, 1]), fresh)


def test_destinations_that_cannot_be_written_are_refused():
    f = arrayrope.rope_frequencies(8)
    cos, sin = arrayrope.rope_tables(f, np.arange(3))
    x = np.ones((3, 8), np.float32)
    frozen = np.zeros((3, 8), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        arrayrope.apply_rotary(x, cos, sin, out=frozen)
    repeated = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (3, 8), (0, 4))
    with pytest.raises(ValueError, match="out repeats elements"):
        arrayrope.apply_rotary(x, cos, sin, out=repeated)
    torch = pytest.importorskip("torch")
    xt = torch.ones(3, 8)
    ct, st = arrayrope.rope_tables(f, torch.arange(3))
    with pytest.raises(ValueError, match="out repeats elements"):
        arrayrope.apply_rotary(xt, ct, st, out=torch.zeros(1, 8).expand(3, 8))
    with pytest.raises(ValueError, match="out is on device meta but x is on device cpu"):
        arrayrope.apply_rotary(xt, ct, st, out=torch.empty(3, 8, device="meta"))


# -- autograd ---------------------------------------------------------------------------------------------------


def test_autograd_follows_pytorchs_in_place_rules():
    """In place on a leaf that requires grad: PyTorch's error. On an intermediate tensor: the gradient of the
    fresh-output call (the transposed rotation), through PyTorch's in-place bookkeeping."""
    torch = pytest.importorskip("torch")
    f = arrayrope.rope_frequencies(8)
    cos, sin = arrayrope.rope_tables(f, torch.arange(5) + 3, dtype=torch.float64)
    leaf = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        arrayrope.apply_rotary(leaf, cos, sin, out=leaf)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        arrayrope.apply_rotary(torch.randn(2, 5, 8, dtype=torch.float64), cos, sin, out=leaf)
    w = torch.randn(2, 5, 8, dtype=torch.float64)
    upstream = torch.randn(2, 5, 8, dtype=torch.float64)

    def grad(in_place):
        p = torch.ones(2, 5, 8, dtype=torch.float64, requires_grad=True)
        x = p * w
        y = arrayrope.apply_rotary(x, cos, sin, out=x) if in_place else arrayrope.apply_rotary(x, cos, sin)
        (y * upstream).sum().backward()
        return p.grad

    # oracle: d/dp sum(upstream * R (p w)) = w * R^T upstream, R^T the rotation by the negated angles
    want = w * arrayrope.apply_rotary(upstream, cos, -sin)
    torch.testing.assert_close(grad(False), want)
    torch.testing.assert_close(grad(True), want)


# -- RotaryEmbedding ----------------------------------------------------------------------------------------------


@writable
@pytest.mark.parametrize("axes", ["bhsd", "bshd"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_a_kv_cache_decode_loop_matches_fresh_outputs(backend, thresholds, axes, layout):
    """Prefill into the cache, then decode steps that rotate q in place and k into the cache slice of their
    position: the cache and every q equal the fresh-output calls (to the bit), and the rotation matrices."""
    rope = arrayrope.RotaryEmbedding(D, layout=layout, axes=axes)
    rng = np.random.default_rng(11)
    prompt, steps, hq, hk, total = 5, 6, 4, 2, 16

    def shape(h, s):
        return (2, h, s, D) if axes == "bhsd" else (2, s, h, D)

    def at(cache, t, s):
        return cache[:, :, t : t + s] if axes == "bhsd" else cache[:, t : t + s]

    cache = backend.asarray(np.full(shape(hk, total), SENTINEL), "float32")
    keys = []
    t = 0
    for s in [prompt] + [1] * steps:
        q_np, k_np = rng.standard_normal(shape(hq, s)), rng.standard_normal(shape(hk, s))
        q, k = backend.asarray(q_np, "float32"), backend.asarray(k_np, "float32")
        q_fresh, k_fresh = rope(q, k, offset=t)
        q_got, k_got = rope(q, k, offset=t, q_out=q, k_out=at(cache, t, s))
        assert q_got is q
        np.testing.assert_array_equal(to_numpy(q), to_numpy(q_fresh))
        np.testing.assert_array_equal(to_numpy(k_got), to_numpy(k_fresh))
        keys.append(k_np)
        t += s
    got = to_numpy(cache)
    np.testing.assert_array_equal(to_numpy(at(cache, t, total - t)), np.full(shape(hk, total - t), SENTINEL))
    all_keys = np.concatenate(keys, axis=2 if axes == "bhsd" else 1)
    k_bhsd = all_keys if axes == "bhsd" else np.swapaxes(all_keys, 1, 2)
    want = rope_by_matrix(k_bhsd.astype(np.float32), np.arange(t), rope.freqs.inv_freq, layout)
    filled = got[:, :, :t] if axes == "bhsd" else np.swapaxes(got[:, :t], 1, 2)
    assert_close(filled.astype(np.float64), want, check_namespace=False, **_tolerance("float32"))


def test_rotary_embedding_refuses_destinations_before_anything_changes():
    rope = arrayrope.RotaryEmbedding(8, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8)
    q = np.ones((1, 2, 3, 8), np.float32)
    both = np.ones((1, 2, 3, 8), np.float32)
    k = both[:, :1]  # q_out=both would overwrite k before k is read
    freqs = rope.freqs
    with pytest.raises(ValueError, match="k_out= was given without k"):
        rope(q, k_out=k)
    with pytest.raises(ValueError, match="q_out shares memory with k"):
        rope(q, k, offset=20, q_out=both)
    buf = np.zeros((1, 1, 3, 8), np.float32)
    with pytest.raises(ValueError, match="k_out shares memory with q_out"):
        rope(q[:, :1], k, offset=20, q_out=buf, k_out=buf)
    with pytest.raises(TypeError, match="k_out must have k's dtype float32"):
        rope(q, k, offset=20, k_out=np.zeros(k.shape))
    assert rope.freqs is freqs and not buf.any()  # nothing changed: no call of length 23 happened
    np.testing.assert_array_equal(k, 1.0)


@writable
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_strided_inputs_rotated_in_place(backend, thresholds, layout):
    """x a view with transposed axes, or with strided features (every other element), rotated in place:
    the view's elements change as the fresh output says, the elements between them do not."""
    xp = backend.xp
    f = arrayrope.rope_frequencies(D)
    positions = np.arange(30) + 5
    cos, sin = arrayrope.rope_tables(f, backend.asarray(positions))
    base = np.random.default_rng(4).standard_normal((2, 30, 3, 2 * D))
    for view in ("transposed", "strided features"):
        buf = backend.asarray(base, "float32")
        x = xp.permute_dims(buf, (0, 2, 1, 3))[..., :D] if view == "transposed" else buf[..., ::2]
        if view == "strided features":
            x = xp.permute_dims(x, (0, 2, 1, 3))
        fresh = to_numpy(arrayrope.apply_rotary(x, cos, sin, layout=layout))
        before = to_numpy(buf).copy()
        assert arrayrope.apply_rotary(x, cos, sin, layout=layout, out=x) is x
        np.testing.assert_array_equal(to_numpy(x), fresh, err_msg=view)
        rest = np.ones(before.shape, bool)
        rest[..., :D] = view != "transposed"
        rest[..., ::2] &= view != "strided features"
        np.testing.assert_array_equal(to_numpy(buf)[rest], before[rest], err_msg=view)
        x_np = np.swapaxes(before, 1, 2)[..., :D] if view == "transposed" else np.swapaxes(before[..., ::2], 1, 2)
        want = rope_by_matrix(x_np, positions, f.inv_freq, layout)
        assert_close(fresh.astype(np.float64), want, check_namespace=False, **_tolerance("float32"))
