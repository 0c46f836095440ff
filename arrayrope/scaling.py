"""Frequency scaling: one registry from Hugging Face ``rope_type`` to its function.

Each entry takes the unscaled float64 ``inv_freq`` and the scaling dict and
returns the scaled ``inv_freq`` and the attention factor.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["ROPE_TYPES", "scale"]

ScalingFn = Callable[..., "tuple[np.ndarray, float]"]


def _default(inv_freq: np.ndarray, params: Mapping[str, Any], **context: Any) -> tuple[np.ndarray, float]:
    return inv_freq, 1.0


ROPE_TYPES: dict[str, ScalingFn] = {"default": _default}


def scale(
    scaling: Mapping[str, Any],
    *,
    inv_freq: np.ndarray,
    base: float,
    head_dim: int,
    rotary_dim: int,
    max_position_embeddings: int | None,
    seq_len: int | None,
) -> tuple[str, np.ndarray, float]:
    """Apply the scaling dict ``scaling``; returns ``(rope_type, inv_freq, attention_factor)``."""
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict such as {{'rope_type': 'linear', 'factor': 2.0}}, got {scaling!r}")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    fn = ROPE_TYPES.get(rope_type)
    if fn is None:
        raise ValueError(f"scaling: unknown rope_type {rope_type!r}; known: {sorted(ROPE_TYPES)}")
    new_inv, factor = fn(
        inv_freq,
        scaling,
        base=base,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        max_position_embeddings=max_position_embeddings,
        seq_len=seq_len,
    )
    return rope_type, np.asarray(new_inv, dtype=np.float64), float(factor)
