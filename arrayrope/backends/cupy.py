"""CuPy: the backend entry (CUDA); rotary application takes the reference (elementwise kernels on the GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import cupy
import numpy as np

if TYPE_CHECKING:
    from .registry import Backend

__all__ = ["probe", "to_numpy"]


def probe() -> list[Backend]:
    """CuPy on the first CUDA device; raises without one."""
    import array_api_compat.cupy as xp

    from .registry import Backend

    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no CUDA device")
    return [Backend("cupy", xp, cupy.cuda.Device(0), ("float16", "float32", "float64"), native=cupy,
                    synchronize=cupy.cuda.Device().synchronize)]


def to_numpy(x: Any) -> np.ndarray:
    out: np.ndarray = x.get()
    return out
