"""Frequency scaling: one registry from Hugging Face ``rope_type`` to its function.

Long-context checkpoints stretch RoPE with a scaling dict, the ``rope_scaling``
(transformers v4) or ``rope_parameters`` (v5) entry of their ``config.json``.
Each rope type is one :class:`RopeType` entry of :data:`ROPE_TYPES`, and
everything arrayrope knows about a rope type is in its entry: the dict keys it
requires and reads (which also tell what a config supplies, such as
``original_max_position_embeddings``), the function that receives the unscaled
float64 ``inv_freq`` (``base ** (-2i / d)``, ``d = rotary_dim``), the dict and the
context lengths and returns the scaled ``inv_freq`` and the attention factor, and,
for the types that depend on the sequence length, the rule by which
:class:`~arrayrope.RotaryEmbedding` follows it during calls. Notation: ``s = factor``,
``L0 = original_max_position_embeddings``, ``Lmax = max_position_embeddings``, ``L = seq_len``.

* default: ``theta``; attention factor 1.
* linear: ``theta / s``; 1.
* dynamic (NTK): base ``b * (s*L/Lmax - (s-1)) ** (d/(d-2))`` when ``L > Lmax``,
  unchanged otherwise; 1.
* yarn: a ramp from ``theta`` (short wavelengths, below ``L0 / beta_fast`` turns)
  to ``theta / s`` (long ones, beyond ``L0 / beta_slow``); ``0.1 ln s + 1``.
* longrope: ``theta / long_factor`` when ``L > L0``, else ``theta / short_factor``;
  ``sqrt(1 + ln s / ln L0)``.
* llama3: ``theta`` for wavelengths below ``L0 / high_freq_factor``, ``theta / s``
  above ``L0 / low_freq_factor``, a smooth blend in between (none when the two factors
  are equal, as in Llama 4); 1.
* proportional (Gemma 4): every pair of the head, the first ``int(head_dim * p) / 2``
  turning by ``b ** (-2i / head_dim) / s`` (``p = partial_rotary_factor``, ``s`` default 1),
  the others not at all; 1. Its rotary part is the whole head.

The semantics follow Hugging Face transformers (the convention checkpoints are
loaded with), including its defaults: ``type`` is read where ``rope_type`` is
missing, and the old names in :data:`ALIASES` are accepted; yarn's ``beta_fast``/``beta_slow``
default to 32/1, ``truncate`` to True, its missing ``factor`` to ``Lmax / L0`` and its attention factor is
``m(s, mscale) / m(s, mscale_all_dim)`` when both are set (``m`` is
:func:`yarn_mscale`); longrope's missing ``factor`` is ``Lmax / L0``;
``original_max_position_embeddings`` falls back to ``max_position_embeddings``
(transformers v5 does the same when it standardizes a config). An explicit
``attention_factor`` always wins. Values that are ``None`` count as missing.

Each entry may also carry a ``fit``: what measured frequencies tell about the
type's parameters (:mod:`._fit`), which is how :func:`arrayrope.testing.identify_rope`
knows which rope types a probe can name. Rope types of transformers that are no 1-D
frequency rule (a vision encoder's ``axial``) are in :data:`REFUSED` with the reason.

Unlike transformers, which logs a warning and goes on, a dict that cannot be
right raises: an unknown ``rope_type``, a missing required key, ``factor < 1``,
``low_freq_factor > high_freq_factor``, ``beta_fast < beta_slow``, factor lists
of the wrong length. Keys a rope type does not read are left out of the math
and reported in one warning.

Adding a rope type is one function and its entry (``fit=`` optional)::

    @register("mine", required=("factor",), optional=("beta",))
    def _mine(inv_freq, params, *, base, rotary_dim, max_position_embeddings, seq_len, **context):
        return inv_freq / params["factor"], 1.0
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._lib.warn import warn_caller
from . import _types  # noqa: F401  (registers the built-in rope types)
from ._params import positive_length, real_value, yarn_mscale
from ._registry import (
    ALIASES,
    COMMON_KEYS,
    REFUSED,
    ROPE_TYPES,
    FitFn,
    LengthRule,
    RopeType,
    ScalingFn,
    register,
)

__all__ = [
    "ALIASES",
    "COMMON_KEYS",
    "REFUSED",
    "ROPE_TYPES",
    "FitFn",
    "LengthRule",
    "RopeType",
    "ScalingFn",
    "register",
    "rope_type",
    "scale",
    "yarn_mscale",
]


def rope_type(scaling: Mapping[str, Any]) -> RopeType:
    """The registry entry a scaling dict names (``rope_type``, else ``type``, else ``"default"``).

    Parameters
    ----------
    scaling : dict
        A ``rope_scaling`` or ``rope_parameters`` dict.

    Returns
    -------
    RopeType
        Its entry (an alias such as ``"su"`` gives the type it names).

    Examples
    --------
    >>> from arrayrope.scaling import rope_type
    >>> rope_type({"type": "su", "short_factor": [1.0], "long_factor": [1.0]}).name
    'longrope'
    """
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict such as {{'rope_type': 'linear', 'factor': 2.0}}, got {scaling!r}")
    name = scaling.get("rope_type")
    if name is None:
        name = scaling.get("type")
    if name is None:
        return ROPE_TYPES["default"]
    if not isinstance(name, str):
        raise TypeError(f"scaling['rope_type'] must be a string, got {name!r}")
    name = ALIASES.get(name, name)
    if name in REFUSED:
        raise ValueError(f"scaling: rope_type {name!r} is not supported: {REFUSED[name]}")
    if name not in ROPE_TYPES:
        raise ValueError(f"scaling: unknown rope_type {name!r}; known: {sorted(ROPE_TYPES)}")
    return ROPE_TYPES[name]


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
    """Apply a scaling dict to inverse frequencies, with its keys checked as its rope type declares them.

    Parameters
    ----------
    scaling : dict
        A ``rope_scaling`` or ``rope_parameters`` dict.
    inv_freq : numpy.ndarray
        The unscaled inverse frequencies (float64).
    base : float
        Their base.
    head_dim, rotary_dim : int
        The head dim and the number of rotated features.
    max_position_embeddings : int or None
        The model's ``max_position_embeddings``.
    seq_len : int or None
        The sequence length, for the types whose frequencies depend on it.

    Returns
    -------
    rope_type : str
        The rope type applied.
    inv_freq : numpy.ndarray
        The scaled inverse frequencies.
    attention_factor : float
        The factor of cos and sin.

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.scaling import scale
    >>> kind, inv, factor = scale({"rope_type": "linear", "factor": 4.0}, inv_freq=np.array([1.0, 0.01]),
    ...                           base=1e4, head_dim=4, rotary_dim=4, max_position_embeddings=None, seq_len=None)
    >>> kind, inv.tolist(), factor
    ('linear', [0.25, 0.0025], 1.0)
    """
    entry = rope_type(scaling)
    if max_position_embeddings is not None:
        max_position_embeddings = positive_length(max_position_embeddings, "max_position_embeddings")
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 0:
            raise ValueError(f"seq_len must be an int >= 0, got {seq_len!r}")
        seq_len = int(seq_len)
    _check_keys(scaling, entry, base=base, head_dim=head_dim, rotary_dim=rotary_dim)
    params = {k: v for k, v in scaling.items() if v is not None}
    params.setdefault("rope_type", entry.name)
    new_inv, factor = entry.frequencies(
        np.array(inv_freq, dtype=np.float64),
        params,
        base=base,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        max_position_embeddings=max_position_embeddings,
        seq_len=seq_len,
    )
    return entry.name, np.asarray(new_inv, dtype=np.float64), float(factor)


def _check_keys(scaling: Mapping[str, Any], entry: RopeType, *, base: float, head_dim: int, rotary_dim: int) -> None:
    present = {k for k, v in scaling.items() if v is not None}
    missing = sorted(entry.required - present)
    if missing:
        raise ValueError(f"scaling for rope_type {entry.name!r} is missing required key(s) {missing}")
    unknown = sorted(set(scaling) - entry.keys)
    if unknown:
        warn_caller(f"scaling: key(s) {unknown} are not used by rope_type {entry.name!r} and were ignored")
    theta = real_value(scaling, "rope_theta")
    if theta is not None and not math.isclose(theta, base, rel_tol=1e-12):
        raise ValueError(
            f"scaling['rope_theta']={theta} differs from base={base}; pass base={theta} "
            "(or use rope_frequencies_from_config)"
        )
    prf = real_value(scaling, "partial_rotary_factor")
    if prf is not None and int(head_dim * prf) != rotary_dim:
        raise ValueError(
            f"scaling['partial_rotary_factor']={prf} gives rotary_dim={int(head_dim * prf)} but "
            f"rotary_dim={rotary_dim}; pass partial_rotary_factor={prf}"
        )
