"""The registry: one :class:`RopeType` entry per ``rope_type``, and how entries are added."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

__all__ = ["ALIASES", "COMMON_KEYS", "ROPE_TYPES", "LengthRule", "RopeType", "ScalingFn", "register"]

ScalingFn = Callable[..., "tuple[np.ndarray, float]"]
#: ``(length, current, max_position_embeddings, original_max_position_embeddings) -> length``:
#: the sequence length the frequencies of a call are for, given the call's length and the
#: length the current frequencies are for.
LengthRule = Callable[[int, int, int, int], int]

# Keys every rope type accepts: the type itself and the two values that v5's
# ``rope_parameters`` carries along (checked against the call's own arguments).
COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})


@dataclasses.dataclass(frozen=True)
class RopeType:
    """What arrayrope knows about one rope type.

    Attributes
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
    """

    name: str
    frequencies: ScalingFn
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    length: LengthRule | None = None

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


def register(
    name: str,
    *,
    required: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
    length: LengthRule | None = None,
) -> Callable[[ScalingFn], ScalingFn]:
    """Register ``fn`` as rope type ``name``: its dict keys and, if any, its sequence-length rule."""

    def deco(fn: ScalingFn) -> ScalingFn:
        ROPE_TYPES[name] = RopeType(name, fn, frozenset(required), frozenset(optional), length)
        return fn

    return deco
