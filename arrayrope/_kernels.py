"""Backend fast paths behind :func:`arrayrope.apply_rotary` and :func:`arrayrope.rope_tables`.

Each kernel computes exactly what the pure Array API reference computes
(``rotary._rotate_generic``, ``tables.rope_tables``' float64 path) and is tested
against it on every layout, dtype and broadcasting pattern. They only change how
memory is used:

* NumPy: the interleaved rotation is one complex multiplication on a complex
  view of x (one pass, no temporary). The half-split layout writes a fresh output
  with ``out=`` ufuncs in row blocks of about 256 KiB, so x is read once and every
  temporary stays in cache; its swap ``[x2, x1]`` is one copy of two opaque byte
  blocks per row (a void-dtype view). Arrays up to 1 MiB use a few broadcasting
  ufuncs instead (fewer calls).
* PyTorch: ``mul`` + ``addcmul_`` into slices of the output (no temporaries) or
  a complex view; used only when autograd does not need to record the call, and
  from 1 MiB (half-split) or 64 KiB (interleaved) of x, where it measured faster;
  smaller tensors take a few whole-tensor ops (a sign-folded flip, or the complex view).
  On CPU the half-split layout runs in row blocks of about 1 MiB (like NumPy's).
* Dask: one ``blockwise`` task per chunk of x that runs the kernel above on the
  chunk's own library.
* JAX: the reference under ``jax.jit`` (one fused XLA computation, no per-op dispatch).

Backends are imported lazily: nothing here imports torch, jax or dask unless an
array of that library is passed in.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

__all__ = ["select", "numpy_rotate", "torch_rotate", "dask_rotate", "jax_rotate", "numpy_tables"]

#: Bytes of x per block of the NumPy kernel (three such blocks fit in a 1 MiB L2).
BLOCK_BYTES = 1 << 18
_SMALL = 1 << 20  # up to this many bytes of x, broadcasting ufuncs beat blocking (measured)
# Below these sizes of x the PyTorch reference (fewer kernel launches) is faster (measured on CPU).
_TORCH_MIN_HALF = 1 << 20
_TORCH_MIN_INTERLEAVED = 1 << 16
#: Bytes of x per block of the PyTorch half-split kernel on CPU (measured best at 1 MiB).
_TORCH_BLOCK = 1 << 20


# --------------------------------------------------------------------------- dispatch


def select(x: Any) -> Callable | None:
    """The fast kernel for ``x``'s library, or ``None`` (use the reference)."""
    t = type(x)
    if t is np.ndarray:
        return numpy_rotate
    mod = t.__module__
    if mod.startswith("torch"):
        return torch_rotate
    if mod.startswith("dask"):
        return dask_rotate
    if mod.startswith(("jax", "jaxlib")):
        return jax_rotate
    return None


def _reference(xp: Any, x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """The pure Array API path, for the cases a kernel leaves to it."""
    from .rotary import _rotate_generic
    from ._xp import namespace

    return _rotate_generic(xp if xp is not None else namespace(x), x, cos, sin, layout)


# --------------------------------------------------------------------------- NumPy


def _void(nbytes: int) -> np.dtype:
    return np.dtype((np.void, nbytes))


_COMPLEX = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


def _complex_of(work: np.dtype) -> np.dtype | None:
    return _COMPLEX.get(work)


def numpy_rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, xp: Any = None) -> np.ndarray:
    """Rotary application on NumPy arrays with a fresh output and no full-size temporaries."""
    dt = x.dtype
    work = dt if dt == cos.dtype == sin.dtype else np.result_type(dt, cos.dtype, sin.dtype)
    if work.kind != "f":
        return _reference(xp, x, cos, sin, layout)
    one_pass = layout == "interleaved" and work == dt and _complex_of(work) is not None
    if one_pass or x.nbytes <= _SMALL or x.strides[-1] != x.itemsize:
        return _numpy_whole(x, cos.astype(work, copy=False), sin.astype(work, copy=False), layout, work)
    rows = _rows_view(x)
    period = _period(x.shape[:-1], cos.shape[:-1]) if rows is not None else None
    if period is None:
        return _numpy_whole(x, cos.astype(work, copy=False), sin.astype(work, copy=False), layout, work)
    h = cos.shape[-1]
    out = np.empty(x.shape, dtype=dt)
    cos = cos.astype(work, copy=False).reshape(period, h)
    sin = sin.astype(work, copy=False).reshape(period, h)
    _numpy_blocks(rows, out.reshape(rows.shape), cos, sin, layout, work, period)
    return out


