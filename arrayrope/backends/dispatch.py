"""Library-specific behaviour behind the core's functions, chosen by the array's library.

Each library module implements the contract of :class:`._protocol.Library`;
:func:`library` is the one lookup (modules are imported the first time an array of
their library passes, so importing arrayrope imports no optional library). The
functions below are what the core calls:

* :func:`rotate`, :func:`prepare`, :func:`arange_tables`: fast paths that compute the
  values of :func:`arrayrope._lib.rotation.rotate_reference` (and of the tables) with
  fewer passes over memory; :func:`check_out`: the one check of a caller's array that a rotation is
  written into (``out=``, ``q_out=``, ``k_out=``), asking the library's module about its memory.
* :func:`concrete`: the one predicate for "the values of this array may be read now"
  (False for Dask graphs, tracers' stand-ins and meta tensors: never inspected or cached).
* :func:`tracing`: whether a graph of that library is being traced (no float64 then).
* :func:`graph_rotary`: the rotary embedding a package built on the core registered
  for graphs of that library (:mod:`.integrations`), while one is traced.
* :func:`constant`, :func:`host`: an array or a value computed on the host, which a graph
  compiler takes as a constant of the graph (the tables' digit rotations and turns, frequencies).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import numpy as np

from .._lib.rotation import rotate_reference
from .._lib.types import Array, Device, DType, Namespace
from . import integrations
from ._libraries import TABLE
from ._namespace import lazy_array, library_name, library_of, namespace, namespace_key, same_device
from ._protocol import Library
from .registry import LIBRARIES, library_module

__all__ = [
    "arange_tables",
    "check_out",
    "concrete",
    "constant",
    "graph_rotary",
    "host",
    "library",
    "load_imported",
    "module_of",
    "prepare",
    "rotate",
    "tracing",
]

_modules: dict[str, Library] = {}
_library_of_namespace: dict[Hashable, str | None] = {}


def library(name: str) -> Library:
    """The module of library ``name`` (``"numpy"``, ``"torch"``...), imported once."""
    found = _modules.get(name)
    if found is None:
        found = _modules[name] = library_module(name)
    return found


#: The module whose import means a library is in use (its backend module then loads at no import cost).
_IMPORT_NAMES = {lib.name: lib.import_name for lib in TABLE}


def load_imported() -> None:
    """Load the backend modules of the libraries this process has imported (and with them their integrations)."""
    for name in LIBRARIES:
        if name not in _modules and _IMPORT_NAMES[name] in sys.modules:
            try:
                library(name)
            except Exception:  # a library that imported but cannot be used here (CuPy without a GPU)
                continue


def concrete(x: object) -> bool:
    """Whether the values of ``x`` exist and may be read now (see :meth:`.Library.concrete`)."""
    if type(x) is np.ndarray:  # NumPy's own arrays always hold their values
        return True
    module = module_of(x)
    return module.concrete(x) if module is not None else not lazy_array(x)


def tracing(xp: Namespace) -> bool:
    """Whether a graph compiler or exporter of namespace ``xp``'s library is tracing (no float64 then)."""
    key = namespace_key(xp)
    name = _library_of_namespace.get(key, "")
    if name == "":
        short = library_name(xp).split(".")[0]
        name = _library_of_namespace[key] = short if short in LIBRARIES else None
    return name is not None and library(name).tracing()


def graph_rotary(x: Array) -> Callable[..., Any] | None:
    """The rotary embedding registered for graphs of ``x``'s library while one is traced, else None."""
    name = library_of(x)
    if name is None or not library(name).tracing():
        return None
    return integrations.graph_rotary(name)


