"""identify_rope on foreign implementations written here in the styles users port from.

Each foreign function is written from the published formulas (complex multiplication,
rotate_half, interleaved stack + flatten with cached tables), independently of
arrayrope; identify_rope must name the parameters they were built with.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrayrope
from arrayrope.scaling import ROPE_TYPES
from arrayrope.testing import identify_rope
from helpers import llama3_inv_freq

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision


def theta(rotary_dim: int, base: float) -> np.ndarray:
    return 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def complex_style(base=10000.0, offset=0, rotary_dim=None):
    """Meta's freqs_cis: pairs (2i, 2i+1) as complex numbers times exp(i m theta)."""

    def fn(x, positions):
        d = x.shape[-1]
        r = rotary_dim or d
        freqs_cis = np.exp(1j * np.outer(positions + offset, theta(r, base)))
        z = x[..., :r].reshape(*x.shape[:-1], r // 2, 2)
        z = (z[..., 0] + 1j * z[..., 1]) * freqs_cis
        rotated = np.stack([z.real, z.imag], axis=-1).reshape(*x.shape[:-1], r)
        return np.concatenate([rotated, x[..., r:]], axis=-1)

    return fn


def rotate_half_style(base=10000.0, offset=0, rotary_dim=None, position_scale=1.0, dtype=np.float64):
    """Hugging Face Llama: emb = cat(freqs, freqs); x * cos + rotate_half(x) * sin."""

    def fn(x, positions):
        d = x.shape[-1]
        r = rotary_dim or d
        freqs = np.outer((positions + offset) * position_scale, theta(r, base)).astype(dtype)
        emb = np.concatenate([freqs, freqs], axis=-1)
        x_rot, x_pass = x[..., :r].astype(dtype), x[..., r:]
        half = np.concatenate([-x_rot[..., r // 2 :], x_rot[..., : r // 2]], axis=-1)
        return np.concatenate([x_rot * np.cos(emb) + half * np.sin(emb), x_pass.astype(dtype)], axis=-1)

    return fn


class StackStyle:
    """Cached cos/sin tables indexed by token positions, even/odd halves re-interleaved by stack."""

    def __init__(self, d_k: int, base: float = 10000.0, max_seq_len: int = 4096):
        angles = np.arange(max_seq_len)[:, None] * theta(d_k, base)[None, :]
        self.cos_cache, self.sin_cache = np.cos(angles), np.sin(angles)

    def __call__(self, x, token_positions):
        cos, sin = self.cos_cache[token_positions], self.sin_cache[token_positions]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        return out.reshape(*out.shape[:-2], -1)


@given(
    head_dim=st.sampled_from([8, 32, 64, 128]),
    base=st.sampled_from([100.0, 10000.0, 500000.0, 1e6]),
    offset=st.integers(0, 3),
)
def test_names_complex_form(head_dim, base, offset):
    found = identify_rope(complex_style(base, offset), head_dim=head_dim)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset) == ("interleaved", head_dim, base, offset)
    assert found.scaling is None and found.attention_factor == 1.0
    assert found.max_error < 1e-12


@given(
    head_dim=st.sampled_from([16, 64, 96, 128]),
    fraction=st.sampled_from([0.25, 0.5, 1.0]),
    base=st.sampled_from([10000.0, 500000.0]),
)
def test_names_rotate_half_with_partial_rotary(head_dim, fraction, base):
    r = int(head_dim * fraction)
    found = identify_rope(rotate_half_style(base, rotary_dim=r), head_dim=head_dim)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset) == ("half", r, base, 0)
    assert "half-split" in str(found) and f"rotary_dim {r} of head_dim {head_dim}" in str(found)


def test_names_interleaved_stack_with_cached_tables():
    found = identify_rope(StackStyle(64, base=10000.0), head_dim=64)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset) == ("interleaved", 64, 10000.0, 0)
    np.testing.assert_allclose(found.inv_freq, theta(64, 10000.0), rtol=0, atol=1e-14)


def test_float32_implementation_is_named_with_its_error():
    found = identify_rope(rotate_half_style(dtype=np.float32), head_dim=64)
    assert found.matched and found.layout == "half" and found.base == 10000.0
    # float32 rounding, not float64 exactness: at the far verification block (about position 2048) float32
    # angles err by up to a few eps32 times the angle
    assert 1e-8 < found.max_error < 8 * np.finfo(np.float32).eps * 2100


def test_reproduced_by_rotary_embedding():
    import arrayrope

    found = identify_rope(complex_style(500000.0, rotary_dim=32), head_dim=64)
    rope = arrayrope.RotaryEmbedding(**found.embedding_kwargs())
    x = np.random.default_rng(1).standard_normal((1, 2, 10, 64))
    pos = np.arange(100, 110)
    np.testing.assert_allclose(rope(x, positions=pos), complex_style(500000.0, rotary_dim=32)(x, pos), atol=1e-12)


# The broken implementations: identify_rope says what they really do.


def test_wrong_layout_is_reported_as_the_other_layout():
    # meant to be half-split (Llama checkpoint) but pairs (2i, 2i+1)
    assert identify_rope(complex_style(), head_dim=64).layout == "interleaved"


def test_base_off_by_one_percent_is_measured():
    found = identify_rope(rotate_half_style(base=10100.0), head_dim=64)
    assert found.matched and found.base == 10100.0
    assert "base 10100" in str(found)


def test_position_off_by_one_is_measured():
    found = identify_rope(rotate_half_style(offset=1), head_dim=64)
    assert found.matched and found.offset == 1
    assert "positions shifted by +1" in str(found)
    with pytest.raises(ValueError, match="matches no known"):
        identify_rope(lambda x, p: 2 * x, head_dim=8).embedding_kwargs()


def test_linear_scaling_is_named():
    found = identify_rope(rotate_half_style(position_scale=0.25), head_dim=64)
    assert found.matched and found.scaling == {"rope_type": "linear", "factor": 4.0}
    assert found.base == 10000.0


@pytest.mark.skipif("llama3" not in ROPE_TYPES, reason="this arrayrope has no llama3 rope type")
def test_llama3_scaling_is_named():
    inv = llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192)

    def fn(x, positions):
        emb = np.concatenate([np.outer(positions, inv)] * 2, axis=-1)
        half = np.concatenate([-x[..., 64:], x[..., :64]], axis=-1)
        return x * np.cos(emb) + half * np.sin(emb)

    found = identify_rope(fn, head_dim=128)
    assert found.matched, found
    assert found.scaling["rope_type"] == "llama3" and found.scaling["factor"] == 8.0  # type: ignore[index]
    assert found.scaling["original_max_position_embeddings"] == 8192  # type: ignore[index]


