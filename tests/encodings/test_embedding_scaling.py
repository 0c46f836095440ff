"""``RotaryEmbedding`` with dynamic NTK and LongRoPE: frequencies follow the sequence length."""

from __future__ import annotations

import numpy as np
import pytest

import arrayrope
from arrayrope.testing import to_numpy

from helpers import POW_ULPS, rope_by_matrix

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

LMAX = 64  # a tiny context so the switches happen at small positions


def ntk(d: int, base: float, s: float, length: int) -> np.ndarray:
    """Dynamic NTK frequencies from the published formula (unchanged up to LMAX)."""
    if length > LMAX:
        base = base * (s * length / LMAX - (s - 1)) ** (d / (d - 2))
    return np.array([base ** (-2.0 * i / d) for i in range(d // 2)])


def qk(backend, seq, dtype="float32"):
    rng = np.random.default_rng(seq)
    q = backend.asarray(rng.standard_normal((1, 2, seq, 32)), dtype=dtype)
    return q, to_numpy(q).astype(np.float64)


def test_dynamic_follows_transformers_rule(backend):
    rope = arrayrope.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=LMAX)
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    tol = 1e-12 if dtype == "float64" else 3e-6

    def run(seq, offset, expect_len):
        q, q64 = qk(backend, seq, dtype)
        out = rope(q, offset=offset)
        want = rope_by_matrix(q64, np.arange(offset, offset + seq), ntk(32, 1e4, 2.0, expect_len), "half")
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=tol, atol=tol)

    run(8, 0, 8)  # within the context: the original frequencies
    run(8, 92, 100)  # grows to 100
    run(4, 80, 100)  # 84 < 100: the frequencies of the longest length stay
    run(1, 100, 101)  # decoding one step further: recomputed for 101
    run(4, 10, 14)  # back below max_position_embeddings: the original frequencies again
    # the original frequencies come back unchanged (a property of the code) ...
    np.testing.assert_array_equal(rope.freqs.inv_freq, arrayrope.rope_frequencies(32).inv_freq)
    # ... and they are the formula's, up to the rounding of pow (NumPy's vectorised pow may differ by an ulp)
    np.testing.assert_array_max_ulp(rope.freqs.inv_freq, ntk(32, 1e4, 2.0, 1), maxulp=POW_ULPS)


def test_longrope_switch(backend):
    short = list(np.linspace(1.0, 1.3, 16))
    long = list(np.linspace(1.0, 20.0, 16))
    rope = arrayrope.RotaryEmbedding(32, scaling={
        "rope_type": "longrope", "short_factor": short, "long_factor": long, "original_max_position_embeddings": LMAX,
    }, max_position_embeddings=4 * LMAX)
    theta = np.array([1e4 ** (-2.0 * i / 32) for i in range(16)])
    att = np.sqrt(1 + np.log(4) / np.log(LMAX))
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    tol = 1e-12 if dtype == "float64" else 3e-6
    for last, factors in ((LMAX - 1, short), (LMAX, long), (LMAX - 1, short)):  # max position + 1 vs L0
        q, q64 = qk(backend, 4, dtype)
        pos = np.arange(last - 3, last + 1)
        if backend.lazy:
            with pytest.raises(ValueError, match="seq_len="):
                rope(q, positions=backend.asarray(pos))
            out = rope(q, positions=backend.asarray(pos), seq_len=last + 1)
        else:
            out = rope(q, positions=backend.asarray(pos))
        want = rope_by_matrix(q64, pos, theta / np.array(factors), "half") * att
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=tol, atol=tol)


def test_rerotate_keeps_a_cache_valid_across_the_dynamic_switch():
    rope = arrayrope.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=LMAX)
    rng = np.random.default_rng(0)
    k = rng.standard_normal((1, 2, LMAX, 32))
    _, cache = rope(k, k, offset=0)
    before = rope.freqs
    k_new = rng.standard_normal((1, 2, 1, 32))
    _, k_new_rot = rope(k_new, k_new, offset=LMAX)  # position LMAX: the frequencies grow
    assert rope.freqs != before
    moved = arrayrope.rerotate(cache, positions=np.arange(LMAX), from_freqs=before, to_freqs=rope.freqs)
    want = rope_by_matrix(k, np.arange(LMAX), ntk(32, 1e4, 4.0, LMAX + 1), "half")
    np.testing.assert_allclose(moved, want, rtol=1e-12, atol=1e-12)


def test_from_config_and_errors():
    cfg = {"head_dim": 32, "max_position_embeddings": LMAX, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    rope = arrayrope.RotaryEmbedding.from_config(cfg)
    q = np.ones((1, 1, 2, 32))
    rope(q, offset=LMAX)
    np.testing.assert_allclose(rope.freqs.inv_freq, ntk(32, 1e4, 2.0, LMAX + 2), rtol=1e-14)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        arrayrope.RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="seq_len must be positive"):
        rope(q, positions=np.arange(2), seq_len=0)
