import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import to_numpy
from helpers import check_like, rope_by_matrix, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision


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


def _paper_pe(n, dim, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^(2i/dim)), PE(pos, 2i+1) = cos(...), float64."""
    pe = np.zeros((n, dim))
    for pos in range(n):
        for i in range(dim // 2):
            pe[pos, 2 * i] = np.sin(pos / base ** (2 * i / dim))
            pe[pos, 2 * i + 1] = np.cos(pos / base ** (2 * i / dim))
    return pe


def test_sinusoidal_matches_the_paper(backend):
    pe = ar.sinusoidal_embedding(50, 16, xp=backend.xp, device=backend.device)
    check_like(pe, backend, "float32", (50, 16))
    np.testing.assert_allclose(to_numpy(pe), _paper_pe(50, 16), atol=1e-7)
    concat = to_numpy(ar.sinusoidal_embedding(backend.asarray(np.arange(50)), 16, layout="concat"))
    ref = _paper_pe(50, 16)
    np.testing.assert_allclose(concat, np.concatenate([ref[:, 0::2], ref[:, 1::2]], axis=1), atol=1e-7)


def test_sinusoidal_shift_is_a_block_rotation():
    """p(i + k) = T(k) p(i), T(k) block-diagonal with 2x2 rotations, independent of i."""
    dim, k = 12, 17
    pe = ar.sinusoidal_embedding(np.arange(200), dim, dtype="float64")
    w = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    T = np.zeros((dim, dim))
    for j, wj in enumerate(w):
        c, s = np.cos(k * wj), np.sin(k * wj)
        T[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[c, s], [-s, c]]  # (sin, cos) -> (sin', cos')
    np.testing.assert_allclose(pe[k:] , pe[:-k] @ T.T, atol=1e-12)


def test_sinusoidal_bad_input():
    with pytest.raises(ValueError, match="dim must be even"):
        ar.sinusoidal_embedding(4, 7)
    with pytest.raises(ValueError, match="layout must be one of"):
        ar.sinusoidal_embedding(4, 8, layout="half")


def test_sinusoidal_tensor2tensor_timing_signal(backend):
    """tensor2tensor's get_timing_signal_1d: log-spaced timescales 1..base (exponent i / (d/2 - 1)), sines first."""
    dim, base, n = 10, 1e4, 7
    pos = np.arange(n, dtype=np.float64)
    inv = np.exp(-np.arange(dim // 2) * np.log(base) / (dim // 2 - 1))
    want = np.concatenate([np.sin(pos[:, None] * inv), np.cos(pos[:, None] * inv)], axis=1)
    out = ar.sinusoidal_embedding(n, dim, base=base, layout="concat", frequencies="tensor2tensor",
                                  xp=backend.xp, device=backend.device, dtype="float32")
    xp_assert_close(out, want, backend, "float32", rtol=0, atol=4e-7)
    with pytest.raises(ValueError, match="frequencies must be one of"):
        ar.sinusoidal_embedding(4, 8, frequencies="t2t")
