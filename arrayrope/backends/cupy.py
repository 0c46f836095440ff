"""CuPy: the backend entry (CUDA), and rotary application as one elementwise kernel per call.

The reference path launches a kernel per operation (slices, products, sums,
concatenation); here one kernel reads each pair of ``x`` and its cos/sin once and
writes both rotated features, in float32 (float64 where an input is float64),
rounding once to ``x``'s dtype. The kernel writes into a C-contiguous ``out=`` directly
(``x`` itself too: each thread reads its pair before it writes it); any other
destination gets the kernel's fresh output copied in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import cupy
import numpy as np

from .._lib.rotation import rotate_reference
from ._defaults import arange_tables, concrete, constant, host, prepare, rotate_prepared, tracing

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

# One thread per pair: i runs over x.shape[:-1] + (h,); row = i / h, pair j = i % h. Features a and b
# of the pair are j and j + h (half-split) or 2j and 2j + 1 (interleaved) within a row of d features.
_BODY = """
const long long row = i / h, j = i - row * h;
const long long a = row * d + (interleaved ? 2 * j : j), b = a + (interleaved ? 1 : h);
const W xa = (W)x[a], xb = (W)x[b], c = (W)cos, s = (W)sin;
y[a] = (T)(xa * c - xb * s);
y[b] = (T)(xb * c + xa * s);
"""
_kernels: dict[str, Any] = {}
_FLOATS = ("float16", "float32", "float64")


def _kernel(wide: bool) -> Any:
    name = "double" if wide else "float"
    k = _kernels.get(name)
    if k is None:
        k = _kernels[name] = cupy.ElementwiseKernel(
            "C cos, C sin, raw T x, int64 h, int64 d, bool interleaved",
            "raw T y",
            _BODY,
            f"arrayrope_rotary_{name}",
            preamble=f"typedef {name} W;",
            no_return=True,
        )
    return k


def probe() -> list[Backend]:
    """CuPy on the first CUDA device; raises without one."""
    import array_api_compat.cupy as xp

    from .registry import Backend

    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no CUDA device")
    return [
        Backend(
            "cupy",
            xp,
            cupy.cuda.Device(0),
            ("float16", "float32", "float64"),
            native=cupy,
            synchronize=cupy.cuda.Device().synchronize,
        )
    ]


def to_numpy(x: Any) -> np.ndarray:
    out: np.ndarray = x.get()
    return out


#: CuPy arrays are written by ``out=``.
OUT_REFUSED: str | None = None
NOUN = "an array"


def memory_known(out: Any) -> bool:
    return True


def out_fault(out: Any) -> str | None:
    """An array that repeats elements cannot be written."""
    if any(s == 0 and n > 1 for n, s in zip(out.shape, out.strides, strict=True)):
        return "repeats elements (a stride of 0, as broadcast_to makes); pass an array of its own"
    return None


def same_view(a: Any, b: Any) -> bool:
    return a is b or (a.data.ptr == b.data.ptr and a.shape == b.shape and a.strides == b.strides)


def shares(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` have an element in common: their memory bounds first, then exactly (which
    sorts the addresses of every element, so only where the bounds meet)."""
    return bool(cupy.may_share_memory(a, b)) and bool(cupy.shares_memory(a, b))


def rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str, out: Any = None) -> Any:
    """``x`` rotated into a fresh array or ``out``: one kernel over the pairs (and a copy of the features past
    rotary_dim)."""
    if (
        x.dtype.name not in _FLOATS
        or cos.dtype != sin.dtype
        or cos.dtype.name not in _FLOATS
        or x.size == 0
        or not x.flags.c_contiguous
    ):
        return rotate_reference(xp, x, cos, sin, layout, out)
    h, d = cos.shape[-1], x.shape[-1]
    pairs = (*x.shape[:-1], h)  # cos/sin broadcast to one value per pair
    # the kernel indexes y as x (row * d + feature): a C-contiguous out takes the result directly
    y = out if out is not None and out.flags.c_contiguous else cupy.empty_like(x)
    wide = "float64" in (x.dtype.name, cos.dtype.name)
    _kernel(wide)(cupy.broadcast_to(cos, pairs), cupy.broadcast_to(sin, pairs), x, h, d, layout == "interleaved", y)
    if 2 * h < d and y is not x:
        y[..., 2 * h :] = x[..., 2 * h :]
    if out is None or y is out:
        return y
    out[...] = y
    return out