def _rows_view(x: np.ndarray) -> np.ndarray | None:
    """x as a (rows, features) view, or None when its leading axes do not flatten without a copy."""
    try:
        return np.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1]), copy=False)
    except ValueError:
        return None


def _period(lead: tuple, table_lead: tuple) -> int | None:
    """Rows after which the tables repeat along flattened ``lead``, or None if they do not.

    The tables must equal ``lead``'s trailing axes and be 1 on all axes before them
    (e.g. ``(S, h)`` against ``(B, H, S)``): row ``i`` of x then uses table row ``i % period``.
    """
    tl = (1,) * (len(lead) - len(table_lead)) + tuple(table_lead)
    k = len(lead)
    while k > 0 and tl[k - 1] == lead[k - 1]:
        k -= 1
    if any(n != 1 for n in tl[:k]):
        return None
    return math.prod(lead[k:])


_SIGN = {np.dtype(t): np.array([[-1.0], [1.0]], dtype=t) for t in (np.float16, np.float32, np.float64)}


def _numpy_whole(x, cos, sin, layout, work) -> np.ndarray:
    """Small or irregular arrays: a few broadcasting ufuncs over the whole array."""
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    lead = x.shape[:-1]
    xr = x[..., :r] if r < d else x
    if xr.dtype != work:
        xr = xr.astype(work)
    cplx = _complex_of(work) if layout == "interleaved" else None
    if layout == "half":
        x3 = xr.reshape(lead + (2, h))
        y = np.multiply(x3, cos[..., None, :])
        t = np.multiply(x3[..., ::-1, :], np.multiply(sin[..., None, :], _SIGN[work]))
        np.add(y, t, out=y)  # [x1 cos - x2 sin, x2 cos + x1 sin]
    elif cplx is not None and xr.strides[-1] == xr.itemsize:
        tab = np.empty(cos.shape, cplx)
        tab.real, tab.imag = cos, sin
        if r < d and x.dtype == work:  # write the rotated part straight into the output
            out = np.empty(x.shape, x.dtype)
            np.multiply(xr.view(cplx), tab, out=out[..., :r].view(cplx))
            np.copyto(out[..., r:], x[..., r:])
            return out
        y = np.multiply(xr.view(cplx), tab).view(work)
    else:
        xe, xo = xr[..., 0::2], xr[..., 1::2]
        y = np.empty(lead + (h, 2), work)
        ye, yo = y[..., 0], y[..., 1]
        t = np.multiply(xo, sin)
        np.multiply(xe, cos, out=ye)
        np.subtract(ye, t, out=ye)
        np.multiply(xe, sin, out=t)
        np.multiply(xo, cos, out=yo)
        np.add(yo, t, out=yo)
    y = y.reshape(lead + (r,))
    if r == d:
        return y if y.dtype == x.dtype else y.astype(x.dtype)
    out = np.empty(x.shape, x.dtype)
    np.copyto(out[..., :r], y, casting="same_kind")
    np.copyto(out[..., r:], x[..., r:])
    return out


