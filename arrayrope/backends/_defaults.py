"""The contract's defaults (:class:`._protocol.Library`), for library modules without a fast path of their own."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .._lib.rotation import rotate_reference
from .._lib.types import Array, Device, DType, Namespace
from ._namespace import lazy_array
from ._protocol import Prepared

__all__ = ["arange_tables", "concrete", "constant", "host", "prepare", "rotate", "rotate_prepared", "tracing"]


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


def prepare(cos: Array, sin: Array, layout: str) -> None:
    """No prepared form."""
    return None


def rotate_prepared(x: Array, prepared: Prepared, layout: str, out: Array | None = None) -> None:
    """No prepared form."""
    return None


def arange_tables(inv_freq: np.ndarray, n: int, dtype: DType, factor: float) -> None:
    """No fast path for tables."""
    return None
