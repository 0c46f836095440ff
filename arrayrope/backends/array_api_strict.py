"""array_api_strict: the conformance backend, with and without float64 (its ``no_float64`` device)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import array_api_strict as xp
import numpy as np

from ._defaults import arange_tables, concrete, constant, host, prepare, rotate, rotate_prepared, tracing

if TYPE_CHECKING:
    from .registry import Backend

__all__ = [
    "arange_tables",
    "concrete",
    "constant",
    "host",
    "prepare",
    "probe",
    "rotate",
    "rotate_prepared",
    "to_numpy",
    "tracing",
]


def probe() -> list[Backend]:
    """The CPU device, and the ``no_float64`` device that refuses float64."""
    from .registry import Backend

    return [
        Backend("array_api_strict", xp, xp.Device("CPU_DEVICE"), ("float32", "float64"), native=xp),
        Backend("array_api_strict-no_float64", xp, xp.Device("no_float64"), ("float32",), native=xp),
    ]


def to_numpy(x: Any) -> np.ndarray:
    return np.from_dlpack(xp.asarray(x, device=xp.Device("CPU_DEVICE"), copy=True))
