"""The reference rotation, pure Array API: the definition every backend's fast path is tested against.

It lives below both :mod:`arrayrope.apply` and :mod:`arrayrope.backends`, so that a
library module falls back to it by importing it, not by being handed it.
"""

from __future__ import annotations

from . import dtypes
from .types import Array, Namespace

__all__ = ["rotate_reference"]


def rotate_reference(xp: Namespace, x: Array, cos: Array, sin: Array, layout: str, out: Array | None = None) -> Array:
    """``x`` with its leading ``2 * cos.shape[-1]`` features rotated in ``layout``, a fresh array or ``out``.

    The arithmetic runs in :func:`~.dtypes.rotation_dtype` of ``x``'s and the tables'
    dtypes (float64 or float32) and is cast back to ``x``'s dtype once; features past the rotary ones pass through. With
    ``out`` the result is computed whole, then assigned to ``out[...]`` (so ``out``
    may be ``x``) and ``out`` is returned.
    """
    dtype = x.dtype
    work = dtypes.rotation_dtype(xp, dtype, cos.dtype, sin.dtype)
    cos, sin = xp.astype(cos, work, copy=False), xp.astype(sin, work, copy=False)
    h = cos.shape[-1]
    r = 2 * h
    d = x.shape[-1]
    xr = xp.astype(x[..., :r], work)
    if layout == "half":
        x1, x2 = xr[..., :h], xr[..., h:]
        parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    else:
        lead = tuple(x.shape[:-1])
        pairs = xp.reshape(xr, (*lead, h, 2))
        xe, xo = pairs[..., 0], pairs[..., 1]
        y = xp.stack([xe * cos - xo * sin, xo * cos + xe * sin], axis=-1)
        parts = [xp.reshape(y, (*lead, r))]
    y = parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)
    y = xp.astype(y, dtype, copy=False)
    if r < d:
        y = xp.concat([y, x[..., r:]], axis=-1)
    if out is None:
        return y
    out[...] = y
    return out
