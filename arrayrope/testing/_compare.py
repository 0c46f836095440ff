"""Comparison of arrays across namespaces and devices with tolerances by dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backends import to_numpy

__all__ = ["assert_close", "default_tolerance"]

_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def _dtype_name(x: Any) -> str:
    name = str(getattr(x, "dtype", "float64")).split(".")[-1]
    return name if name in _EPS else "float64"


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for a dtype (name or dtype object): four units in the last place.

    Examples
    --------
    >>> from arrayrope.testing import default_tolerance
    >>> default_tolerance("float32")
    (4.76837158203125e-07, 4.76837158203125e-07)
    """
    name = str(dtype).split(".")[-1]
    if name not in _EPS:
        raise ValueError(f"dtype must be one of {sorted(_EPS)}, got {dtype!r}")
    tol = 4 * _EPS[name]
    return tol, tol


def assert_close(actual: Any, desired: Any, *, rtol: float | None = None, atol: float | None = None) -> None:
    """Assert ``|actual - desired| <= atol + rtol * |desired|`` elementwise, whatever the backends.

    Tolerances default to :func:`default_tolerance` of the coarser of the two dtypes.
    On failure the message gives the count of mismatches, the worst index and both values there.

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.testing import assert_close
    >>> assert_close(np.float32([1.0, 2.0]), np.array([1.0, 2.0000001]))
    >>> assert_close(np.array([-np.inf, np.nan]), np.array([-np.inf, np.nan]))
    """
    names = [_dtype_name(actual), _dtype_name(desired)]
    coarse = max(names, key=lambda n: _EPS[n])
    d_rtol, d_atol = default_tolerance(coarse)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a = to_numpy(actual).astype(np.float64)
    d = to_numpy(desired).astype(np.float64)
    if a.shape != d.shape:
        raise AssertionError(f"shapes differ: actual {a.shape}, desired {d.shape}")
    with np.errstate(invalid="ignore"):
        err = np.abs(a - d)
        bound = atol + rtol * np.abs(d)
        # equal values (infinities of one sign included) and NaN against NaN agree
        bad = ~((np.isfinite(err) & (err <= bound)) | (a == d) | (np.isnan(a) & np.isnan(d)))
    if np.any(bad):
        excess = np.where(bad, np.nan_to_num(err - bound, nan=np.inf), -np.inf)
        worst = np.unravel_index(int(np.argmax(excess)), a.shape) if a.ndim else ()
        raise AssertionError(
            f"{int(bad.sum())} of {a.size} elements differ beyond rtol={rtol:g}, atol={atol:g} ({coarse}); "
            f"worst at index {tuple(int(i) for i in worst)}: actual {a[worst]!r}, desired {d[worst]!r}, "
            f"abs error {err[worst]:.3g}; max abs error {np.nanmax(err):.3g}"
        )
