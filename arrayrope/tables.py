"""Cos/sin tables: the second stage, angles in float64 (or an exact float32 method).

``rope_tables`` turns :class:`~arrayrope.RopeFrequencies` and positions of any
backend into ``(cos, sin)`` on the positions' namespace and device.

Precision. Where the namespace and device have float64, the angles
``position * inv_freq`` and their cos/sin are computed in float64 and cast at
the end: float32 tables are then correctly rounded to within 3e-8 at any
position. Where float64 is missing (JAX without x64, Apple MPS, array_api_strict's
``no_float64`` device) the positions are split into 10-bit digits,
``p = sum(d_k * 1024**k)``; the rotation of each digit is looked up in a small
table computed on the host in float64, and the digit rotations are composed
with the angle-addition formula in float32. The error then stays below 1.5e-7
at any position instead of growing with it (float32 angles reach 6e-2 at 2^20).
"""

from __future__ import annotations

import numbers
from typing import Any

import array_api_compat.numpy as _NUMPY_NS
import numpy as np

from . import _kernels, _xp
from .frequencies import RopeFrequencies

__all__ = ["rope_tables"]

_DIGIT_BITS = 10


def rope_tables(
    freqs: RopeFrequencies,
    positions: Any,
    *,
    xp: Any = None,
    dtype: Any = None,
    device: Any = None,
    apply_attention_factor: bool = True,
) -> tuple[Any, Any]:
    """Cos and sin of ``positions * inv_freq``, each ``positions.shape + (rotary_dim // 2,)``.

    Parameters
    ----------
    freqs : RopeFrequencies
        From :func:`rope_frequencies`.
    positions : int or array
        An int ``n`` (positions ``0 .. n-1``) or an array of any shape and backend:
        integers (negative ones rotate backwards) or real numbers (fractional
        positions for interpolation or image grids).
    xp : namespace, optional
        Array namespace for an int ``positions`` (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : optional
        Device of the tables (default: the positions' device).
    apply_attention_factor : bool
        Multiply cos and sin by ``freqs.attention_factor`` as Hugging Face does
        (YaRN, LongRoPE). Pass False when the factor goes into the softmax scale instead.

    Returns
    -------
    cos, sin : arrays
        On the positions' namespace and device.

    Notes
    -----
    Float positions must be finite: checked on eager backends (NumPy, PyTorch,
    CuPy, array_api_strict); JAX and Dask arrays are not inspected, so that
    tracing and graph building compute nothing. Without float64 the float32
    method handles integer positions of magnitude below ``2**31`` (int32) or
    ``2**63`` (int64) and float positions below ``2**31``.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(4)
    >>> cos, sin = arrayrope.rope_tables(f, 3)
    >>> cos.shape, cos.dtype
    ((3, 2), dtype('float32'))
    >>> np.allclose(sin[:, 0], np.sin([0.0, 1.0, 2.0]))
    True
    """
    if not isinstance(freqs, RopeFrequencies):
        raise TypeError(f"freqs must be a RopeFrequencies from rope_frequencies(), got {type(freqs).__name__}")
    xp, pos, device = _positions(positions, xp, device)
    dtype = _dtype(xp, dtype, device)
    factor = freqs.attention_factor if apply_attention_factor else 1.0
    if isinstance(pos, int) and xp is _NUMPY_NS and dtype != xp.float64:
        # positions 0..n-1 on NumPy: float64 angle addition in cache-sized blocks
        # (same values as the float64 angles below, about 10x faster; see _kernels)
        return _kernels.numpy_tables(freqs.inv_freq, pos, np.dtype(dtype), factor)
    if _xp.has_float64(xp, device):
        if isinstance(pos, int):
            pos = xp.arange(pos, dtype=xp.float64, device=device)
        else:
            pos = xp.astype(pos, xp.float64)
        angles = pos[..., None] * xp.asarray(np.array(freqs.inv_freq), device=device)
        cos, sin = xp.cos(angles), xp.sin(angles)
    else:
        cos, sin = _float32_tables(xp, freqs.inv_freq, pos, device)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return xp.astype(cos, dtype), xp.astype(sin, dtype)


