"""RoPE-Mixed tables and initialisation (``encodings/mixed.py``) against the angle sum written out
in float64, the initialisation's published directions and magnitudes, and torch's gradcheck."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function

import arrayrope
from arrayrope import mixed_rope_tables
from arrayrope.testing import assert_close, to_numpy
from helpers import float_dtypes, tol, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(mixed_rope_tables)


def test_mixed_tables_match_formula(xp, backend):
    heads, dim, grid = 3, 16, (3, 4)
    f64 = arrayrope.mixed_rope_frequencies(dim, heads, seed=1)
    n = grid[0] * grid[1]
    rows, cols = np.divmod(np.arange(n), grid[1])
    for dtype in float_dtypes(backend):
        f = backend.asarray(f64, dtype=dtype)
        cos, sin = mixed_rope_tables(f, grid, num_prefix_tokens=1)
        fd = to_numpy(f).astype(np.float64)
        angles = rows[None, :, None] * fd[0][:, None, :] + cols[None, :, None] * fd[1][:, None, :]
        angles = np.concatenate([np.zeros((heads, 1, dim // 2)), angles], axis=1)
        xp_assert_close(cos, np.cos(angles), backend, dtype, **tol(dtype))
        xp_assert_close(sin, np.sin(angles), backend, dtype, **tol(dtype))
        # the same tokens given as coordinates
        coords = backend.asarray(np.stack([rows, cols], axis=-1), dtype=dtype)
        cos, sin = mixed_rope_tables(f, coords, num_prefix_tokens=1)
        xp_assert_close(cos, np.cos(angles), backend, dtype, **tol(dtype))
        xp_assert_close(sin, np.sin(angles), backend, dtype, **tol(dtype))


def test_mixed_initialisation_directions():
    f = arrayrope.mixed_rope_frequencies(16, 5, seed=3)
    mag = 10.0 ** (-np.arange(0, 16, 4) / 16)
    np.testing.assert_allclose(np.hypot(f[0], f[1]), np.tile(np.concatenate([mag, mag]), (5, 1)))
    # the two halves of each head are orthogonal directions
    np.testing.assert_allclose(f[0, :, :4] * f[0, :, 4:] + f[1, :, :4] * f[1, :, 4:], 0, atol=1e-15)


def test_mixed_tables_train_with_torch_autograd():
    torch = pytest.importorskip("torch")
    f = torch.tensor(arrayrope.mixed_rope_frequencies(8, 2, seed=0), dtype=torch.float64, requires_grad=True)
    coords = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.5, -1.0]], dtype=torch.float64)
    torch.autograd.gradcheck(lambda w: arrayrope.mixed_rope_tables(w, coords), (f,))
    cos, sin = arrayrope.mixed_rope_tables(f, coords)
    (cos.sum() + sin.sum()).backward()
    assert f.grad is not None and float(f.grad.abs().sum()) > 0


# -- bad input --------------------------------------------------------------------------------


def test_mixed_bad_input():
    f = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=r"trailing size.*n_axes = freqs.shape\[0\] = 2"):
        arrayrope.mixed_rope_tables(f, np.zeros((5, 3)))
    with pytest.raises(ValueError, match="freqs must have shape"):
        arrayrope.mixed_rope_tables(np.zeros((3, 4)), (2, 2))
    with pytest.raises(ValueError, match="head_dim must be a multiple of 4"):
        arrayrope.mixed_rope_frequencies(6, 2)


def test_mixed_tables_go_to_the_device_asked_for(xp, backend):
    freqs = backend.asarray(arrayrope.mixed_rope_frequencies(8, 2, seed=1), dtype="float32")
    cos, sin = mixed_rope_tables(freqs, (2, 3), device=backend.device)
    here, there = mixed_rope_tables(freqs, (2, 3))
    assert_close(cos, here)
    assert_close(sin, there)
    with pytest.raises(ValueError, match=r"device=.* is not a device of"):
        mixed_rope_tables(freqs, (2, 3), device=object())
