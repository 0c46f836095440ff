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


def test_frequencies_are_frozen_and_comparable():
    f = ar.rope_frequencies(8)
    with pytest.raises(ValueError):
        f.inv_freq[0] = 2.0
    with pytest.raises(AttributeError):
        f.head_dim = 4
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
        (dict(head_dim=8, partial_rotary_factor=0.5, rotary_dim=4), ValueError, "not both"),
        (dict(head_dim=10, partial_rotary_factor=0.5), ValueError, "rotary_dim=5"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, exc, words):
    head_dim = kwargs.pop("head_dim")
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        ar.rope_frequencies(head_dim, **kwargs)
