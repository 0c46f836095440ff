"""Dtype rules, in one place: which dtype tables take and in which dtype they are computed.

* Tables default to float32 on every backend (:data:`DEFAULT_TABLE`).
* Angles are computed in float64 where the namespace and device have it, else by
  the exact float32 method of :mod:`.digits` (:func:`work_dtype`); graphs being traced
  carry no float64 unless their tables are float64.
* Inputs are rotated by tables of float64 when they are float64, else float32
  (:func:`table_dtype_for`), and a rotation's arithmetic runs in float64 when the input
  or its tables are float64, else in float32 (:func:`rotation_dtype`): float16 and
  bfloat16 inputs are rotated in float32 and rounded once, whatever their tables' dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import fence
from .types import DType, Namespace

DEFAULT_TABLE = "float32"


def table_dtype(xp: Namespace, dtype: DType | None, device: Any) -> DType:
    """The table dtype a user asked for (a dtype of ``xp`` or its name), checked; float32 when None.

    ``device`` is checked too: every function that makes arrays on a device it is given asks here.
    """
    fence.backends.check_device(xp, device)
    if dtype is None:
        return xp.float32
    if isinstance(dtype, str):
        found = getattr(xp, dtype, None)
        if found is None:
            raise ValueError(f"dtype {dtype!r} is not available in {fence.backends.library_name(xp)}")
        dtype = found
    if not fence.backends.is_real_floating(xp, dtype):
        raise TypeError(f"dtype must be a real floating dtype of {fence.backends.library_name(xp)}, got {dtype!r}")
    if dtype == xp.float64 and not fence.backends.has_float64(xp, device):
        raise ValueError(f"dtype float64 is not supported by {fence.backends.library_name(xp)} on device {device}")
    return dtype


def work_dtype(xp: Namespace, device: Any, dtype: DType | None = None) -> DType:
    """float64 where ``xp`` has it on ``device``, else float32; float32 as well in a graph being traced
    (``torch.compile``, ``torch.export``) unless ``dtype``, the result's, is float64: traced graphs carry no
    other float64."""
    if fence.backends.tracing(xp) and dtype != xp.float64:
        return xp.float32
    return xp.float64 if fence.backends.has_float64(xp, device) else xp.float32


def index_dtype(xp: Namespace, device: Any) -> DType:
    """The widest integer dtype on ``device``: int64, or int32 where there is no int64 (JAX without x64)."""
    return xp.int64 if fence.backends.has_int64(xp, device) else xp.int32


def dtype_name(dtype: DType) -> str:
    """A dtype's short name for messages (``int64``, not ``torch.int64``)."""
    name = getattr(dtype, "__name__", None)  # NumPy scalar types such as numpy.int64
    return name if isinstance(name, str) else str(dtype).rsplit(".", 1)[-1].removeprefix("dtype('").removesuffix("')")


def table_dtype_for(xp: Namespace, x_dtype: DType) -> DType:
    """Tables for rotating an input of ``x_dtype``: float64 for float64 (or wider) inputs, float32 otherwise."""
    return xp.float64 if _wide(xp, x_dtype) else xp.float32


def rotation_dtype(xp: Namespace, *dtypes: DType) -> DType:
    """The dtype a rotation's arithmetic runs in, for an input and tables of ``dtypes``: float64 when one of
    them is float64 (of either byte order) or wider, else float32 (so float16 and bfloat16 values are computed
    in float32, rounded once).

    Comparisons of dtypes only: no promotion call of the library, which tracers (dynamo) cannot record.
    """
    wide = xp.float64
    if wide in dtypes:  # the common cases first: this runs on every rotation (a decode step is microseconds)
        return wide
    for d in dtypes:
        if _wide_numpy(d):
            return wide
    return xp.float32


#: The classes of NumPy's float64 dtypes of either byte order (``<f8``, ``>f8``) and of ``longdouble``: a
#: class test costs a tenth of ``isinstance(d, np.dtype)`` for the other libraries' dtypes.
_FLOAT64_CLASS, _LONGDOUBLE_CLASS = type(np.dtype(np.float64)), type(np.dtype(np.longdouble))


def _wide_numpy(dtype: DType) -> bool:
    """Whether ``dtype`` is a NumPy float64 of either byte order or a longdouble (identity tests of its class,
    which dynamo traces in every PyTorch release, where a set's membership test it does not before 2.9)."""
    kind = type(dtype)
    return kind is _FLOAT64_CLASS or kind is _LONGDOUBLE_CLASS


def _wide(xp: Namespace, dtype: DType) -> bool:
    """Whether ``dtype`` is float64, or a NumPy float of 8 bytes or more (big-endian ``>f8``, ``longdouble``)."""
    return bool(dtype == xp.float64 or _wide_numpy(dtype))


def host_dtype(xp: Namespace, dtype: DType) -> np.dtype[Any]:
    """The NumPy dtype that holds a float64 or float32 table of ``xp`` on the host."""
    return np.dtype(np.float64 if dtype == xp.float64 else np.float32)
