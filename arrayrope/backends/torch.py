"""PyTorch: the backend entries (CPU, CUDA), and the fast path behind ``apply_rotary``; what its tracers see
and the host constants they take are in :mod:`._torch_graph`, what ``out=`` asks of a tensor's memory in
:mod:`._torch_memory`.

* Small tensors (a decode step): a few whole-tensor ops on halves from ``chunk``
  (half-split) or one complex multiplication (interleaved), joined by ``cat``; also
  mid-sized ones of the tables' dtype up to :data:`WHOLE_HALF` / :data:`WHOLE_INTERLEAVED`
  elements, whose few short parallel regions cost less than blocks.
* CPU: where PyTorch may use several threads, row blocks of at most :data:`GRAIN`
  elements per op, so that it runs each op on the calling thread and opens no
  parallel region: a region ends at a barrier, and when another process holds a
  core each region waits milliseconds for the delayed thread (the naive formula's
  regions, and the small blocked ones before, cost ten to a hundred times the work).
  From :data:`HELPERS_MIN` elements of a tensor needing no conversion, helper
  threads up to ``torch.get_num_threads()`` claim blocks in turn (:func:`.blocks.run`);
  a delayed thread then takes fewer blocks instead of holding the others. On one
  thread, blocks of :data:`ONE_THREAD_BLOCK` elements. Half-split pairs are ``mul`` +
  ``addcmul_`` into the output; interleaved pairs one complex multiplication on
  complex views. float16 and bfloat16 are converted block by block into float32
  scratch, rotated there and rounded once into the output; on several threads in
  blocks of :data:`CAST_BLOCK` elements whose ops run in PyTorch's parallel regions
  (six calls a block make small blocks cost more than their work).
* Other devices (CUDA), and CPU tensors the blocks cannot view: the same ops on
  the whole tensor, into slices of a fresh output.
* ``out=``: the blocks, the whole-tensor ops and the prepared tables write into the
  caller's tensor; where it is ``x`` itself, half-split blocks read ``x`` through the
  per-thread scratch (the complex multiplication writes each pair after reading it).
  A destination the blocks cannot view (a ``(B, H, S, D)`` cache sliced on ``S``)
  takes the whole-tensor ops.

Calls that autograd records, and calls being traced or compiled (``torch.compile``,
``torch.export``, TorchScript tracing for ``torch.onnx.export``), take the reference:
``out=`` ops are not differentiable, the reference has no branch on the size of ``x``
(exports with a dynamic batch or sequence stay dynamic) and the compilers fuse its
elementwise ops themselves. Nothing created while tracing is kept afterwards.

The lookups the core's code reads on tensors are filled when this module loads, so that inside a trace they hit
(see :func:`._namespace.warm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import array_api_compat.torch as _xp
import numpy as np
import torch

from .._lib import dtypes
from .._lib.rotation import rotate_reference
from . import blocks, integrations
from ._defaults import arange_tables
from ._torch_graph import concrete, constant, host, plain_floating, tracing
from ._torch_memory import NOUN, OUT_REFUSED, memory_known, out_fault, same_view, shares

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
    "plain_floating",
    "prepare",
    "probe",
    "rotate",
    "rotate_prepared",
    "same_view",
    "shares",
    "to_numpy",
    "tracing",
]

#: Elements below which PyTorch runs an op on the calling thread (ATen's ``GRAIN_SIZE``).
GRAIN = 32768
#: Elements per op of a block when PyTorch runs on one thread (no parallel region to avoid: fewer calls).
ONE_THREAD_BLOCK = 1 << 17
#: Elements per block of a float16/bfloat16 x (converted to float32 block by block) on more than one thread:
#: no helper claims such blocks, so each op of a block runs in PyTorch's own parallel region. Measured 3.6x
#: faster than blocks of GRAIN elements at (4, 32, 512, 128) bfloat16 on 2 cores (and 2x the naive formula's
#: speed in bfloat16 there), where the calls of small blocks cost more than their work.
CAST_BLOCK = 1 << 19
#: Elements of x from which helper threads take blocks too, when x needs no conversion (below that, and for
#: the six calls per block of a conversion, the calls' interpreter lock traffic costs more than a core gives).
HELPERS_MIN = 1 << 23
#: Elements up to which x of the tables' dtype takes the whole-tensor ops: interleaved pairs (one complex
#: multiplication) on any thread count, half-split pairs where PyTorch may use several threads. Measured
#: faster than the blocks there, quiet and beside a busy process: their few parallel regions are short.
WHOLE_INTERLEAVED = 1 << 20
WHOLE_HALF = 1 << 18

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def probe() -> list[Backend]:
    """PyTorch on the CPU, and on CUDA when a GPU is present."""
    from .registry import Backend

    dtypes = ("float16", "bfloat16", "float32", "float64")
    found = [Backend("torch", _xp, torch.device("cpu"), dtypes, native=torch)]
    if torch.cuda.is_available():
        found.append(
            Backend("torch-cuda", _xp, torch.device("cuda"), dtypes, native=torch, synchronize=torch.cuda.synchronize)
        )
    return found


def namespace_of(x: object) -> Any:
    """array_api_compat's PyTorch namespace for a tensor, else None."""
    return _xp if isinstance(x, torch.Tensor) else None


