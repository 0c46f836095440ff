"""``rerotate`` (``encodings/rerotate.py``): keys rotated with one frequency set equal keys rotated with
another (explicit matrices)."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import given
from hypothesis import strategies as st

import arrayrope
from arrayrope import rerotate
from arrayrope.testing import to_numpy
from helpers import check_like, rope_by_matrix

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(rerotate)


def oracle(k: np.ndarray, positions: np.ndarray, freqs, layout: str) -> np.ndarray:
    """Rotation by explicit matrices, then the attention factor on the rotary features (float64)."""
    out = rope_by_matrix(k, positions, freqs.inv_freq, layout)
    out[..., : freqs.rotary_dim] *= freqs.attention_factor
    return out


def freq_pair(kind: str, head_dim: int, rotary_dim: int):
    r = rotary_dim
    if kind == "dynamic":  # a dynamic-NTK growth from 4096 to 12000 tokens
        sc = {"rope_type": "dynamic", "factor": 4.0}
        f1 = arrayrope.rope_frequencies(head_dim, rotary_dim=r, scaling=sc, max_position_embeddings=4096)
        f2 = arrayrope.rope_frequencies(head_dim, rotary_dim=r, scaling=sc, max_position_embeddings=4096, seq_len=12000)
    elif kind == "longrope":  # the short -> long switch, attention factor 1.19 on both sides
        sc = {
            "rope_type": "longrope",
            "short_factor": list(np.linspace(1, 1.5, r // 2)),
            "long_factor": list(np.linspace(1, 30, r // 2)),
            "original_max_position_embeddings": 4096,
        }
        f1 = arrayrope.rope_frequencies(head_dim, rotary_dim=r, scaling=sc, max_position_embeddings=131072)
        f2 = arrayrope.rope_frequencies(
            head_dim, rotary_dim=r, scaling=sc, max_position_embeddings=131072, seq_len=5000
        )
    else:  # default -> yarn: different frequencies and attention factors
        f1 = arrayrope.rope_frequencies(head_dim, rotary_dim=r)
        f2 = arrayrope.rope_frequencies(
            head_dim,
            rotary_dim=r,
            scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096},
        )
    return f1, f2


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("kind", ["dynamic", "longrope", "yarn"])
def test_rerotate_every_backend(xp, backend, layout, kind):
    f1, f2 = freq_pair(kind, 64, 48)
    rng = np.random.default_rng(1)
    k = rng.standard_normal((2, 3, 5, 64))
    pos = np.array([0, 1, 4095, 4096, 70000])
    for dtype in [d for d in ("float32", "float64") if d in backend.dtypes]:
        kb = backend.asarray(k, dtype=dtype)
        k1 = backend.asarray(oracle(to_numpy(kb).astype(np.float64), pos, f1, layout), dtype=dtype)
        out = rerotate(k1, positions=backend.asarray(pos), from_freqs=f1, to_freqs=f2, layout=layout)
        check_like(out, backend, dtype, k.shape)
        tol = 2.5e-11 if dtype == "float64" else 2e-6  # float64: angles near 2e5 rad carry ~1e-11
        want = oracle(to_numpy(kb).astype(np.float64), pos, f2, layout)
        np.testing.assert_allclose(to_numpy(out).astype(np.float64), want, rtol=tol, atol=tol * 4)


@given(
    st.sampled_from(["dynamic", "longrope", "yarn"]),
    st.sampled_from([(64, 64), (80, 32), (128, 128), (128, 64)]),
    st.sampled_from(["half", "interleaved"]),
    st.lists(st.integers(0, 200_000), min_size=1, max_size=6),
    st.sampled_from(["float32", "float64"]),
)
def test_rerotate_property(kind, dims, layout, positions, dtype):
    head_dim, rotary_dim = dims
    f1, f2 = freq_pair(kind, head_dim, rotary_dim)
    pos = np.array(positions)
    k = np.random.default_rng(len(positions)).standard_normal((2, len(positions), head_dim)).astype(dtype)
    k1 = arrayrope.apply_rotary(k, *arrayrope.rope_tables(f1, pos, dtype=dtype), layout=layout)
    out = arrayrope.rerotate(k1, positions=pos, from_freqs=f1, to_freqs=f2, layout=layout)
    direct = arrayrope.apply_rotary(k, *arrayrope.rope_tables(f2, pos, dtype=dtype), layout=layout)
    tol = 2.5e-11 if dtype == "float64" else 2e-6  # float64: angles near 2e5 rad carry ~1e-11
    np.testing.assert_allclose(out, oracle(k.astype(np.float64), pos, f2, layout), rtol=tol, atol=4 * tol)
    np.testing.assert_allclose(out, direct, rtol=tol, atol=4 * tol)


def test_attention_factor_left_out():
    f1, f2 = freq_pair("yarn", 64, 64)
    k = np.random.default_rng(2).standard_normal((4, 64))
    pos = np.arange(4)
    k1 = arrayrope.apply_rotary(k, *arrayrope.rope_tables(f1, pos, dtype="float64", apply_attention_factor=False))
    out = arrayrope.rerotate(k1, positions=pos, from_freqs=f1, to_freqs=f2, apply_attention_factor=False)
    np.testing.assert_allclose(out, rope_by_matrix(k, pos, f2.inv_freq, "half"), rtol=1e-12, atol=1e-12)


def test_input_not_modified_and_bad_input():
    f1, f2 = freq_pair("dynamic", 64, 64)
    k = np.ones((3, 64))
    arrayrope.rerotate(k, positions=np.arange(3), from_freqs=f1, to_freqs=f2)
    assert np.all(k == 1)
    with pytest.raises(ValueError, match="share head_dim and rotary_dim"):
        arrayrope.rerotate(k, positions=np.arange(3), from_freqs=f1, to_freqs=arrayrope.rope_frequencies(32))
    with pytest.raises(TypeError, match="to_freqs must be a RopeFrequencies"):
        arrayrope.rerotate(k, positions=np.arange(3), from_freqs=f1, to_freqs=f2.inv_freq)
    with pytest.raises(ValueError, match="head_dim=64"):
        arrayrope.rerotate(np.ones((3, 32)), positions=np.arange(3), from_freqs=f1, to_freqs=f2)
    with pytest.raises(ValueError, match="layout"):
        arrayrope.rerotate(k, positions=np.arange(3), from_freqs=f1, to_freqs=f2, layout="gptj")
