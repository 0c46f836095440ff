"""The registry: one :class:`RopeType` entry per ``rope_type``, and how entries are added."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

ScalingFn = Callable[..., "tuple[np.ndarray, float]"]
#: ``(base, rotary_dim, scaling)``: parameters a fit proposes (``scaling`` None for plain RoPE).
Candidate = tuple[float, int, dict[str, Any] | None]
#: ``fit(omega, sigma, *, head_dim, gain, gain_sigma) -> candidates``: parameters of the rope type that
#: could have produced the measured pair frequencies ``omega`` (uncertainty ``sigma``) and the measured
#: factor ``gain`` on cos and sin, roundest first (see :mod:`arrayrope.scaling._fit`).
FitFn = Callable[..., Iterable[Candidate]]
#: ``(length, current, max_position_embeddings, original_max_position_embeddings) -> length``:
#: the sequence length the frequencies of a call are for, given the call's length and the
#: length the current frequencies are for.
LengthRule = Callable[[int, int, int, int], int]

# Keys every rope type accepts: the type itself and the two values that v5's
# ``rope_parameters`` carries along (checked against the call's own arguments).
COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})


@dataclasses.dataclass(frozen=True)
class RopeType:
    """What arrayrope knows about one rope type: an entry of :data:`ROPE_TYPES`.

    Parameters
    ----------
    name : str
        The ``rope_type`` of configs.
    frequencies : callable
        ``frequencies(inv_freq, params, *, base, head_dim, rotary_dim, max_position_embeddings,
        seq_len) -> (inv_freq, attention_factor)``.
    required, optional : frozenset of str
        Dict keys it needs and may read; missing required keys raise before
        ``frequencies`` runs, other keys (beyond :data:`COMMON_KEYS`) are reported in
        one warning.
    length : callable or None
        For types whose frequencies depend on the sequence length: how a
        :class:`~arrayrope.RotaryEmbedding` picks the length of its frequencies at
        each call (see :data:`LengthRule`); None for fixed frequencies.
    fit : callable or None
        What a probe of the frequencies can tell about the type's parameters (see
        :data:`FitFn`); :func:`arrayrope.testing.identify_rope` names the types that
        have one. None where measured frequencies cannot name the type.

    Examples
    --------
    >>> from arrayrope.scaling import ROPE_TYPES
    >>> sorted(ROPE_TYPES["llama3"].required)[:2], ROPE_TYPES["dynamic"].length is None
    (['factor', 'high_freq_factor'], False)
    """

    name: str
    frequencies: ScalingFn
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    length: LengthRule | None = None
    fit: FitFn | None = None

    @property
    def keys(self) -> frozenset[str]:
        """Every key the type reads."""
        return self.required | self.optional | COMMON_KEYS

    @property
    def reads_original_length(self) -> bool:
        """Whether ``original_max_position_embeddings`` matters (a config's top-level one then wins)."""
        return "original_max_position_embeddings" in self.keys

    @property
    def carries_attention_factor(self) -> bool:
        """Whether the type may scale cos and sin (an ``attention_factor`` other than 1)."""
        return "attention_factor" in self.keys


ROPE_TYPES: dict[str, RopeType] = {}

# Older names transformers rewrites when it loads a config: Phi-3's "su" is LongRoPE;
# Qwen2-VL's "mrope" computes default frequencies (its sections split the head by axis).
ALIASES: dict[str, str] = {"su": "longrope", "mrope": "default"}

# Rope types of transformers that are no 1-D frequency rule arrayrope could compute, and why.
REFUSED: dict[str, str] = {
    "axial": "it is the 2-D rope of a vision encoder (Pixtral, Qwen2.5-VL, ...) whose frequencies each model "
    "defines itself; build its tables with arrayrope.axial_rope_tables",
}


def register(
    name: str,
    *,
    required: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
    length: LengthRule | None = None,
    fit: FitFn | None = None,
) -> Callable[[ScalingFn], ScalingFn]:
    """Register a function of the frequencies as rope type ``name``, with its dict keys, length rule and fit.

    Parameters
    ----------
    name : str
        The ``rope_type`` configs give.
    required, optional : tuple of str
        The scaling dict's keys the function needs and the ones it may read.
    length : callable, optional
        How a :class:`~arrayrope.RotaryEmbedding` picks the sequence length of the frequencies at each
        call, for types whose frequencies depend on it (see :data:`LengthRule`).
    fit : callable, optional
        What a probe of the frequencies can tell about the type's parameters (see :data:`FitFn`).

    Returns
    -------
    callable
        A decorator that registers the function ``frequencies(inv_freq, params, *, base, head_dim,
        rotary_dim, max_position_embeddings, seq_len) -> (inv_freq, attention_factor)`` and returns it.

    Examples
    --------
    >>> from arrayrope.scaling import ROPE_TYPES, register
    >>> @register("halved", required=("factor",))
    ... def halved(inv_freq, params, **_):
    ...     return inv_freq / (2 * params["factor"]), 1.0
    >>> import arrayrope
    >>> arrayrope.rope_frequencies(4, scaling={"rope_type": "halved", "factor": 1.0}).inv_freq.tolist()
    [0.5, 0.005]
    >>> del ROPE_TYPES["halved"]
    """

    def deco(fn: ScalingFn) -> ScalingFn:
        ROPE_TYPES[name] = RopeType(name, fn, frozenset(required), frozenset(optional), length, fit)
        return fn

    return deco
