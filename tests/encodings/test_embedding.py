import threading

import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import to_numpy
from helpers import check_like, rope_by_matrix

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
    np.testing.assert_allclose(to_numpy(rope(xq, positions=backend.asarray(p1))), _oracle_bhsd(q, p1, inv, "half"), atol=3e-6)
    # (B, S) position ids
    p2 = np.array([[0, 1, 2, 3, 4], [9, 10, 11, 12, 13]])
    np.testing.assert_allclose(to_numpy(rope(xq, positions=backend.asarray(p2))), _oracle_bhsd(q, p2, inv, "half"), atol=3e-6)
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
            to_numpy(out).astype(np.float64), _oracle_bhsd(xin, np.arange(5, 8), rope.freqs.inv_freq, "half"),
            atol=tol * 4, rtol=tol,
        )


def test_cache_grows_on_demand_and_is_reused():
    rope = ar.RotaryEmbedding(8)
    q = np.random.default_rng(0).standard_normal((1, 1, 4, 8)).astype(np.float32)
    rope(q, offset=0)
    (cos, _), = rope._cache.values()
    assert cos.shape[0] == 256
    out = rope(q, offset=5000)  # beyond the cache: it grows to the next power of two
    (cos, _), = rope._cache.values()
    assert cos.shape[0] == 8192
    np.testing.assert_allclose(out, _oracle_bhsd(q.astype(np.float64), np.arange(5000, 5004), rope.freqs.inv_freq, "half"), atol=3e-6)


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
        np.testing.assert_allclose(out, _oracle_bhsd(q.astype(np.float64), np.arange(100 * i, 100 * i + 3), rope.freqs.inv_freq, "half"), atol=3e-6)


def test_jax_jit_with_traced_offset():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k = _qk(s=1)
    rope = ar.RotaryEmbedding(16)
    step = jax.jit(lambda a, b, off: rope(a, b, offset=off))
    off = jnp.asarray([3, 40], dtype=jnp.int32)
    qr, kr = step(jnp.asarray(q, dtype=jnp.float32), jnp.asarray(k, dtype=jnp.float32), off)
    np.testing.assert_allclose(np.asarray(qr), _oracle_bhsd(q, np.array([[3], [40]]), rope.freqs.inv_freq, "half"), atol=3e-6)
    # an int offset inside jit uses the cache without storing traced values in it
    qr = jax.jit(lambda a: rope(a, offset=7))(jnp.asarray(q, dtype=jnp.float32))
    np.testing.assert_allclose(np.asarray(qr), _oracle_bhsd(q, np.array([7]), rope.freqs.inv_freq, "half"), atol=3e-6)
    assert all(not type(v[0]).__name__.endswith("Tracer") for v in rope._cache.values())


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
    with pytest.raises(ValueError, match="q.shape\\[-1\\] must be head_dim=16"):
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
