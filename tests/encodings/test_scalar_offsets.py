"""0-d offsets wherever an int offset is taken (``RotaryEmbedding.__call__``, ``alibi_bias``,
``t5_relative_bias``), with a value (NumPy, PyTorch, JAX, array_api_strict) or without one (Dask, and
offsets traced by ``jax.jit``), and decode loops under ``jax.jit`` that compile once.

Oracles: the same call with an int offset; cos/sin of ``p * theta`` with the product taken exactly
(``helpers.exact_cos_sin``) applied by the rotate-half formula; ALiBi's published bias
``-2**(-8h/n) * (i + offset - j)``; and the compilations that jax itself logs.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import to_numpy
from helpers import check_like, exact_cos_sin

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

#: Worst error of float32 tables (docs/guide/precision.md): correctly rounded where the device has
#: float64, composed from 10-bit digit rotations in float32 where it has none (JAX without x64).
TABLE_ERROR = {"float64 device": 3.0e-8, "no float64": 3.0e-7}


def _qk(b=2, s=3, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, 4, s, d)).astype(np.float32), rng.standard_normal((b, 2, s, d)).astype(np.float32)


def _exact_rope(x, positions, inv_freq):
    """Half-split RoPE of ``x`` (B, H, S, D) at integer ``positions`` (B, S), float64, from exact cos/sin."""
    cos, sin = exact_cos_sin(np.asarray(positions, dtype=np.int64), inv_freq)  # (B, S, h)
    h = len(inv_freq)
    x = np.asarray(x, dtype=np.float64)
    c, s = cos[:, None], sin[:, None]
    out = x.copy()
    out[..., :h] = x[..., :h] * c - x[..., h : 2 * h] * s
    out[..., h : 2 * h] = x[..., h : 2 * h] * c + x[..., :h] * s
    return out


def _bound(x, *table_errors):
    """Largest difference of two float32 rotations of ``x`` whose tables have these errors: each output feature
    takes two products with table entries, then rounds (two ulps of the largest input, generously)."""
    return 2 * float(np.abs(x).max()) * (sum(table_errors) + 2.0**-23)


# -- RotaryEmbedding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 300, 2**17 + 5])  # from the cache, and past it
def test_a_0d_offset_is_the_int(backend, value):
    """A 0-d offset of the backend's own library rotates as the int does: with a value, it is that int (the same
    computation, to the bit); a Dask one, whose value is not read, computes its tables from its positions."""
    q, k = _qk()
    rope = ar.RotaryEmbedding(16, rotary_dim=12)
    xq, xk = backend.asarray(q), backend.asarray(k)
    qr, kr = rope(xq, xk, offset=backend.asarray(np.array(value)))
    check_like(qr, backend, "float32", q.shape)
    check_like(kr, backend, "float32", k.shape)
    positions = np.full((2, 1), value) + np.arange(3)
    want_q, want_k = rope(xq, xk, offset=value)
    for got, want, x in ((qr, want_q, q), (kr, want_k, k)):
        if backend.library == "dask":
            assert np.abs(to_numpy(got) - to_numpy(want)).max() <= _bound(x, *[TABLE_ERROR["float64 device"]] * 2)
        else:
            np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
        exact = _exact_rope(x, positions, rope.freqs.inv_freq)
        assert np.abs(to_numpy(got) - exact).max() <= _bound(x, TABLE_ERROR["no float64"])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint64"])
def test_0d_offsets_of_every_integer_dtype(dtype):
    q, k = _qk()
    rope = ar.RotaryEmbedding(16)
    for got, want in zip(rope(q, k, offset=np.array(100, dtype=dtype)), rope(q, k, offset=100), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_0d_offset_of_another_library_is_a_number():
    """An int has no library: neither has a 0-d array whose value is read (a 1-d one is part of the computation
    and must share q's library, which the catalogue checks)."""
    torch = pytest.importorskip("torch")
    q, _ = _qk()
    rope = ar.RotaryEmbedding(16)
    got = rope(torch.from_numpy(q), offset=np.array(9))
    want = rope(torch.from_numpy(q), offset=9)
    assert torch.equal(got, want)
    np.testing.assert_array_equal(rope(q, offset=torch.tensor(9)), rope(q, offset=9))


def test_torch_0d_tensors():
    torch = pytest.importorskip("torch")
    q, k = _qk(s=1)
    rope = ar.RotaryEmbedding(16)
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    for dtype in (torch.int32, torch.int64, torch.uint8, torch.int16):
        qr, kr = rope(tq, tk, offset=torch.tensor(200, dtype=dtype))
        want_q, want_k = rope(tq, tk, offset=200)
        assert torch.equal(qr, want_q) and torch.equal(kr, want_k)
        exact = _exact_rope(q, np.full((2, 1), 200), rope.freqs.inv_freq)
        assert np.abs(qr.numpy() - exact).max() <= _bound(q, TABLE_ERROR["float64 device"])


def test_0d_offsets_are_refused_as_ints_are():
    q, _ = _qk()
    rope = ar.RotaryEmbedding(16)
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        rope(q, offset=np.array(-1))
    with pytest.raises(
        TypeError,
        match=r"offset must be an int or an integer array of shape \(\) or \(B,\), got "
        r"dtype float64",
    ):
        rope(q, offset=np.array(1.5))
    with pytest.raises(TypeError, match="offset must have an integer or real floating dtype, got bool"):
        rope(q, offset=np.array(True))
    with pytest.raises(ValueError, match="pass positions or offset, not both"):
        rope(q, positions=np.arange(3), offset=np.array(2))
    # offset 0 is no offset, as the int 0 is
    np.testing.assert_array_equal(
        rope(q, positions=np.arange(5, 8), offset=np.array(0)), rope(q, positions=np.arange(5, 8))
    )


# -- under jax.jit -----------------------------------------------------------------------------------------


def _compilations(records, name):
    """How many times jax compiled the jitted function ``name`` (its log under ``jax.log_compiles``)."""
    return sum(1 for r in records if r.getMessage().startswith(f"Compiling jit({name})"))


#: Offsets of one decode step each: from the cache's range, at its edges and past it, up to the last
#: position of int32 (JAX without x64 computes positions in int32).
DECODE = [0, 1, 2, 255, 256, 4095, 2**17 - 1, 2**17, 10**6, 2**31 - 2]


def test_a_jitted_decode_step_compiles_once_for_every_offset(caplog):
    """The issue's call, ``jax.jit(lambda q, k, o: rope(q, k, offset=o))`` with int offsets: each int becomes
    a traced 0-d int32, the tables are computed in the graph from ``o + 0..S-1``, and the step compiles once
    for every offset. Each result equals the eager call with the int offset, and exact rotations."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k = _qk(s=1, d=64)
    rope = ar.RotaryEmbedding(64, rotary_dim=48)
    traces = []

    def decode_step(q, k, offset):
        traces.append(offset)  # runs once per trace
        return rope(q, k, offset=offset)

    step = jax.jit(decode_step)
    jq, jk = jnp.asarray(q), jnp.asarray(k)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        outs = [step(jq, jk, offset) for offset in DECODE]
    assert len(traces) == 1 and isinstance(traces[0], jax.core.Tracer)
    assert _compilations(caplog.records, "decode_step") == 1
    table = TABLE_ERROR["float64 device" if ar.backends.has_float64(jnp, None) else "no float64"]
    for offset, got in zip(DECODE, outs, strict=True):
        eager = rope(jq, jk, offset=offset)
        for x, g, e in zip((q, k), got, eager, strict=True):
            assert np.abs(np.asarray(g) - np.asarray(e)).max() <= _bound(x, table, TABLE_ERROR["float64 device"])
            exact = _exact_rope(x, np.full((2, 1), offset), rope.freqs.inv_freq)
            assert np.abs(np.asarray(g) - exact).max() <= _bound(x, table)
    assert not any(isinstance(v[0], jax.core.Tracer) for v in rope._cache._tables.values())  # the trace kept none


def test_a_jitted_step_with_per_row_offsets_compiles_once(caplog):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k = _qk(s=2, d=32)
    rope = ar.RotaryEmbedding(32)
    traces = []

    def rows_step(q, k, offsets):
        traces.append(offsets)
        return rope(q, k, offset=offsets)

    step = jax.jit(rows_step)
    jq, jk = jnp.asarray(q), jnp.asarray(k)
    pairs = [(0, 7), (300, 2), (2**17, 5), (10**6, 2**30)]
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        outs = [step(jq, jk, jnp.asarray(p, dtype=jnp.int32)) for p in pairs]
    assert len(traces) == 1 and _compilations(caplog.records, "rows_step") == 1
    table = TABLE_ERROR["float64 device" if ar.backends.has_float64(jnp, None) else "no float64"]
    for p, got in zip(pairs, outs, strict=True):
        eager = rope(jq, jk, offset=jnp.asarray(p, dtype=jnp.int32))
        positions = np.asarray(p)[:, None] + np.arange(2)
        for x, g, e in zip((q, k), got, eager, strict=True):
            assert np.abs(np.asarray(g) - np.asarray(e)).max() <= _bound(x, table, table)
            assert np.abs(np.asarray(g) - _exact_rope(x, positions, rope.freqs.inv_freq)).max() <= _bound(x, table)


def test_a_decode_loop_inside_jit():
    """A whole decode loop in one compiled ``lax.scan``: the offset is the loop's counter, traced; every step
    equals the eager step at that int offset."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    steps, start = 12, 4090  # across the cache's 4096-row edge
    rng = np.random.default_rng(5)
    qs = rng.standard_normal((steps, 1, 4, 1, 16)).astype(np.float32)
    ks = rng.standard_normal((steps, 1, 2, 1, 16)).astype(np.float32)
    rope = ar.RotaryEmbedding(16)

    def body(offset, qk):
        return offset + 1, rope(qk[0], qk[1], offset=offset)

    _, (q_rot, k_rot) = jax.jit(lambda qs, ks: jax.lax.scan(body, jnp.int32(start), (qs, ks)))(qs, ks)
    table = TABLE_ERROR["float64 device" if ar.backends.has_float64(jnp, None) else "no float64"]
    for t in range(steps):
        eager_q, eager_k = rope(jnp.asarray(qs[t]), jnp.asarray(ks[t]), offset=start + t)
        assert np.abs(np.asarray(q_rot[t]) - np.asarray(eager_q)).max() <= _bound(qs[t], table, table)
        assert np.abs(np.asarray(k_rot[t]) - np.asarray(eager_k)).max() <= _bound(ks[t], table, table)
        exact = _exact_rope(qs[t], np.array([[start + t]]), rope.freqs.inv_freq)
        assert np.abs(np.asarray(q_rot[t]) - exact).max() <= _bound(qs[t], table)


def test_traced_offsets_are_checked_by_their_dtype_and_shape():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q = jnp.ones((2, 1, 3, 8))
    rope = ar.RotaryEmbedding(8)
    with pytest.raises(TypeError, match=r"integer array of shape \(\) or \(B,\), got dtype float32"):
        jax.jit(lambda q, o: rope(q, offset=o))(q, 1.5)
    with pytest.raises(ValueError, match="pass positions or offset, not both"):
        jax.jit(lambda q, o: rope(q, positions=jnp.arange(3), offset=o))(q, 0)
    dynamic = ar.RotaryEmbedding(8, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16)
    with pytest.raises(ValueError, match="pass seq_len="):
        jax.jit(lambda q, o: dynamic(q, offset=o))(q, 4)
    # with seq_len (the length whose frequencies the graph keeps: offset + S), as the eager int call
    got = jax.jit(lambda q, o: dynamic(q, offset=o, seq_len=40))(q, 37)
    want = ar.RotaryEmbedding(8, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16)(
        q, offset=37
    )
    assert np.abs(np.asarray(got) - np.asarray(want)).max() <= _bound(np.asarray(q), *[TABLE_ERROR["no float64"]] * 2)


# -- attention biases --------------------------------------------------------------------------------------


def _alibi_formula(num_heads, q_len, k_len, offset):
    """-slope_h * (i + offset - j) for keys at or before the query, -inf after (slopes 2**(-8h/n), n a power of
    two)."""
    slopes = 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)
    rel = np.arange(k_len)[None, :] - (offset + np.arange(q_len))[:, None]
    return np.where(rel > 0, -np.inf, slopes[:, None, None] * rel)


