"""Argument checks with messages that name the argument, the value and what is expected."""

from __future__ import annotations

import math
import numbers
from typing import Any

LAYOUTS = ("half", "interleaved")


def positive_int(value: Any, name: str, *, even: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if even and value % 2:
        raise ValueError(f"{name} must be even (features rotate in pairs), got {value}")
    return value


def non_negative_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def positive_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def rotary_dim(rotary: Any, head_dim: int, name: str = "rotary_dim") -> int:
    if rotary is None:
        return head_dim
    rotary = positive_int(rotary, name, even=True)
    if rotary > head_dim:
        raise ValueError(f"{name} must be <= head_dim={head_dim}, got {rotary}")
    return rotary


def layout(value: Any) -> str:
    if value not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {value!r}")
    return value


def choice(value: Any, name: str, options: tuple) -> Any:
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value
