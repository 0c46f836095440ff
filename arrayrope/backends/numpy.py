"""NumPy: the backend entry, and the fast paths behind ``apply_rotary`` and ``rope_tables``.

* Interleaved pairs: one complex multiplication on a complex view of ``x`` (one
  pass, no temporary).
* Half-split pairs: a fresh output written with ``out=`` ufuncs in row blocks of
  about 256 KiB, so ``x`` is read once and every temporary stays in cache; the
  swap ``[x2, x1]`` is one copy of two opaque byte blocks per row (a void-dtype
  view), and the sign of the rotation is folded into the sin table.
* Arrays up to 1 MiB (half-split: 128 KiB): a few broadcasting ufuncs over the whole array (fewer calls).
* Tables for positions ``0..n-1``: float64 angle addition in cache-sized blocks.
* ``out=``: each path writes its last ufunc into the caller's array (``x`` itself, or a
  slice of a larger buffer); the half-split blocks take the swapped copy of a block
  before they write over it, so that ``out`` may be ``x``. A destination whose leading
  axes do not flatten (a ``(B, H, S, D)`` cache sliced on ``S``) is written in pieces
  along its outer axes, each a rows view.

Each computes the values of the pure Array API reference and is tested against it.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lib import dtypes
from .._lib.rotation import rotate_reference
from ._defaults import concrete, constant, host, tracing
from .blocks import period as _period
from .blocks import row_blocks

if TYPE_CHECKING:
    from .registry import Backend

__all__ = [
    "NOUN",
    "OUT_REFUSED",
    "arange_tables",
    "concrete",
    "constant",
    "host",
    "memory_known",
    "out_fault",
    "prepare",
    "probe",
    "rotate",
    "rotate_prepared",
    "same_view",
    "shares",
    "to_numpy",
    "tracing",
]

#: Bytes of x per block of the blocked kernel (three such blocks fit in a 1 MiB L2).
BLOCK_BYTES = 1 << 18
_SMALL = 1 << 20  # up to this many bytes of x, broadcasting ufuncs beat blocking (measured)
_SMALL_HALF = 1 << 17  # the same for half-split pairs, whose swapped view costs a call per 64 elements


def probe() -> list[Backend]:
    """NumPy on the CPU."""
    import array_api_compat.numpy as xp

    from .registry import Backend

    return [Backend("numpy", xp, "cpu", ("float16", "float32", "float64"), native=np)]


def to_numpy(x: Any) -> np.ndarray:
    return np.asarray(x)


_COMPLEX: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}
_REAL = {c: r for r, c in _COMPLEX.items()}
_SIGN: dict[np.dtype[Any], np.ndarray] = {
    np.dtype(t): np.array([[-1.0], [1.0]], dtype=t) for t in (np.float16, np.float32, np.float64)
}


def _void(nbytes: int) -> np.dtype[np.void]:
    return np.dtype((np.void, nbytes))


#: NumPy arrays are written by ``out=``.
OUT_REFUSED: str | None = None
NOUN = "an array"


def memory_known(out: np.ndarray) -> bool:
    return True


def out_fault(out: np.ndarray) -> str | None:
    """A read-only array, or one that repeats elements, cannot be written."""
    if not out.flags.writeable:
        return "is read-only; pass a writable array (x itself, or a slice of a buffer)"
    if 0 in out.strides and any(s == 0 and n > 1 for n, s in zip(out.shape, out.strides, strict=True)):
        return "repeats elements (a stride of 0, as np.broadcast_to makes); pass a writable array"
    return None


#: Effort bound of the exact overlap test (NumPy's stubs allow only -1 and 0; the function takes any bound).
_MAX_WORK: Any = 1 << 16


def same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` view the same elements in the same order (``a`` is ``b``, or a view like it)."""
    return a is b or (
        a.shape == b.shape
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def shares(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` have an element in common (exactly; where that is too hard to tell: yes)."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=_MAX_WORK))
    except np.exceptions.TooHardError:
        return True


def rotate(xp: Any, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, out: Any = None) -> np.ndarray:
    """Rotary application on NumPy arrays, into a fresh output or ``out``, with no full-size temporaries."""
    dt = x.dtype
    if dt.kind != "f" or not x.size:  # empty arrays: no period of rows to reshape by
        ref: np.ndarray = rotate_reference(xp, x, cos, sin, layout, out)
        return ref
    work: np.dtype[Any]
    if dt is cos.dtype and dt is sin.dtype and dt in _COMPLEX:
        work = dt  # the common case, without the rule's comparisons (a decode step is microseconds)
    else:
        work = np.dtype(dtypes.rotation_dtype(np, dt, cos.dtype, sin.dtype))
    small = x.nbytes <= (_SMALL_HALF if layout == "half" else _SMALL)
    if small and layout == "half" and work == dt and x.shape[-1] == 2 * cos.shape[-1]:
        return _small_half(x, cos, sin, out)
    one_pass = layout == "interleaved" and work == dt and work in _COMPLEX
    if one_pass or small or x.strides[-1] != x.itemsize:
        return _whole(x, cos.astype(work, copy=False), sin.astype(work, copy=False), layout, work, out)
    rows = _rows_view(x)
    period = _period(x.shape[:-1], cos.shape[:-1]) if rows is not None else None
    if rows is None or period is None:
        return _whole(x, cos.astype(work, copy=False), sin.astype(work, copy=False), layout, work, out)
    h = cos.shape[-1]
    c2 = cos.astype(work, copy=False).reshape(period, h)
    s2 = sin.astype(work, copy=False).reshape(period, h)
    result = np.empty(x.shape, dtype=dt) if out is None else out
    orows = _rows_view(result) if result.strides[-1] == result.itemsize else None
    if orows is not None:
        _blocks([(rows, orows)], c2, s2, layout, work, period)
        return result
    pieces = _pieces(result, period)
    if pieces is None:  # no rows view of out: rotate into a fresh array, then copy
        np.copyto(result, rotate(xp, x, cos, sin, layout))
        return result
    n = pieces[0].shape[0]
    _blocks([(rows[i * n : (i + 1) * n], piece) for i, piece in enumerate(pieces)], c2, s2, layout, work, period)
    return result


def _pieces(out: np.ndarray, period: int) -> list[np.ndarray] | None:
    """``out`` as rows views of its inner axes, one per index of its outer axes (in row order), or None.

    None unless a piece holds whole periods of the tables (every piece then starts at table row 0) and at
    least half a block of rows (the loop then costs little beside the work).
    """
    if out.strides[-1] != out.itemsize:
        return None
    lead = out.shape[:-1]
    for k in range(1, len(lead)):
        inner = out[(0,) * k]
        if _rows_view(inner) is None:
            continue
        n = math.prod(lead[k:])
        if n % period or n * out.shape[-1] * out.itemsize < BLOCK_BYTES // 2:
            return None
        views = [_rows_view(out[i]) for i in itertools.product(*map(range, lead[:k]))]
        if any(v is None for v in views):
            return None
        return [v for v in views if v is not None]
    return None


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` reshaped to ``shape`` as a view of it, or None where that needs a copy."""
    v = a.reshape(shape)
    return v if v.size == 0 or np.may_share_memory(v, a) else None


def _into(y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``y`` (a fresh result) copied into ``out``, rounded to its dtype."""
    np.copyto(out, y.reshape(out.shape), casting="same_kind")
    return out


def _small_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Small half-split arrays of the tables' dtype: four ufuncs, with the simplest broadcast the tables allow.

    Both products are taken before the sum is written: ``out`` may be ``x``."""
    h = cos.shape[-1]
    x3: np.ndarray
    if cos.size == h:  # one table row for all of x (a decode step): x as (-1, 2, h)
        x3, c, s = x.reshape(-1, 2, h), cos, sin
    elif (p := _period(x.shape[:-1], cos.shape[:-1])) is not None:
        x3, c, s = x.reshape(-1, p, 2, h), cos.reshape(p, 1, h), sin.reshape(p, 1, h)
    else:
        x3, c, s = x.reshape((*x.shape[:-1], 2, h)), cos[..., None, :], sin[..., None, :]
    y = np.multiply(x3, c)
    t = np.multiply(x3[..., ::-1, :], s)
    t *= _SIGN[y.dtype]
    o3 = None if out is None else _view(out, y.shape)
    if o3 is not None and out is not None:
        np.add(y, t, out=o3)  # [x1 cos - x2 sin, x2 cos + x1 sin]
        return out
    y += t
    return y.reshape(x.shape) if out is None else _into(y, out)


def prepare(cos: np.ndarray, sin: np.ndarray, layout: str) -> tuple[np.ndarray, ...] | None:
    """Tables for :func:`rotate_prepared`: ``(..., 2, h)`` cos and sign-folded sin (half-split), or complex."""
    if cos.dtype != sin.dtype or cos.dtype not in _COMPLEX:
        return None
    if layout == "half":
        c3 = np.empty((*cos.shape[:-1], 2, cos.shape[-1]), cos.dtype)
        s3 = np.empty_like(c3)
        c3[..., 0, :] = c3[..., 1, :] = cos
        np.negative(sin, out=s3[..., 0, :])
        s3[..., 1, :] = sin
        return c3, s3
    tab = np.empty(cos.shape, _COMPLEX[cos.dtype])
    tab.real, tab.imag = cos, sin
    return (tab,)


def rotate_prepared(
    x: np.ndarray, prepared: tuple[np.ndarray, ...], layout: str, out: np.ndarray | None = None
) -> np.ndarray | None:
    """Small arrays with prepared tables: three ufuncs (half-split) or one (interleaved); else None."""
    t = prepared[0]
    if x.nbytes > _SMALL or not x.size:
        return None
    if layout == "half":
        c3, s3 = prepared
        h = c3.shape[-1]
        if x.dtype != c3.dtype or x.shape[-1] != 2 * h:
            return None
        x3: np.ndarray
        if c3.size == 2 * h:  # one table row for all of x: the simplest broadcast
            x3 = x.reshape(-1, 2, h)
        elif (p := _period(x.shape[:-1], c3.shape[:-2])) is not None:
            x3, c3, s3 = x.reshape(-1, p, 2, h), c3.reshape(p, 2, h), s3.reshape(p, 2, h)
        else:
            x3 = x.reshape((*x.shape[:-1], 2, h))
        swapped = np.multiply(x3[..., ::-1, :], s3)  # taken first: out may be x
        o3 = None if out is None else _view(out, swapped.shape)
        if o3 is not None and out is not None:
            np.multiply(x3, c3, out=o3)
            o3 += swapped
            return out
        rotated = np.multiply(x3, c3)
        rotated += swapped
        return rotated.reshape(x.shape) if out is None else _into(rotated, out)
    if x.dtype != _REAL.get(t.dtype) or x.shape[-1] != 2 * t.shape[-1] or x.strides[-1] != x.itemsize:
        return None
    if out is not None and out.strides[-1] == out.itemsize:
        np.multiply(x.view(t.dtype), t, out=out.view(t.dtype))  # pair by pair: out may be x
        return out
    y: np.ndarray = np.multiply(x.view(t.dtype), t).view(x.dtype)
    return y if out is None else _into(y, out)


def _rows_view(x: np.ndarray) -> np.ndarray | None:
    """x as a (rows, features) view, or None when its leading axes do not flatten without a copy."""
    dims = [(n, s) for n, s in zip(x.shape[:-1], x.strides[:-1], strict=True) if n != 1]
    if any(s != n_next * s_next for (_, s), (n_next, s_next) in itertools.pairwise(dims)):
        return None
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # a view: the leading axes are evenly strided


def _whole(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, work: np.dtype[Any], out: np.ndarray | None = None
) -> np.ndarray:
    """Small or irregular arrays: a few broadcasting ufuncs over the whole array.

    Each result is computed whole before it is written into ``out`` (which may be ``x``), except the
    complex multiplication, which writes each pair after reading it."""
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    lead = x.shape[:-1]
    xr = x[..., :r] if r < d else x
    if xr.dtype != work:
        xr = xr.astype(work)
    cplx = _COMPLEX.get(work) if layout == "interleaved" else None
    if layout == "half":
        x3 = xr.reshape((*lead, 2, h))
        y = np.multiply(x3, cos[..., None, :])
        t = np.multiply(x3[..., ::-1, :], np.multiply(sin[..., None, :], _SIGN[work]))
        np.add(y, t, out=y)  # [x1 cos - x2 sin, x2 cos + x1 sin]
    elif cplx is not None and xr.strides[-1] == xr.itemsize:
        tab = np.empty(cos.shape, cplx)
        tab.real, tab.imag = cos, sin
        dest = out if out is not None else np.empty(x.shape, x.dtype) if r < d else None
        if x.dtype == work and dest is not None and dest.strides[-1] == dest.itemsize:
            # write the rotated part straight into the output
            np.multiply(xr.view(cplx), tab, out=dest[..., :r].view(cplx))
            if r < d:
                np.copyto(dest[..., r:], x[..., r:])
            return dest
        y = np.multiply(xr.view(cplx), tab).view(work)
    else:
        xe, xo = xr[..., 0::2], xr[..., 1::2]
        y = np.empty((*lead, h, 2), work)
        ye, yo = y[..., 0], y[..., 1]
        t = np.multiply(xo, sin)
        np.multiply(xe, cos, out=ye)
        np.subtract(ye, t, out=ye)
        np.multiply(xe, sin, out=t)
        np.multiply(xo, cos, out=yo)
        np.add(yo, t, out=yo)
    y = y.reshape((*lead, r))
    if r == d and out is None:
        return y if y.dtype == x.dtype else np.asarray(y.astype(x.dtype))
    if out is None:
        out = np.empty(x.shape, x.dtype)
    np.copyto(out[..., :r], y, casting="same_kind")
    if r < d:
        np.copyto(out[..., r:], x[..., r:])
    return out


def _blocks(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    cos: np.ndarray,
    sin: np.ndarray,
    layout: str,
    work: np.dtype[Any],
    period: int,
) -> None:
    """Large arrays: row blocks of about BLOCK_BYTES with the matching table rows.

    Row ``i`` uses table row ``i % period``. Long periods are cut into blocks;
    short ones (e.g. one decode position for all heads) are broadcast over
    blocks of whole periods, seen as ``(-1, period, features)``. ``pairs`` are
    (rows of x, rows of the output) of one shape, each starting at table row 0:
    the tables and scratch are made once for all. An output may be its x: a
    block of x is read whole (swapped copy, products) before its rotation is
    written, or pair by pair (complex multiplication).
    """
    h = cos.shape[-1]
    xf, of = pairs[0]
    r, d = 2 * h, xf.shape[1]
    n = xf.shape[0]
    step, short, blocks = row_blocks(n, period, max(1, BLOCK_BYTES // (d * work.itemsize)))
    schedule = list(blocks)

    def fold(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, period, a.shape[-1]) if short else a

    cast_in = xf.dtype != work
    cast_out = of.dtype != work
    xbuf = np.empty((step, r), work)
    obuf = np.empty((step, r), work)
    if layout == "half":
        cos_t = np.concatenate([cos, cos], axis=-1)
        sin_t = np.concatenate([-sin, sin], axis=-1)  # sign folded: y = x*cos_t + [x2, x1]*sin_t
        tbuf = np.empty((step, r), work)
        swap = tbuf.view(_void(h * work.itemsize))[:, ::-1]
        vdt = swap.dtype
    else:
        cplx: np.dtype[Any] = _COMPLEX.get(work, np.dtype(np.complex64))
        if work not in _COMPLEX:  # float16 work (float16 x and tables): compute in float32
            work = np.dtype(np.float32)
            cast_in = cast_out = True
            xbuf, obuf = np.empty((step, r), work), np.empty((step, r), work)
        tab = np.empty(cos.shape, cplx)
        tab.real, tab.imag = cos, sin
    for xf, of in pairs:
        for a, m, s0 in schedule:
            xb = xf[a : a + m, :r]
            ob = of[a : a + m, :r]
            if cast_in:
                np.copyto(xbuf[:m], xb, casting="same_kind")
                xb = xbuf[:m]
            o = obuf[:m] if cast_out else ob
            if layout == "half":
                np.copyto(swap[:m], xb.view(vdt))  # before o is written: o may be x's block
                np.multiply(fold(xb), cos_t if short else cos_t[s0 : s0 + m], out=fold(o))
                t = fold(tbuf[:m])
                np.multiply(t, sin_t if short else sin_t[s0 : s0 + m], out=t)
                np.add(o, tbuf[:m], out=o)
            else:
                tb = tab if short else tab[s0 : s0 + m]
                np.multiply(fold(xb.view(cplx)), tb, out=fold(o.view(cplx)))
            if cast_out:
                np.copyto(ob, o, casting="same_kind")
            if r < d:
                np.copyto(of[a : a + m, r:], xf[a : a + m, r:])


def arange_tables(inv_freq: np.ndarray, n: int, dtype: Any, factor: float) -> tuple[np.ndarray, np.ndarray] | None:
    """cos/sin of ``p * inv_freq`` for ``p = 0..n-1`` by angle addition in float64, in blocks.

    ``p = 1024 * a + b``: the rotations of ``1024 * a`` and ``b`` are float64 cos/sin on
    the host, composed with ``cos(u + v) = cos u cos v - sin u sin v`` in float64
    and cast: the values of float64 angles up to a float64 rounding, at a fraction
    of the transcendental calls. None (use the reference) for float64 tables,
    whose last bits would show the difference.
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return None
    h = inv_freq.shape[0]
    lo_n = 1024
    hi_n = -(-n // lo_n)
    lo = np.arange(lo_n, dtype=np.float64)[:, None] * inv_freq
    hi = (np.arange(hi_n, dtype=np.float64) * lo_n)[:, None] * inv_freq
    cl, sl, ch, sh = np.cos(lo), np.sin(lo), np.cos(hi), np.sin(hi)
    if factor != 1.0:
        ch, sh = ch * factor, sh * factor
    cos = np.empty((hi_n * lo_n, h), dtype)
    sin = np.empty((hi_n * lo_n, h), dtype)
    c3, s3 = cos.reshape(hi_n, lo_n, h), sin.reshape(hi_n, lo_n, h)
    t1 = np.empty((lo_n, h))
    t2 = np.empty((lo_n, h))
    for i in range(hi_n):
        a, b = ch[i], sh[i]
        np.multiply(cl, a, out=t1)
        np.multiply(sl, b, out=t2)
        np.subtract(t1, t2, out=t1)
        np.copyto(c3[i], t1, casting="same_kind")
        np.multiply(sl, a, out=t1)
        np.multiply(cl, b, out=t2)
        np.add(t1, t2, out=t1)
        np.copyto(s3[i], t1, casting="same_kind")
    return cos[:n], sin[:n]