def to_numpy(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        x = x.float()
    return x.numpy()


def rotate(
    xp: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotary application on tensors, into a fresh output or ``out``; the reference where autograd or a tracer
    records (``out`` is then assigned, as PyTorch's in-place rules allow)."""
    if _recorded(x, cos, sin) or (out is not None and out.requires_grad and torch.is_grad_enabled()):
        ref: torch.Tensor = rotate_reference(xp, x, cos, sin, layout, out)
        return ref
    dt, cd = x.dtype, cos.dtype
    if dt is cd and dt is sin.dtype and (dt is torch.float32 or dt is torch.float64):
        work = dt  # the common case, without the rule's comparisons (a decode step is microseconds)
    else:  # float16 and bfloat16 arithmetic runs in float32, rounded once at the end
        work = dtypes.rotation_dtype(_xp, dt, cd, sin.dtype)
        if cd != work or sin.dtype != work:
            cos, sin = cos.to(work), sin.to(work)
    n = x.numel()
    if n <= GRAIN or (
        work == dt
        and n <= (WHOLE_INTERLEAVED if layout == "interleaved" else WHOLE_HALF if torch.get_num_threads() > 1 else 0)
    ):
        return _small(x, cos, sin, layout, work, out)
    # on one thread PyTorch opens no parallel region: one block's worth of x takes the whole-tensor ops
    if x.device.type == "cpu" and (x.dtype != cos.dtype or x.numel() > ONE_THREAD_BLOCK or torch.get_num_threads() > 1):
        done = _cpu(x, cos, sin, layout, out)
        if done is not None:
            return done
    return _whole(x, cos, sin, layout, out)


def _recorded(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether autograd records these tensors or a tracer or compiler is running (``out=`` ops would break them)."""
    return ((x.requires_grad or cos.requires_grad or sin.requires_grad) and torch.is_grad_enabled()) or tracing()


def prepare(cos: torch.Tensor, sin: torch.Tensor, layout: str) -> tuple[torch.Tensor, ...] | None:
    """Tables for :func:`rotate_prepared`: full-width cos and sign-folded sin (half-split), or complex."""
    if _recorded(cos, cos, sin) or cos.dtype != sin.dtype:
        return None
    work = dtypes.rotation_dtype(_xp, cos.dtype)
    if cos.dtype != work:
        cos, sin = cos.to(work), sin.to(work)
    if layout == "half":
        return torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)
    return (torch.complex(cos, sin),)


def rotate_prepared(
    x: torch.Tensor, prepared: tuple[torch.Tensor, ...], layout: str, out: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Small tensors with prepared tables: three calls (half-split) or one multiplication; else None."""
    t = prepared[0]
    # prepared tables come from outside any trace (prepare() gives none within one): only autograd is asked
    if x.numel() > GRAIN or ((x.requires_grad or t.requires_grad) and torch.is_grad_enabled()):
        return None
    if out is not None and out.requires_grad:
        return None
    if layout == "half":
        cf, sf = prepared
        d = x.shape[-1]
        if d != cf.shape[-1]:
            return None
        # [x1, x2] cos + [x2, x1] [-sin, sin]; both operands are fresh, so out may be x
        if out is not None and out.dtype == cf.dtype:
            return torch.addcmul(x * cf, x.roll(d // 2, -1), sf, out=out)
        y = (x * cf).addcmul_(x.roll(d // 2, -1), sf)  # the product is fresh: its sum is taken in place
        return y if out is None and y.dtype is x.dtype else _result(y, x, out)
    if x.dtype != _REAL.get(t.dtype) or x.shape[-1] != 2 * t.shape[-1] or not _complex_view_ok(x):
        return None
    if out is not None and _complex_view_ok(out):  # pair by pair: out may be x
        torch.mul(torch.view_as_complex(_pairs(x)), t, out=torch.view_as_complex(_pairs(out)))
        return out
    return _result(torch.view_as_real(torch.view_as_complex(_pairs(x)) * t).flatten(-2), x, out)


def _result(y: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``y`` (a fresh result) in ``x``'s dtype, or copied into ``out``."""
    if out is not None:
        return out.copy_(y)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def _small(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, work: torch.dtype, out: torch.Tensor | None
) -> torch.Tensor:
    """A few whole-tensor ops (decode steps): the fewest calls, each on the calling thread; the results are
    joined into ``out`` (which may be ``x``: they are computed before)."""
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    if layout == "half" and r == d:  # the products promote to the work dtype
        x1, x2 = x.chunk(2, -1)
        # value=-1 rounds as the prepared tables' negated sine on the CPU (one op fewer), not on CUDA
        # the products are fresh tensors: each takes its second term in place (no third allocation)
        first = (x1 * cos).addcmul_(x2, sin, value=-1) if x.is_cpu else (x1 * cos).addcmul_(x2, -sin)
        both = (first, (x2 * cos).addcmul_(x1, sin))
        if out is not None and both[0].dtype == out.dtype:
            return torch.cat(both, -1, out=out)
        return _result(torch.cat(both, -1), x, out)
    xr, rest = (x, None) if r == d else torch.split(x, [r, d - r], -1)
    if layout == "half":
        x1, x2 = xr.chunk(2, -1)
        parts = [torch.addcmul(x1 * cos, x2, -sin), torch.addcmul(x2 * cos, x1, sin)]
    else:
        if xr.dtype != work or not _complex_view_ok(xr):
            xr = xr.to(work, copy=True)
        pairs = torch.view_as_complex(_pairs(xr))
        parts = [torch.view_as_real(pairs * torch.complex(cos, sin)).flatten(-2)]
    if rest is not None:
        parts.append(rest.to(parts[0].dtype))
    if out is not None and parts[0].dtype == out.dtype:
        return torch.cat(parts, -1, out=out)
    return _result(parts[0] if len(parts) == 1 else torch.cat(parts, -1), x, out)


def _cpu(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, into: torch.Tensor | None
) -> torch.Tensor | None:
    """CPU row blocks of at most GRAIN elements per op on more than one thread (CAST_BLOCK for float16 and
    bfloat16 x), ONE_THREAD_BLOCK on one, inline or claimed by helpers.

    None where x's rows (or ``into``'s) do not view as ``(outer, period, d)`` or the tables do not repeat with
    a period.
    """
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    period = blocks.period(tuple(x.shape[:-1]), tuple(cos.shape[:-1]))
    if not period:
        return None
    try:
        x3 = x.view(-1, period, d)
    except RuntimeError:  # leading axes that do not flatten without a copy
        return None
    compute = cos.dtype
    cast = x.dtype != compute  # x is converted block by block into float32 (or wider) scratch
    inplace = into is not None and same_view(into, x)  # half-split blocks then read x from scratch
    outer = x3.shape[0]
    if into is None:
        out = torch.empty((outer, period, d), dtype=x.dtype)
    else:
        try:
            out = into.view(outer, period, d)
        except RuntimeError:  # leading axes that do not flatten without a copy
            return None
    threads = torch.get_num_threads()
    low = x.dtype in (torch.float16, torch.bfloat16)
    limit = ONE_THREAD_BLOCK if threads == 1 else CAST_BLOCK if low else GRAIN
    rows = max(1, min(period, limit // r))  # positions per block, then as many outer rows as fit
    per = max(1, min(outer, limit // (rows * r)))
    by_rows, by_outer = _sizes(period, rows), _sizes(outer, per)
    cos, sin = cos.reshape(period, h), sin.reshape(period, h)

    def split(t: torch.Tensor) -> list[torch.Tensor]:
        """``t`` (outer, period, k) as blocks: position ranges, and outer ranges within each."""
        parts = t.split_with_sizes(by_rows, 1) if len(by_rows) > 1 else (t,)
        return [b for part in parts for b in (part.split_with_sizes(by_outer, 0) if len(by_outer) > 1 else (part,))]

    def tables(t: torch.Tensor) -> list[torch.Tensor]:
        return [b for b in (t.split_with_sizes(by_rows, 0) if len(by_rows) > 1 else (t,)) for _ in by_outer]

    cb, sb = tables(cos), tables(sin)
    xs, os_ = split(x3[..., :r]), split(out[..., :r])
    pass_x, pass_o = (split(x3[..., r:]), split(out[..., r:])) if r < d else ([], [])
    if layout == "half":
        x1s, x2s = split(x3[..., :h]), split(x3[..., h:r])
        o1s, o2s = split(out[..., :h]), split(out[..., h:r])

        def work(i: int, scratch: dict[str, Any]) -> None:
            c, s = cb[i], sb[i]
            if cast:
                xb = _scratch(scratch, xs[i], compute)
                ob = _scratch(scratch, xs[i], compute, "o")
                (x1, x2), (o1, o2) = xb.chunk(2, -1), ob.chunk(2, -1)
            elif inplace:
                x1, x2 = _scratch(scratch, xs[i], compute).chunk(2, -1)
                o1, o2 = o1s[i], o2s[i]
            else:
                x1, x2, o1, o2 = x1s[i], x2s[i], o1s[i], o2s[i]
            torch.mul(x1, c, out=o1)
            o1.addcmul_(x2, s, value=-1)
            torch.mul(x2, c, out=o2)
            o2.addcmul_(x1, s)
            if cast:
                os_[i].copy_(ob)
            if pass_x:
                pass_o[i].copy_(pass_x[i])
    else:
        cc = tables(torch.complex(cos, sin))

        def work(i: int, scratch: dict[str, Any]) -> None:
            xb, ob = xs[i], os_[i]
            if cast or not (_complex_view_ok(xb) and _complex_view_ok(ob)):
                t = _scratch(scratch, xb, compute)
                tc = torch.view_as_complex(_pairs(t))
                torch.mul(tc, cc[i], out=tc)
                ob.copy_(t)
            else:
                torch.mul(torch.view_as_complex(_pairs(xb)), cc[i], out=torch.view_as_complex(_pairs(ob)))
            if pass_x:
                pass_o[i].copy_(pass_x[i])

    helpers = threads if x.numel() >= HELPERS_MIN and not cast else 1
    blocks.run(len(xs), work, helpers, _inference_mode(torch.is_inference_mode_enabled()))
    return out.view(x.shape) if into is None else into


def _sizes(n: int, step: int) -> list[int]:
    """``n`` cut into pieces of ``step`` (the last one shorter)."""
    return [step] * (n // step) + ([n % step] if n % step else [])


def _scratch(scratch: dict[str, Any], like: torch.Tensor, dtype: torch.dtype, name: str = "x") -> torch.Tensor:
    """A contiguous ``dtype`` buffer of ``like``'s shape, kept per thread; ``"x"`` is filled with ``like``."""
    n = math.prod(like.shape)
    buf = scratch.get(name)
    if buf is None or buf.numel() < n:
        buf = scratch[name] = torch.empty(n, dtype=dtype)
    t = buf[:n].view(like.shape)
    if name == "x":
        t.copy_(like)
    return t


def _inference_mode(enabled: bool) -> Callable[[], Any]:
    """The helper threads' context: the caller's inference mode (thread-local in PyTorch)."""
    return lambda: torch.inference_mode(enabled)


def _whole(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, into: torch.Tensor | None = None
) -> torch.Tensor:
    """The same ops on the whole tensor, into slices of a fresh output or ``into`` (CUDA, strided CPU tensors).

    Where ``into`` is ``x``, the pairs are read from a copy (the complex multiplication needs none)."""
    work = cos.dtype
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    lead = tuple(x.shape[:-1])
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if into is None else into
    xr = x[..., :r]
    if x.dtype != work:
        xr = xr.to(work)
        o = torch.empty((*lead, r), dtype=work, device=x.device)
    # the interleaved pairs as complex numbers wherever a fresh output takes them so: an out= call computes
    # the same products (rounded alike) whatever the destination's strides
    pairs = layout == "interleaved" and _complex_view_ok(xr)
    if x.dtype == work:
        o = out[..., :r]
        if into is not None and same_view(into, x) and not pairs:
            xr = xr.clone()
    if layout == "half":
        (x1, x2), (o1, o2) = xr.chunk(2, -1), o.chunk(2, -1)
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
    elif pairs:  # a destination with no complex view takes the same product, then a copy
        xc = torch.view_as_complex(_pairs(xr))
        if _complex_view_ok(o):
            torch.mul(xc, torch.complex(cos, sin), out=torch.view_as_complex(_pairs(o)))
        else:
            o.copy_(torch.view_as_real(xc * torch.complex(cos, sin)).flatten(-2))
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


def _pairs(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its last axis viewed as pairs: ``(..., d)`` -> ``(..., d // 2, 2)``."""
    return t.view(*t.shape[:-1], -1, 2)


def _complex_view_ok(t: torch.Tensor) -> bool:
    s = t.stride()
    return s[-1] == 1 and all(v % 2 == 0 for v in s[:-1]) and t.storage_offset() % 2 == 0


def _warm() -> None:
    """Fill the lookups that the core's code reads on tensors, before a trace of it reads them (see
    :func:`._namespace.warm`: a miss inside dynamo's trace would recompile the graph at the next new entry)."""
    from . import _namespace, dispatch

    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        devices.append(torch.device("mps"))
    dtypes = (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    )
    x = torch.empty(0)
    _namespace.warm(x, dtypes, devices)
    dispatch.tracing(_namespace.namespace(x))


_warm()
integrations.load("torch")  # packages built on the core plug into PyTorch's tracers now (the first tensor seen)
