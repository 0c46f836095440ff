"""What :func:`~arrayrope._identify.identify.identify_rope` reports: :class:`RopeConvention`, and the
frequencies and embedding arguments of a convention it named.

Public as :class:`arrayrope.testing.RopeConvention` (documented there).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from ..frequencies import RopeFrequencies, rope_frequencies

__all__ = ["RopeConvention"]

_LAYOUT_NAMES = {
    "half": "half-split (GPT-NeoX, Llama, rotate_half)",
    "interleaved": "interleaved (RoFormer paper, GPT-J, complex freqs_cis)",
}


@dataclasses.dataclass(frozen=True)
class RopeConvention:
    """What :func:`identify_rope` found.

    Parameters
    ----------
    matched : bool
        Whether the function is a known RoPE convention (then every field below is set).
    head_dim : int
        Features per head.
    layout : {"half", "interleaved"} or None
        Which features pair up.
    rotary_dim : int or None
        The number of features that turn (for ``proportional`` scaling the
        frequencies span the whole head; the pairs past it keep frequency 0).
    base : float or None
        The base (``rope_theta``) of ``inv_freq[i] = base ** (-2i / rotary_dim)``.
    offset : int or None
        The function rotates ``x`` by ``positions + offset`` (1 is the classic
        off-by-one).
    scaling : dict or None
        A Hugging Face ``rope_scaling`` dict (``{"rope_type": "linear", "factor": 4.0}``),
        or None when the frequencies are unscaled.
    attention_factor : float
        The factor multiplying cos and sin (1.0 for plain RoPE).
    inv_freq : numpy.ndarray or None
        The measured frequency of each pair (radians per position).
    max_error : float
        Largest difference between ``fn`` and the named convention (computed in
        float64) on random inputs at positions ``seq_len .. 2 seq_len - 1`` and at
        the far block nearest 4096, relative to the largest input value: the
        implementation's own rounding (its dtype, its float32 angles) included.
        NaN when nothing matched.
    reason : str
        Why nothing matched (empty when matched).
    rotary_features : {"leading", "trailing"}
        Whether the rotary features are the first ones of the head or the last
        (DeepSeek's ``q_pe`` after ``q_nope``).

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> from arrayrope.testing import identify_rope
    >>> rope = arrayrope.RotaryEmbedding(16, base=500000.0)
    >>> found = identify_rope(lambda x, p: rope(x, positions=p), head_dim=16)
    >>> found.matched, found.layout, found.base
    (True, 'half', 500000.0)
    """

    matched: bool
    head_dim: int
    layout: str | None = None
    rotary_dim: int | None = None
    base: float | None = None
    offset: int | None = None
    scaling: dict[str, Any] | None = None
    attention_factor: float = 1.0
    inv_freq: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    max_error: float = float("nan")
    reason: str = ""
    rotary_features: str = "leading"

    def embedding_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`arrayrope.RotaryEmbedding` that reproduce ``fn``.

        The offset is not among them: pass ``positions + offset`` when calling.
        """
        if not self.matched:
            raise ValueError(f"fn matches no known RoPE convention ({self.reason}); nothing to reproduce")
        kwargs = {
            "head_dim": self.head_dim,
            "base": self.base,
            "rotary_dim": self.rotary_dim,
            "scaling": self.scaling,
            "layout": self.layout,
        }
        if self.rotary_features != "leading":
            kwargs["rotary_features"] = self.rotary_features
        return kwargs

    def frequencies(self) -> RopeFrequencies:
        """The frequencies found as the core computes them (float64), with the measured attention factor.

        Examples
        --------
        >>> import arrayrope
        >>> from arrayrope.testing import identify_rope
        >>> rope = arrayrope.RotaryEmbedding(16, base=500.0)
        >>> f = identify_rope(lambda x, p: rope(x, positions=p), head_dim=16).frequencies()
        >>> bool(abs(f.inv_freq[1] - 500.0 ** (-2 / 16)) < 1e-15)
        True
        """
        if not self.matched:
            raise ValueError(f"fn matches no known RoPE convention ({self.reason}); no frequencies to give")
        return _frequencies(self)

    def __str__(self) -> str:
        if not self.matched:
            found = ", ".join(
                f"{k} {v}"
                for k, v in (
                    ("layout", self.layout),
                    ("rotary_dim", self.rotary_dim),
                    ("base", self.base),
                    ("offset", self.offset),
                )
                if v is not None
            )
            return f"matches no known RoPE convention: {self.reason}" + (f" (found: {found})" if found else "")
        scaling = (
            "no frequency scaling"
            if self.scaling is None
            else "scaling " + ", ".join(f"{k}={v}" for k, v in self.scaling.items())
        )
        offset = "positions as given" if not self.offset else f"positions shifted by {self.offset:+d}"
        where = "" if self.rotary_features == "leading" else " (the trailing features)"
        return (
            f"{_LAYOUT_NAMES[self.layout or 'half']} RoPE, rotary_dim {self.rotary_dim} of head_dim {self.head_dim}"
            f"{where}, base {self.base:g}, {scaling}, {offset}; max error {self.max_error:.1e}"
        )


def _frequencies(found: RopeConvention) -> RopeFrequencies:
    """The frequencies of a matched convention, as the core computes them, with the measured attention factor."""
    assert found.rotary_dim is not None and found.base is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        freqs = rope_frequencies(found.head_dim, base=found.base, rotary_dim=found.rotary_dim, scaling=found.scaling)
    return dataclasses.replace(freqs, attention_factor=found.attention_factor)
