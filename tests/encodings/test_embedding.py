"""``RotaryEmbedding`` (``encodings/embedding.py``) against explicit rotation matrices: offsets, positions,
grouped-query heads, both axes orders, dtypes, its cache and threads, jax.jit, and the scaled frequencies
(dynamic NTK, LongRoPE) that follow the sequence length, from their published formulas."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import to_numpy
from helpers import POW_ULPS, check_like, inv_freq_formula, rope_by_matrix, ulps, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

LAYOUTS = ("half", "interleaved")


def _qk(b=2, hq=4, hk=2, s=5, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, hq, s, d)), rng.standard_normal((b, hk, s, d))


def _oracle_bhsd(x, positions, inv_freq, layout):
    """positions (S,) or (B, S); x (B, H, S, D)."""
    positions = np.broadcast_to(positions, (x.shape[0], x.shape[2]))
    return np.stack([rope_by_matrix(x[b], positions[b], inv_freq, layout) for b in range(x.shape[0])])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_offset_and_gqa(backend, layout):
    q, k = _qk()
    rope = ar.RotaryEmbedding(16, rotary_dim=12, layout=layout, base=500.0)
    qr, kr = rope(backend.asarray(q, dtype="float32"), backend.asarray(k, dtype="float32"), offset=300)
    pos = np.arange(300, 305)
    check_like(qr, backend, "float32", q.shape)
    check_like(kr, backend, "float32", k.shape)
    np.testing.assert_allclose(to_numpy(qr), _oracle_bhsd(q, pos, rope.freqs.inv_freq, layout), atol=3e-6)
    np.testing.assert_allclose(to_numpy(kr), _oracle_bhsd(k, pos, rope.freqs.inv_freq, layout), atol=3e-6)


def test_explicit_positions_and_per_batch_offsets(backend):
    q, k = _qk()
    rope = ar.RotaryEmbedding(16)
    inv = rope.freqs.inv_freq
    xq = backend.asarray(q, dtype="float32")
    # (S,) positions
    p1 = np.array([7, 3, 0, 100, 2])
    out = rope(xq, positions=backend.asarray(p1))
    np.testing.assert_allclose(to_numpy(out), _oracle_bhsd(q, p1, inv, "half"), atol=3e-6)
    # (B, S) position ids
    p2 = np.array([[0, 1, 2, 3, 4], [9, 10, 11, 12, 13]])
    out = rope(xq, positions=backend.asarray(p2))
    np.testing.assert_allclose(to_numpy(out), _oracle_bhsd(q, p2, inv, "half"), atol=3e-6)
    # per-batch offsets (B,)
    off = np.array([4, 1000])
    qr, kr = rope(xq, backend.asarray(k, dtype="float32"), offset=backend.asarray(off))
    expected = off[:, None] + np.arange(5)
    np.testing.assert_allclose(to_numpy(qr), _oracle_bhsd(q, expected, inv, "half"), atol=3e-6)
    np.testing.assert_allclose(to_numpy(kr), _oracle_bhsd(k, expected, inv, "half"), atol=3e-6)


def test_bshd_axes(backend):
    q, _ = _qk()
    rope = ar.RotaryEmbedding(16, axes="bshd", layout="interleaved")
    q_bshd = np.transpose(q, (0, 2, 1, 3))
    out = rope(backend.asarray(q_bshd, dtype="float32"), offset=11)
    expected = np.transpose(_oracle_bhsd(q, np.arange(11, 16), rope.freqs.inv_freq, "interleaved"), (0, 2, 1, 3))
    np.testing.assert_allclose(to_numpy(out), expected, atol=3e-6)
    p2 = np.array([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    out = rope(backend.asarray(q_bshd, dtype="float32"), positions=backend.asarray(p2))
    expected = np.transpose(_oracle_bhsd(q, p2, rope.freqs.inv_freq, "interleaved"), (0, 2, 1, 3))
    np.testing.assert_allclose(to_numpy(out), expected, atol=3e-6)


def test_dtypes_follow_the_input(backend):
    q, _ = _qk(s=3)
    rope = ar.RotaryEmbedding(16)
    for dtype in backend.dtypes:
        out = rope(backend.asarray(q, dtype=dtype), offset=5)
        check_like(out, backend, dtype, q.shape)
        xin = to_numpy(backend.asarray(q, dtype=dtype)).astype(np.float64)
        tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 3e-6, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(
            to_numpy(out).astype(np.float64),
            _oracle_bhsd(xin, np.arange(5, 8), rope.freqs.inv_freq, "half"),
            atol=tol * 4,
            rtol=tol,
        )


def test_cache_grows_on_demand_and_is_reused():
    rope = ar.RotaryEmbedding(8)
    q = np.random.default_rng(0).standard_normal((1, 1, 4, 8)).astype(np.float32)
    rope(q, offset=0)
    ((cos, _),) = rope._cache._tables.values()
    assert cos.shape[0] == 256
    out = rope(q, offset=5000)  # beyond the cache: it grows to the next power of two
    ((cos, _),) = rope._cache._tables.values()
    assert cos.shape[0] == 8192
    expected = _oracle_bhsd(q.astype(np.float64), np.arange(5000, 5004), rope.freqs.inv_freq, "half")
    np.testing.assert_allclose(out, expected, atol=3e-6)


def test_threads_share_one_instance():
    rope = ar.RotaryEmbedding(32)
    q = np.random.default_rng(0).standard_normal((1, 2, 3, 32)).astype(np.float32)
    results, errors = {}, []

    def work(i):
        try:
            results[i] = rope(q, offset=100 * i)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    for i, out in results.items():
        expected = _oracle_bhsd(q.astype(np.float64), np.arange(100 * i, 100 * i + 3), rope.freqs.inv_freq, "half")
        np.testing.assert_allclose(out, expected, atol=3e-6)


def test_jax_jit_with_traced_offset():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k = _qk(s=1)
    rope = ar.RotaryEmbedding(16)
    step = jax.jit(lambda a, b, off: rope(a, b, offset=off))
    off = jnp.asarray([3, 40], dtype=jnp.int32)
    qr, _kr = step(jnp.asarray(q, dtype=jnp.float32), jnp.asarray(k, dtype=jnp.float32), off)
    expected = _oracle_bhsd(q, np.array([[3], [40]]), rope.freqs.inv_freq, "half")
    np.testing.assert_allclose(np.asarray(qr), expected, atol=3e-6)
    # an int offset inside jit uses the cache without storing traced values in it
    qr = jax.jit(lambda a: rope(a, offset=7))(jnp.asarray(q, dtype=jnp.float32))
    np.testing.assert_allclose(np.asarray(qr), _oracle_bhsd(q, np.array([7]), rope.freqs.inv_freq, "half"), atol=3e-6)
    assert all(not type(v[0]).__name__.endswith("Tracer") for v in rope._cache._tables.values())


def test_bad_calls(backend):
    q, k = _qk()
    rope = ar.RotaryEmbedding(16)
    xq = backend.asarray(q, dtype="float32")
    with pytest.raises(ValueError, match="axes must be one of"):
        ar.RotaryEmbedding(16, axes="bsd")
    with pytest.raises(ValueError, match="layout must be one of"):
        ar.RotaryEmbedding(16, layout="gptj")
    with pytest.raises(ValueError, match="q must be 4-D"):
        rope(xq[0, ...])
    with pytest.raises(ValueError, match=r"q.shape\[-1\] must be head_dim=16"):
        rope(xq[..., :8])
    with pytest.raises(ValueError, match="pass positions or offset, not both"):
        rope(xq, positions=backend.asarray(np.arange(5)), offset=3)
    with pytest.raises(ValueError, match="positions must have shape"):
        rope(xq, positions=backend.asarray(np.arange(4)))
    with pytest.raises(ValueError, match="offset must be >= 0"):
        rope(xq, offset=-1)
    with pytest.raises(ValueError, match="offset must be an int or an array of shape"):
        rope(xq, offset=backend.asarray(np.array([1, 2, 3])))
    with pytest.raises(ValueError, match="q and k must share batch and sequence"):
        rope(xq, backend.asarray(k[:, :, :3], dtype="float32"))
    with pytest.raises(TypeError, match="q must have a real floating dtype"):
        rope(backend.asarray(np.ones((1, 1, 2, 16), dtype=np.int32)))


# -- frequencies that follow the sequence length -----------------------------------------------

LMAX = 64  # a tiny context so the switches happen at small positions


def ntk(d: int, base: float, s: float, length: int) -> np.ndarray:
    """Dynamic NTK frequencies from the published formula (unchanged up to LMAX)."""
    if length > LMAX:
        base = base * (s * length / LMAX - (s - 1)) ** (d / (d - 2))
    return inv_freq_formula(d, base)


def _q(backend, seq, dtype="float32"):
    rng = np.random.default_rng(seq)
    q = backend.asarray(rng.standard_normal((1, 2, seq, 32)), dtype=dtype)
    return q, to_numpy(q).astype(np.float64)


def test_dynamic_follows_transformers_rule(backend):
    rope = ar.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=LMAX)
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    tol = 1e-12 if dtype == "float64" else 3e-6

    def run(seq, offset, expect_len):
        q, q64 = _q(backend, seq, dtype)
        out = rope(q, offset=offset)
        want = rope_by_matrix(q64, np.arange(offset, offset + seq), ntk(32, 1e4, 2.0, expect_len), "half")
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=tol, atol=tol)

    run(8, 0, 8)  # within the context: the original frequencies
    run(8, 92, 100)  # grows to 100
    run(4, 80, 100)  # 84 < 100: the frequencies of the longest length stay
    run(1, 100, 101)  # decoding one step further: recomputed for 101
    run(4, 10, 14)  # back below max_position_embeddings: the original frequencies again
    # the original frequencies come back unchanged (a property of the code) ...
    np.testing.assert_array_equal(rope.freqs.inv_freq, ar.rope_frequencies(32).inv_freq)
    # ... and they are the formula's, up to the rounding of pow (NumPy's vectorised pow may differ by an ulp)
    np.testing.assert_array_max_ulp(rope.freqs.inv_freq, ntk(32, 1e4, 2.0, 1), maxulp=POW_ULPS)


def _hf_rotary(cfg):
    """transformers' Llama rotary module for ``cfg``: ``step(length)`` runs it on positions ``0 .. length - 1``
    (its dynamic update) and returns the frequencies it then holds, float64."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.models.llama import modeling_llama

    transformers.logging.set_verbosity_error()
    module = modeling_llama.LlamaRotaryEmbedding(transformers.LlamaConfig(**copy.deepcopy(cfg)))  # it fills in cfg
    x = torch.zeros(1, 1, 1, cfg["head_dim"])

    def step(length):
        module(x, torch.arange(length)[None])
        return module.inv_freq.double().numpy()

    return step


