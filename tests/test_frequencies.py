import numpy as np
import pytest

import arrayrope as ar
from helpers import POW_ULPS, inv_freq_formula

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision


@pytest.mark.parametrize("head_dim, rotary_dim", [(2, None), (64, None), (80, 40), (128, 32), (256, None)])
@pytest.mark.parametrize("base", [100.0, 10000.0, 500000.0])
def test_inv_freq_is_the_published_formula(head_dim, rotary_dim, base):
    f = ar.rope_frequencies(head_dim, base=base, rotary_dim=rotary_dim)
    r = rotary_dim or head_dim
    assert f.inv_freq.dtype == np.float64 and f.inv_freq.shape == (r // 2,)
    np.testing.assert_array_max_ulp(f.inv_freq, inv_freq_formula(r, base), maxulp=POW_ULPS)
    assert (f.head_dim, f.rotary_dim, f.attention_factor, f.base, f.rope_type) == (head_dim, r, 1.0, base, "default")


def test_partial_rotary_factor_follows_the_config_convention():
    # rotary_dim = int(head_dim * factor), as Hugging Face configs define it (Phi, GPT-NeoX)
    assert ar.rope_frequencies(80, partial_rotary_factor=0.4).rotary_dim == 32
    assert ar.rope_frequencies(128, partial_rotary_factor=1.0).rotary_dim == 128
    # the smallest rotary part: one pair (int(8 * 0.25) = 2), rotating by base ** 0 = 1
    f = ar.rope_frequencies(8, partial_rotary_factor=0.25)
    assert f.rotary_dim == 2 and f.inv_freq.tolist() == [1.0]


def test_frequencies_are_frozen_and_comparable():
    f = ar.rope_frequencies(8)
    with pytest.raises(ValueError):
        f.inv_freq[0] = 2.0
    with pytest.raises(AttributeError):
        f.head_dim = 4  # type: ignore[misc]
    assert f == ar.rope_frequencies(8) and f != ar.rope_frequencies(8, base=500.0)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(head_dim=7), ValueError, "head_dim must be even"),
        (dict(head_dim=0), ValueError, "head_dim must be positive"),
        (dict(head_dim=-4), ValueError, "head_dim must be positive"),
        (dict(head_dim=8.0), TypeError, "head_dim must be an int"),
        (dict(head_dim=True), TypeError, "head_dim must be an int"),
        (dict(head_dim=8, rotary_dim=3), ValueError, "rotary_dim must be even"),
        (dict(head_dim=8, rotary_dim=0), ValueError, "rotary_dim must be positive"),
        (dict(head_dim=8, rotary_dim=16), ValueError, "rotary_dim must be <= head_dim=8"),
        (dict(head_dim=8, base=0.0), ValueError, "base must be a finite number > 0"),
        (dict(head_dim=8, base=-1.0), ValueError, "base must be a finite number > 0"),
        (dict(head_dim=8, base=float("inf")), ValueError, "base must be"),
        (dict(head_dim=8, base="1e4"), TypeError, "base must be a real number"),
        (dict(head_dim=8, partial_rotary_factor=1.5), ValueError, "partial_rotary_factor must be in (0, 1]"),
        (dict(head_dim=8, partial_rotary_factor=1 + 2**-52), ValueError, "partial_rotary_factor must be in (0, 1]"),
        (dict(head_dim=8, partial_rotary_factor=0.0), ValueError, "partial_rotary_factor must be in (0, 1], got 0"),
        (dict(head_dim=8, partial_rotary_factor=0.2), ValueError, "gives rotary_dim=1"),
        (dict(head_dim=8, partial_rotary_factor=0.1), ValueError, "gives rotary_dim=0"),
        (dict(head_dim=8, partial_rotary_factor=0.5, rotary_dim=4), ValueError, "not both"),
        (dict(head_dim=10, partial_rotary_factor=0.5), ValueError, "rotary_dim=5"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, exc, words):
    head_dim = kwargs.pop("head_dim")
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        ar.rope_frequencies(head_dim, **kwargs)


GOOD = dict(inv_freq=np.ones(2), head_dim=4, rotary_dim=4)


