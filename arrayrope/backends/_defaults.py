"""The contract's defaults (:class:`._protocol.Library`), for library modules without a fast path of their own."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .._lib.rotation import rotate_reference
from .._lib.types import Array, Device, DType, Namespace
from ._namespace import lazy_array
from ._protocol import Prepared

__all__ = [
    "NOUN",
    "arange_tables",
    "concrete",
    "constant",
    "host",
    "memory_known",
    "out_fault",
    "prepare",
    "rotate",
    "rotate_prepared",
    "same_view",
    "shares",
    "tracing",
]

#: The word for an array in the messages about ``out=``.
NOUN = "an array"


def concrete(x: Array) -> bool:
    """Values exist unless the array is lazy (``array_api_compat.is_lazy_array``)."""
    return not lazy_array(x)


def tracing() -> bool:
    """No graph compiler or exporter of its own."""
    return False


def constant(xp: Namespace, make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Device) -> Array:
    """A fresh array (the host side keeps its own caches; tracers such as ``jax.jit`` take it as a constant)."""
    return xp.asarray(make(*args), device=device)


def host(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)`` as it is (tracers such as ``jax.jit`` run host code as it is)."""
    return fn(*args)


def rotate(xp: Namespace, x: Array, cos: Array, sin: Array, layout: str, out: Array | None = None) -> Array:
    """The reference."""
    return rotate_reference(xp, x, cos, sin, layout, out)


def memory_known(out: Array) -> bool:
    """A library whose arrays cannot be written (it refuses ``out=`` before): no memory to inspect."""
    return False


def out_fault(out: Array) -> None:
    """Nothing known against ``out``."""
    return None


def shares(a: Array, b: Array) -> bool:
    """No memory known to be shared."""
    return False


def same_view(a: Array, b: Array) -> bool:
    """Only an array is itself."""
    return a is b


def prepare(cos: Array, sin: Array, layout: str) -> None:
    """No prepared form."""
    return None


def rotate_prepared(x: Array, prepared: Prepared, layout: str, out: Array | None = None) -> None:
    """No prepared form."""
    return None


def arange_tables(inv_freq: np.ndarray, n: int, dtype: DType, factor: float) -> None:
    """No fast path for tables."""
    return None
