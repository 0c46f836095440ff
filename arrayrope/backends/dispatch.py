"""Fast paths behind ``apply_rotary`` and ``rope_tables``, one per library, chosen by the array's type.

A library module may define ``rotate(xp, x, cos, sin, layout, generic)`` and
``arange_tables(inv_freq, n, dtype, factor)``. A fast path computes the values of
the pure Array API reference (``generic``, passed in by the caller) with fewer
passes over memory; where it does not apply it calls ``generic`` itself, or
``arange_tables`` returns None. A module may also define ``prepare(cos, sin, layout)``
and ``rotate_prepared(x, prepared, layout)``: tables put once into the form its
small-array path applies with the fewest calls (sign folded, complex), for callers
that apply the same tables several times (``RotaryEmbedding``: q and k, every layer
of a decode step); ``rotate_prepared`` returns None where that form does not apply.
Modules are imported the first time an array of their library passes, so
importing arrayrope imports no optional library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._namespace import library_name, library_of
from .registry import library_module

__all__ = ["arange_tables", "prepare", "rotate"]

Generic = Callable[[Any, Any, Any, Any, str], Any]
_NONE = object()
_functions: dict[tuple[str | None, str], Any] = {}


def _kernel(library: str | None, name: str = "rotate") -> Any:
    """The function ``name`` of ``library``'s module, or None (cached)."""
    key = (library, name)
    fn = _functions.get(key, _NONE)
    if fn is _NONE:
        fn = getattr(library_module(library), name, None) if library is not None else None
        _functions[key] = fn
    return fn


def rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str, generic: Generic, prepared: Any = None) -> Any:
    """``x`` rotated by its library's fast path, or by ``generic`` where there is none.

    ``xp`` is the namespace of the (already checked) arguments, or None where the
    caller has not resolved it; ``generic(xp, x, cos, sin, layout)`` resolves it then.
    ``prepared`` is what :func:`prepare` returned for these tables, or None.
    """
    library = library_of(x)
    if prepared is not None:
        fn = _kernel(library, "rotate_prepared")
        out = None if fn is None else fn(x, prepared, layout)
        if out is not None:
            return out
    kernel = _kernel(library)
    if kernel is None:
        return generic(xp, x, cos, sin, layout)
    return kernel(xp, x, cos, sin, layout, generic)


def prepare(x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """``cos``/``sin`` in the form the small-array path of ``x``'s library applies fastest, or None."""
    fn = _kernel(library_of(x), "prepare")
    return None if fn is None else fn(cos, sin, layout)


def arange_tables(xp: Any, inv_freq: np.ndarray, n: int, dtype: Any, factor: float) -> tuple[Any, Any] | None:
    """cos/sin for positions ``0..n-1`` from the fast path of ``xp``'s library, or None."""
    if library_name(xp) != "numpy":
        return None
    tables: tuple[Any, Any] | None = library_module("numpy").arange_tables(inv_freq, n, dtype, factor)
    return tables