def test_bias_offsets_as_0d_arrays(backend):
    value = 5
    offset = backend.asarray(np.array(value))
    got = ar.alibi_bias(4, 3, 9, offset=offset, xp=backend.xp, device=backend.device)
    np.testing.assert_array_equal(
        to_numpy(got), to_numpy(ar.alibi_bias(4, 3, 9, offset=value, xp=backend.xp, device=backend.device))
    )
    np.testing.assert_allclose(to_numpy(got), _alibi_formula(4, 3, 9, value), rtol=1e-7)
    table = backend.asarray(np.arange(64.0).reshape(32, 2), dtype="float32")
    np.testing.assert_array_equal(
        to_numpy(ar.t5_relative_bias(table, 3, 9, offset=offset)),
        to_numpy(ar.t5_relative_bias(table, 3, 9, offset=value)),
    )


def test_bias_offsets_under_jit_compile_once():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    traces = []

    def biases(table, offset):
        traces.append(offset)
        return ar.alibi_bias(4, 2, 12, offset=offset), ar.t5_relative_bias(table, 2, 12, offset=offset)

    step = jax.jit(biases)
    table = jnp.asarray(np.arange(64.0, dtype=np.float32).reshape(32, 2))
    for offset in (0, 3, 10, 10**6):
        alibi, t5 = step(table, offset)
        np.testing.assert_array_equal(np.asarray(alibi), np.asarray(ar.alibi_bias(4, 2, 12, offset=offset, xp=jnp)))
        np.testing.assert_allclose(np.asarray(alibi), _alibi_formula(4, 2, 12, offset), rtol=1e-7)
        np.testing.assert_array_equal(np.asarray(t5), np.asarray(ar.t5_relative_bias(table, 2, 12, offset=offset)))
    assert len(traces) == 1
    with pytest.raises(ValueError, match=r"offset must be an int or a 0-d integer array .*, got shape \(2,\)"):
        step(table, jnp.asarray([1, 2]))
