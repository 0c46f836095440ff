"""Comparison of arrays, with tolerances derived from the dtype: one rule for every check."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import backends
from .._lib import checks
from ..backends import to_numpy

__all__ = ["assert_close", "default_tolerance", "tolerance_at"]

_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
#: Units in the last place that a correct result may differ by, per dtype (see default_tolerance).
ULPS = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 4096}


def _full_name(x: Any) -> str:
    """The dtype's own name whatever the library spells around it (``torch.float32``, ``dtype('float32')``)."""
    return str(getattr(x, "dtype", "")).split(".")[-1].removeprefix("dtype('").removesuffix("')")


def _dtype_name(x: Any) -> str:
    name = str(getattr(x, "dtype", "float64")).split(".")[-1]
    return name if name in _EPS else "float64"


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` that a correct result in ``dtype`` meets: ``ULPS[dtype]`` units in the last place.

    How the figures are derived:

    * float16, bfloat16, float32: 4 ulps. Results in these dtypes are best computed in
      a wider type and rounded once (arrayrope builds tables in float64 and rotates
      half-precision inputs in float32), so their error is the rounding of the inputs,
      the tables and the output, half an ulp each, whatever the math library.
    * float64: 4096 ulps (``2**-40``, 9.1e-13). A float64 result has no wider type to be
      computed in: every step of the chain rounds in float64, within half an ulp for
      ``+ - * /`` and within a few ulps for ``pow``, ``exp``, ``cos`` and ``sin``, where
      the vectorised kernels that NumPy and other libraries pick by CPU (AVX-512 among
      them) differ from the C library, and from one CPU to the next, by an ulp or more.
      A relative error in an intermediate reaches the result multiplied by the size of
      what follows it: a frequency ``theta`` one ulp apart moves the angle ``p * theta``
      by ``p * theta * 2**-52`` radians, which cos and sin pass on unchanged. 4096 ulps
      cover frequencies a few ulps apart at angles up to about a thousand radians
      (positions up to about 1000 on the fastest pair, 4096 with frequencies one ulp
      apart); a defect (a wrong layout, a position off by one, a base off by 1e-6, any
      step done in float32) is larger by orders of magnitude.

    Far positions. A float64 reference that computes ``cos(p * theta)`` as written is
    itself off by up to half an ulp of the angle, ``|p * theta| * 2**-53`` (6e-11 at
    ``p = 2**20``, ``theta = 1``), which exceeds the float64 tolerance while a library
    that reduces angles exactly, as arrayrope does, is right. Either reduce the
    reference's angles exactly (:func:`exact_angles`, or mpmath), or add the
    reference's own error to the tolerance: ``atol=default_tolerance("float64")[1] +
    2**-52 * max|p * theta| * max|x|``.

    ``rtol`` applies to the magnitude of the expected values and ``atol`` equals it, so
    values near zero are held to the same absolute error as the largest ones.

    Examples
    --------
    >>> from arrayrope.testing import default_tolerance
    >>> default_tolerance("float32")
    (4.76837158203125e-07, 4.76837158203125e-07)
    >>> default_tolerance("float64")
    (9.094947017729282e-13, 9.094947017729282e-13)
    """
    name = str(dtype).split(".")[-1]
    if name not in _EPS:
        raise ValueError(f"dtype must be one of {sorted(_EPS)}, got {dtype!r}")
    tol = ULPS[name] * _EPS[name]
    return tol, tol


def tolerance_at(dtype: Any, scale: float, *, rtol: float | None = None, atol: float | None = None) -> float:
    """The absolute error allowed for results of ``dtype`` whose largest magnitude is ``scale``.

    ``atol + rtol * scale``, with :func:`default_tolerance` of ``dtype`` where
    ``rtol`` or ``atol`` is not given: the rule of :func:`check_parity` rows and of
    :func:`arrayrope.export.validate`.

    Examples
    --------
    >>> from arrayrope.testing import tolerance_at
    >>> tolerance_at("float32", 3.0) == 4 * 2**-23 * (1 + 3.0)
    True
    """
    d_rtol, d_atol = default_tolerance(dtype)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale >= 0:
        raise (TypeError if not isinstance(scale, numbers.Real) or isinstance(scale, bool) else ValueError)(
            f"scale must be a real number >= 0 (the largest magnitude of the result), got {scale!r}"
        )
    rtol = d_rtol if rtol is None else _tolerance_value(rtol, "rtol")
    atol = d_atol if atol is None else _tolerance_value(atol, "atol")
    return atol + rtol * float(scale)


def _tolerance_value(value: object, name: str) -> float:
    """A tolerance: a finite real >= 0."""
    out = checks.finite_real(value, name)
    if out < 0:
        raise ValueError(f"{name} must be >= 0, got {out}")
    return out


def assert_close(
    actual: Any,
    desired: Any,
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
    for name, flag in (("check_namespace", check_namespace), ("check_dtype", check_dtype),
                       ("check_shape", check_shape), ("check_device", check_device)):
        checks.boolean(flag, name)
    rtol = None if rtol is None else _tolerance_value(rtol, "rtol")
    atol = None if atol is None else _tolerance_value(atol, "atol")
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
    shape_a, shape_d = tuple(np.shape(actual) if lib_a is None else actual.shape), tuple(
        np.shape(desired) if lib_d is None else desired.shape
    )
    if check_shape and shape_a != shape_d:
        raise AssertionError(f"shapes differ: actual {shape_a}, desired {shape_d}")
    coarse = max(names, key=lambda n: _EPS[n])
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
