"""JAX: the backend entry, and the reference compiled by ``jax.jit`` behind ``apply_rotary``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .._lib.rotation import rotate_reference
from ._defaults import (
    NOUN,
    arange_tables,
    constant,
    host,
    memory_known,
    out_fault,
    prepare,
    rotate_prepared,
    same_view,
    shares,
    tracing,
)

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

_jitted: dict[str, Callable[..., Any]] = {}


def probe() -> list[Backend]:
    """JAX on the CPU, and on CUDA when a GPU is present (float64 only with x64 enabled)."""
    from .registry import Backend

    x64 = bool(jax.config.read("jax_enable_x64"))  # type: ignore[no-untyped-call]
    dtypes = ("float16", "bfloat16", "float32") + (("float64",) if x64 else ())
    found = [Backend("jax", jnp, jax.devices("cpu")[0], dtypes, lazy=True, native=jnp)]
    try:
        gpu = jax.devices("cuda")[0]
    except RuntimeError:  # no CUDA plugin, or no device
        return found
    return [*found, Backend("jax-cuda", jnp, gpu, dtypes, lazy=True, native=jnp)]


def concrete(x: jax.Array) -> bool:
    """Whether ``x`` holds values (an array outside a trace), not a tracer's stand-in under ``jax.jit``."""
    return not isinstance(x, jax.core.Tracer)


def to_numpy(x: jax.Array) -> np.ndarray:
    arr = np.asarray(x)
    return arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr


#: JAX arrays are immutable: ``out=`` is refused.
OUT_REFUSED: str | None = (
    "cannot write into a JAX array: JAX arrays are immutable. Use the returned array; to put it "
    "into a cache, cache.at[...].set(y) or jax.lax.dynamic_update_slice (under jax.jit, with the cache "
    "donated, XLA updates it in place)"
)


def rotate(xp: Any, x: jax.Array, cos: jax.Array, sin: jax.Array, layout: str, out: Any = None) -> jax.Array:
    """The reference under ``jax.jit``: one fused XLA computation (inlined when already tracing); ``out`` is
    refused before (:func:`.dispatch.check_out`)."""
    fn = _jitted.get(layout)
    if fn is None:
        fn = _jitted[layout] = jax.jit(lambda a, c, s: rotate_reference(jnp, a, c, s, layout))
    y: jax.Array = fn(x, cos, sin)
    return y