# Functions that are no known RoPE: identify_rope says so, and why.

MIDDLE = [4, 5, 2, 3, 0, 1, 6, 7]  # its own inverse: features 2..5 become the rotary ones


@pytest.mark.parametrize(
    "fn, why",
    [
        (lambda x, p: 2.0 * x, "does not turn"),
        (lambda x, p: x, "unchanged"),
        (lambda x, p: rotate_half_style()(x, np.arange(x.shape[-2])), "ignores its positions"),
        (lambda x, p: rotate_half_style()(x, -p), "opposite sign"),
        (lambda x, p: rotate_half_style(rotary_dim=4)(x[..., ::-1], p)[..., ::-1], "opposite sign"),
        (
            lambda x, p: rotate_half_style(rotary_dim=4)(x[..., MIDDLE], p)[..., MIDDLE],
            "not the leading or the trailing",
        ),
        (lambda x, p: complex_style()(x[..., [0, 2, 1, 3, 4, 5, 6, 7]], p), "neither half-split"),
        (lambda x, p: rotate_half_style()(x, p.astype(np.float64) ** 1.5), "linearly"),
        (lambda x, p: rotate_half_style()(x, p) * np.float64(1.5), "neither base"),
    ],
    ids=[
        "scaled",
        "identity",
        "ignores-positions",
        "reversed",
        "trailing-reversed",
        "middle",
        "pairs",
        "nonlinear",
        "gain",
    ],
)
def test_says_plainly_when_nothing_matches(fn, why):
    found = identify_rope(fn, head_dim=8)
    assert not found.matched
    assert str(found).startswith("matches no known RoPE convention") and why in str(found), str(found)


def test_longrope_like_frequencies_match_nothing():
    rng = np.random.default_rng(0)
    inv = theta(32, 10000.0) / rng.uniform(1.0, 3.0, 16)

    def fn(x, positions):
        emb = np.concatenate([np.outer(positions, inv)] * 2, axis=-1)
        half = np.concatenate([-x[..., 16:], x[..., :16]], axis=-1)
        return x * np.cos(emb) + half * np.sin(emb)

    found = identify_rope(fn, head_dim=32)
    assert not found.matched and found.layout == "half" and found.rotary_dim == 32
    assert "neither base ** (-2i / rotary_dim) nor a known scaling" in found.reason


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="fn must be callable"):
        identify_rope(None, head_dim=8)
    with pytest.raises(ValueError, match="head_dim must be even"):
        identify_rope(lambda x, p: x, head_dim=7)
    with pytest.raises(ValueError, match="seq_len must be >= 4"):
        identify_rope(lambda x, p: x, head_dim=8, seq_len=2)
    with pytest.raises(ValueError, match=r"fn returned shape \(1, 8, 32, 4\) for x of shape \(1, 8, 32, 8\)"):
        identify_rope(lambda x, p: x[..., :4], head_dim=8)
    with pytest.raises(ValueError, match=r"raised for every probe.*ZeroDivisionError"):
        identify_rope(lambda x, p: 1 / 0, head_dim=8)
    with pytest.raises(TypeError, match="one array"):
        identify_rope(lambda x, p: (x, x), head_dim=8)


