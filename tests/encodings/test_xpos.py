"""xPos (``encodings/xpos.py``) against the paper's definition written with explicit rotation and scaling
matrices."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import given
from hypothesis import strategies as st

import arrayrope
from arrayrope import xpos_tables
from arrayrope.testing import to_numpy
from helpers import check_like, rotation_matrix

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(xpos_tables)


def xpos_matrix(
    n: float, inv_freq: np.ndarray, head_dim: int, layout: str, sign: int, scale_base=512.0, gamma=0.4, center=0.0
) -> np.ndarray:
    """diag(zeta_i ** (sign * (n - c) / scale_base) on both features of pair i) @ R(n theta)."""
    r = 2 * len(inv_freq)
    zeta = [(2 * i / r + gamma) / (1 + gamma) for i in range(r // 2)]
    scale = np.ones(head_dim)
    for i, z in enumerate(zeta):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        scale[a] = scale[b] = z ** (sign * (n - center) / scale_base)
    return np.diag(scale) @ rotation_matrix(n * inv_freq, layout, head_dim)


def test_published_scales_by_hand():
    f = arrayrope.rope_frequencies(8)
    qs, ks = arrayrope.xpos_scales(f, np.array([0, 512, 1024]), dtype="float64")
    zeta = np.array([0.4, 0.65, 0.9, 1.15]) / 1.4  # (2i/8 + 0.4) / 1.4
    np.testing.assert_allclose(qs, [np.ones(4), zeta, zeta**2], rtol=1e-14)
    np.testing.assert_allclose(ks, 1 / qs, rtol=1e-14)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_xpos_every_backend(xp, backend, layout):
    f = arrayrope.rope_frequencies(32, rotary_dim=24)
    rng = np.random.default_rng(0)
    pos = np.array([0, 3, 700, 2000])
    q, k = rng.standard_normal((2, 4, 32))
    dtype = "float32"
    tabs = xpos_tables(f, backend.asarray(pos), center=1000.0)
    for t in tabs:
        check_like(t, backend, dtype, (4, 12))
    qr = arrayrope.apply_rotary(backend.asarray(q, dtype=dtype), tabs[0], tabs[1], layout=layout)
    kr = arrayrope.apply_rotary(backend.asarray(k, dtype=dtype), tabs[2], tabs[3], layout=layout)
    for out, x, sign in ((qr, q, 1), (kr, k, -1)):
        want = np.stack([xpos_matrix(p, f.inv_freq, 32, layout, sign, center=1000.0) @ x[j] for j, p in enumerate(pos)])
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=2e-6, atol=2e-6)


@given(
    st.integers(0, 5000), st.integers(0, 5000), st.sampled_from(["half", "interleaved"]), st.sampled_from([64.0, 512.0])
)
def test_scores_depend_on_distance_only(m, n, layout, scale_base):
    f = arrayrope.rope_frequencies(16)
    rng = np.random.default_rng(m + n)
    q, k = rng.standard_normal((2, 16))
    pos = np.array([m, n])
    qc, qs, kc, ks = arrayrope.xpos_tables(f, pos, scale_base=scale_base, center=float(m), dtype="float64")
    q_m = arrayrope.apply_rotary(q[None], qc[:1], qs[:1], layout=layout)[0]
    k_n = arrayrope.apply_rotary(k[None], kc[1:], ks[1:], layout=layout)[0]
    # the same pair shifted to positions (m - n, 0): relative positions only
    want = (xpos_matrix(m - n, f.inv_freq, 16, layout, 1, scale_base) @ q) @ (
        rotation_matrix(0 * f.inv_freq, layout, 16) @ k
    )
    assert float(q_m @ k_n) == pytest.approx(float(want), rel=1e-9, abs=1e-9)


def test_bad_arguments():
    f = arrayrope.rope_frequencies(8)
    with pytest.raises(ValueError, match="scale_base must be a finite number > 0"):
        arrayrope.xpos_scales(f, 4, scale_base=0)
    with pytest.raises(TypeError, match="freqs must be a RopeFrequencies"):
        arrayrope.xpos_tables(8, 4)
    with pytest.raises(TypeError, match="center"):
        arrayrope.xpos_scales(f, 4, center="middle")


def test_causal_factors_decay_with_distance():
    f = arrayrope.rope_frequencies(16)
    qs, ks = arrayrope.xpos_scales(f, np.arange(0, 4096, 64), center=2048.0, dtype="float64")
    m, n = np.triu_indices(qs.shape[0])  # pairs m <= n
    factor = qs[n] * ks[m]  # query at the later position n, key at m <= n
    assert np.all(factor <= 1 + 1e-12)
    d = (n - m) * 64.0
    zeta0 = 0.4 / 1.4
    np.testing.assert_allclose(factor[:, 0], zeta0 ** (d / 512.0), rtol=1e-12)
