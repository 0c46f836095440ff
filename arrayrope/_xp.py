"""Namespace, device and dtype helpers shared by every encoding.

Everything backend-specific that the math needs is answered here, once, so the
rest of the package is written against the Array API standard alone.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat as compat
import numpy as np

__all__ = [
    "namespace",
    "device_of",
    "has_float64",
    "is_lazy",
    "check_array",
    "default_table_dtype",
]

_normalized: dict[int, Any] = {}
_float64_support: dict[tuple, bool] = {}


def namespace(*arrays: Any, xp: Any = None, names: tuple[str, ...] = ()) -> Any:
    """The array namespace of ``arrays``, or ``xp`` normalised to a compliant one.

    ``xp`` may be a raw module (``numpy``, ``torch``, ``cupy``, ``dask.array``,
    ``jax.numpy``) or a compliant namespace; raw modules are mapped to their
    ``array_api_compat`` wrappers. ``names`` label the arrays in the error raised
    when they come from different libraries.
    """
    if xp is not None:
        key = id(xp)
        ns = _normalized.get(key)
        if ns is None:
            ns = compat.array_namespace(xp.asarray(0))
            _normalized[key] = ns
        if arrays:
            _same_namespace(ns, arrays, names, given_xp=True)
        return ns
    arrays = tuple(a for a in arrays if a is not None)
    if not arrays:
        return compat.array_namespace(np.empty(0))
    return _same_namespace(None, arrays, names, given_xp=False)


def _same_namespace(ns: Any, arrays: tuple, names: tuple[str, ...], *, given_xp: bool) -> Any:
    found = []
    for i, a in enumerate(arrays):
        name = names[i] if i < len(names) else f"argument {i}"
        if not compat.is_array_api_obj(a):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
        found.append((name, compat.array_namespace(a)))
    first_name, first = found[0]
    for name, other in found[1:]:
        if other is not first:
            raise TypeError(
                f"{name} is a {_lib(other)} array but {first_name} is a {_lib(first)} array; "
                "pass arrays of one library"
            )
    if given_xp and first is not ns:
        raise TypeError(
            f"{first_name} is a {_lib(first)} array but xp={_lib(ns)}; "
            "pass xp=None or arrays of that library"
        )
    return first


def _lib(ns: Any) -> str:
    name = getattr(ns, "__name__", repr(ns))
    return name.replace("array_api_compat.", "")


def device_of(x: Any) -> Any:
    """The device of ``x`` (``None`` for a JAX array being traced)."""
    return compat.device(x)


def same_device(a: Any, b: Any, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` when ``a`` and ``b`` live on different devices."""
    da, db = compat.device(a), compat.device(b)
    if da is None or db is None or da == db:
        return
    raise ValueError(f"{name_b} is on device {db} but {name_a} is on device {da}; move one of them")


def _key(obj: Any) -> Any:
    try:
        hash(obj)
        return obj
    except TypeError:
        return repr(obj)


def has_float64(xp: Any, device: Any) -> bool:
    """Whether ``xp`` computes in float64 on ``device`` (JAX without x64, Apple MPS do not)."""
    key = (id(xp), _key(device))
    ok = _float64_support.get(key)
    if ok is None:
        try:
            info = xp.__array_namespace_info__()
            ok = "float64" in info.dtypes(device=device, kind="real floating")
        except Exception:  # a namespace without the inspection API: try it
            try:
                ok = xp.asarray(1.0, dtype=xp.float64, device=device).dtype == xp.float64
            except Exception:
                ok = False
        _float64_support[key] = ok
    return ok


def is_lazy(x: Any) -> bool:
    """Whether values of ``x`` cannot be inspected without forcing computation (JAX, Dask)."""
    return compat.is_lazy_array(x)


def check_array(x: Any, name: str) -> None:
    if not compat.is_array_api_obj(x):
        raise TypeError(f"{name} must be an array (NumPy, PyTorch, CuPy, JAX, Dask...), got {type(x).__name__}")


def is_real_floating(xp: Any, dtype: Any) -> bool:
    return xp.isdtype(dtype, "real floating")


def default_table_dtype(xp: Any) -> Any:
    return xp.float32


def shape_tuple(x: Any) -> tuple:
    return tuple(x.shape)


def known(n: Any) -> bool:
    """Whether a shape entry is known (Dask may leave sizes unknown as NaN)."""
    return n is not None and not (isinstance(n, float) and math.isnan(n))


def broadcast_shapes(a: tuple, b: tuple) -> tuple | None:
    """The broadcast of two shapes, or ``None`` when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        m = a[-i] if i <= len(a) else 1
        n = b[-i] if i <= len(b) else 1
        if not (known(m) and known(n)):
            out.append(m if not known(m) else n)
        elif m == n or n == 1:
            out.append(m)
        elif m == 1:
            out.append(n)
        else:
            return None
    return tuple(reversed(out))