@pytest.mark.parametrize("call", ["offset", "offsets", "positions"])
def test_dynamic_at_max_position_embeddings_keeps_what_transformers_keeps(call):
    """After the frequencies grew past ``max_position_embeddings``, a call of length exactly
    ``max_position_embeddings`` keeps the grown ones (transformers resets only below it); one of length
    ``max_position_embeddings - 1`` takes the original ones back, and one of ``max_position_embeddings + 1``
    grows them again. Each call against transformers' module after the same calls."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": LMAX,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
    }
    hf = _hf_rotary(cfg)
    rope = ar.RotaryEmbedding.from_config(cfg)
    q = np.random.default_rng(3).standard_normal((1, 2, 2, 32))
    original = inv_freq_formula(32, 1e4)
    for length, grown in (
        (LMAX, False),
        (2 * LMAX, True),
        (LMAX, True),
        (LMAX - 1, False),
        (LMAX, False),
        (LMAX + 1, True),
        (LMAX, True),
        (3, False),
    ):
        theirs = hf(length)
        pos = np.arange(length - 2, length)
        if call == "offset":
            out, freqs = rope(q, offset=length - 2, return_freqs=True)
        elif call == "offsets":  # one per batch row: the length is the largest offset + seq
            out, freqs = rope(q, offset=np.array([length - 2]), return_freqs=True)
        else:
            out, freqs = rope(q, positions=pos, return_freqs=True)
        # transformers computes its frequencies in float32: within 4 float32 ulps of the float64 ones
        np.testing.assert_allclose(freqs.inv_freq, theirs, rtol=5e-7, atol=0)
        assert bool(np.max(np.abs(freqs.inv_freq / original - 1)) > 1e-3) is grown, length  # which set it is
        # and the call rotated by them (float64 q: float64 tables)
        np.testing.assert_allclose(out, rope_by_matrix(q, pos, freqs.inv_freq, "half"), rtol=1e-12, atol=1e-12)


def test_longrope_without_an_original_context_switches_at_max_position_embeddings():
    """A longrope dict without ``original_max_position_embeddings`` takes ``max_position_embeddings`` for it (as
    transformers does when it loads the config): short factors up to that length, long ones one past it."""
    short, long = list(np.linspace(1.0, 1.3, 16)), list(np.linspace(1.0, 20.0, 16))
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": LMAX,
        "rope_scaling": {"rope_type": "longrope", "short_factor": short, "long_factor": long},
    }
    hf = _hf_rotary(cfg)
    rope = ar.RotaryEmbedding.from_config(cfg)
    theta = inv_freq_formula(32, 1e4)
    q = np.zeros((1, 1, 2, 32))
    for length, factors in ((LMAX, short), (LMAX + 1, long), (LMAX, short)):
        theirs = hf(length)
        _, freqs = rope(q, offset=length - 2, return_freqs=True)
        np.testing.assert_allclose(freqs.inv_freq, theirs, rtol=5e-7, atol=0)
        np.testing.assert_allclose(freqs.inv_freq, theta / np.array(factors), rtol=1e-13)
        assert freqs.attention_factor == 1.0  # factor = max_position_embeddings / itself


def test_the_length_of_a_call_comes_from_an_int_offset_else_seq_len_else_the_positions():
    """The documented precedence: ``offset + S`` for an int offset (seq_len= is not read), else ``seq_len=``,
    else ``max(positions) + 1``; each checked by the NTK frequencies it selects."""
    rope = ar.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=LMAX)
    q = np.zeros((1, 1, 2, 32))

    def length_of(**kwargs):
        _, freqs = rope(q, return_freqs=True, **kwargs)
        found = [n for n in (LMAX, 3 * LMAX, 5 * LMAX) if np.allclose(freqs.inv_freq, ntk(32, 1e4, 2.0, n), rtol=1e-12)]
        rope(q)  # back to the original frequencies (a call below max_position_embeddings)
        return found

    assert length_of(offset=3 * LMAX - 2, seq_len=5 * LMAX) == [3 * LMAX]
    assert length_of(positions=np.array([0, 3 * LMAX - 1]), seq_len=5 * LMAX) == [5 * LMAX]
    assert length_of(offset=np.array([3 * LMAX - 2]), seq_len=5 * LMAX) == [5 * LMAX]
    assert length_of(positions=np.array([3 * LMAX - 1, 0])) == [3 * LMAX]
    assert length_of(offset=np.array([3 * LMAX - 2])) == [3 * LMAX]


def test_longrope_switch(backend):
    short = list(np.linspace(1.0, 1.3, 16))
    long = list(np.linspace(1.0, 20.0, 16))
    rope = ar.RotaryEmbedding(
        32,
        scaling={
            "rope_type": "longrope",
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": LMAX,
        },
        max_position_embeddings=4 * LMAX,
    )
    theta = inv_freq_formula(32, 1e4)
    att = np.sqrt(1 + np.log(4) / np.log(LMAX))
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    tol = 1e-12 if dtype == "float64" else 3e-6
    for last, factors in ((LMAX - 1, short), (LMAX, long), (LMAX - 1, short)):  # max position + 1 vs L0
        q, q64 = _q(backend, 4, dtype)
        pos = np.arange(last - 3, last + 1)
        if backend.library == "dask":  # positions whose values are not read: the length must be given
            with pytest.raises(ValueError, match="seq_len="):
                rope(q, positions=backend.asarray(pos))
            out = rope(q, positions=backend.asarray(pos), seq_len=last + 1)
        else:
            out = rope(q, positions=backend.asarray(pos))
        want = rope_by_matrix(q64, pos, theta / np.array(factors), "half") * att
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=tol, atol=tol)


def test_rerotate_keeps_a_cache_valid_across_the_dynamic_switch():
    rope = ar.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=LMAX)
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 2, LMAX, 32))
    _, cache = rope(k, k, offset=0)
    before = rope.freqs
    k_new = rng.standard_normal((1, 2, 1, 32))
    _, _k_new_rot = rope(k_new, k_new, offset=LMAX)  # position LMAX: the frequencies grow
    assert rope.freqs != before
    moved = ar.rerotate(cache, positions=np.arange(LMAX), from_freqs=before, to_freqs=rope.freqs)
    want = rope_by_matrix(k, np.arange(LMAX), ntk(32, 1e4, 4.0, LMAX + 1), "half")
    np.testing.assert_allclose(moved, want, rtol=1e-12, atol=1e-12)


def test_from_config_and_errors():
    cfg = {"head_dim": 32, "max_position_embeddings": LMAX, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    with pytest.raises(ValueError, match=r"no model_type; pass layout='half'"):  # no family: no layout of its own
        ar.RotaryEmbedding.from_config(cfg)
    rope = ar.RotaryEmbedding.from_config(cfg, layout="half")
    assert ar.RotaryEmbedding.from_config({**cfg, "model_type": "llama"}).layout == "half"
    q = np.ones((1, 1, 2, 32))
    rope(q, offset=LMAX)
    np.testing.assert_allclose(rope.freqs.inv_freq, ntk(32, 1e4, 2.0, LMAX + 2), rtol=1e-14)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        ar.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="seq_len must be positive"):
        rope(q, positions=np.arange(2), seq_len=0)


def test_trailing_rotary_features_and_repr(backend):
    rope = ar.RotaryEmbedding(12, rotary_dim=4, rotary_features="trailing", layout="interleaved")
    assert "rotary_features='trailing'" in repr(rope)
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 12))
    pos = np.arange(5) + 40
    want = x.copy()
    want[..., 8:] = rope_by_matrix(x[..., 8:], pos, rope.freqs.inv_freq, "interleaved")
    dtype = backend.dtypes[0]
    out = rope(backend.asarray(x, dtype=dtype), offset=40)
    xp_assert_close(out, want, backend, dtype, **ulps(dtype))


def test_axes_mistakes_are_loud():
    """q laid out (batch, seq, heads, dim) with the default axes: the errors say so and name axes=."""
    rope = ar.RotaryEmbedding(16)
    q = np.zeros((1, 10, 4, 16), np.float32)  # bshd
    k = np.zeros((1, 10, 2, 16), np.float32)  # grouped-query keys
    with pytest.raises(ValueError, match=r"axes='bhsd'.*fit axes='bshd'"):
        rope(q, k)
    with pytest.raises(ValueError, match=r"axes='bhsd'.*They fit axis 1.*pass that as axes="):
        rope(q, positions=np.arange(10))
    q_rot, _ = ar.RotaryEmbedding(16, axes="bshd")(q, k, positions=np.arange(10))
    assert q_rot.shape == q.shape
    with pytest.raises(ValueError, match="axes='bhsd'"):
        rope(np.zeros((1, 4, 10, 8), np.float32))
    with pytest.raises(ValueError, match="axes='bshd'"):
        ar.RotaryEmbedding(16, axes="bshd")(np.zeros((4, 10, 16), np.float32))


# -- far positions: the tables of the positions asked for, never a cache grown to reach them -------------


def _exact_bhsd(x, positions, inv_freq):
    """Half-split RoPE of x (B, H, S, D) at integer positions (B, S) of any size: angles reduced exactly."""
    import mpmath

    with mpmath.workprec(200):
        out = np.array(x, dtype=np.float64)
        for b, row in enumerate(np.broadcast_to(positions, (x.shape[0], x.shape[2]))):
            for s, p in enumerate(row):
                ang = [mpmath.mpf(int(p)) * mpmath.mpf(float(t)) for t in inv_freq]
                c = np.array([float(mpmath.cos(a)) for a in ang])
                sn = np.array([float(mpmath.sin(a)) for a in ang])
                h = len(inv_freq)
                x1, x2 = x[b, :, s, :h].astype(np.float64), x[b, :, s, h : 2 * h].astype(np.float64)
                out[b, :, s, :h], out[b, :, s, h : 2 * h] = x1 * c - x2 * sn, x2 * c + x1 * sn
    return out


@pytest.mark.parametrize("offset", [2**17 - 3, 2**24 + 3, 2**31, 2**40 + 7, 2**62])
def test_far_offsets_compute_their_own_tables_exactly(backend, offset):
    pytest.importorskip("mpmath")
    if offset + 2 >= 2**31 and not arrayrope_has_int64(backend):
        with pytest.raises(ValueError, match=r"offset \+ seq - 1 must be at most 2147483647"):
            ar.RotaryEmbedding(128)(backend.asarray(np.ones((1, 1, 3, 128)), dtype="float32"), offset=offset)
        return
    rope = ar.RotaryEmbedding(128)
    q, k = _qk(b=1, hq=2, hk=1, s=3, d=128)
    qr, kr = rope(backend.asarray(q, dtype="float32"), backend.asarray(k, dtype="float32"), offset=offset)
    pos = np.arange(offset, offset + 3)
    assert np.abs(to_numpy(qr) - _exact_bhsd(q.astype(np.float32), pos, rope.freqs.inv_freq)).max() <= 2e-6
    assert np.abs(to_numpy(kr) - _exact_bhsd(k.astype(np.float32), pos, rope.freqs.inv_freq)).max() <= 2e-6
    assert all(cos.shape[0] <= 2**17 for cos, _ in rope._cache._tables.values())  # the cache did not grow to reach them


def arrayrope_has_int64(backend) -> bool:
    from arrayrope import backends

    return backends.has_int64(backend.xp, backend.device)


def test_a_decode_step_at_offset_2_31_costs_what_it_uses():
    """Memory of the call itself (tracemalloc sees NumPy's buffers): the 8 GiB table of the past is gone.
    Its time is a bench target (python -m bench, section "far"), not an assertion here."""
    import tracemalloc

    rope = ar.RotaryEmbedding(128)
    q, k = (np.ones((1, h, 1, 128), np.float32) for h in (32, 8))
    rope(q, k, offset=1000)
    tracemalloc.start()
    try:
        rope(q, k, offset=2**31)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # one position's tables and the outputs: far below 200 MB


# -- every array argument checked; each output in its own input's dtype ---------------------------------


@pytest.mark.parametrize("dtype", ["int64", "int32", "complex64", "bool"])
def test_k_is_checked_like_q(dtype):
    rope = ar.RotaryEmbedding(8)
    q = np.ones((1, 2, 3, 8), np.float32)
    with pytest.raises(TypeError, match=rf"k must have a real floating dtype .*, got {dtype}"):
        rope(q, np.ones((1, 2, 3, 8), dtype=dtype))
    for bad, message in (
        (np.ones((1, 2, 3, 6), np.float32), r"k.shape\[-1\] must be head_dim=8"),
        (np.ones((2, 3, 8), np.float32), "k must be 4-D"),
    ):
        with pytest.raises(ValueError, match=message):
            rope(q, bad)


def test_each_input_is_rotated_in_its_own_dtype(backend):
    """A float64 k next to a float32 q gets float64 tables (exact at 1e6), and the other way round."""
    if "float64" not in backend.dtypes:
        pytest.skip(f"{backend.name} has no float64")
    pytest.importorskip("mpmath")
    rope = ar.RotaryEmbedding(16)
    q, k = _qk(s=2, d=16)
    pos = np.arange(10**6, 10**6 + 2)
    want_q = _exact_bhsd(q, pos, rope.freqs.inv_freq)
    want_k = _exact_bhsd(k, pos, rope.freqs.inv_freq)
    for q_dt, k_dt in (("float32", "float64"), ("float64", "float32")):
        qr, kr = rope(backend.asarray(q, dtype=q_dt), backend.asarray(k, dtype=k_dt), offset=10**6)
        check_like(qr, backend, q_dt, q.shape)
        check_like(kr, backend, k_dt, k.shape)
        for out, want, dt in ((qr, want_q, q_dt), (kr, want_k, k_dt)):
            tol = 1e-14 if dt == "float64" else 3e-6  # float32 tables would be 3e-8 off
            np.testing.assert_allclose(to_numpy(out), want, atol=tol, rtol=0)


# -- offsets of any integer dtype: positions in a dtype that holds them -----------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64"])
def test_offsets_never_wrap_in_their_own_dtype(backend, dtype):
    pytest.importorskip("mpmath")
    info = np.iinfo(dtype)
    top = info.max if dtype != "int64" else 2**62
    if top + 2 >= 2**31 and not arrayrope_has_int64(backend):
        pytest.skip(f"{backend.name} has no int64 for positions past 2**31")
    rope = ar.RotaryEmbedding(8)
    q, _ = _qk(b=2, hq=1, s=3, d=8)
    off = np.array([top - 1, 1]).astype(dtype)
    out = rope(backend.asarray(q, dtype="float32"), offset=backend.asarray(off))
    want = _exact_bhsd(q.astype(np.float32), off.astype(object)[:, None] + np.arange(3), rope.freqs.inv_freq)
    assert np.abs(to_numpy(out) - want).max() <= 2e-6


@pytest.mark.parametrize("kind", ["int", "array"])
def test_the_last_position_a_device_holds_and_one_past_it(backend, kind):
    """A call whose last position is the largest integer of the device's index dtype (int64, or int32 where
    there is none) is rotated exactly; one whose last position would be one more is refused."""
    pytest.importorskip("mpmath")
    if backend.lazy and kind == "array":
        pytest.skip("lazy offset arrays are not inspected")
    limit = 2**63 - 1 if arrayrope_has_int64(backend) else 2**31 - 1
    rope = ar.RotaryEmbedding(8)
    q, _ = _qk(b=2, hq=1, s=3, d=8)
    xq = backend.asarray(q, dtype="float32")

    def offset(last):
        start = last - 2
        return start if kind == "int" else backend.asarray(np.array([start, 5], dtype=np.int64))

    out = rope(xq, offset=offset(limit))
    starts = np.array([limit - 2, limit - 2 if kind == "int" else 5], dtype=object)
    want = _exact_bhsd(q.astype(np.float32), starts[:, None] + np.arange(3), rope.freqs.inv_freq)
    assert np.abs(to_numpy(out) - want).max() <= 2e-6
    with pytest.raises(ValueError, match=rf"offset \+ seq - 1 must (be at most|fit in int\d\d \(at most) {limit}"):
        rope(xq, offset=offset(limit + 1))


def test_offsets_are_integers_and_not_negative():
    rope = ar.RotaryEmbedding(8)
    q = np.ones((2, 1, 3, 8), np.float32)
    with pytest.raises(TypeError, match=r"an integer array of shape \(\) or \(B,\), got dtype float"):
        rope(q, offset=np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="offset must be >= 0, got -4"):
        rope(q, offset=np.array([3, -4]))
    with pytest.raises(ValueError, match=r"offset \+ seq - 1 must fit in int64"):
        rope(q, offset=np.array([2**63 - 2, 0]))


# -- threads and rejected calls ------------------------------------------------------------------------


def test_a_rejected_call_changes_no_state():
    """A call refused for its positions' shape (or any other argument) leaves the dynamic frequencies and
    the cache as they were: the next call equals that of a fresh instance."""
    scaling = {"rope_type": "dynamic", "factor": 4.0}
    rope = ar.RotaryEmbedding(16, scaling=scaling, max_position_embeddings=32)
    fresh = ar.RotaryEmbedding(16, scaling=scaling, max_position_embeddings=32)
    q = np.random.default_rng(0).standard_normal((1, 1, 4, 16)).astype(np.float32)
    bad_calls = [
        dict(positions=np.arange(1000, 1005)),  # 5 positions for 4 tokens
        dict(offset=10**6, positions=np.arange(4)),  # both
        dict(offset=np.array([500, 600])),  # a batch of 1
        dict(offset=500, seq_len=0),
        dict(offset=500, return_freqs="yes"),
    ]
    for kw in bad_calls:
        with pytest.raises((TypeError, ValueError)):
            rope(q, **kw)
        with pytest.raises((TypeError, ValueError)):
            rope(q, np.ones((1, 1, 4, 8), np.float32), offset=500)  # a bad k
    assert rope.freqs == fresh.freqs and not rope._cache._tables
    np.testing.assert_array_equal(rope(q, offset=40), fresh(q, offset=40))


def test_threads_rerotate_with_the_frequencies_their_calls_used():
    """The pattern of docs/guide/scaling.md from many threads sharing one dynamic instance: each thread's call returns
    the frequencies it used, so every rerotated cache equals a prefill at that thread's frequencies,
    whatever the other threads' calls did to the shared state in between."""
    rope = ar.RotaryEmbedding(16, scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=32)
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 2, 32, 16))
    errors, wrong = [], []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            for step in range(25):
                _, cache, old = rope(k, k, return_freqs=True)  # positions 0..31
                length = 33 + (i * 25 + step) % 40  # threads reach different lengths
                _, _, new = rope(k[:, :, :1], k[:, :, :1], offset=length - 1, return_freqs=True)
                moved = ar.rerotate(cache, positions=np.arange(32), from_freqs=old, to_freqs=new)
                want = ar.apply_rotary(k, *ar.rope_tables(new, np.arange(32), dtype="float64"))
                if np.abs(moved - want).max() > 1e-9:
                    wrong.append((i, step))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and not wrong, (errors, wrong[:5])
