"""The frequencies of the rope types that follow the sequence length (dynamic NTK, LongRoPE).

A :class:`~arrayrope.RotaryEmbedding` of such a type starts from the frequencies of
its maximum length and asks the type's registry entry (its ``length`` rule) which
length each call's frequencies are for; this object keeps that state and the last
frequencies computed.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import backends
from .._lib.types import Namespace
from ..frequencies import RopeFrequencies, rope_frequencies, turned_back
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
        # a family whose pairs turn the other way (nanochat): what the type recomputes turns that way too
        self.turned = bool(np.any(start.inv_freq < 0))
        self.last: tuple[int, RopeFrequencies] | None = None

    def __call__(self, length: int) -> RopeFrequencies:
        self.current = self.rule(length, self.current, self.max_len, self.original)
        if self.current == self.start_length:
            return self.start
        if self.last is None or self.last[0] != self.current:
            self.last = (self.current, self._frequencies(self.current))
        return self.last[1]

    def traced(self, xp: Namespace, length: Any) -> RopeFrequencies:
        """The frequencies a graph being traced keeps for calls of length ``length`` (no state changes).

        The rule runs from the starting state, as a fresh instance's first call does: a graph holds no
        state, so it keeps the frequencies of its length (dynamic NTK: those of every length beyond
        ``max_position_embeddings``, which a traced length then fixes; ``torch.compile`` compiles a graph per
        length there). They are computed on the host while the graph is traced (:func:`arrayrope.backends.host`).
        """
        current = self.rule(length, self.start_length, self.max_len, self.original)
        if current == self.start_length:
            return self.start
        s, most = self.start, self.max_position_embeddings
        # plain ints and floats (a traced int's value is fixed here: the graph holds one length's frequencies)
        found: RopeFrequencies = backends.host(
            xp,
            _frequencies,
            (
                operator.index(s.head_dim),
                float(s.base),
                operator.index(s.rotary_dim),
                self.scaling,
                None if most is None else operator.index(most),
                operator.index(current),
                self.turned,
            ),
        )
        return found

    def _frequencies(self, length: int) -> RopeFrequencies:
        s = self.start
        return _frequencies(
            s.head_dim, s.base, s.rotary_dim, self.scaling, self.max_position_embeddings, length, self.turned
        )


def _frequencies(
    head_dim: int,
    base: float,
    rotary_dim: int,
    scaling: Mapping[str, Any],
    max_len: int | None,
    length: int,
    turned: bool,
) -> RopeFrequencies:
    """The type's frequencies for ``length`` (negated for a family whose pairs turn the other way)."""
    with warnings.catch_warnings():  # reported once, when the instance was made
        warnings.simplefilter("ignore")
        found = rope_frequencies(
            head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling, max_position_embeddings=max_len, seq_len=length
        )
    return turned_back(found) if turned else found
