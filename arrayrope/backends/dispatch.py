"""Fast paths behind ``apply_rotary`` and ``rope_tables``, one per library, chosen by the array's type.

A library module may define ``rotate(xp, x, cos, sin, layout, generic)`` and
``arange_tables(inv_freq, n, dtype, factor)``. A fast path computes the values of
the pure Array API reference (``generic``, passed in by the caller) with fewer
passes over memory; where it does not apply it calls ``generic`` itself, or
``arange_tables`` returns None. Modules are imported the first time an array of
their library passes, so importing arrayrope imports no optional library.

A library whose arrays can be traced into graphs may also define ``traced(x)``
(whether caches must not keep ``x``), ``concrete(x)`` (whether the values of a lazy
array can be read now: JAX's outside a trace), ``onnx_exporting()`` (whether an ONNX
exporter of that library is tracing: exported graphs carry no float64) and
``onnx_rotary()`` (the rotary embedding to trace then, or None).

A module may also define ``prepare(cos, sin, layout)`` and
``rotate_prepared(x, prepared, layout)``: tables put once into the form its
small-array path applies with the fewest calls (sign folded, complex), for callers
that apply the same tables several times (``RotaryEmbedding``: q and k, every layer
of a decode step); ``rotate_prepared`` returns None where that form does not apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._namespace import lazy_array, library_name, library_of
from .registry import LIBRARIES, library_module

__all__ = ["arange_tables", "concrete", "is_lazy", "onnx_exporting", "onnx_rotary", "prepare", "rotate", "traced"]

Generic = Callable[[Any, Any, Any, Any, str], Any]
_NONE = object()
_rotate_of: dict[str | None, Any] = {}
_hooks: dict[tuple[str | None, str], Any] = {}


def _hook(library: str | None, name: str) -> Any:
    """Function ``name`` of a library's module (None where it has none), looked up once."""
    key = (library, name)
    found = _hooks.get(key, _NONE)
    if found is _NONE:
        found = getattr(library_module(library), name, None) if library is not None else None
        _hooks[key] = found
    return found


def _kernel(library: str | None) -> Any:
    kernel = _rotate_of.get(library, _NONE)
    if kernel is _NONE:
        kernel = _rotate_of[library] = _hook(library, "rotate")
    return kernel


def is_lazy(x: Any) -> bool:
    """Whether the values of ``x`` must not be inspected: a lazy array (JAX, Dask, meta tensors) or a tracer's
    stand-in (torch.compile, torch.export), where reading a value forces computation or breaks the trace."""
    return lazy_array(x) or traced(x)


def traced(x: Any) -> bool:
    """Whether ``x`` is a tracer's stand-in (torch.compile, torch.export) that no cache may keep."""
    test = _hook(library_of(x), "traced")
    return bool(test(x)) if test is not None else False


def concrete(x: Any) -> bool:
    """Whether the values of ``x`` can be read now: False for a tracer's stand-in (``jax.jit``,
    torch.compile), a Dask graph or a meta tensor, whose values do not exist yet."""
    if traced(x):
        return False
    test = _hook(library_of(x), "concrete")
    return bool(test(x)) if test is not None else not lazy_array(x)


_library_of_namespace: dict[int, str | None] = {}


def onnx_exporting(xp: Any) -> bool:
    """Whether an ONNX exporter is tracing arrays of namespace ``xp`` (the graph must not compute in float64)."""
    library = _library_of_namespace.get(id(xp), _NONE)
    if library is _NONE:
        name = library_name(xp).split(".")[0]
        library = _library_of_namespace[id(xp)] = name if name in LIBRARIES else None
    test = _hook(library, "onnx_exporting")  # type: ignore[arg-type]
    return bool(test()) if test is not None else False


def onnx_rotary(x: Any) -> Any:
    """The rotary embedding of ``x``'s library for a graph traced by an ONNX exporter, or None.

    None when ``x`` is not being traced for ONNX export (the case of every eager call).
    """
    hook = _hook(library_of(x), "onnx_rotary")
    return hook() if hook is not None else None


def rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str, generic: Generic, prepared: Any = None) -> Any:
    """``x`` rotated by its library's fast path, or by ``generic`` where there is none.

    ``xp`` is the namespace of the (already checked) arguments, or None where the
    caller has not resolved it; ``generic(xp, x, cos, sin, layout)`` resolves it then.
    ``prepared`` is what :func:`prepare` returned for these tables, or None.
    """
    library = library_of(x)
    if prepared is not None:
        fn = _hook(library, "rotate_prepared")
        out = None if fn is None else fn(x, prepared, layout)
        if out is not None:
            return out
    kernel = _kernel(library)
    if kernel is None:
        return generic(xp, x, cos, sin, layout)
    return kernel(xp, x, cos, sin, layout, generic)


def prepare(x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """``cos``/``sin`` in the form the small-array path of ``x``'s library applies fastest, or None."""
    fn = _hook(library_of(x), "prepare")
    return None if fn is None else fn(cos, sin, layout)


def arange_tables(xp: Any, inv_freq: np.ndarray, n: int, dtype: Any, factor: float) -> tuple[Any, Any] | None:
    """cos/sin for positions ``0..n-1`` from the fast path of ``xp``'s library, or None."""
    if library_name(xp) != "numpy":
        return None
    tables: tuple[Any, Any] | None = library_module("numpy").arange_tables(inv_freq, n, dtype, factor)
    return tables
