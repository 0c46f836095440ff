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
  above ``L0 / low_freq_factor``, a smooth blend in between; 1.

The semantics follow Hugging Face transformers (the convention checkpoints are
loaded with), including its defaults: ``type`` is read where ``rope_type`` is
missing, and the old names in :data:`ALIASES` are accepted; yarn's ``beta_fast``/``beta_slow``
default to 32/1, ``truncate`` to True, its missing ``factor`` to ``Lmax / L0`` and its attention factor is
``m(s, mscale) / m(s, mscale_all_dim)`` when both are set (``m`` is
:func:`yarn_mscale`); longrope's missing ``factor`` is ``Lmax / L0``;
``original_max_position_embeddings`` falls back to ``max_position_embeddings``
(transformers v5 does the same when it standardizes a config). An explicit
``attention_factor`` always wins. Values that are ``None`` count as missing.

Unlike transformers, which logs a warning and goes on, a dict that cannot be
right raises: an unknown ``rope_type``, a missing required key, ``factor < 1``,
``low_freq_factor >= high_freq_factor``, ``beta_fast < beta_slow``, factor lists
of the wrong length. Keys a rope type does not read are left out of the math
and reported in one warning.

Adding a rope type is one function and its entry::

    @register("mine", required=("factor",), optional=("beta",))
    def _mine(inv_freq, params, *, base, rotary_dim, max_position_embeddings, seq_len, **context):
        return inv_freq / params["factor"], 1.0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["ALIASES", "COMMON_KEYS", "ROPE_TYPES", "RopeType", "register", "rope_type", "scale", "yarn_mscale"]

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


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1 when ``factor <= 1``).

    Hugging Face multiplies cos and sin by ``yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all_dim)``
    (or ``yarn_mscale(s)``), which scales ``q . k`` by its square. DeepSeek-V2/V3 set
    ``mscale == mscale_all_dim`` so that factor is 1, and instead multiply the softmax
    scale by ``yarn_mscale(s, mscale_all_dim) ** 2``.

    Examples
    --------
    >>> from arrayrope.scaling import yarn_mscale
    >>> round(yarn_mscale(40.0, 1.0), 6)
    1.368888
    >>> yarn_mscale(1.0)
    1.0
    """
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


# ---------------------------------------------------------------- value checks


def _where(params: Mapping[str, Any], key: str) -> str:
    return f"scaling[{key!r}] (rope_type {_type_of(params)!r})"


def _type_of(params: Mapping[str, Any]) -> str:
    return params.get("rope_type") or params.get("type") or "default"


def _real(params: Mapping[str, Any], key: str, *, default: Any = None, minimum: float | None = None,
          strict_min: bool = False) -> Any:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"{_where(params, key)} must be a finite number, got {value!r}")
    value = float(value)
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        op = ">" if strict_min else ">="
        raise ValueError(f"{_where(params, key)} must be {op} {minimum:g}, got {value:g}")
    return value


def _length(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _original_length(params: Mapping[str, Any], max_position_embeddings: int | None) -> int:
    value = params.get("original_max_position_embeddings")
    if value is not None:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return _length(value, _where(params, "original_max_position_embeddings"))
    if max_position_embeddings is None:
        raise ValueError(
            f"scaling for rope_type {_type_of(params)!r} needs 'original_max_position_embeddings' "
            "(the pretraining context length); put it in the dict or pass max_position_embeddings="
        )
    return max_position_embeddings


def _factor(params: Mapping[str, Any]) -> float | None:
    factor: float | None = _real(params, "factor", minimum=1.0)
    return factor


def _required_factor(params: Mapping[str, Any]) -> float:
    """``factor`` of a type that requires it (the registry checked that it is there)."""
    factor = _factor(params)
    if factor is None:
        raise ValueError(f"scaling for rope_type {_type_of(params)!r} is missing required key(s) ['factor']")
    return factor


def _factor_or_ratio(params: Mapping[str, Any], original: int, max_position_embeddings: int | None) -> float:
    """``factor``, or ``Lmax / L0`` when the dict has none (yarn, longrope)."""
    factor = _factor(params)
    if factor is not None:
        return factor
    if max_position_embeddings is None:
        raise ValueError(
            f"scaling for rope_type {_type_of(params)!r} has no 'factor'; give it, or pass "
            "max_position_embeddings= so that factor = max_position_embeddings / original_max_position_embeddings"
        )
    return max_position_embeddings / original


# ---------------------------------------------------------------- rope types


@register("default")
def _default(inv_freq: np.ndarray, params: Mapping[str, Any], **context: Any) -> tuple[np.ndarray, float]:
    return inv_freq, 1.0


@register("linear", required=("factor",))
def _linear(inv_freq: np.ndarray, params: Mapping[str, Any], **context: Any) -> tuple[np.ndarray, float]:
    return inv_freq / _required_factor(params), 1.0


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
    factor = _required_factor(params)
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
    optional=("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
              "mscale_all_dim", "truncate"),
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
    original = _original_length(params, max_position_embeddings)
    if _factor(params) is None and params.get("original_max_position_embeddings") is None:
        raise ValueError(
            "scaling for rope_type 'yarn' needs 'factor', or 'original_max_position_embeddings' with "
            "max_position_embeddings= (factor = max_position_embeddings / original_max_position_embeddings)"
        )
    factor = _factor_or_ratio(params, original, max_position_embeddings)
    if factor < 1:
        raise ValueError(
            f"yarn: max_position_embeddings / original_max_position_embeddings = {factor:g} < 1; "
            "give scaling['factor'] >= 1"
        )
    if max_position_embeddings is not None and _factor(params) is not None:
        implicit = max_position_embeddings / original
        if implicit not in (1.0, factor):
            warnings.warn(
                f"yarn: scaling['factor']={factor:g} differs from max_position_embeddings / "
                f"original_max_position_embeddings = {implicit:g}; the explicit factor is used",
                stacklevel=4,
            )
    attention = _real(params, "attention_factor", minimum=0.0, strict_min=True)
    if attention is None:
        mscale = _real(params, "mscale")
        mscale_all_dim = _real(params, "mscale_all_dim")
        if mscale and mscale_all_dim:
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention = yarn_mscale(factor)
    beta_fast = _real(params, "beta_fast") or 32.0
    beta_slow = _real(params, "beta_slow") or 1.0
    if beta_fast < beta_slow:
        raise ValueError(f"yarn: scaling['beta_fast']={beta_fast:g} must be >= scaling['beta_slow']={beta_slow:g}")
    truncate = params.get("truncate", True)
    if truncate is None:
        truncate = True
    if not isinstance(truncate, (bool, np.bool_)):
        raise TypeError(f"{_where(params, 'truncate')} must be true or false, got {truncate!r}")

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
    original = _original_length(params, max_position_embeddings)
    short = _factor_list(params, "short_factor", rotary_dim)
    long = _factor_list(params, "long_factor", rotary_dim)
    attention = _real(params, "attention_factor", minimum=0.0, strict_min=True)
    if attention is None:
        factor = _factor_or_ratio(params, original, max_position_embeddings)
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = long if seq_len is not None and seq_len > original else short
    return inv_freq / ext, float(attention)


def _factor_list(params: Mapping[str, Any], key: str, rotary_dim: int) -> np.ndarray:
    value = params[key]
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{_where(params, key)} must be a list of numbers, got {value!r}") from None
    if arr.ndim != 1 or arr.shape[0] != rotary_dim // 2:
        raise ValueError(
            f"{_where(params, key)} must be a list of rotary_dim // 2 = {rotary_dim // 2} numbers "
            f"(one per frequency), got {arr.shape[0] if arr.ndim == 1 else arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{_where(params, key)} must hold finite numbers > 0")
    return arr


@register("llama3", required=("factor", "low_freq_factor", "high_freq_factor"),
          optional=("original_max_position_embeddings",))
def _llama3(
    inv_freq: np.ndarray,
    params: Mapping[str, Any],
    *,
    max_position_embeddings: int | None,
    **context: Any,
) -> tuple[np.ndarray, float]:
    factor = _required_factor(params)
    low = _real(params, "low_freq_factor", minimum=0.0, strict_min=True)
    high = _real(params, "high_freq_factor", minimum=0.0, strict_min=True)
    if low >= high:
        raise ValueError(
            f"llama3: scaling['low_freq_factor']={low:g} must be < scaling['high_freq_factor']={high:g}"
        )
    original = _original_length(params, max_position_embeddings)
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    out = (1 - smooth) * inv_freq / factor + smooth * inv_freq  # the band in between
    out = np.where(wavelength < original / high, inv_freq, out)  # short wavelengths kept
    out = np.where(wavelength > original / low, inv_freq / factor, out)  # long ones interpolated
    return out, 1.0


# ---------------------------------------------------------------- dispatch


def rope_type(scaling: Mapping[str, Any]) -> RopeType:
    """The registry entry a scaling dict names (``rope_type``, else ``type``, else ``"default"``).

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
    """Apply the scaling dict ``scaling``; returns ``(rope_type, inv_freq, attention_factor)``."""
    entry = rope_type(scaling)
    if max_position_embeddings is not None:
        max_position_embeddings = _length(max_position_embeddings, "max_position_embeddings")
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
        warnings.warn(
            f"scaling: key(s) {unknown} are not used by rope_type {entry.name!r} and were ignored",
            stacklevel=4,
        )
    theta = _real(scaling, "rope_theta")
    if theta is not None and not math.isclose(theta, base, rel_tol=1e-12):
        raise ValueError(
            f"scaling['rope_theta']={theta} differs from base={base}; pass base={theta} "
            "(or use rope_frequencies_from_config)"
        )
    prf = _real(scaling, "partial_rotary_factor")
    if prf is not None and int(head_dim * prf) != rotary_dim:
        raise ValueError(
            f"scaling['partial_rotary_factor']={prf} gives rotary_dim={int(head_dim * prf)} but "
            f"rotary_dim={rotary_dim}; pass partial_rotary_factor={prf}"
        )
