"""Frequency scaling against the published formulas, re-written here element by element."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import arrayrope
from arrayrope.scaling import ROPE_TYPES, yarn_mscale
from helpers import POW_ULPS, around, inv_freq_formula, llama3_inv_freq

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

HEAD_DIMS = (64, 80, 128, 256)


# ---- the formulas (NOTES section 2 / the YaRN, LongRoPE, Llama 3.1 and NTK write-ups), one element at a time


def linear_ref(d, base, s):
    return [t / s for t in inv_freq_formula(d, base)], 1.0


def dynamic_ref(d, base, s, lmax, seq_len):
    if seq_len is None or seq_len <= lmax:
        return inv_freq_formula(d, base), 1.0
    new_base = base * (s * seq_len / lmax - (s - 1)) ** (d / (d - 2))
    return inv_freq_formula(d, new_base), 1.0


def yarn_ref(
    d, base, s, l0, *, beta_fast=32, beta_slow=1, truncate=True, mscale=None, mscale_all_dim=None, attention_factor=None
):
    def r(beta):
        return d * math.log(l0 / (2 * math.pi * beta)) / (2 * math.log(base))

    lo, hi = r(beta_fast), r(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if hi == lo:
        hi += 0.001
    out = []
    for i, t in enumerate(inv_freq_formula(d, base)):
        g = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out.append(t * ((1 - g) + g / s))

    def m(s, mu):
        return 1.0 if s <= 1 else 0.1 * mu * math.log(s) + 1

    if attention_factor is None:
        attention_factor = m(s, mscale) / m(s, mscale_all_dim) if mscale and mscale_all_dim else m(s, 1)
    return out, attention_factor


def longrope_ref(d, base, short, long, l0, seq_len, s):
    lam = long if seq_len is not None and seq_len > l0 else short
    att = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(l0))
    return [t / lam[i] for i, t in enumerate(inv_freq_formula(d, base))], att


def llama3_ref(d, base, s, low, high, l0):
    return llama3_inv_freq(d, base, s, low, high, l0), 1.0


def check(freqs, expected, attention):
    np.testing.assert_allclose(freqs.inv_freq, np.array(expected), rtol=1e-12, atol=0)
    assert freqs.attention_factor == pytest.approx(attention, rel=1e-12)


# ---- hand-computed and published values


def test_yarn_correction_range_by_hand():
    # d=128, base 1e4, L0=4096: r(32) = 128 ln(4096/(64 pi)) / (2 ln 1e4) = 20.9 -> 20; r(1) = 45.0 -> 46
    f = arrayrope.rope_frequencies(
        128, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    )
    th = inv_freq_formula(128, 1e4)
    ratio = f.inv_freq / th
    np.testing.assert_allclose(ratio[:21], 1.0, rtol=1e-13)  # pairs 0..20 keep theta
    np.testing.assert_allclose(ratio[46:], 0.25, rtol=1e-13)  # pairs 46.. are theta / 4
    assert np.all(np.diff(ratio[20:47]) < 0)
    assert f.attention_factor == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)


def test_longrope_phi3_attention_factor():
    # Phi-3-mini-128k: L0 = 4096, Lmax = 131072, no factor: s = 32, sqrt(1 + ln 32 / ln 4096) = sqrt(17/12)
    cfg = {
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [4.0] * 48},
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    assert f.attention_factor == pytest.approx(math.sqrt(17 / 12), rel=1e-14)
    np.testing.assert_allclose(f.inv_freq, inv_freq_formula(96, 1e4), rtol=1e-13)  # short factors at start
    g = arrayrope.rope_frequencies_from_config(cfg, seq_len=4097)
    np.testing.assert_allclose(g.inv_freq, inv_freq_formula(96, 1e4) / 4, rtol=1e-13)


def test_deepseek_yarn_mscale_equal_gives_factor_one():
    scaling = {
        "type": "yarn",
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "beta_fast": 32,
        "beta_slow": 1,
        "original_max_position_embeddings": 4096,
    }
    f = arrayrope.rope_frequencies(64, scaling=scaling, max_position_embeddings=163840)
    assert f.attention_factor == 1.0
    # the softmax correction DeepSeek applies instead: m(40, 1)^2 = (0.1 ln 40 + 1)^2
    assert yarn_mscale(40, 1.0) ** 2 == pytest.approx((0.1 * math.log(40) + 1) ** 2, rel=1e-15)


def test_yarn_mscale_ratio_and_explicit_attention_factor():
    base = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}
    f = arrayrope.rope_frequencies(128, scaling={**base, "mscale": 0.707, "mscale_all_dim": 1.0})
    assert f.attention_factor == pytest.approx((0.0707 * math.log(16) + 1) / (0.1 * math.log(16) + 1), rel=1e-14)
    g = arrayrope.rope_frequencies(128, scaling={**base, "mscale": 0.707, "attention_factor": 0.5})
    assert g.attention_factor == 0.5
    np.testing.assert_array_equal(f.inv_freq, g.inv_freq)  # the factor never touches the frequencies


def test_longrope_explicit_attention_factor_wins():
    sc = {
        "rope_type": "longrope",
        "short_factor": [1.0] * 32,
        "long_factor": [2.0] * 32,
        "original_max_position_embeddings": 4096,
        "factor": 32.0,
        "attention_factor": 1.5,
    }
    f = arrayrope.rope_frequencies(64, scaling=sc, max_position_embeddings=131072, seq_len=5000)
    assert f.attention_factor == 1.5
    np.testing.assert_allclose(f.inv_freq, inv_freq_formula(64, 1e4) / 2, rtol=1e-14)


def test_yarn_missing_factor_is_length_ratio():
    f = arrayrope.rope_frequencies(
        64, scaling={"rope_type": "yarn", "original_max_position_embeddings": 2048}, max_position_embeddings=8192
    )
    check(f, *yarn_ref(64, 1e4, 4.0, 2048))


def test_yarn_factor_disagreeing_with_lengths_warns_and_uses_factor():
    with pytest.warns(UserWarning, match="explicit factor is used"):
        f = arrayrope.rope_frequencies(
            64,
            scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048},
            max_position_embeddings=8192,
        )
    check(f, *yarn_ref(64, 1e4, 2.0, 2048))


def test_dynamic_below_and_at_max_is_unchanged():
    for seq_len in (None, 1, 2047, 2048):
        f = arrayrope.rope_frequencies(
            128, scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=2048, seq_len=seq_len
        )
        np.testing.assert_array_equal(f.inv_freq, arrayrope.rope_frequencies(128).inv_freq)
    f = arrayrope.rope_frequencies(
        128, scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=2048, seq_len=2049
    )
    assert np.all(f.inv_freq[1:] < arrayrope.rope_frequencies(128).inv_freq[1:])


def test_longrope_exactly_at_switch_uses_short_factor():
    short, long = [1.0] * 32, [8.0] * 32
    sc = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": 4096,
        "factor": 32.0,
    }
    at = arrayrope.rope_frequencies(64, scaling=sc, seq_len=4096)
    past = arrayrope.rope_frequencies(64, scaling=sc, seq_len=4097)
    check(at, *longrope_ref(64, 1e4, short, long, 4096, 4096, 32.0))
    check(past, *longrope_ref(64, 1e4, short, long, 4096, 4097, 32.0))
    assert not np.array_equal(at.inv_freq, past.inv_freq)


def test_llama31_band_counts():
    # Llama 3.1: base 5e5, d = 128, L0 = 8192, factor 8, low 1, high 4
    sc = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    f = arrayrope.rope_frequencies(128, base=500000.0, scaling=sc)
    th = inv_freq_formula(128, 5e5)
    w = 2 * np.pi / th
    kept, scaled = w < 2048, w > 8192
    plain = arrayrope.rope_frequencies(128, base=500000.0).inv_freq
    # the kept band passes through and the long band is divided by 8 (exact in binary): properties of the code
    np.testing.assert_array_equal(f.inv_freq[kept], plain[kept])
    np.testing.assert_array_equal(f.inv_freq[scaled], plain[scaled] / 8)
    # against the published formula, up to the math library's rounding of pow (vectorised pow may differ by an ulp)
    np.testing.assert_array_max_ulp(f.inv_freq[kept], th[kept], maxulp=POW_ULPS)
    np.testing.assert_array_max_ulp(f.inv_freq[scaled], th[scaled] / 8, maxulp=POW_ULPS)
    assert kept.sum() + scaled.sum() < 64 and kept.sum() > 0 and scaled.sum() > 0
    check(f, *llama3_ref(128, 5e5, 8.0, 1.0, 4.0, 8192))


# ---- properties over head dims, partial rotary, factors and sequence lengths

# (head_dim, partial_rotary_factor) pairs as checkpoints use them (Phi-2: 80 x 0.4, GPT-NeoX: 0.25)
dims = st.sampled_from([(h, p) for h in HEAD_DIMS for p in (1.0, 0.5, 0.25, 0.4) if int(h * p) % 2 == 0])
factors = st.floats(min_value=1.0, max_value=64.0, exclude_min=True)
bases = st.sampled_from([10000.0, 500000.0, 1e6])
# YaRN's original contexts and bases: 2 pi beta_fast (201.06 for 32, 100.5 for 16, 402.1 for 64) is where the
# fast end of its ramp crosses 0; long contexts with small bases push the slow end past rotary_dim - 1
yarn_lengths = st.sampled_from([64, 100, 101, 201, 202, 402, 403, 2048, 4096, 8192, 131072, 2**20])
yarn_bases = st.sampled_from([10.0, 16.0, 100.0, 10000.0, 500000.0, 1e6])


def _dim(head_dim, prf):
    return int(head_dim * prf)


@given(dims, bases, factors)
def test_linear_matches_formula(hd, base, s):
    head_dim, prf = hd
    f = arrayrope.rope_frequencies(
        head_dim, base=base, partial_rotary_factor=prf, scaling={"rope_type": "linear", "factor": s}
    )
    check(f, *linear_ref(_dim(head_dim, prf), base, s))


@given(dims, bases, factors, around(8192, lo=0, hi=4 * 8192))
def test_dynamic_matches_formula(hd, base, s, seq_len):
    head_dim, prf = hd
    f = arrayrope.rope_frequencies(
        head_dim,
        base=base,
        partial_rotary_factor=prf,
        max_position_embeddings=8192,
        seq_len=seq_len,
        scaling={"type": "dynamic", "factor": s},
    )
    check(f, *dynamic_ref(_dim(head_dim, prf), base, s, 8192, seq_len))


@given(dims, yarn_bases, factors, yarn_lengths, st.booleans(), st.sampled_from([(32, 1), (16, 2), (64, 0.5), (8, 8)]))
def test_yarn_matches_formula(hd, base, s, l0, truncate, betas):
    head_dim, prf = hd
    sc = {
        "rope_type": "yarn",
        "factor": s,
        "original_max_position_embeddings": l0,
        "truncate": truncate,
        "beta_fast": betas[0],
        "beta_slow": betas[1],
    }
    f = arrayrope.rope_frequencies(head_dim, base=base, partial_rotary_factor=prf, scaling=sc)
    check(f, *yarn_ref(_dim(head_dim, prf), base, s, l0, beta_fast=betas[0], beta_slow=betas[1], truncate=truncate))


@given(dims, bases, factors, around(4096, lo=0, hi=2 * 4096), st.randoms(use_true_random=False))
def test_longrope_matches_formula(hd, base, s, seq_len, rnd):
    head_dim, prf = hd
    d = _dim(head_dim, prf)
    short = [1 + rnd.random() for _ in range(d // 2)]
    long = [1 + 10 * rnd.random() for _ in range(d // 2)]
    sc = {"rope_type": "longrope", "short_factor": short, "long_factor": long, "original_max_position_embeddings": 4096}
    f = arrayrope.rope_frequencies(
        head_dim,
        base=base,
        partial_rotary_factor=prf,
        scaling=sc,
        max_position_embeddings=int(4096 * s),
        seq_len=seq_len,
    )
    check(f, *longrope_ref(d, base, short, long, 4096, seq_len, int(4096 * s) / 4096))


@given(
    dims,
    bases,
    factors,
    st.sampled_from([(1.0, 4.0), (0.5, 2.0), (2.0, 8.0), (4.0, 4.0)]),
    st.sampled_from([1, 2048, 4096, 8192, 131072]),
)
def test_llama3_matches_formula(hd, base, s, lh, l0):
    head_dim, prf = hd
    sc = {
        "rope_type": "llama3",
        "factor": s,
        "low_freq_factor": lh[0],
        "high_freq_factor": lh[1],
        "original_max_position_embeddings": l0,
    }
    f = arrayrope.rope_frequencies(head_dim, base=base, partial_rotary_factor=prf, scaling=sc)
    check(f, *llama3_ref(_dim(head_dim, prf), base, s, lh[0], lh[1], l0))


def test_registry_lists_every_type():
    assert {"default", "linear", "dynamic", "yarn", "longrope", "llama3"} <= set(ROPE_TYPES)


# ---- bad input


@pytest.mark.parametrize(
    "scaling, kwargs, exc, match",
    [
        ({"rope_type": "ntk-by-parts"}, {}, ValueError, r"unknown rope_type 'ntk-by-parts'; known: \['default'"),
        ({"rope_type": "linear"}, {}, ValueError, r"missing required key\(s\) \['factor'\]"),
        ({"rope_type": "llama3", "factor": 8.0}, {}, ValueError, "high_freq_factor', 'low_freq_factor'"),
        ({"rope_type": "linear", "factor": 0.5}, {}, ValueError, r"scaling\['factor'\].*>= 1, got 0.5"),
        ({"rope_type": "linear", "factor": "2"}, {}, TypeError, r"scaling\['factor'\].*number"),
        ({"rope_type": "dynamic", "factor": 2.0}, {}, ValueError, "max_position_embeddings"),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 2.0,
                "original_max_position_embeddings": 8192,
            },
            {},
            ValueError,
            "low_freq_factor.*high_freq_factor",
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            {},
            ValueError,
            "original_max_position_embeddings",
        ),
        ({"rope_type": "yarn", "factor": 4.0}, {}, ValueError, "original_max_position_embeddings"),
        ({"rope_type": "yarn"}, {"max_position_embeddings": 4096}, ValueError, "needs 'factor'"),
        (
            {"rope_type": "yarn", "original_max_position_embeddings": 8192},
            {"max_position_embeddings": 4096},
            ValueError,
            "< 1",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 1,
                "beta_slow": 32,
            },
            {},
            ValueError,
            "beta_fast",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 31,
                "long_factor": [1.0] * 32,
                "original_max_position_embeddings": 4096,
                "factor": 2.0,
            },
            {},
            ValueError,
            r"short_factor.*32.*got 31",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 32,
                "long_factor": [1.0] * 33,
                "original_max_position_embeddings": 4096,
                "factor": 2.0,
            },
            {},
            ValueError,
            r"long_factor.*got 33",
        ),
        ({"rope_type": "longrope", "short_factor": [1.0] * 32}, {}, ValueError, r"\['long_factor'\]"),
        ({"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}, {}, ValueError, "rope_theta"),
        ({"rope_type": "linear", "factor": 2.0, "rope_theta": "1e4"}, {}, TypeError, r"scaling\['rope_theta'\]"),
        ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}, {}, ValueError, "partial_rotary_factor"),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "truncate": "no"},
            {},
            TypeError,
            "truncate",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "attention_factor": -1.0},
            {},
            ValueError,
            "attention_factor",
        ),
        ("linear", {}, TypeError, "dict"),
        ({"rope_type": 3}, {}, TypeError, "rope_type"),
        # one past the edge of each domain (the edges themselves: test_values_at_the_edges_of_their_domains)
        ({"rope_type": "linear", "factor": 1 - 2**-52}, {}, ValueError, r"scaling\['factor'\].*>= 1"),
        (
            {"rope_type": "yarn", "original_max_position_embeddings": 4097},
            {"max_position_embeddings": 4096},
            ValueError,
            "< 1",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 0},
            {},
            ValueError,
            r"original_max_position_embeddings.*must be a positive int, got 0",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 0.0},
            {},
            ValueError,
            r"scaling\['beta_fast'\].*must be > 0, got 0",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "attention_factor": 0.0},
            {},
            ValueError,
            r"scaling\['attention_factor'\].*must be > 0, got 0",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 2.0,
                "beta_slow": 2.0 + 2**-51,
            },
            {},
            ValueError,
            "beta_fast",
        ),
        # 0.1 * mscale * ln(e) + 1 = 0 exactly
        (
            {
                "rope_type": "yarn",
                "factor": math.e,
                "original_max_position_embeddings": 4096,
                "mscale": -10.0,
                "mscale_all_dim": 1.0,
            },
            {},
            ValueError,
            "magnitude corrections 0 and",
        ),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 0.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            {},
            ValueError,
            r"low_freq_factor.*must be > 0, got 0",
        ),
        # Llama 4's step (low == high) with its cutoff at the wavelength of pair 0 (2 pi) exactly
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 8192 / (2 * math.pi),
                "high_freq_factor": 8192 / (2 * math.pi),
                "original_max_position_embeddings": 8192,
            },
            {},
            ValueError,
            "equals the cutoff",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 32,
                "long_factor": [1.0] * 32,
                "original_max_position_embeddings": 1,
                "factor": 2.0,
            },
            {},
            ValueError,
            "must be >= 2",
        ),
        (
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * 31 + [0.0],
                "long_factor": [1.0] * 32,
                "original_max_position_embeddings": 4096,
                "factor": 2.0,
            },
            {},
            ValueError,
            r"short_factor.*numbers > 0",
        ),
        (
            {"rope_type": "dynamic", "factor": 2.0},
            {"max_position_embeddings": 64, "seq_len": -1},
            ValueError,
            "seq_len",
        ),
    ],
)
def test_bad_scaling(scaling, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        arrayrope.rope_frequencies(64, scaling=scaling, **kwargs)


@pytest.mark.parametrize(
    ("rope_type", "scaling", "kwargs"),
    [
        ("linear", {"factor": 1.0}, {}),
        ("yarn", {"factor": None, "original_max_position_embeddings": 4096}, {"max_position_embeddings": 4096}),  # 1
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 2.0, "beta_slow": 2.0}, {}),
        (
            "llama3",
            {"factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            {},
        ),
        (
            "longrope",
            {"short_factor": [1.5] * 32, "long_factor": [3.0] * 32, "original_max_position_embeddings": 2},
            {"max_position_embeddings": 16},
        ),
        (
            "longrope",
            {"short_factor": [1.5] * 32, "long_factor": [3.0] * 32, "original_max_position_embeddings": 2},
            {"max_position_embeddings": 16, "seq_len": 3},
        ),
        ("dynamic", {"factor": 2.0}, {"max_position_embeddings": 64, "seq_len": 0}),
    ],
)
def test_values_at_the_edges_of_their_domains(rope_type, scaling, kwargs):
    """Each value at the edge of what a rope type accepts (a factor of 1, equal betas or band factors, an original
    context of 2, a sequence length of 0) gives what transformers' own function gives there."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    transformers.logging.set_verbosity_error()
    sc = {"rope_type": rope_type, **scaling}
    ours = arrayrope.rope_frequencies(64, scaling=sc, **kwargs)
    cfg = transformers.LlamaConfig(
        hidden_size=128,
        num_attention_heads=2,
        head_dim=64,
        rope_scaling=dict(sc),
        max_position_embeddings=kwargs.get("max_position_embeddings", 4096),
    )
    theirs, their_att = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=kwargs.get("seq_len"))
    np.testing.assert_allclose(ours.inv_freq, theirs.double().numpy(), rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(float(their_att), rel=1e-6)


def test_unknown_keys_warn_once_and_stay_out_of_the_math():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = arrayrope.rope_frequencies(64, scaling={"rope_type": "linear", "factor": 2.0, "beta_fast": 3, "foo": "bar"})
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "['beta_fast', 'foo']" in msgs[0] and "'linear'" in msgs[0]
    check(f, *linear_ref(64, 1e4, 2.0))


# ---- against transformers itself, where it is installed


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "longrope", "llama3"])
def test_against_transformers(rope_type):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    sc = {
        "linear": {"rope_type": "linear", "factor": 4.0},
        "dynamic": {"rope_type": "dynamic", "factor": 4.0},
        "yarn": {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
        },
        "longrope": {
            "rope_type": "longrope",
            "short_factor": [1.0 + i / 40 for i in range(40)],
            "long_factor": [2.0 + i / 10 for i in range(40)],
            "original_max_position_embeddings": 4096,
        },
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }[rope_type]
    for seq_len in (None, 1000, 40000):
        cfg = transformers.LlamaConfig(
            hidden_size=80 * 16,
            num_attention_heads=16,
            head_dim=80,
            max_position_embeddings=32768,
            rope_theta=500000.0,
            rope_scaling=dict(sc),
        )
        theirs, their_att = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
        ours = arrayrope.rope_frequencies(80, base=500000.0, scaling=sc, max_position_embeddings=32768, seq_len=seq_len)
        np.testing.assert_allclose(ours.inv_freq, theirs.double().numpy(), rtol=1e-6, atol=0)
        assert ours.attention_factor == pytest.approx(float(their_att), rel=1e-6)


