"""Values of a scaling dict, read with messages that name the key and the rope type."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from .._lib import checks


def where(params: Mapping[str, Any], key: str) -> str:
    return f"scaling[{key!r}] (rope_type {type_of(params)!r})"


def type_of(params: Mapping[str, Any]) -> str:
    return params.get("rope_type") or params.get("type") or "default"


def real_value(
    params: Mapping[str, Any], key: str, *, default: Any = None, minimum: float | None = None, strict_min: bool = False
) -> Any:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where(params, key)} must be a finite number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{where(params, key)} must be a finite number, got {value!r}")
    value = float(value)
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        op = ">" if strict_min else ">="
        raise ValueError(f"{where(params, key)} must be {op} {minimum:g}, got {value:g}")
    return value


def positive_length(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def original_length(params: Mapping[str, Any], max_position_embeddings: int | None) -> int:
    value = params.get("original_max_position_embeddings")
    if value is not None:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return positive_length(value, where(params, "original_max_position_embeddings"))
    if max_position_embeddings is None:
        raise ValueError(
            f"scaling for rope_type {type_of(params)!r} needs 'original_max_position_embeddings' "
            "(the pretraining context length); put it in the dict or pass max_position_embeddings="
        )
    return max_position_embeddings


def factor_of(params: Mapping[str, Any]) -> float | None:
    factor: float | None = real_value(params, "factor", minimum=1.0)
    return factor


def required_factor(params: Mapping[str, Any]) -> float:
    """``factor`` of a type that requires it (the registry checked that it is there)."""
    factor = factor_of(params)
    if factor is None:
        raise ValueError(f"scaling for rope_type {type_of(params)!r} is missing required key(s) ['factor']")
    return factor


def factor_or_ratio(params: Mapping[str, Any], original: int, max_position_embeddings: int | None) -> float:
    """``factor``, or ``Lmax / L0`` when the dict has none (yarn, longrope)."""
    factor = factor_of(params)
    if factor is not None:
        return factor
    if max_position_embeddings is None:
        raise ValueError(
            f"scaling for rope_type {type_of(params)!r} has no 'factor'; give it, or pass "
            "max_position_embeddings= so that factor = max_position_embeddings / original_max_position_embeddings"
        )
    return max_position_embeddings / original


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """Compute YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1 when ``factor <= 1``).

    Hugging Face multiplies cos and sin by ``yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all_dim)``
    (or ``yarn_mscale(s)``), which scales ``q . k`` by its square. DeepSeek-V2/V3 set
    ``mscale == mscale_all_dim`` so that factor is 1, and instead multiply the softmax
    scale by ``yarn_mscale(s, mscale_all_dim) ** 2``.

    Parameters
    ----------
    factor : float
        The scaling factor (positive).
    mscale : float
        The config's ``mscale`` (or ``mscale_all_dim``).

    Returns
    -------
    float
        The correction.

    Examples
    --------
    >>> from arrayrope.scaling import yarn_mscale
    >>> round(yarn_mscale(40.0, 1.0), 6)
    1.368888
    >>> yarn_mscale(1.0)
    1.0
    """
    factor = checks.positive_real(factor, "factor")
    mscale = checks.finite_real(mscale, "mscale")
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0
