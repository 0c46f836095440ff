"""Comparison of arrays, with tolerances derived from the dtype: one rule for every check."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.types import Array
from .._lib.verdicts import EPS, default_tolerance, tolerance_value
from ..backends import to_numpy

__all__ = ["assert_close"]


def _full_name(x: Any) -> str:
    """The dtype's own name whatever the library spells around it (``torch.float32``, ``dtype('float32')``)."""
    return str(getattr(x, "dtype", "")).split(".")[-1].removeprefix("dtype('").removesuffix("')")


def _dtype_name(x: Any) -> str:
    name = str(getattr(x, "dtype", "float64")).split(".")[-1]
    return name if name in EPS else "float64"


def assert_close(
    actual: Array,
    desired: Array,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_namespace: bool = True,
    check_dtype: bool = True,
    check_shape: bool = True,
    check_device: bool = True,
) -> None:
    """Assert that ``actual`` is ``desired``: same library, dtype, shape and device, and close values.

    Values pass where ``|actual - desired| <= atol + rtol * |desired|``, elementwise;
    equal infinities and NaN against NaN agree. Tolerances default to
    :func:`default_tolerance` of the coarser of the two dtypes. On failure the
    message gives the count of mismatches, the worst index and both values there.

    Parameters
    ----------
    actual, desired : array
        Arrays of any library (compared on the host in float64).
    rtol, atol : float, optional
        Relative and absolute tolerance.
    check_namespace, check_dtype, check_shape, check_device : bool
        Relax one of the checks, e.g. to compare a torch result with a float64 NumPy
        oracle (``check_namespace=False, check_dtype=False``). Devices are compared
        between arrays of one library. Shapes must always broadcast; with
        ``check_shape=False`` they need not be equal.

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.testing import assert_close
    >>> assert_close(np.float32([1.0, 2.0]), np.float32([1.0, 2.0000002]))
    >>> assert_close(np.float32([1.0, 2.0]), np.array([1.0, 2.0]))
    Traceback (most recent call last):
    ...
    AssertionError: dtypes differ: actual float32, desired float64 (pass check_dtype=False to compare values only)
    >>> assert_close(np.float32([1.0, 2.0]), np.array([1.0, 2.0]), check_dtype=False)
    """
    for name, value in (("actual", actual), ("desired", desired)):
        if value is None or isinstance(value, (str, bytes)):
            raise TypeError(f"{name} must be an array (or numbers), got {value!r}")
    for name, flag in (
        ("check_namespace", check_namespace),
        ("check_dtype", check_dtype),
        ("check_shape", check_shape),
        ("check_device", check_device),
    ):
        checks.boolean(flag, name)
    rtol = None if rtol is None else tolerance_value(rtol, "rtol")
    atol = None if atol is None else tolerance_value(atol, "atol")
    lib_a, lib_d = backends.library_of(actual), backends.library_of(desired)
    if check_namespace and lib_a != lib_d:
        raise AssertionError(
            f"namespaces differ: actual is a {lib_a or type(actual).__name__} array, desired a "
            f"{lib_d or type(desired).__name__} array (pass check_namespace=False to compare values only)"
        )
    names = [_dtype_name(actual), _dtype_name(desired)]
    if check_dtype and _full_name(actual) != _full_name(desired):
        raise AssertionError(
            f"dtypes differ: actual {_full_name(actual)}, desired {_full_name(desired)} "
            "(pass check_dtype=False to compare values only)"
        )
    if check_device and lib_a == lib_d and lib_a is not None:
        dev_a, dev_d = backends.device_of(actual), backends.device_of(desired)
        if dev_a is not None and dev_d is not None and dev_a != dev_d:
            raise AssertionError(f"devices differ: actual on {dev_a}, desired on {dev_d}")
    shape_a, shape_d = (
        tuple(np.shape(actual) if lib_a is None else actual.shape),
        tuple(np.shape(desired) if lib_d is None else desired.shape),
    )
    if check_shape and shape_a != shape_d:
        raise AssertionError(f"shapes differ: actual {shape_a}, desired {shape_d}")
    coarse = max(names, key=lambda n: EPS[n])
    d_rtol, d_atol = default_tolerance(coarse)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a = to_numpy(actual).astype(np.float64)
    d = to_numpy(desired).astype(np.float64)
    try:
        a, d = np.broadcast_arrays(a, d)
    except ValueError:
        raise AssertionError(f"shapes do not broadcast: actual {a.shape}, desired {d.shape}") from None
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf and NaN are judged below, not warned about
        err = np.abs(a - d)
        bound = atol + rtol * np.abs(d)
        # equal values (infinities of one sign included) and NaN against NaN agree
        bad = ~((np.isfinite(err) & (err <= bound)) | (a == d) | (np.isnan(a) & np.isnan(d)))
        if not np.any(bad):
            return
        excess = np.where(bad, np.nan_to_num(err - bound, nan=np.inf), -np.inf)
        worst = np.unravel_index(int(np.argmax(excess)), a.shape) if a.ndim else ()
        largest = np.nanmax(err) if not np.all(np.isnan(err)) else np.nan
    raise AssertionError(
        f"{int(bad.sum())} of {a.size} elements differ beyond rtol={rtol:g}, atol={atol:g} ({coarse}); "
        f"worst at index {tuple(int(i) for i in worst)}: actual {a[worst]!r}, desired {d[worst]!r}, "
        f"abs error {err[worst]:.3g}; max abs error {largest:.3g}"
    )