def test_three_dimensional_only_function_is_probed_in_3d():
    def fn(x, positions):
        if x.ndim != 3:
            raise ValueError("expects (heads, seq, head_dim)")
        return rotate_half_style(offset=2)(x, positions)

    found = identify_rope(fn, head_dim=16)
    assert found.matched and found.offset == 2


def test_torch_implementation_in_the_stack_style():
    torch = pytest.importorskip("torch")
    inv = torch.tensor(theta(64, 10000.0))

    def fn(x, token_positions):
        x = torch.from_numpy(x)
        ang = torch.from_numpy(token_positions).double()[:, None] * inv
        cos, sin = torch.cos(ang), torch.sin(ang)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)

    found = identify_rope(fn, head_dim=64)
    assert found.matched and found.layout == "interleaved" and found.base == 10000.0


# The float32 and half-precision implementations of the issue: slow pairs of large bases turn by less than
# float32's resolution over a short probe, so identify_rope probes far positions.


def float32_recipe(inv_freq, layout="half", dtype=np.float32, rotary_dim=None, trailing=False):
    """The common recipe: float32 inv_freq, float32 angles (positions * inv_freq), tables cast to ``dtype``."""
    inv32 = np.asarray(inv_freq, dtype=np.float32)

    def fn(x, positions):
        r = 2 * inv32.size
        d = x.shape[-1]
        start = d - r if trailing else 0
        ang = positions.astype(np.float32)[:, None] * inv32
        cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
        xs = x.astype(dtype)
        part = xs[..., start : start + r]
        if layout == "half":
            x1, x2 = part[..., : r // 2], part[..., r // 2 :]
            rot = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        else:
            x1, x2 = part[..., 0::2], part[..., 1::2]
            rot = np.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(part.shape)
        return np.concatenate([xs[..., :start], rot, xs[..., start + r :]], -1).astype(dtype)

    return fn


@given(
    base=st.sampled_from([1e4, 5e5, 1e6, 1e7]),
    layout=st.sampled_from(["half", "interleaved"]),
    fraction=st.sampled_from([0.25, 0.5, 1.0]),
    dtype=st.sampled_from([np.float32, np.float16]),
    scaling=st.sampled_from([None, "linear", "llama3"]),
)
@settings(max_examples=20)
def test_float32_and_float16_recipes_at_large_bases(base, layout, fraction, dtype, scaling):
    head_dim = 64
    r = int(head_dim * fraction)
    inv = theta(r, base)
    if scaling == "linear":
        inv = inv / 4.0
    elif scaling == "llama3":
        inv = llama3_inv_freq(r, base, 8.0, 1.0, 4.0, 8192)
    found = identify_rope(float32_recipe(inv, layout, dtype), head_dim=head_dim, dtype="float32", seq_len=8)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset) == (layout, r, base, 0), found
    np.testing.assert_allclose(
        arrayrope.RotaryEmbedding(**found.embedding_kwargs()).freqs.inv_freq,
        inv,
        rtol=1e-6 if dtype == np.float32 else 1e-4,
    )
    # honest error: the float32 angles at the far verification positions, then the output rounding
    assert found.max_error <= 8 * np.finfo(dtype).eps + 1e-6 * 4100


def test_rotary_embedding_in_float32_at_llama31_settings():
    """The issue's case: arrayrope's own RotaryEmbedding in float32, base 500000, llama3 scaling."""
    sc = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    rope = arrayrope.RotaryEmbedding(128, base=500000.0, scaling=sc)
    found = identify_rope(lambda x, p: rope(x, positions=p), head_dim=128, dtype="float32", seq_len=8)
    assert found.matched and found.scaling == sc and found.base == 500000.0, found
    assert found.max_error < 1e-6  # float32 tables correctly rounded: only the output's rounding


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [0.5, 1.0])
@pytest.mark.parametrize("scaling", [None, "llama3", "yarn"])
def test_bfloat16_recipes_with_scalings(layout, fraction, scaling):
    """float32 tables rounded to bfloat16 and the rotation in bfloat16, at base 1e7 (yarn: base 1e6)."""
    torch = pytest.importorskip("torch")
    head_dim = 128
    r = int(head_dim * fraction)
    base = 1e6 if scaling == "yarn" else 1e7
    sc = {
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
    }.get(scaling)
    f = arrayrope.rope_frequencies(head_dim, base=base, rotary_dim=r, scaling=sc)
    inv = torch.tensor(f.inv_freq, dtype=torch.float32)
    att = f.attention_factor

    def fn(x, positions):
        t = torch.from_numpy(x).to(torch.bfloat16)
        ang = torch.from_numpy(positions).float()[:, None] * inv
        cos, sin = (att * ang.cos()).bfloat16(), (att * ang.sin()).bfloat16()
        rot, rest = t[..., :r], t[..., r:]
        if layout == "half":
            x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
        return torch.cat([out, rest], -1)

    found = identify_rope(fn, head_dim=head_dim, dtype="float32", seq_len=8)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.scaling) == (layout, r, base, sc), found
    assert found.attention_factor == pytest.approx(att, rel=2**-8)


