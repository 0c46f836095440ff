"""array_api_strict: the conformance backend, with and without float64 (its ``no_float64`` device)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import array_api_strict as xp
import numpy as np

from ._defaults import (
    NOUN,
    arange_tables,
    concrete,
    constant,
    host,
    memory_known,
    out_fault,
    prepare,
    rotate,
    rotate_prepared,
    same_view,
    shares,
    tracing,
)

if TYPE_CHECKING:
    from .registry import Backend

__all__ = [
    "NOUN",
    "OUT_REFUSED",
    "arange_tables",
    "concrete",
    "constant",
    "host",
    "memory_known",
    "out_fault",
    "prepare",
    "probe",
    "rotate",
    "rotate_prepared",
    "same_view",
    "shares",
    "to_numpy",
    "tracing",
]


#: The standard leaves writes through views undefined: ``out=`` is refused.
OUT_REFUSED: str | None = (
    "is refused for array_api_strict arrays: the Array API standard has no out= and leaves "
    "undefined whether a write into a slice reaches the array it was sliced from. Use the returned array "
    "(and assign it, buffer[...] = y, where your library defines that)"
)


def probe() -> list[Backend]:
    """The CPU device, and the ``no_float64`` device that refuses float64."""
    from .registry import Backend

    return [
        Backend("array_api_strict", xp, xp.Device("CPU_DEVICE"), ("float32", "float64"), native=xp),
        Backend("array_api_strict-no_float64", xp, xp.Device("no_float64"), ("float32",), native=xp),
    ]


def to_numpy(x: Any) -> np.ndarray:
    return np.from_dlpack(xp.asarray(x, device=xp.Device("CPU_DEVICE"), copy=True))
