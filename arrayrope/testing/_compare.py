"""Comparison of arrays across namespaces and devices with tolerances by dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backends import to_numpy

__all__ = ["assert_close", "default_tolerance"]

_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
#: Units in the last place that a correct result may differ by, per dtype (see default_tolerance).
ULPS = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 4096}


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
      step done in float32) is larger by orders of magnitude. Compare at larger angles
      with an explicit ``rtol``.

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
