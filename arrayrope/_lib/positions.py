"""Positions, read one way everywhere: a count, or an array of integer or real positions."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import backends
from .types import Array, Device, Namespace

__all__ = ["as_positions", "position_array"]


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
        Real positions must be finite: checked on eager backends only, so JAX traces
        and Dask stays lazy.
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
        xp = backends.namespace(like, xp=xp)
    if count and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} as an int is a count n (positions 0..n-1) and must be >= 0, got {value}")
        return backends.namespace(xp=xp), int(value), device
    if value is None or isinstance(value, (bool, float, complex, str, bytes)):
        expected = "an int count or an array" if count else "an array"
        raise TypeError(f"{name} must be {expected} of integer or real positions, got {value!r}")
    if not backends.is_array(value):
        ns = backends.namespace(xp=xp)
        where = backends.device_of(like) if like is not None else device
        try:
            host = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array of integer or real positions, got {value!r}") from exc
        if host.dtype.kind not in "iuf":
            raise TypeError(f"{name} must have an integer or real floating dtype, got {host.dtype} from {value!r}")
        value = ns.asarray(host, device=where)
    ns = backends.namespace(value, xp=xp, names=(name,))
    if like is not None:
        backends.same_device(like, value, like_name, name)
    here = backends.device_of(value)
    if device is None:
        device = here
    elif here is not None and here != device:
        value = backends.to_device(value, device)
    dt = value.dtype
    if not (backends.is_integral(ns, dt) or backends.is_real_floating(ns, dt)):
        raise TypeError(f"{name} must have an integer or real floating dtype, got {dt}")
    if backends.is_real_floating(ns, dt) and not backends.is_lazy(value) and not bool(ns.all(ns.isfinite(value))):
        raise ValueError(f"{name} must be finite; got NaN or infinity")
    return ns, value, device


def position_array(
    value: Any, name: str = "positions", *, xp: Namespace | None = None, device: Device = None,
    like: Array | None = None, like_name: str = "q",
) -> tuple[Namespace, Array, Device]:
    """:func:`as_positions` for an argument that must be an array (an int is a 0-d array, not a count)."""
    return as_positions(value, name, xp=xp, device=device, like=like, like_name=like_name, count=False)
