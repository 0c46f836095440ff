"""Fast paths behind ``apply_rotary`` and ``rope_tables``, one per library, chosen by the array's type.

A library module may define ``rotate(xp, x, cos, sin, layout, generic)`` and
``arange_tables(inv_freq, n, dtype, factor)``. A fast path computes the values of
the pure Array API reference (``generic``, passed in by the caller) with fewer
passes over memory; where it does not apply it calls ``generic`` itself, or
``arange_tables`` returns None. Modules are imported the first time an array of
their library passes, so importing arrayrope imports no optional library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._namespace import library_name, library_of
from .registry import library_module

__all__ = ["arange_tables", "rotate"]

Generic = Callable[[Any, Any, Any, Any, str], Any]
_NONE = object()
_rotate_of: dict[str | None, Any] = {}


def _kernel(library: str | None) -> Any:
    kernel = _rotate_of.get(library, _NONE)
    if kernel is _NONE:
        kernel = getattr(library_module(library), "rotate", None) if library is not None else None
        _rotate_of[library] = kernel
    return kernel


def rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str, generic: Generic) -> Any:
    """``x`` rotated by its library's fast path, or by ``generic`` where there is none.

    ``xp`` is the namespace of the (already checked) arguments, or None where the
    caller has not resolved it; ``generic(xp, x, cos, sin, layout)`` resolves it then.
    """
    kernel = _kernel(library_of(x))
    if kernel is None:
        return generic(xp, x, cos, sin, layout)
    return kernel(xp, x, cos, sin, layout, generic)


def arange_tables(xp: Any, inv_freq: np.ndarray, n: int, dtype: Any, factor: float) -> tuple[Any, Any] | None:
    """cos/sin for positions ``0..n-1`` from the fast path of ``xp``'s library, or None."""
    if library_name(xp) != "numpy":
        return None
    tables: tuple[Any, Any] | None = library_module("numpy").arange_tables(inv_freq, n, dtype, factor)
    return tables
