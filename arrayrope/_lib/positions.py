"""Positions, read one way everywhere: a count, or an array of integer or real positions.

Positions lie in the int64 range ``[-2**63, 2**63)``: checked for real and uint64
positions whose values exist (traced and lazy arrays, under ``jax.jit``, ``torch.compile``
or Dask, are never inspected). Positions
derived from others (an offset plus steps) are computed in a dtype that holds them
(:func:`add_steps`), never in a narrow dtype that would wrap. A 0-d integer array is an
int wherever an int is accepted (:func:`scalar_int`); under a trace it stays an array.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from . import fence
from .dtypes import dtype_name, index_dtype
from .types import Array, Device, Namespace

__all__ = ["LIMIT", "add_steps", "as_positions", "magnitude_bits", "position_array", "scalar_int"]

#: Positions must lie in ``[-LIMIT, LIMIT)`` (the int64 range).
LIMIT = 2**63


def as_positions(
    value: Any,
    name: str = "positions",
    *,
    xp: Namespace | None = None,
    device: Device = None,
    like: Array | None = None,
    like_name: str = "q",
    count: bool = True,
) -> tuple[Namespace, Array | int, Device]:
    """``(namespace, positions, device)`` for a positions argument.

    Parameters
    ----------
    value : int, array or array-like
        With ``count=True`` an int ``n >= 0`` means positions ``0 .. n-1`` and is
        returned as an int. Arrays must have an integer or real floating dtype; other
        sequences become arrays of ``xp`` (or ``like``'s namespace, default NumPy).
        Real positions must be finite and all positions in the int64 range: checked
        where the values exist, so that traces (``jax.jit``, ``torch.compile``) and Dask
        graphs compute nothing. Unsigned positions come
        back in the signed dtype that holds them (uint8 as int16, ..., uint64 as int64).
    name : str
        The argument's name, for error messages.
    xp : namespace, optional
        The namespace ``value`` must belong to.
    device : optional
        Where the positions are wanted: an array elsewhere is moved there.
    like : array, optional
        An array whose namespace and device the positions must share (not moved: a
        position array on another device than ``like`` is an error).
    count : bool
        Whether an int is a count.
    """
    if like is not None:
        xp = fence.backends.namespace(like, xp=xp)
    if count and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} as an int is a count n (positions 0..n-1) and must be >= 0, got {value}")
        ns = fence.backends.namespace(xp=xp)
        fence.backends.check_device(ns, device)
        return ns, int(value), device
    if value is None or isinstance(value, (bool, float, complex, str, bytes)):
        expected = "an int count or an array" if count else "an array"
        raise TypeError(f"{name} must be {expected} of integer or real positions, got {value!r}")
    if not fence.backends.is_array(value):
        ns = fence.backends.namespace(xp=xp)
        fence.backends.check_device(ns, device)
        where = fence.backends.device_of(like) if like is not None else device
        try:
            host = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array of integer or real positions, got {value!r}") from exc
        if host.dtype.kind not in "iuf":
            raise TypeError(f"{name} must have an integer or real floating dtype, got {host.dtype} from {value!r}")
        value = ns.asarray(host, device=where)
    if like is not None:
        mine = fence.backends.namespace(value, names=(name,))
        if mine is not xp:
            raise TypeError(
                f"{name} is a {fence.backends.library_name(mine)} array but {like_name} is a "
                f"{fence.backends.library_name(xp)} array; pass arrays of one library"
            )
    ns = fence.backends.namespace(value, xp=xp, names=(name,))
    if like is not None:
        fence.backends.same_device(like, value, like_name, name)
    fence.backends.check_device(ns, device)
    here = fence.backends.device_of(value)
    if device is None:
        device = here
    elif here is not None and here != device:
        value = fence.backends.to_device(value, device)
    dt = value.dtype
    if not (fence.backends.is_integral(ns, dt) or fence.backends.is_real_floating(ns, dt)):
        raise TypeError(f"{name} must have an integer or real floating dtype, got {dt}")
    if ns.isdtype(dt, "unsigned integer"):
        value = _signed(ns, value, name, device)
    elif fence.backends.concrete(value) and fence.backends.is_real_floating(ns, dt):
        lo, hi = _extremes(ns, value)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"{name} must be finite; got NaN or infinity")
        if lo < -LIMIT or hi >= LIMIT:
            raise ValueError(
                f"{name} must lie in the int64 range [-2**63, 2**63); got values from {lo:.6g} to {hi:.6g}"
            )
    return ns, value, device


def _signed(xp: Namespace, value: Array, name: str, device: Device) -> Array:
    """Unsigned positions as the signed dtype that holds them (every library computes with those):
    uint8 -> int16, uint16 -> int32, uint32 -> int64 (where there is one), uint64 -> int64 once checked."""
    bits = int(xp.iinfo(value.dtype).bits)
    if bits == 64 and fence.backends.concrete(value) and math.prod(value.shape):
        try:
            top = int(xp.max(value))
        except Exception:  # a library without reductions for uint64 (PyTorch): to within float64 rounding
            top = int(xp.max(xp.astype(value, xp.float64 if fence.backends.has_float64(xp, device) else xp.float32)))
        if top >= LIMIT:
            raise ValueError(f"{name} must lie in the int64 range [-2**63, 2**63); got values up to {top:.6g}")
    wider = {8: "int16", 16: "int32", 32: "int64", 64: "int64"}[bits]
    if wider == "int64" and not fence.backends.has_int64(xp, device):
        return value
    return xp.astype(value, getattr(xp, wider))


def _bits_of(xp: Namespace, dtype: Any) -> int:
    """Bound ``b`` on the magnitude of any position of ``dtype``, ``|p| < 2**b`` (64 for wide real dtypes)."""
    if fence.backends.is_integral(xp, dtype):
        return int(xp.iinfo(dtype).bits)
    return 16 if dtype == getattr(xp, "float16", None) else 64


def _extremes(xp: Namespace, pos: Array) -> tuple[Any, Any]:
    """The smallest and largest position (Python numbers; 0, 0 for an empty array)."""
    if math.prod(pos.shape) == 0:
        return 0, 0
    cast = int if fence.backends.is_integral(xp, pos.dtype) else float
    return cast(xp.min(pos)), cast(xp.max(pos))


def magnitude_bits(xp: Namespace, pos: Array) -> int:
    """``b`` such that every position has ``|p| < 2**b`` (and its nearest integer too).

    Read from the values where they exist, from the dtype for traced and lazy arrays,
    whose values are never inspected.
    """
    if not fence.backends.concrete(pos):
        return _bits_of(xp, pos.dtype)
    lo, hi = _extremes(xp, pos)
    top: int = math.ceil(max(-lo, hi))
    return top.bit_length()


def add_steps(xp: Namespace, start: Array, steps: int, device: Device, name: str = "offset") -> Array:
    """Positions ``start[..., None] + arange(steps)``, in a dtype that holds them.

    ``start`` (integers) is widened to int64 where the device has it, so that
    nothing wraps; where it has no int64 (JAX without x64) the positions must fit in
    int32, checked where the values exist.
    """
    wide = index_dtype(xp, device)
    top = steps - 1
    if fence.backends.concrete(start):
        lo, hi = _extremes(xp, start)
        limit = xp.iinfo(wide).max
        if hi + top > limit or lo < xp.iinfo(wide).min:
            raise ValueError(
                f"{name} + seq - 1 must fit in {dtype_name(wide)} (at most {limit}), "
                f"got {name} values up to {hi} with seq={steps}"
            )
    start = xp.astype(start, wide)
    return start[..., None] + xp.arange(steps, dtype=wide, device=device)


def scalar_int(value: Any) -> Any:
    """``value`` as a Python int where it holds one integer that can be read now, else ``value`` itself.

    Ints (bools are not), NumPy integers and 0-d integer arrays of any library whose
    value exists (NumPy, PyTorch, CuPy, array_api_strict, JAX outside a trace) become
    ints; traced 0-d arrays (``jax.jit``, torch.compile), Dask arrays and everything
    else come back unchanged, for the caller to compute with as arrays or to refuse.
    Reading the value waits for the array's device, as ``int()`` does.
    """
    if type(value) is int:  # the common case, without the abstract class's check
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if (
        fence.backends.is_array(value)
        and value.ndim == 0
        and fence.backends.concrete(value)
        and fence.backends.is_integral(fence.backends.namespace(value), value.dtype)
    ):
        return int(value)
    return value


def position_array(
    value: Any,
    name: str = "positions",
    *,
    xp: Namespace | None = None,
    device: Device = None,
    like: Array | None = None,
    like_name: str = "q",
) -> tuple[Namespace, Array, Device]:
    """:func:`as_positions` for an argument that must be an array (an int is a 0-d array, not a count)."""
    return as_positions(value, name, xp=xp, device=device, like=like, like_name=like_name, count=False)
