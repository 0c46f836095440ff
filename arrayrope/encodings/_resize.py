"""The frequencies of the rope types that follow the sequence length (dynamic NTK, LongRoPE).

A :class:`~arrayrope.RotaryEmbedding` of such a type starts from the frequencies of
its maximum length and asks the type's registry entry (its ``length`` rule) which
length each call's frequencies are for; this object keeps that state and the last
frequencies computed.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..frequencies import RopeFrequencies, rope_frequencies
from ..scaling import rope_type

__all__ = ["Resizer"]


class Resizer:
    """The frequencies of a sequence-length-dependent rope type, as its registry entry's rule picks them."""

    def __init__(self, start: RopeFrequencies, scaling: Mapping[str, Any], max_len: int | None) -> None:
        entry = rope_type(scaling)
        assert entry.length is not None
        self.rule = entry.length
        self.start = start
        self.scaling = dict(scaling)
        self.original = int(self.scaling.get("original_max_position_embeddings") or max_len or 0)
        self.max_position_embeddings = max_len
        self.max_len = max_len if max_len is not None else self.original
        # the length the starting frequencies are for, and that of the current ones
        self.start_length = self.current = self.rule(1, self.max_len, self.max_len, self.original)
        self.last: tuple[int, RopeFrequencies] | None = None

    def __call__(self, length: int) -> RopeFrequencies:
        self.current = self.rule(length, self.current, self.max_len, self.original)
        if self.current == self.start_length:
            return self.start
        if self.last is None or self.last[0] != self.current:
            s = self.start
            with warnings.catch_warnings():  # reported once, when the instance was made
                warnings.simplefilter("ignore")
                freqs = rope_frequencies(s.head_dim, base=s.base, rotary_dim=s.rotary_dim, scaling=self.scaling,
                                         max_position_embeddings=self.max_position_embeddings, seq_len=self.current)
            self.last = (self.current, freqs)
        return self.last[1]