def _correction_range(d, base, l0, beta):
    """The fractional pair index at which a wavelength makes ``beta`` turns over ``l0`` (YaRN's formula)."""
    return d * math.log(l0 / (2 * math.pi * beta)) / (2 * math.log(base))


#: beta with ``_correction_range(64, 1e4, 4096, beta) == 30.995``
_EMPTY_RANGE_BETA = 4096 / (2 * math.pi * math.exp(2 * math.log(1e4) * 30.995 / 64))


@pytest.mark.parametrize(
    ("d", "base", "l0", "betas", "truncate"),
    [
        # long context, base 1e4: the slow end (69.1 -> 70) lies past the last pair (63), below the clamp at d - 1
        (128, 1e4, 131072, (32, 1), True),
        # small bases: the slow end passes d - 1 and is clamped there, while the fast end leaves pairs on the ramp
        (128, 16.0, 2048, (32, 1), True),
        (128, 10.0, 1024, (32, 1), False),
        (32, 20.0, 2048, (32, 1), True),
        # a short context: the fast end is negative and clamped to 0
        (128, 1e4, 128, (32, 1), True),
        # equal betas without truncation: an empty range, widened by 0.001
        (64, 1e4, 4096, (8, 8), False),
        # ... where the last pair lies 0.005 past it: the width decides its ramp (5 -> clipped to 1)
        (64, 1e4, 4096, (_EMPTY_RANGE_BETA, _EMPTY_RANGE_BETA), False),
    ],
)
def test_yarn_correction_range_at_its_clamps_against_transformers(d, base, l0, betas, truncate):
    """YaRN's ramp runs from ``max(lo, 0)`` to ``min(hi, d - 1)`` (d the rotary dim, not the number of pairs):
    each case puts one end at or past its clamp, against transformers' own function."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    transformers.logging.set_verbosity_error()
    lo, hi = _correction_range(d, base, l0, betas[0]), _correction_range(d, base, l0, betas[1])
    assert lo < d // 2 - 1 and (hi > d // 2 or lo < 0 or lo == hi)  # the case reaches what it is there for
    sc = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": l0,
        "beta_fast": betas[0],
        "beta_slow": betas[1],
        "truncate": truncate,
    }
    cfg = transformers.LlamaConfig(
        hidden_size=2 * d,
        num_attention_heads=2,
        head_dim=d,
        rope_theta=base,
        max_position_embeddings=4 * l0,
        rope_scaling=dict(sc),
    )
    theirs, their_att = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    ours = arrayrope.rope_frequencies(d, base=base, scaling=sc)
    # transformers computes in float32: a few float32 ulps (1.2e-7 each) from the float64 values
    np.testing.assert_allclose(ours.inv_freq, theirs.double().numpy(), rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(float(their_att), rel=1e-6)
    check(ours, *yarn_ref(d, base, 4.0, l0, beta_fast=betas[0], beta_slow=betas[1], truncate=truncate))


def test_dynamic_with_the_smallest_rotary_dims():
    """Rotary dim 4, the smallest NTK rescales (exponent d / (d - 2) = 2), against transformers; rotary dim 2, whose
    one frequency is base ** 0 = 1 for any base (transformers divides by d - 2 = 0 there), stays 1."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    transformers.logging.set_verbosity_error()
    sc = {"rope_type": "dynamic", "factor": 2.0}
    cfg = transformers.LlamaConfig(
        hidden_size=8, num_attention_heads=2, head_dim=4, max_position_embeddings=64, rope_scaling=dict(sc)
    )
    theirs, _ = ROPE_INIT_FUNCTIONS["dynamic"](cfg, "cpu", seq_len=100)
    ours = arrayrope.rope_frequencies(4, scaling=sc, max_position_embeddings=64, seq_len=100)
    np.testing.assert_allclose(ours.inv_freq, theirs.double().numpy(), rtol=1e-6, atol=0)
    check(ours, *dynamic_ref(4, 1e4, 2.0, 64, 100))
    two = arrayrope.rope_frequencies(2, scaling=sc, max_position_embeddings=64, seq_len=100)
    assert two.inv_freq.tolist() == [1.0]


def test_a_scaling_warning_points_at_the_users_line():
    """Raised deep in the package (config read, registry, rope type), the warning is attributed to the caller's
    own line, whichever entry point they called."""
    config = {
        "head_dim": 32,
        "rope_theta": 1e4,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024},
    }
    for call in (
        lambda: arrayrope.rope_frequencies_from_config(config),
        lambda: arrayrope.RotaryEmbedding.from_config({**config, "model_type": "qwen2"}),
        lambda: arrayrope.rope_frequencies(32, scaling={"rope_type": "linear", "factor": 2.0, "bogus": 1}),
    ):
        with pytest.warns(UserWarning, match="factor is used|not used by rope_type") as caught:
            call()
        assert [w.filename for w in caught] == [__file__], [(w.filename, w.lineno) for w in caught]
