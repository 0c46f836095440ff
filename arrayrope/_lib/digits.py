"""The exact float32 table method, for namespaces and devices without float64 (and ONNX graphs).

A position is split into 10-bit digits, ``p = sum(d_k * 1024**k)``. The rotation of
each digit at each level, ``(cos, sin)(d * 1024**k * inv_freq)`` for ``d < 1024``, is
computed on the host in float64 and rounded to float32 once; the digit rotations of
a position are then composed with the angle-addition formula in float32. Every
factor is within half a float32 ulp, so the error stays near float32 rounding at
any position instead of growing with it (a float32 angle ``p * theta`` is off by
``p * theta * 2**-24`` radians: 6e-2 at 2**20).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backends
from .types import Array, Device, Namespace

__all__ = ["DIGIT_BITS", "digit_rotations", "float32_tables"]

#: Bits per digit: 1024 rows per digit table.
DIGIT_BITS = 10


def digit_rotations(inv_freq: np.ndarray, level: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of ``d * 1024**level * inv_freq`` for ``d < 1024``, float64, shape ``(1024, len(inv_freq))``."""
    d = np.arange(1 << DIGIT_BITS, dtype=np.float64) * float(1 << (DIGIT_BITS * level))
    angles = d[:, None] * np.asarray(inv_freq, dtype=np.float64)
    return np.cos(angles), np.sin(angles)


def float32_tables(xp: Namespace, inv_freq: np.ndarray, pos: Array | int, device: Device) -> tuple[Array, Array]:
    """Float32 cos/sin of ``pos * inv_freq`` by the digit method, ``pos.shape + (len(inv_freq),)``.

    ``pos`` is a count ``n`` (positions ``0..n-1``), or an array of integer or real
    positions (real ones: the nearest integer by digits, the remainder, at most 0.5,
    by a float32 angle).
    """
    f32 = xp.float32
    frac = None
    if isinstance(pos, int):
        itype = xp.int32 if pos <= 2**31 else xp.int64
        ints = xp.arange(pos, dtype=itype, device=device)
        bits = 31 if itype == xp.int32 else 63
    elif backends.is_integral(xp, pos.dtype):
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
    mask = xp.asarray((1 << DIGIT_BITS) - 1, dtype=flat.dtype, device=device)
    cos: Any = None
    sin: Any = None
    for level in range(-(-bits // DIGIT_BITS)):
        digit = xp.bitwise_and(flat >> (DIGIT_BITS * level), mask) if level else xp.bitwise_and(flat, mask)
        c_tab, s_tab = digit_rotations(inv_freq, level)
        c = xp.take(xp.asarray(c_tab.astype(np.float32), device=device), digit, axis=0)
        s = xp.take(xp.asarray(s_tab.astype(np.float32), device=device), digit, axis=0)
        if cos is None:
            cos, sin = c, s
        else:
            cos, sin = cos * c - sin * s, sin * c + cos * s
    h = inv_freq.shape[0]
    cos = xp.reshape(cos, (*shape, h))
    sin = xp.reshape(sin, (*shape, h))
    if negative is not None:
        sin = xp.where(negative[..., None], -sin, sin)
    if frac is not None:
        fa = frac[..., None] * xp.asarray(inv_freq.astype(np.float32), device=device)
        fc, fs = xp.cos(fa), xp.sin(fa)
        cos, sin = cos * fc - sin * fs, sin * fc + cos * fs
    return cos, sin
