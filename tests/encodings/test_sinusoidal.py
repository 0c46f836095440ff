"""Sinusoidal embeddings (``encodings/sinusoidal.py``) against the Transformer paper's formula, written
element by element, and its shift property written as explicit block rotations."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function

import arrayrope as ar
from arrayrope import sinusoidal_embedding
from arrayrope.testing import to_numpy
from helpers import check_like, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(sinusoidal_embedding)


def _paper_pe(n, dim, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^(2i/dim)), PE(pos, 2i+1) = cos(...), float64."""
    pe = np.zeros((n, dim))
    for pos in range(n):
        for i in range(dim // 2):
            pe[pos, 2 * i] = np.sin(pos / base ** (2 * i / dim))
            pe[pos, 2 * i + 1] = np.cos(pos / base ** (2 * i / dim))
    return pe


def test_sinusoidal_matches_the_paper(xp, backend):
    pe = sinusoidal_embedding(16, 50, xp=backend.xp, device=backend.device)
    check_like(pe, backend, "float32", (50, 16))
    np.testing.assert_allclose(to_numpy(pe), _paper_pe(50, 16), atol=1e-7)
    concat = to_numpy(sinusoidal_embedding(16, backend.asarray(np.arange(50)), layout="concat"))
    ref = _paper_pe(50, 16)
    np.testing.assert_allclose(concat, np.concatenate([ref[:, 0::2], ref[:, 1::2]], axis=1), atol=1e-7)


def test_sinusoidal_shift_is_a_block_rotation():
    """p(i + k) = T(k) p(i), T(k) block-diagonal with 2x2 rotations, independent of i."""
    dim, k = 12, 17
    pe = ar.sinusoidal_embedding(dim, np.arange(200), dtype="float64")
    w = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    T = np.zeros((dim, dim))
    for j, wj in enumerate(w):
        c, s = np.cos(k * wj), np.sin(k * wj)
        T[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[c, s], [-s, c]]  # (sin, cos) -> (sin', cos')
    np.testing.assert_allclose(pe[k:], pe[:-k] @ T.T, atol=1e-12)


def test_sinusoidal_bad_input():
    with pytest.raises(ValueError, match="dim must be even"):
        ar.sinusoidal_embedding(7, 4)
    with pytest.raises(ValueError, match="layout must be one of"):
        ar.sinusoidal_embedding(8, 4, layout="half")


def test_sinusoidal_tensor2tensor_timing_signal(backend):
    """tensor2tensor's get_timing_signal_1d: log-spaced timescales 1..base (exponent i / (d/2 - 1)), sines first."""
    dim, base, n = 10, 1e4, 7
    pos = np.arange(n, dtype=np.float64)
    inv = np.exp(-np.arange(dim // 2) * np.log(base) / (dim // 2 - 1))
    want = np.concatenate([np.sin(pos[:, None] * inv), np.cos(pos[:, None] * inv)], axis=1)
    out = ar.sinusoidal_embedding(
        dim,
        n,
        base=base,
        layout="concat",
        frequencies="tensor2tensor",
        xp=backend.xp,
        device=backend.device,
        dtype="float32",
    )
    xp_assert_close(out, want, backend, "float32", rtol=0, atol=4e-7)
    with pytest.raises(ValueError, match="frequencies must be one of"):
        ar.sinusoidal_embedding(8, 4, frequencies="t2t")