def test_bfloat16_implementation_in_torch():
    torch = pytest.importorskip("torch")
    inv = torch.tensor(theta(64, 1e7), dtype=torch.float32)

    def fn(x, positions):
        t = torch.from_numpy(x).to(torch.bfloat16)
        ang = torch.from_numpy(positions).float()[:, None] * inv
        cos, sin = torch.cat([ang.cos()] * 2, -1).bfloat16(), torch.cat([ang.sin()] * 2, -1).bfloat16()
        return t * cos + torch.cat([-t[..., 32:], t[..., :32]], -1) * sin

    found = identify_rope(fn, head_dim=64, dtype="float32", seq_len=8)
    assert found.matched and (found.layout, found.base) == ("half", 1e7), found
    assert 1e-3 < found.max_error < 0.05  # bfloat16 rounding, reported as it is


def test_trailing_proportional_and_yarn_are_named():
    trailing = identify_rope(
        float32_recipe(theta(16, 1e4), "interleaved", trailing=True), head_dim=48, dtype="float32", seq_len=8
    )
    assert trailing.matched and (trailing.rotary_features, trailing.rotary_dim) == ("trailing", 16), trailing
    assert "(the trailing features)" in str(trailing)
    assert trailing.embedding_kwargs()["rotary_features"] == "trailing"
    prop = np.concatenate([1e6 ** (-np.arange(0, 16, 2) / 64), np.zeros(24)])  # Gemma 4: 8 of 32 pairs turn
    found = identify_rope(float32_recipe(prop), head_dim=64, dtype="float32", seq_len=8)
    assert found.matched and found.scaling == {"rope_type": "proportional"} and found.rotary_dim == 16, found
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    f = arrayrope.rope_frequencies(64, base=1e6, scaling=yarn)

    found = identify_rope(lambda x, p: _attention_scaled(x, p, f), head_dim=64, dtype="float32", seq_len=8)
    assert found.matched and found.scaling == yarn, found
    assert found.attention_factor == pytest.approx(f.attention_factor, rel=1e-6)


def _attention_scaled(x, positions, f):
    """Half-split RoPE with cos and sin multiplied by the attention factor, in float32."""
    ang = positions.astype(np.float32)[:, None] * f.inv_freq.astype(np.float32)
    c = np.float32(f.attention_factor)
    cos, sin = c * np.cos(ang), c * np.sin(ang)
    h = f.rotary_dim // 2
    x1, x2 = x[..., :h].astype(np.float32), x[..., h:].astype(np.float32)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def test_tables_that_end_and_lengths_that_change():
    inv = theta(64, 1e6)
    table = float32_recipe(inv)

    def capped(x, positions):  # a cache of 4096 positions, indexed: far positions raise
        if positions.max() >= 4096:
            raise IndexError("index out of range of the 4096-position cache")
        return table(x, positions)

    found = identify_rope(capped, head_dim=64, dtype="float32", seq_len=8)
    assert found.matched and found.base == 1e6, found

    def dynamic(x, positions):  # NTK: the base grows once the length passes 2048
        n = int(positions.max()) + 1
        base = 1e4 * max(1.0, 2.0 * n / 2048 - 1.0) ** (64 / 62)
        return float32_recipe(theta(64, base))(x, positions)

    far = identify_rope(dynamic, head_dim=64, dtype="float32", seq_len=8)
    assert not far.matched and "do not grow linearly" in far.reason and "max_position" in far.reason
    near = identify_rope(dynamic, head_dim=64, dtype="float32", seq_len=8, max_position=2047)
    assert near.matched and near.base == 1e4 and near.scaling is None


def test_permuted_output_is_pointed_out():
    """DeepSeek's kernel: interleaved pairs in, half-split order out. Composed with to_interleaved it is plain RoPE."""
    inner = float32_recipe(theta(16, 1e4), "interleaved")

    def kernel(x, p):
        return arrayrope.to_half_split(inner(x, p))

    found = identify_rope(kernel, head_dim=16, dtype="float32", seq_len=8)
    assert not found.matched and "output is permuted" in found.reason, found
    fixed = identify_rope(lambda x, p: kernel(arrayrope.to_interleaved(x), p), head_dim=16, dtype="float32", seq_len=8)
    assert fixed.matched and fixed.layout == "half", fixed
