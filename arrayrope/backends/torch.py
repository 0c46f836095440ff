"""PyTorch: the backend entries (CPU, CUDA), and the fast path behind ``apply_rotary``.

``mul`` + ``addcmul_`` into slices of a fresh output (no temporaries), or one
complex multiplication on a complex view for interleaved pairs. On CPU the
half-split layout runs in row blocks of about 1 MiB, so the four passes of each
block hit cache. Small tensors take a few whole-tensor ops instead (fewer kernel
launches), and calls that autograd records take the reference (``out=`` ops are
not differentiable).

Calls that are being traced (``torch.compile``, ``torch.export``, TorchScript
tracing for ``torch.onnx.export``) take the reference as well: it has no branch on
the size of ``x``, so exports with a dynamic batch or sequence stay dynamic, and
the compiler fuses its elementwise ops itself. Nothing created while tracing is
kept afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .blocks import period as _period
from .blocks import row_blocks

if TYPE_CHECKING:
    from .registry import Backend

__all__ = ["onnx_exporting", "onnx_rotary", "probe", "rotate", "to_numpy", "traced", "tracing"]

# Below these sizes of x the reference (fewer kernel launches) is faster (measured on CPU).
_MIN_HALF = 1 << 20
_MIN_INTERLEAVED = 1 << 16
#: Bytes of x per block of the half-split kernel on CPU (measured best at 1 MiB).
_BLOCK = 1 << 20

Generic = Callable[[Any, Any, Any, Any, str], Any]


def probe() -> list[Backend]:
    """PyTorch on the CPU, and on CUDA when a GPU is present."""
    import array_api_compat.torch as xp

    from .registry import Backend

    dtypes = ("float16", "bfloat16", "float32", "float64")
    found = [Backend("torch", xp, torch.device("cpu"), dtypes, native=torch)]
    if torch.cuda.is_available():
        found.append(Backend("torch-cuda", xp, torch.device("cuda"), dtypes, native=torch,
                             synchronize=torch.cuda.synchronize))
    return found


def to_numpy(x: torch.Tensor) -> np.ndarray:
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        x = x.float()
    return x.numpy()


_jit_tracing: Callable[[], bool] = torch.jit.is_tracing  # type: ignore[attr-defined]


def tracing() -> bool:
    """Whether the running code is being traced (torch.compile, torch.export, TorchScript) rather than run."""
    return torch.compiler.is_compiling() or _jit_tracing()


def traced(x: torch.Tensor) -> bool:
    """Whether ``x`` belongs to a trace (or is a fake or functional tensor): no cache may keep it."""
    return type(x) is not torch.Tensor or tracing()


def onnx_exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing (cheap when eager: no tracer runs)."""
    if not tracing():
        return False
    onnx = sys.modules.get("torch.onnx")  # an export has imported it
    return onnx is not None and bool(onnx.is_in_onnx_export())


def onnx_rotary() -> Any:
    """``torch_onnx.rotary_embedding`` while ``torch.onnx.export`` traces, else None."""
    if not onnx_exporting():
        return None
    from . import torch_onnx

    return torch_onnx.rotary_embedding


def rotate(
    xp: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, generic: Generic
) -> torch.Tensor:
    """``mul`` + ``addcmul_`` into a fresh output; the reference when autograd records or a tracer runs."""
    if (torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)) or tracing():
        ref: torch.Tensor = generic(xp, x, cos, sin, layout)  # out= ops are not differentiable
        return ref
    dt = x.dtype
    work = dt if dt == cos.dtype == sin.dtype else torch.promote_types(torch.promote_types(dt, cos.dtype), sin.dtype)
    if cos.dtype != work or sin.dtype != work:
        cos, sin = cos.to(work), sin.to(work)
    if x.numel() * x.element_size() < (_MIN_HALF if layout == "half" else _MIN_INTERLEAVED):
        return _small(x, cos, sin, layout, work)
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    lead = tuple(x.shape[:-1])
    if layout == "half" and x.device.type == "cpu" and x.dtype == work and x.is_contiguous():
        period = _period(lead, tuple(cos.shape[:-1]))
        if period is not None:
            return _half_blocks(x, cos.reshape(period, h), sin.reshape(period, h), period)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    xr = x[..., :r]
    if x.dtype != work:
        xr = xr.to(work)
        o = torch.empty((*lead, r), dtype=work, device=x.device)
    else:
        o = out[..., :r]
    if layout == "half":
        x1, x2, o1, o2 = xr[..., :h], xr[..., h:], o[..., :h], o[..., h:]
        torch.mul(x1, cos, out=o1)
        o1.addcmul_(x2, sin, value=-1)
        torch.mul(x2, cos, out=o2)
        o2.addcmul_(x1, sin)
    elif work in (torch.float32, torch.float64) and _complex_view_ok(xr) and _complex_view_ok(o):
        xc = torch.view_as_complex(xr.reshape(*lead, h, 2))
        oc = torch.view_as_complex(o.reshape(*lead, h, 2))
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


def _half_blocks(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, period: int) -> torch.Tensor:
    """Half-split on CPU in row blocks of about 1 MiB, so the four passes of each block hit cache.

    Row ``i`` of x (flattened leading axes) uses table row ``i % period``, as in the NumPy kernel.
    """
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    xf = x.view(-1, d)
    out = torch.empty_like(xf)
    n = xf.shape[0]
    _, short, blocks = row_blocks(n, period, max(1, _BLOCK // (d * x.element_size())))
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


#: The (-1, +1) factors of the small half-split path, per dtype and device (plain tensors only).
_SIGN: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _small(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, work: torch.dtype) -> torch.Tensor:
    """Small tensors: a few whole-tensor ops (out= slices cost more than they save here)."""
    h = cos.shape[-1]
    r, d = 2 * h, x.shape[-1]
    xr = x[..., :r] if r < d else x
    if xr.dtype != work:
        xr = xr.to(work)
    if layout == "half":
        key = (work, x.device)
        sign = _SIGN.get(key)
        if sign is None:
            sign = torch.tensor([[-1.0], [1.0]], dtype=work, device=x.device)
            if not traced(x):  # never keep a tracer's tensor past its trace
                _SIGN[key] = sign
        x3 = xr.reshape(*xr.shape[:-1], 2, h)
        y = (x3 * cos.unsqueeze(-2) + x3.flip(-2) * (sin.unsqueeze(-2) * sign)).flatten(-2)
    elif work in (torch.float32, torch.float64) and _complex_view_ok(xr):
        pairs = torch.view_as_complex(xr.reshape(*xr.shape[:-1], h, 2))
        y = torch.view_as_real(pairs * torch.complex(cos, sin)).flatten(-2)
    else:
        xe, xo = xr[..., 0::2], xr[..., 1::2]
        y = torch.stack((xe * cos - xo * sin, xo * cos + xe * sin), -1).flatten(-2)
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    return y if r == d else torch.cat((y, x[..., r:]), -1)


def _complex_view_ok(t: torch.Tensor) -> bool:
    s = t.stride()
    return s[-1] == 1 and all(v % 2 == 0 for v in s[:-1]) and t.storage_offset() % 2 == 0