def rotate(
    module: Library | None,
    xp: Namespace,
    x: Array,
    cos: Array,
    sin: Array,
    layout: str,
    prepared: object = None,
    out: Array | None = None,
) -> Array:
    """``x`` rotated by the fast path of ``module`` (its library's, from :func:`module_of`; None: the reference),
    with ``prepared`` (what :func:`prepare` returned) where given, into ``out`` (checked by :func:`check_out`)."""
    if module is None:
        return rotate_reference(xp, x, cos, sin, layout, out)
    if prepared is not None:
        done = module.rotate_prepared(x, prepared, layout, out)
        if done is not None:
            return done
    return module.rotate(xp, x, cos, sin, layout, out)


def module_of(x: object) -> Library | None:
    """The module of ``x``'s library (None: a library without one, which takes the pure Array API reference)."""
    name = library_of(x)
    return None if name is None else library(name)


def check_out(out: Array, x: Array, *, name: str, x_name: str, others: Mapping[str, Array]) -> None:
    """Refuse ``out`` (the argument ``name``) as the destination of ``x`` (``x_name``) rotated: another library,
    shape, dtype or device; a library whose arrays cannot be written; memory that cannot be written (read-only,
    elements repeated), or shared with ``x`` (other than being ``x`` itself) or with ``others`` (the call's
    other arrays, read or written, by name)."""
    namespace(x, out, names=(x_name, name))  # an array, of x's library
    if out.dtype != x.dtype:
        raise TypeError(f"{name} must have {x_name}'s dtype {x.dtype} (the result's), got {out.dtype}")
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(
            f"{name} must have {x_name}'s shape {tuple(x.shape)} (no broadcasting), got {tuple(out.shape)}"
        )
    same_device(x, out, x_name, name)
    module = module_of(x)
    if module is None:
        raise TypeError(
            f"{name}= writes into arrays of NumPy, CuPy and PyTorch; {x_name} is a {type(x).__name__}: "
            f"pass no {name}= and use the returned array"
        )
    if module.OUT_REFUSED is not None:
        raise TypeError(f"{name}= {module.OUT_REFUSED}")
    if not module.memory_known(out):
        return
    fault = module.out_fault(out)
    if fault is not None:
        raise ValueError(f"{name} {fault}")
    if out is not x and module.shares(out, x) and not module.same_view(out, x):
        raise ValueError(
            f"{name} shares memory with {x_name} without being {x_name} itself; pass {x_name} (in place) "
            f"or {module.NOUN} that does not overlap it"
        )
    for other_name, other in others.items():
        if module.shares(out, other):
            raise ValueError(f"{name} shares memory with {other_name}; pass {module.NOUN} that does not overlap it")


def prepare(x: Array, cos: Array, sin: Array, layout: str) -> object | None:
    """``cos``/``sin`` in the form the small-array path of ``x``'s library applies fastest, or None."""
    module = module_of(x)
    return None if module is None else module.prepare(cos, sin, layout)


def arange_tables(
    xp: Namespace, inv_freq: np.ndarray, n: int, dtype: DType, factor: float
) -> tuple[Array, Array] | None:
    """cos/sin for positions ``0..n-1`` from the fast path of ``xp``'s library, or None."""
    short = library_name(xp).split(".")[0]
    return library(short).arange_tables(inv_freq, n, dtype, factor) if short in LIBRARIES else None


def constant(xp: Namespace, make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Device) -> Array:
    """``make(*args)`` (host NumPy from hashable arguments) as an array of ``xp`` on ``device``.

    See :meth:`.Library.constant`: graph compilers take it as a constant of the graph.
    """
    short = library_name(xp).split(".")[0]
    if short in LIBRARIES:
        return library(short).constant(xp, make, args, device)
    return xp.asarray(make(*args), device=device)


_T = TypeVar("_T")


def host(xp: Namespace, fn: Callable[..., _T], args: tuple[Any, ...]) -> _T:
    """``fn(*args)`` computed on the host (see :meth:`.Library.host`): a constant of the graph being traced."""
    short = library_name(xp).split(".")[0]
    found: _T = library(short).host(fn, args) if short in LIBRARIES else fn(*args)
    return found
