"""Multimodal RoPE tables (``encodings/mrope.py``) against Qwen2-VL's, Qwen3-VL's and ERNIE 4.5 VL's frequency
selection, written out from their definitions with ``rotate_half`` (ERNIE's pairs ``(2i, 2i + 1)``), in float64."""

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


def ernie_vl_reference(q, positions, inv_freq, mrope_section):
    """ERNIE 4.5 VL (transformers' ``Ernie4_5_VLMoeTextRotaryEmbedding``), step by step: the leading h + w
    frequencies pre-rotated (even ones, then odd ones), the angles of every axis split by ``mrope_section``
    ``[h, w, t]``, chunk i taken from axis (i + 1) % 3, h and w stacked column by column, t after them, each
    column repeated for the two features of its pair, rotated by ERNIE's ``rotate_half_text``."""
    hw, t = mrope_section[0] + mrope_section[1], mrope_section[2]
    inv3 = np.empty_like(inv_freq)
    inv3[:hw] = np.concatenate([inv_freq[:-t][0::2], inv_freq[:-t][1::2]])
    inv3[-t:] = inv_freq[-t:]
    freqs = positions[..., None].astype(np.float64) * inv3  # (3, B, S, pairs)

    def recompose(table):
        bounds = np.cumsum(mrope_section)[:-1]
        h, w, tt = (m[(i + 1) % 3] for i, m in enumerate(np.split(table, bounds, axis=-1)))
        hw_cols = np.stack([h, w], axis=-1).reshape(*h.shape[:-1], -1)
        return np.repeat(np.concatenate([hw_cols, tt], axis=-1), 2, axis=-1)

    cos, sin = recompose(np.cos(freqs))[:, None], recompose(np.sin(freqs))[:, None]
    rotated = np.stack([-q[..., 1::2], q[..., 0::2]], axis=-1).reshape(q.shape)
    return q * cos + rotated * sin


@pytest.mark.parametrize("mrope_section", [(4, 4, 3), (3, 3, 5), (1, 1, 1)])
def test_mrope_spatial_matches_ernie_vl(mrope_section):
    """``interleaved="spatial"`` with ERNIE's ``[h, w, t]`` read as sections ``(t, h, w)``, applied in the
    interleaved layout, is ERNIE 4.5 VL's rotation."""
    from arrayrope.encodings.mrope import stated_sections

    dim = 2 * sum(mrope_section)
    rng = np.random.default_rng(7)
    b, s = 2, 9
    positions = rng.integers(0, 4000, (3, b, s))
    positions[:, 0, :3] = np.arange(3)  # text tokens: one position on all axes
    sections = stated_sections(mrope_section, "spatial")
    assert sections == (mrope_section[2], *mrope_section[:2])
    freqs = arrayrope.rope_frequencies(dim, base=5e5)
    q = rng.standard_normal((b, 2, s, dim))
    cos, sin = mrope_tables(freqs, positions, sections=sections, interleaved="spatial", dtype="float64")
    out = arrayrope.apply_rotary(q, cos[:, None, ...], sin[:, None, ...], layout="interleaved")
    ref = ernie_vl_reference(q, positions, inv_freq_formula(dim, 5e5), mrope_section)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-9)


def test_mrope_spatial_assignment_rule():
    """Pair k takes h when k is even and k < 2 * s_h, w when odd and k < 2 * s_h, t otherwise (ERNIE's 22, 22, 20)."""
    freqs = arrayrope.rope_frequencies(128)
    positions = np.array([1, 2, 3]).reshape(3, 1)  # t=1, h=2, w=3: angle / inv_freq names the axis
    cos, sin = arrayrope.mrope_tables(freqs, positions, sections=(20, 22, 22), interleaved="spatial", dtype="float64")
    angle = np.arctan2(sin[0], cos[0]) / freqs.inv_freq
    k = np.arange(64)
    np.testing.assert_allclose(angle, np.where(k < 44, 2 + k % 2, 1), rtol=1e-9)
    rope = arrayrope.RotaryEmbedding(128, mrope_sections=(20, 22, 22), mrope_interleaved="spatial")
    assert rope.mrope_interleaved == "spatial" and "mrope_interleaved='spatial'" in repr(rope)


def test_mrope_sections_of_ernie_vl_are_stated_h_w_t():
    """ERNIE 4.5 VL's mrope_section [h, w, t] (its default [22, 22, 20]) are the sections (t, h, w) of its spatial
    M-RoPE; h and w must be equal (its rotary module takes their pairs in turns)."""
    from arrayrope.config import settings

    text = {"hidden_size": 2560, "num_attention_heads": 20}
    assert settings({"model_type": "ernie4_5_vl_moe", "text_config": text}).mrope == ((20, 22, 22), "spatial")
    stated = {**text, "rope_parameters": {"rope_theta": 5e5, "mrope_section": [21, 21, 22]}}
    assert settings({"model_type": "ernie4_5_vl_moe_text", **stated}).mrope == ((22, 21, 21), "spatial")
    uneven = {**text, "rope_parameters": {"rope_theta": 5e5, "mrope_section": [22, 21, 21]}}
    with pytest.raises(ValueError, match=r"mrope_section=\[22, 21, 21\] states \[h, w, t\].*h and w must be equal"):
        settings({"model_type": "ernie4_5_vl_moe_text", **uneven})


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
    with pytest.raises(ValueError, match=r"sections=\[4, 6, 5\]: spatial sections .* equal sections"):
        arrayrope.mrope_tables(f, pos, sections=(4, 6, 5), interleaved="spatial")
    with pytest.raises(ValueError, match=r"sections=\[4, 5, 5\]: spatial sections .* 16"):
        arrayrope.mrope_tables(f, pos, sections=(4, 5, 5), interleaved="spatial")
    with pytest.raises(TypeError, match=r"interleaved must be True .* 'spatial' .* or 'full_width' .*got 'ernie'"):
        arrayrope.mrope_tables(f, pos, sections=(4, 6, 6), interleaved="ernie")
    # HunYuan-VL's full-width sections: no table of pairs holds them (RotaryEmbedding applies them)
    with pytest.raises(ValueError, match=r"sections=\[4, 4, 4, 3\]: full-width sections .* 16 pairs; these sum to 15"):
        arrayrope.mrope_tables(f, np.zeros((4, 1, 2), int), sections=(4, 4, 4, 3), interleaved="full_width")
    with pytest.raises(ValueError, match=r"different axes: no table of pairs .* mrope_interleaved='full_width'"):
        arrayrope.mrope_tables(f, np.zeros((4, 1, 2), int), sections=(4, 4, 4, 4), interleaved="full_width")