@pytest.mark.parametrize(
    "field, value, error, message",
    [
        ("attention_factor", float("nan"), ValueError, "attention_factor must be a finite number > 0, got nan"),
        ("attention_factor", 0, ValueError, "attention_factor must be a finite number > 0, got 0"),
        ("attention_factor", -1, ValueError, "attention_factor must be a finite number > 0, got -1"),
        ("attention_factor", float("inf"), ValueError, "attention_factor must be a finite number > 0, got inf"),
        ("attention_factor", True, TypeError, "attention_factor must be a real number, got True"),
        ("rotary_dim", 6, ValueError, "rotary_dim must be <= head_dim=4, got 6"),
        ("rotary_dim", 3, ValueError, "rotary_dim must be even"),
        ("rotary_dim", 4.0, TypeError, r"rotary_dim must be an int, got 4.0 \(float\)"),
        ("head_dim", 0, ValueError, "head_dim must be positive, got 0"),
        ("head_dim", "4", TypeError, "head_dim must be an int, got '4'"),
        ("head_dim", 4.0, TypeError, r"head_dim must be an int, got 4.0 \(float\)"),
        ("base", -5, ValueError, "base must be a finite number > 0, got -5"),
        ("base", float("nan"), ValueError, "base must be a finite number > 0, got nan"),
        ("inv_freq", np.ones(2, complex), TypeError, "inv_freq must hold real numbers, got dtype complex128"),
        ("inv_freq", np.array([1.0, np.nan]), ValueError, "inv_freq must be finite"),
        ("inv_freq", np.ones(3), ValueError, r"inv_freq must have shape \(2,\) for rotary_dim=4, got \(3,\)"),
        ("rope_type", 3, TypeError, "rope_type must be a string, got 3"),
    ],
)
def test_every_field_of_rope_frequencies_is_checked(field, value, error, message):
    with pytest.raises(error, match=message):
        ar.RopeFrequencies(**{**GOOD, field: value})


@pytest.mark.parametrize("value", [32.0, np.float64(32.0), 32.5, "32", True])
def test_rotary_dim_given_as_a_float_is_refused_everywhere(value):
    """Never rounded: rope_frequencies, RotaryEmbedding, the converters and the export options refuse it."""
    calls = [
        lambda: ar.rope_frequencies(64, rotary_dim=value),
        lambda: ar.RotaryEmbedding(64, rotary_dim=value),
        lambda: ar.to_half_split(np.ones((2, 64)), rotary_dim=value),
        lambda: ar.permute_rotary_rows(np.ones(64), num_heads=1, head_dim=64, rotary_dim=value),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"rotary_dim must be an int, got "):
            call()


def test_scaling_values_out_of_their_domain_name_the_key():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    with pytest.raises(ValueError, match=r"scaling\['beta_slow'\] \(rope_type 'yarn'\) must be > 0, got -1"):
        ar.rope_frequencies(64, scaling={**yarn, "beta_slow": -1})
    with pytest.raises(ValueError, match=r"scaling\['mscale'\]=1 and scaling\['mscale_all_dim'\]=-7.2\d* give"):
        ar.rope_frequencies(64, scaling={**yarn, "mscale": 1, "mscale_all_dim": -10 / np.log(4)})
    with pytest.raises(ValueError, match="yarn: base must not be 1"):
        ar.rope_frequencies(64, base=1.0, scaling=yarn)
    with pytest.raises(ValueError, match="longrope: the original context length must be >= 2"):
        ar.rope_frequencies(
            4,
            scaling={
                "rope_type": "longrope",
                "short_factor": [1, 1],
                "long_factor": [1, 1],
                "original_max_position_embeddings": 1,
            },
        )
    with pytest.raises(TypeError, match="apply_attention_factor must be True or False, got 'False'"):
        ar.rope_tables(ar.rope_frequencies(8), 3, apply_attention_factor="False")
    for name, value in (("max_position_embeddings", 0), ("max_position_embeddings", 1.5), ("seq_len", -1)):
        with pytest.raises((TypeError, ValueError), match=name):
            ar.rope_frequencies(8, **{name: value})


def test_rope_frequencies_fields_are_keyword_only():
    f = ar.rope_frequencies(8)
    with pytest.raises(TypeError, match="positional"):
        ar.RopeFrequencies(f.inv_freq, 8, 8)
    assert ar.RopeFrequencies(inv_freq=f.inv_freq, head_dim=8, rotary_dim=8) == f
