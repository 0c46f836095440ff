"""What the bench knows about each library: how to time it, and the naive formulas users write.

The libraries themselves come from :func:`arrayrope.backends.available`, the one
registry of (library, device) backends. The bench adds two things of its own:

* how to time a library: a fresh copy and a copy into an existing array (the
  references every ratio is taken to), how to force a lazy result, and whether
  results are computed per call at all (Dask builds graphs: its own section times
  them); synchronising is the backend's ``synchronize``;
* the naive formulas users write from the seed documents: Hugging Face's
  ``x * cos + rotate_half(x) * sin`` with full-width tables in x's dtype
  (half-split), the even/odd pairs re-interleaved with stack + reshape
  (interleaved), and Meta's complex ``freqs_cis`` multiplication.

Where these need the library's own API, :data:`OPS` keys them by ``Backend.library``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from arrayrope.backends import Backend, available

#: The two floating dtypes below float32 that a backend may have.
LOW_PRECISION = ("float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class Ops:
    """How to time one library, and the joins its naive formulas use."""

    copy: Callable[[Any], Any]
    copy_into: Callable[[Any, Any], Any] | None
    ready: Callable[[Any], Any]  # forces a lazy or asynchronous result
    cat: Callable[..., Any]
    stack: Callable[..., Any]
    complex_mul: Callable[[Any, Any], Any] | None  # (x_rot, freqs_cis) -> rotated, Meta's complex form
    jit: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None  # the compiler users wrap formulas in
    per_call: bool = True  # False: results are task graphs, timed in a section of their own
    set_threads: Callable[[int], None] | None = None  # pins the library's own pool (beyond the environment)
    get_threads: Callable[[], int] | None = None  # the threads it uses


def _same(y: Any) -> Any:
    return y


def _numpy_like(mod: Any) -> Ops:
    """NumPy and CuPy: the same API on the host and on the GPU."""

    def cmul(xr: Any, fc: Any) -> Any:
        z = mod.ascontiguousarray(xr, dtype=mod.float32).view(mod.complex64) * fc
        return z.view(mod.float32).astype(xr.dtype, copy=False)

    return Ops(lambda x: x.copy(), mod.copyto, _same, mod.concatenate, mod.stack, cmul)


def _torch(torch: Any) -> Ops:
    def cmul(xr: Any, fc: Any) -> Any:
        z = torch.view_as_complex(xr.float().reshape(*xr.shape[:-1], -1, 2)) * fc
        return torch.view_as_real(z).flatten(-2).type_as(xr)

    return Ops(
        lambda x: x.clone(),
        lambda dst, x: dst.copy_(x),
        _same,
        torch.cat,
        torch.stack,
        cmul,
        set_threads=torch.set_num_threads,
        get_threads=torch.get_num_threads,
    )


def _jax(jnp: Any) -> Ops:
    import jax

    def cmul(xr: Any, fc: Any) -> Any:
        p = xr.astype(jnp.float32).reshape(*xr.shape[:-1], -1, 2)
        z = jax.lax.complex(p[..., 0], p[..., 1]) * fc
        return jnp.stack((z.real, z.imag), -1).reshape(xr.shape).astype(xr.dtype)

    return Ops(
        lambda x: jnp.array(x, copy=True), None, jax.block_until_ready, jnp.concatenate, jnp.stack, cmul, jit=jax.jit
    )


class _Sink:
    """A store target that drops what it gets, so a result is computed but never kept."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _dask(da: Any) -> Ops:
    def compute(y: Any) -> Any:
        return da.store(y, _Sink(), lock=False)

    # x.copy() is a no-op on immutable Dask arrays: the copy that writes a new array is x * 1.0.
    return Ops(lambda x: x * 1.0, None, compute, da.concatenate, da.stack, None, per_call=False)


#: Backend.library -> the bench's operations for it, built from the library's own module.
OPS: dict[str, Callable[[Any], Ops]] = {
    "numpy": _numpy_like,
    "cupy": _numpy_like,
    "torch": _torch,
    "jax": _jax,
    "dask": _dask,
}


@dataclasses.dataclass(frozen=True)
class Lib:
    """One backend of the registry with the bench's operations for its library."""

    backend: Backend
    ops: Ops

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def low(self) -> tuple[str, ...]:
        """Low-precision dtypes the backend has (timed on one prefill shape)."""
        return tuple(d for d in self.backend.dtypes if d in LOW_PRECISION)

    def array(self, a: np.ndarray, dtype: str | None = None) -> Any:
        """``a`` as an array of this backend, on its device (bfloat16 rounded from float32)."""
        return self.backend.asarray(a, dtype)

    def sync(self) -> None:
        self.backend.synchronize()


def select(names: Iterable[str]) -> tuple[list[Lib], dict[str, str]]:
    """The backends among ``names`` that are available here and that the bench can time (and why not the others)."""
    backends, missing = available(list(names), with_reasons=True)
    libs = []
    for backend in backends:
        make = OPS.get(backend.library)
        if make is None:
            missing[backend.name] = f"the bench has no timing recipe for {backend.library}"
            continue
        libs.append(Lib(backend, make(backend.native)))
    return libs, missing


# --------------------------------------------------------------------------- the naive formulas


def naive_half(ops: Ops, x: Any, cos_full: Any, sin_full: Any, r: int) -> Any:
    """Hugging Face: ``x * cos + rotate_half(x) * sin``, tables full width (``cat([cos, cos])``)."""
    xr = x[..., :r] if r < x.shape[-1] else x
    h = r // 2
    rotated = ops.cat((-xr[..., h:], xr[..., :h]), -1)
    y = xr * cos_full + rotated * sin_full
    return y if r == x.shape[-1] else ops.cat((y, x[..., r:]), -1)


def naive_interleaved(ops: Ops, x: Any, cos: Any, sin: Any, r: int) -> Any:
    """Even/odd pairs rotated, then re-interleaved with stack + reshape."""
    xr = x[..., :r] if r < x.shape[-1] else x
    xe, xo = xr[..., 0::2], xr[..., 1::2]
    y = ops.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).reshape(xr.shape)
    return y if r == x.shape[-1] else ops.cat((y, x[..., r:]), -1)


def naive_complex(ops: Ops, x: Any, freqs_cis: Any, r: int) -> Any:
    """Meta: pairs viewed as complex numbers, multiplied by ``freqs_cis = cos + i sin``."""
    assert ops.complex_mul is not None
    xr = x[..., :r] if r < x.shape[-1] else x
    y = ops.complex_mul(xr, freqs_cis)
    return y if r == x.shape[-1] else ops.cat((y, x[..., r:]), -1)


def naive(ops: Ops, layout: str, x: Any, tables: tuple[Any, Any, Any, Any], r: int) -> Any:
    """The naive formula of ``layout``; ``tables`` = (cos_full, sin_full, cos, sin) in x's dtype."""
    if layout == "half":
        return naive_half(ops, x, tables[0], tables[1], r)
    return naive_interleaved(ops, x, tables[2], tables[3], r)
