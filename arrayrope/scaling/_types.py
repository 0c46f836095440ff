"""The rope types of Hugging Face checkpoints, each registered with its keys and, if any, its length rule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._lib.warn import warn_caller
from . import _fit
from ._params import (
    factor_of,
    factor_or_ratio,
    original_length,
    real_value,
    required_factor,
    where,
    yarn_mscale,
)
from ._registry import ROPE_TYPES, register

__all__: list[str] = []


def _dynamic_length(length: int, current: int, max_len: int, original: int) -> int:
    """Dynamic NTK: grow with the longest length seen; back to the original below ``max_len``."""
    if length > current:
        return length
    if length < max_len:
        return max_len
    return current


def _longrope_length(length: int, current: int, max_len: int, original: int) -> int:
    """LongRoPE: one set beyond the original length (the long factors), one at or below it."""
    return original + 1 if length > original else original


@register("default", fit=_fit.default)
def _default(inv_freq: np.ndarray, params: Mapping[str, Any], **context: Any) -> tuple[np.ndarray, float]:
    return inv_freq, 1.0


@register("linear", required=("factor",), fit=_fit.linear)
def _linear(inv_freq: np.ndarray, params: Mapping[str, Any], **context: Any) -> tuple[np.ndarray, float]:
    return inv_freq / required_factor(params), 1.0


@register("dynamic", required=("factor",), length=_dynamic_length)
def _dynamic(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    base: float,
    rotary_dim: int,
    max_position_embeddings: int | None,
    seq_len: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    factor = required_factor(params)
    if max_position_embeddings is None:
        raise ValueError("rope_type 'dynamic' needs max_position_embeddings= (the length beyond which it rescales)")
    length = max(seq_len or 0, max_position_embeddings)
    if length == max_position_embeddings or rotary_dim == 2:  # unchanged (d = 2 has the single frequency 1)
        return inv_freq, 1.0
    d = rotary_dim
    new_base = base * (factor * length / max_position_embeddings - (factor - 1)) ** (d / (d - 2))
    return new_base ** (-np.arange(0, d, 2, dtype=np.float64) / d), 1.0


@register(
    "yarn",
    optional=(
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
    fit=_fit.yarn,
)
def _yarn(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    base: float,
    rotary_dim: int,
    max_position_embeddings: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    original = original_length(params, max_position_embeddings)
    if factor_of(params) is None and params.get("original_max_position_embeddings") is None:
        raise ValueError(
            "scaling for rope_type 'yarn' needs 'factor', or 'original_max_position_embeddings' with "
            "max_position_embeddings= (factor = max_position_embeddings / original_max_position_embeddings)"
        )
    factor = factor_or_ratio(params, original, max_position_embeddings)
    if factor < 1:
        raise ValueError(
            f"yarn: max_position_embeddings / original_max_position_embeddings = {factor:g} < 1; "
            "give scaling['factor'] >= 1"
        )
    if max_position_embeddings is not None and factor_of(params) is not None:
        implicit = max_position_embeddings / original
        if implicit not in (1.0, factor):
            warn_caller(
                f"yarn: scaling['factor']={factor:g} differs from max_position_embeddings / "
                f"original_max_position_embeddings = {implicit:g}; the explicit factor is used"
            )
    attention = real_value(params, "attention_factor", minimum=0.0, strict_min=True)
    if attention is None:
        mscale = real_value(params, "mscale")
        mscale_all_dim = real_value(params, "mscale_all_dim")
        if mscale and mscale_all_dim:
            top, bottom = yarn_mscale(factor, mscale), yarn_mscale(factor, mscale_all_dim)
            if not (top > 0 and bottom > 0):
                raise ValueError(
                    f"yarn: scaling['mscale']={mscale:g} and scaling['mscale_all_dim']={mscale_all_dim:g} give "
                    f"magnitude corrections {top:g} and {bottom:g} (0.1 * mscale * ln(factor) + 1); both must be > 0"
                )
            attention = top / bottom
        else:
            attention = yarn_mscale(factor)
    beta_fast = real_value(params, "beta_fast", minimum=0.0, strict_min=True) or 32.0
    beta_slow = real_value(params, "beta_slow", minimum=0.0, strict_min=True) or 1.0
    if base == 1.0:
        raise ValueError("yarn: base must not be 1 (its ramp is placed by ln(base)); got base=1")
    if beta_fast < beta_slow:
        raise ValueError(f"yarn: scaling['beta_fast']={beta_fast:g} must be >= scaling['beta_slow']={beta_slow:g}")
    truncate = params.get("truncate", True)
    if truncate is None:
        truncate = True
    if not isinstance(truncate, (bool, np.bool_)):
        raise TypeError(f"{where(params, 'truncate')} must be true or false, got {truncate!r}")

    d = rotary_dim

    def pair_index(rotations: float) -> float:
        # the pair index i whose wavelength 2*pi*base**(2i/d) makes `rotations` turns over L0
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if hi == lo:
        hi += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    # ramp 0: keep theta (extrapolate, short wavelengths); ramp 1: theta / s (interpolate)
    return inv_freq * ((1.0 - ramp) + ramp / factor), float(attention)


@register(
    "longrope",
    required=("short_factor", "long_factor"),
    optional=("factor", "original_max_position_embeddings", "attention_factor"),
    length=_longrope_length,
)
def _longrope(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    rotary_dim: int,
    max_position_embeddings: int | None,
    seq_len: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    original = original_length(params, max_position_embeddings)
    if original < 2:
        raise ValueError(
            f"longrope: the original context length must be >= 2 (its attention factor divides by "
            f"ln of it), got original_max_position_embeddings={original}"
        )
    short = _factor_list(params, "short_factor", rotary_dim)
    long = _factor_list(params, "long_factor", rotary_dim)
    attention = real_value(params, "attention_factor", minimum=0.0, strict_min=True)
    if attention is None:
        factor = factor_or_ratio(params, original, max_position_embeddings)
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = long if seq_len is not None and seq_len > original else short
    return inv_freq / ext, float(attention)


def _factor_list(params: Mapping[str, Any], key: str, rotary_dim: int) -> np.ndarray:
    value = params[key]
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{where(params, key)} must be a list of numbers, got {value!r}") from None
    if arr.ndim != 1 or arr.shape[0] != rotary_dim // 2:
        raise ValueError(
            f"{where(params, key)} must be a list of rotary_dim // 2 = {rotary_dim // 2} numbers "
            f"(one per frequency), got {arr.shape[0] if arr.ndim == 1 else arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{where(params, key)} must hold finite numbers > 0")
    return arr


@register("ntk_alpha", required=("alpha",), optional=("factor",))
def _ntk_alpha(
    inv_freq: np.ndarray, params: Mapping[str, Any], *, base: float, head_dim: int, rotary_dim: int, **context: Any
) -> tuple[np.ndarray, float]:
    """Hunyuan: the base stretched once by ``alpha ** (d / (d - 2))`` (``d`` = head dim), whatever the length.

    transformers computes it in the Hunyuan families' own code for a ``dynamic`` dict that has ``alpha``
    (their configs publish ``{"type": "dynamic", "alpha": 1000}``); ``factor`` is not read.
    """
    alpha = real_value(params, "alpha", minimum=0.0, strict_min=True)
    if rotary_dim != head_dim or head_dim == 2:
        raise ValueError(
            f"ntk_alpha: transformers stretches the base over the whole head (head_dim={head_dim}), which it "
            f"rotates whole; rotary_dim={rotary_dim} is not supported"
        )
    d = head_dim
    stretched = base * alpha ** (d / (d - 2))
    return stretched ** (-np.arange(0, d, 2, dtype=np.float64) / d), 1.0


@register(
    "longrope_mscale",
    required=("short_factor", "long_factor", "short_mscale", "long_mscale"),
    optional=("factor", "original_max_position_embeddings"),
    length=_longrope_length,
)
def _longrope_mscale(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    rotary_dim: int,
    max_position_embeddings: int | None,
    seq_len: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    """PhiMoE: LongRoPE whose attention factor is ``short_mscale`` up to the original length, ``long_mscale`` beyond.

    transformers' PhiMoE applies ``long_mscale`` beyond the original length but keeps the short factors
    there (its rotary module recomputes the frequencies without the length), while the reference
    implementation divides by ``long_factor``: beyond the original length arrayrope refuses instead of
    guessing which one a checkpoint was trained with.
    """
    original = original_length(params, max_position_embeddings)
    short = _factor_list(params, "short_factor", rotary_dim)
    _factor_list(params, "long_factor", rotary_dim)
    short_mscale = real_value(params, "short_mscale", minimum=0.0, strict_min=True)
    real_value(params, "long_mscale", minimum=0.0, strict_min=True)
    if seq_len is not None and seq_len > original:
        raise ValueError(
            f"longrope_mscale (PhiMoE): at length {seq_len} > original_max_position_embeddings={original} "
            "transformers keeps short_factor and scales cos and sin by long_mscale, while the reference "
            "implementation divides by long_factor; arrayrope does not guess which one the checkpoint needs. "
            "Pass scaling= with the rope type and attention_factor you mean (longrope, attention_factor=long_mscale)"
        )
    return inv_freq / short, float(short_mscale)


@register(
    "llama3",
    required=("factor", "low_freq_factor", "high_freq_factor"),
    optional=("original_max_position_embeddings",),
    fit=_fit.llama3,
)
def _llama3(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    max_position_embeddings: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    factor = required_factor(params)
    low = real_value(params, "low_freq_factor", minimum=0.0, strict_min=True)
    high = real_value(params, "high_freq_factor", minimum=0.0, strict_min=True)
    if low > high:
        raise ValueError(f"llama3: scaling['low_freq_factor']={low:g} must be <= scaling['high_freq_factor']={high:g}")
    original = original_length(params, max_position_embeddings)
    wavelength = 2 * math.pi / inv_freq
    kept, interpolated = wavelength < original / high, wavelength > original / low
    if low == high:  # Llama 4: a step at one wavelength, no band in between
        if not np.all(kept | interpolated):
            raise ValueError(
                f"llama3: with low_freq_factor == high_freq_factor == {low:g} a pair's wavelength equals the cutoff "
                f"{original / low:g} exactly, where the blend is 0/0 (transformers gives NaN there)"
            )
        return np.where(kept, inv_freq, inv_freq / factor), 1.0
    smooth = (original / wavelength - low) / (high - low)
    out = (1 - smooth) * inv_freq / factor + smooth * inv_freq  # the band in between
    out = np.where(kept, inv_freq, out)  # short wavelengths kept
    out = np.where(interpolated, inv_freq / factor, out)  # long ones interpolated
    return out, 1.0


def _mscaled(name: str) -> None:
    """Register ``{name}_phimoe``: PhiMoE's rotary module with rope type ``name``, which scales cos and sin by
    ``short_mscale`` up to the original length and by ``long_mscale`` beyond it, in place of the type's own
    attention factor (its frequencies are the type's, whatever the length)."""
    inner = ROPE_TYPES[name]

    @register(
        f"{name}_phimoe",
        required=(*sorted(inner.required), "short_mscale", "long_mscale"),
        optional=tuple(sorted(inner.optional | {"original_max_position_embeddings"})),
        length=_longrope_length,
    )
    def scaled(
        inv_freq: np.ndarray,
        params: Mapping[str, Any],
        *,
        max_position_embeddings: int | None,
        seq_len: int | None,
        **context: Any,
    ) -> tuple[np.ndarray, float]:
        out, _ = inner.frequencies(
            inv_freq, params, max_position_embeddings=max_position_embeddings, seq_len=seq_len, **context
        )
        original = original_length(params, max_position_embeddings)
        short = real_value(params, "short_mscale", minimum=0.0, strict_min=True)
        long = real_value(params, "long_mscale", minimum=0.0, strict_min=True)
        return out, float(long if seq_len is not None and seq_len > original else short)


_mscaled("llama3")
_mscaled("yarn")


@register("proportional", optional=("factor",), fit=_fit.proportional)
def _proportional(
    inv_freq: np.ndarray, params: Mapping[str, Any], *, base: float, head_dim: int, rotary_dim: int, **context: Any
) -> tuple[np.ndarray, float]:
    """Gemma 4: every pair of the head, the first ``rotary_dim / 2`` turning by ``base ** (-2i / head_dim) / s``.

    The exponent runs over ``head_dim``, not the rotary dim, and the pairs past the rotary
    dim keep frequency 0 (they pass through), so the result has ``head_dim // 2`` entries.
    """
    factor = factor_of(params) or 1.0
    out = np.zeros(head_dim // 2, dtype=np.float64)
    out[: rotary_dim // 2] = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / head_dim)
    return out / factor, 1.0
