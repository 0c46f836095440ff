"""Multimodal RoPE tables (``encodings/mrope.py``) against Qwen2-VL's and Qwen3-VL's frequency
selection, written out from their definitions with ``rotate_half``, in float64."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function

import arrayrope
from arrayrope import mrope_tables
from arrayrope.testing import to_numpy
from helpers import check_like, float_dtypes, inv_freq_formula, rotate_half, tol, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(mrope_tables)


def qwen2_vl_reference(q, positions, inv_freq, sections):
    """Qwen2-VL: cos of (3, B, S, d), split by sections * 2, chunk i from axis i % 3."""
    freqs = positions[..., None].astype(np.float64) * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    bounds = np.cumsum(list(sections) * 2)[:-1]
    cos = np.concatenate([c[i % 3] for i, c in enumerate(np.split(np.cos(emb), bounds, axis=-1))], axis=-1)
    sin = np.concatenate([s[i % 3] for i, s in enumerate(np.split(np.sin(emb), bounds, axis=-1))], axis=-1)
    return q * cos[:, None] + rotate_half(q) * sin[:, None]


def qwen3_vl_reference(q, positions, inv_freq, sections):
    """Qwen3-VL: start from the temporal angles, overwrite h at k = 1, 4, ... and w at k = 2, 5, ..."""
    freqs = positions[..., None].astype(np.float64) * inv_freq
    mixed = freqs[0].copy()
    for axis, start in ((1, 1), (2, 2)):
        mixed[..., start : 3 * sections[axis] : 3] = freqs[axis][..., start : 3 * sections[axis] : 3]
    emb = np.concatenate([mixed, mixed], axis=-1)
    return q * np.cos(emb)[:, None] + rotate_half(q) * np.sin(emb)[:, None]


@pytest.mark.parametrize("interleaved,sections", [(False, (2, 3, 3)), (True, (3, 3, 2))])
def test_mrope_matches_qwen(xp, backend, interleaved, sections):
    dim = 2 * sum(sections)
    rng = np.random.default_rng(5)
    b, s = 2, 7
    positions = np.stack([rng.integers(0, 3, (b, s)), rng.integers(0, 20, (b, s)), rng.integers(0, 20, (b, s))])
    positions[:, 0, :3] = np.arange(3)  # text tokens: one position on all axes
    freqs = arrayrope.rope_frequencies(dim, base=1e6)
    q64 = rng.standard_normal((b, 2, s, dim))
    for dtype in float_dtypes(backend):
        cos, sin = mrope_tables(
            freqs, backend.asarray(positions), sections=sections, interleaved=interleaved, dtype=dtype
        )
        check_like(cos, backend, dtype, (b, s, dim // 2))
        q = backend.asarray(q64, dtype=dtype)
        out = arrayrope.apply_rotary(q, cos[:, None, ...], sin[:, None, ...], layout="half")
        ref = (qwen3_vl_reference if interleaved else qwen2_vl_reference)(
            to_numpy(q).astype(np.float64), positions, inv_freq_formula(dim, 1e6), sections
        )
        xp_assert_close(out, ref, backend, dtype, **tol(dtype))


def test_mrope_interleaved_assignment_rule():
    """Frequency k takes h when k%3==1 and k<3*s1, w when k%3==2 and k<3*s2, t otherwise."""
    sections = (24, 20, 20)
    freqs = arrayrope.rope_frequencies(128)
    positions = np.array([1, 2, 3]).reshape(3, 1)  # t=1, h=2, w=3: angle / inv_freq names the axis
    cos, sin = arrayrope.mrope_tables(freqs, positions, sections=sections, interleaved=True, dtype="float64")
    angle = np.arctan2(sin[0], cos[0]) / freqs.inv_freq
    k = np.arange(64)
    expected = np.where((k % 3 == 1) & (k < 60), 2, np.where((k % 3 == 2) & (k < 60), 3, 1))
    np.testing.assert_allclose(angle, expected, rtol=1e-9)


def test_mrope_text_tokens_are_1d_rope():
    freqs = arrayrope.rope_frequencies(32, base=1e4)
    pos = np.arange(9)
    for interleaved in (False, True):
        cos, _sin = arrayrope.mrope_tables(freqs, np.stack([pos] * 3), sections=(4, 6, 6), interleaved=interleaved)
        np.testing.assert_allclose(cos, np.cos(np.outer(pos, inv_freq_formula(32, 1e4))), atol=1e-7)


# -- bad input --------------------------------------------------------------------------------


def test_mrope_bad_input():
    f = arrayrope.rope_frequencies(32)
    pos = np.zeros((3, 1, 4), dtype=int)
    with pytest.raises(ValueError, match=r"sections=\[4, 4, 4\] sum to 12.*16"):
        arrayrope.mrope_tables(f, pos, sections=(4, 4, 4))
    with pytest.raises(ValueError, match=r"positions must have shape \(len\(sections\), ...\) = \(3, ...\)"):
        arrayrope.mrope_tables(f, np.zeros((2, 4), dtype=int), sections=(4, 6, 6))
    with pytest.raises(ValueError, match="sections must contain positive"):
        arrayrope.mrope_tables(f, pos, sections=(0, 8, 8))
    with pytest.raises(TypeError, match="freqs must be a RopeFrequencies"):
        arrayrope.mrope_tables(np.ones(16), pos, sections=(4, 6, 6))