def _row_blocks(n: int, period: int, step: int) -> Any:
    """The block schedule shared by the blocked kernels.

    Rows ``0..n-1`` of x use table row ``i % period``. Returns ``(step, short, blocks)``:
    ``short`` when whole periods fit in a block (tables broadcast over ``(-1, period, ...)``),
    and ``blocks`` yields ``(a, m, s0)``: rows ``a..a+m-1`` use table rows ``s0..s0+m-1``.
    """
    short = period < step
    if short:
        step = (step // period) * period
    outer = step if short else period

    def blocks() -> Any:
        for p0 in range(0, n, outer):
            span = min(outer, n - p0)
            for s0 in range(0, span, step):
                yield p0 + s0, min(step, span - s0), s0

    return step, short, blocks()


def _numpy_blocks(xf, of, cos, sin, layout, work, period) -> None:
    """Large arrays: row blocks of about BLOCK_BYTES with the matching table rows.

    Row ``i`` uses table row ``i % period``. Long periods are cut into blocks;
    short ones (e.g. one decode position for all heads) are broadcast over
    blocks of whole periods, seen as ``(-1, period, features)``.
    """
    h = cos.shape[-1]
    r, d = 2 * h, xf.shape[1]
    n = xf.shape[0]
    step, short, blocks = _row_blocks(n, period, max(1, BLOCK_BYTES // (d * work.itemsize)))

    def fold(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, period, a.shape[-1]) if short else a

    cast_in = xf.dtype != work
    cast_out = of.dtype != work
    xbuf = np.empty((step, r), work) if cast_in else None
    obuf = np.empty((step, r), work) if cast_out else None
    cplx = _complex_of(work)
    if layout == "half":
        cos_t = np.concatenate([cos, cos], axis=-1)
        sin_t = np.concatenate([-sin, sin], axis=-1)  # sign folded: y = x*cos_t + [x2, x1]*sin_t
        tbuf = np.empty((step, r), work)
        swap = tbuf.view(_void(h * work.itemsize))[:, ::-1]
        vdt = swap.dtype
    else:
        if cplx is None:  # float16 work (float16 x and tables): compute in float32
            work, cplx = np.dtype(np.float32), np.dtype(np.complex64)
            cast_in = cast_out = True
            xbuf, obuf = np.empty((step, r), work), np.empty((step, r), work)
        tab = np.empty(cos.shape, cplx)
        tab.real, tab.imag = cos, sin
    for a, m, s0 in blocks:
        xb = xf[a : a + m, :r]
        ob = of[a : a + m, :r]
        if cast_in:
            np.copyto(xbuf[:m], xb, casting="same_kind")
            xb = xbuf[:m]
        o = obuf[:m] if cast_out else ob
        if layout == "half":
            np.multiply(fold(xb), cos_t if short else cos_t[s0 : s0 + m], out=fold(o))
            np.copyto(swap[:m], xb.view(vdt))
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


# --------------------------------------------------------------------------- PyTorch


def torch_rotate(x: Any, cos: Any, sin: Any, layout: str, xp: Any = None) -> Any:
    """``mul`` + ``addcmul_`` into a fresh output; the reference when autograd records."""
    import torch

    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return _reference(xp, x, cos, sin, layout)  # out= ops are not differentiable
    dt = x.dtype
    work = dt if dt == cos.dtype == sin.dtype else torch.promote_types(torch.promote_types(dt, cos.dtype), sin.dtype)
    if cos.dtype != work or sin.dtype != work:
        cos, sin = cos.to(work), sin.to(work)
    if x.numel() * x.element_size() < (_TORCH_MIN_HALF if layout == "half" else _TORCH_MIN_INTERLEAVED):
        return _torch_small(torch, x, cos, sin, layout, work)
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    lead = tuple(x.shape[:-1])
    if layout == "half" and x.device.type == "cpu" and x.dtype == work and x.is_contiguous():
        period = _period(lead, tuple(cos.shape[:-1]))
        if period is not None:
            return _torch_half_blocks(torch, x, cos.reshape(period, h), sin.reshape(period, h), period)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    xr = x[..., :r]
    if x.dtype != work:
        xr = xr.to(work)
        o = torch.empty(lead + (r,), dtype=work, device=x.device)
    else:
        o = out[..., :r]
    if layout == "half":
        x1, x2, o1, o2 = xr[..., :h], xr[..., h:], o[..., :h], o[..., h:]
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
    elif work in (torch.float32, torch.float64) and _complex_view_ok(xr) and _complex_view_ok(o):
        xc = torch.view_as_complex(xr.unflatten(-1, (h, 2)))
        oc = torch.view_as_complex(o.unflatten(-1, (h, 2)))
        torch.mul(xc, torch.complex(cos, sin), out=oc)
    else:
        xe, xo, oe, oo = xr[..., 0::2], xr[..., 1::2], o[..., 0::2], o[..., 1::2]
        torch.mul(xe, cos, out=oe)
        oe.addcmul_(xo, sin, value=-1)
        torch.mul(xo, cos, out=oo)
        oo.addcmul_(xe, sin)
    if x.dtype != work:
        out[..., :r].copy_(o)
    if r < d:
        out[..., r:].copy_(x[..., r:])
    return out


def _torch_half_blocks(torch: Any, x: Any, cos: Any, sin: Any, period: int) -> Any:
    """Half-split on CPU in row blocks of about 1 MiB, so the four passes of each block hit cache.

    Row ``i`` of x (flattened leading axes) uses table row ``i % period``, as in the NumPy kernel.
    """
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    xf = x.view(-1, d)
    out = torch.empty_like(xf)
    n = xf.shape[0]
    _, short, blocks = _row_blocks(n, period, max(1, _TORCH_BLOCK // (d * x.element_size())))
    for a, m, s0 in blocks:
        xb, ob = xf[a : a + m], out[a : a + m]
        if short:
            xb, ob, cb, sb = xb.view(-1, period, d), ob.view(-1, period, d), cos, sin
        else:
            cb, sb = cos[s0 : s0 + m], sin[s0 : s0 + m]
        x1, x2, o1, o2 = xb[..., :h], xb[..., h:r], ob[..., :h], ob[..., h:r]
        torch.mul(x1, cb, out=o1)
        o1.addcmul_(x2, sb, value=-1)
        torch.mul(x2, cb, out=o2)
        o2.addcmul_(x1, sb)
        if r < d:
            ob[..., r:].copy_(xb[..., r:])
    return out.view(x.shape)


_TORCH_SIGN: dict = {}


def _torch_small(torch: Any, x: Any, cos: Any, sin: Any, layout: str, work: Any) -> Any:
    """Small tensors: a few whole-tensor ops (out= slices cost more than they save here)."""
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    xr = x[..., :r] if r < d else x
    if xr.dtype != work:
        xr = xr.to(work)
    if layout == "half":
        key = (work, x.device)
        sign = _TORCH_SIGN.get(key)
        if sign is None:
            sign = _TORCH_SIGN[key] = torch.tensor([[-1.0], [1.0]], dtype=work, device=x.device)
        x3 = xr.unflatten(-1, (2, h))
        y = (x3 * cos.unsqueeze(-2) + x3.flip(-2) * (sin.unsqueeze(-2) * sign)).flatten(-2)
    elif work in (torch.float32, torch.float64) and _complex_view_ok(xr):
        y = torch.view_as_real(torch.view_as_complex(xr.unflatten(-1, (h, 2))) * torch.complex(cos, sin)).flatten(-2)
    else:
        xe, xo = xr[..., 0::2], xr[..., 1::2]
        y = torch.stack((xe * cos - xo * sin, xo * cos + xe * sin), -1).flatten(-2)
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    return y if r == d else torch.cat((y, x[..., r:]), -1)


def _complex_view_ok(t: Any) -> bool:
    s = t.stride()
    return s[-1] == 1 and all(v % 2 == 0 for v in s[:-1]) and t.storage_offset() % 2 == 0


# --------------------------------------------------------------------------- Dask


def dask_rotate(x: Any, cos: Any, sin: Any, layout: str, xp: Any = None) -> Any:
    """One blockwise task per chunk of x; the tables are rechunked to x's chunks (they are small)."""
    import dask.array as da

    if len(x.chunks[-1]) != 1 or any(math.isnan(c) for cs in x.chunks for c in cs):
        return _reference(xp, x, cos, sin, layout)
    nd, td = x.ndim, cos.ndim
    letters = "abcdefghijklmnopqrstuvwxy"[:nd]
    t_ind = letters[nd - td : nd - 1] + "z"
    chunks = []
    for i, n in enumerate(cos.shape[:-1]):
        axis = nd - td + i
        chunks.append(x.chunks[axis] if n == x.shape[axis] and n != 1 else (n,))
    chunks.append((cos.shape[-1],))
    cos, sin = cos.rechunk(tuple(chunks)), sin.rechunk(tuple(chunks))

    def rotary(xb: Any, cb: Any, sb: Any) -> Any:
        return rotate_block(xb, cb, sb, layout)

    return da.blockwise(
        rotary, letters, x, letters, cos, t_ind, sin, t_ind,
        dtype=x.dtype, meta=x._meta, concatenate=True,
    )


def rotate_block(xb: Any, cb: Any, sb: Any, layout: str) -> Any:
    """Rotate one in-memory chunk with its own library's kernel (set by arrayrope.rotary)."""
    from . import rotary

    return rotary._rotate(None, xb, cb, sb, layout)


# --------------------------------------------------------------------------- JAX

_jitted: dict[str, Callable] = {}


def jax_rotate(x: Any, cos: Any, sin: Any, layout: str, xp: Any = None) -> Any:
    """The reference compiled by ``jax.jit`` (cached per layout; inlined when already tracing)."""
    fn = _jitted.get(layout)
    if fn is None:
        import jax

        fn = _jitted[layout] = jax.jit(lambda a, c, s: _reference(None, a, c, s, layout))
    return fn(x, cos, sin)


# --------------------------------------------------------------------------- tables


def numpy_tables(inv_freq: np.ndarray, n: int, dtype: np.dtype, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of ``p * inv_freq`` for p = 0..n-1 by angle addition, float64 arithmetic, in blocks.

    ``p = 1024 * a + b``: the rotations of ``1024 * a`` and ``b`` are float64 cos/sin on
    the host, composed with ``cos(u + v) = cos u cos v - sin u sin v`` in float64
    and cast: the same values as float64 angles up to one float64 rounding, at a
    fraction of the transcendental calls.
    """
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
