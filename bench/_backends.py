"""What the bench needs from each library: arrays, copies, synchronisation and the naive formulas.

The naive formulas are the ones users write from the seed documents: Hugging
Face's ``x * cos + rotate_half(x) * sin`` with full-width tables in x's dtype
(half-split), the even/odd pairs re-interleaved with stack + reshape
(interleaved), and Meta's complex ``freqs_cis`` multiplication.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass
class Lib:
    name: str  # numpy, torch, jax, cupy, torch-cuda
    mod: Any  # the library's own module (np, torch, jnp, cupy)
    device: str  # cpu or cuda
    low: tuple[str, ...]  # low-precision dtypes it has
    put: Callable[[np.ndarray], Any]
    sync: Callable[[], None]
    ready: Callable[[Any], Any]  # forces a lazy/asynchronous result
    copy: Callable[[Any], Any]
    copy_into: Callable[[Any, Any], Any] | None
    cat: Callable
    stack: Callable
    complex_mul: Callable | None  # (x_rot, freqs_cis) -> rotated, Meta's complex form

    def array(self, a: np.ndarray, dtype: str) -> Any:
        if dtype == "bfloat16":
            return self.cast(self.put(a.astype(np.float32)), "bfloat16")
        return self.put(a.astype(dtype))

    def cast(self, x: Any, dtype: str) -> Any:
        if self.name.startswith("torch"):
            import torch

            return x.to(getattr(torch, dtype))
        return x.astype(dtype)


def naive_half(lib: Lib, x: Any, cos_full: Any, sin_full: Any, r: int) -> Any:
    xr = x[..., :r] if r < x.shape[-1] else x
    h = r // 2
    rotated = lib.cat((-xr[..., h:], xr[..., :h]), -1)
    y = xr * cos_full + rotated * sin_full
    return y if r == x.shape[-1] else lib.cat((y, x[..., r:]), -1)


def naive_interleaved(lib: Lib, x: Any, cos: Any, sin: Any, r: int) -> Any:
    xr = x[..., :r] if r < x.shape[-1] else x
    xe, xo = xr[..., 0::2], xr[..., 1::2]
    y = lib.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).reshape(xr.shape)
    return y if r == x.shape[-1] else lib.cat((y, x[..., r:]), -1)


def naive_complex(lib: Lib, x: Any, freqs_cis: Any, r: int) -> Any:
    xr = x[..., :r] if r < x.shape[-1] else x
    y = lib.complex_mul(xr, freqs_cis)
    return y if r == x.shape[-1] else lib.cat((y, x[..., r:]), -1)


def _numpy() -> Lib:
    def cmul(xr: np.ndarray, fc: np.ndarray) -> np.ndarray:
        z = np.ascontiguousarray(xr, dtype=np.float32).view(np.complex64) * fc
        return z.view(np.float32).astype(xr.dtype, copy=False)

    return Lib(
        "numpy", np, "cpu", ("float16",), np.asarray, lambda: None, lambda y: y,
        lambda x: x.copy(), lambda dst, x: np.copyto(dst, x), np.concatenate, np.stack, cmul,
    )


def _torch(device: str) -> Lib:
    import torch

    dev = torch.device(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def cmul(xr: Any, fc: Any) -> Any:
        z = torch.view_as_complex(xr.float().reshape(*xr.shape[:-1], -1, 2)) * fc
        return torch.view_as_real(z).flatten(-2).type_as(xr)

    return Lib(
        "torch" if device == "cpu" else "torch-cuda", torch, device, ("bfloat16", "float16"),
        lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev), sync, lambda y: y,
        lambda x: x.clone(), lambda dst, x: dst.copy_(x), torch.cat, torch.stack, cmul,
    )


def _jax() -> Lib:
    import jax
    import jax.numpy as jnp

    def cmul(xr: Any, fc: Any) -> Any:
        p = xr.astype(jnp.float32).reshape(*xr.shape[:-1], -1, 2)
        z = jax.lax.complex(p[..., 0], p[..., 1]) * fc
        return jnp.stack((z.real, z.imag), -1).reshape(xr.shape).astype(xr.dtype)

    cpu = jax.devices("cpu")[0]
    return Lib(
        "jax", jnp, "cpu", ("bfloat16",), lambda a: jax.device_put(a, cpu), lambda: None,
        jax.block_until_ready, lambda x: jnp.array(x, copy=True), None, jnp.concatenate, jnp.stack, cmul,
    )


def _cupy() -> Lib:
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no CUDA device")

    def cmul(xr: Any, fc: Any) -> Any:
        z = cupy.ascontiguousarray(xr, dtype=cupy.float32).view(cupy.complex64) * fc
        return z.view(cupy.float32).astype(xr.dtype, copy=False)

    return Lib(
        "cupy", cupy, "cuda", ("float16",), cupy.asarray, cupy.cuda.Device().synchronize, lambda y: y,
        lambda x: x.copy(), lambda dst, x: cupy.copyto(dst, x), cupy.concatenate, cupy.stack, cmul,
    )


def available(names: list[str]) -> tuple[list[Lib], dict[str, str]]:
    """The libraries among ``names`` that load here (and why the others do not)."""
    makers: dict[str, Callable[[], Lib]] = {
        "numpy": _numpy,
        "torch": lambda: _torch("cpu"),
        "jax": _jax,
        "cupy": _cupy,
        "torch-cuda": _torch_cuda,
    }
    found, missing = [], {}
    for name in names:
        if name == "dask":
            continue
        try:
            found.append(makers[name]())
        except Exception as exc:
            missing[name] = f"{type(exc).__name__}: {exc}"
    return found, missing


def _torch_cuda() -> Lib:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    return _torch("cuda")
