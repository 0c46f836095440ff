"""Argument checks with messages that name the argument, the value and what is expected."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from .types import LAYOUTS, Layout

T = TypeVar("T")


def integer(value: object, name: str, *, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    out = int(value)
    if out < minimum:
        raise ValueError(f"{name} must be {'positive' if minimum == 1 else f'>= {minimum}'}, got {out}")
    return out


def positive_int(value: object, name: str, *, even: bool = False) -> int:
    """``value`` as an int > 0 (and even when ``even``)."""
    out = integer(value, name, minimum=1)
    if even and out % 2:
        raise ValueError(f"{name} must be even (features rotate in pairs), got {out}")
    return out


def non_negative_int(value: object, name: str) -> int:
    """``value`` as an int >= 0."""
    return integer(value, name, minimum=0)


def positive_real(value: object, name: str) -> float:
    """``value`` as a finite float > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    out = float(value)
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {out}")
    return out


def finite_real(value: object, name: str) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a finite number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def boolean(value: object, name: str) -> bool:
    """``value`` as a bool: ``True``/``False`` (NumPy's ``bool_`` too), never a string or a number."""
    if isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def rotary_dim(rotary: object, head_dim: int, name: str = "rotary_dim") -> int:
    """The rotary dim: ``head_dim`` when None, else an even int in ``[2, head_dim]``."""
    if rotary is None:
        return head_dim
    out = positive_int(rotary, name, even=True)
    if out > head_dim:
        raise ValueError(f"{name} must be <= head_dim={head_dim}, got {out}")
    return out


def layout(value: object) -> Layout:
    """``value`` as a :data:`~arrayrope._lib.types.Layout`."""
    for option in LAYOUTS:
        if value == option and isinstance(value, str):
            return option
    raise ValueError(f"layout must be one of {LAYOUTS}, got {value!r}")


def choice(value: Any, name: str, options: Sequence[T]) -> T:
    """``value`` when it is one of ``options`` (compared by equality and type)."""
    for option in options:
        if type(value) is type(option) and value == option:
            return option
    raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}")


def int_sequence(value: object, name: str, *, positive: bool) -> tuple[int, ...]:
    """A non-empty sequence of ints (each >= 1 when ``positive``) as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise TypeError(f"{name} must be a non-empty sequence of ints, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must contain ints, got {value!r}")
        if positive and v < 1:
            raise ValueError(f"{name} must contain positive ints, got {list(value)}")
        out.append(int(v))
    return tuple(out)