def _positions(positions: Any, xp: Any, device: Any) -> tuple[Any, Any, Any]:
    if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
        if positions < 0:
            raise ValueError(f"positions as an int is a count n (positions 0..n-1) and must be >= 0, got {positions}")
        return _xp.namespace(xp=xp) if xp is not None else _xp.namespace(), int(positions), device
    if isinstance(positions, (bool, float, complex, str)) or positions is None:
        raise TypeError(
            f"positions must be an int count or an array of integer or real positions, got {positions!r}"
        )
    if not _xp.compat.is_array_api_obj(positions):
        ns = _xp.namespace(xp=xp) if xp is not None else _xp.namespace()
        positions = ns.asarray(np.asarray(positions), device=device)
    xp = _xp.namespace(positions, xp=xp, names=("positions",))
    pdev = _xp.device_of(positions)
    if device is None:
        device = pdev
    elif pdev is not None and pdev != device:
        positions = _xp.compat.to_device(positions, device)
    dt = positions.dtype
    if xp.isdtype(dt, "bool") or xp.isdtype(dt, "complex floating") or not xp.isdtype(dt, ("integral", "real floating")):
        raise TypeError(f"positions must have an integer or real floating dtype, got {dt}")
    if xp.isdtype(dt, "real floating") and not _xp.is_lazy(positions):
        if not bool(xp.all(xp.isfinite(positions))):
            raise ValueError("positions must be finite; got NaN or infinity")
    return xp, positions, device


def _dtype(xp: Any, dtype: Any, device: Any) -> Any:
    if dtype is None:
        return _xp.default_table_dtype(xp)
    if isinstance(dtype, str):
        found = getattr(xp, dtype, None)
        if found is None:
            raise ValueError(f"dtype {dtype!r} is not available in {xp.__name__}")
        dtype = found
    try:
        ok = xp.isdtype(dtype, "real floating")
    except Exception:
        ok = False
    if not ok:
        raise TypeError(f"dtype must be a real floating dtype of {xp.__name__}, got {dtype!r}")
    if dtype == xp.float64 and not _xp.has_float64(xp, device):
        raise ValueError(f"dtype float64 is not supported by {xp.__name__} on device {device}")
    return dtype


def _digit_rotations(inv_freq: np.ndarray, level: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of ``d * 1024**level * inv_freq`` for d < 1024, in float64 on the host."""
    d = np.arange(1 << _DIGIT_BITS, dtype=np.float64) * float(1 << (_DIGIT_BITS * level))
    angles = d[:, None] * inv_freq
    return np.cos(angles), np.sin(angles)


def _float32_tables(xp: Any, inv_freq: np.ndarray, pos: Any, device: Any) -> tuple[Any, Any]:
    """Exact float32 tables for namespaces/devices without float64."""
    f32 = xp.float32
    frac = None
    if isinstance(pos, int):
        itype = xp.int32 if pos <= 2**31 else xp.int64
        ints = xp.arange(pos, dtype=itype, device=device)
        bits = 31 if itype == xp.int32 else 63
    elif xp.isdtype(pos.dtype, "integral"):
        ints = pos
        bits = xp.iinfo(pos.dtype).bits - (0 if xp.isdtype(pos.dtype, "unsigned integer") else 1)
    else:
        p = xp.astype(pos, f32)
        whole = xp.round(p)
        frac = p - whole  # exact: |frac| <= 0.5
        ints = xp.astype(whole, xp.int32)
        bits = 31
    negative = ints < 0 if xp.isdtype(ints.dtype, "signed integer") else None
    mag = xp.abs(ints) if negative is not None else ints
    shape = tuple(mag.shape)
    flat = xp.reshape(mag, (-1,))
    mask = xp.asarray((1 << _DIGIT_BITS) - 1, dtype=flat.dtype, device=device)
    cos = sin = None
    for level in range(-(-bits // _DIGIT_BITS)):
        digit = xp.bitwise_and(flat >> (_DIGIT_BITS * level), mask) if level else xp.bitwise_and(flat, mask)
        c_tab, s_tab = _digit_rotations(inv_freq, level)
        c = xp.take(xp.asarray(c_tab.astype(np.float32), device=device), digit, axis=0)
        s = xp.take(xp.asarray(s_tab.astype(np.float32), device=device), digit, axis=0)
        if cos is None:
            cos, sin = c, s
        else:
            cos, sin = cos * c - sin * s, sin * c + cos * s
    h = inv_freq.shape[0]
    cos = xp.reshape(cos, shape + (h,))
    sin = xp.reshape(sin, shape + (h,))
    if negative is not None:
        sin = xp.where(negative[..., None], -sin, sin)
    if frac is not None:
        fa = frac[..., None] * xp.asarray(inv_freq.astype(np.float32), device=device)
        fc, fs = xp.cos(fa), xp.sin(fa)
        cos, sin = cos * fc - sin * fs, sin * fc + cos * fs
    return cos, sin
