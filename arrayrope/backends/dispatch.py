"""Library-specific behaviour behind the core's functions, chosen by the array's library.

Each library module implements the contract of :class:`._protocol.Library`;
:func:`library` is the one lookup (modules are imported the first time an array of
their library passes, so importing arrayrope imports no optional library). The
functions below are what the core calls:

* :func:`rotate`, :func:`prepare`, :func:`arange_tables`: fast paths that compute the
  values of :func:`arrayrope._lib.rotation.rotate_reference` (and of the tables) with
  fewer passes over memory; :func:`check_out`: whether a rotation may be written into
  a caller's array (``out=``).
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
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from .._lib.rotation import rotate_reference
from .._lib.types import Array, Device, DType, Namespace
from . import integrations
from ._libraries import TABLE
from ._namespace import lazy_array, library_name, library_of, namespace_key
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


def _of(x: object) -> Library | None:
    name = library_of(x)
    return None if name is None else library(name)


def concrete(x: object) -> bool:
    """Whether the values of ``x`` exist and may be read now (see :meth:`.Library.concrete`)."""
    module = _of(x)
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
    xp: Namespace, x: Array, cos: Array, sin: Array, layout: str, prepared: object = None, out: Array | None = None
) -> Array:
    """``x`` rotated by its library's fast path (``prepared``: what :func:`prepare` returned, or None), into
    ``out`` when given (checked by :func:`check_out`)."""
    module = _of(x)
    if module is None:
        return rotate_reference(xp, x, cos, sin, layout, out)
    if prepared is not None:
        done = module.rotate_prepared(x, prepared, layout, out)
        if done is not None:
            return done
    return module.rotate(xp, x, cos, sin, layout, out)


def check_out(out: Array, x: Array, others: tuple[Array, ...], names: tuple[str, ...]) -> None:
    """Refuse ``out`` where ``x``'s library cannot write ``x`` rotated into it (see :meth:`.Library.check_out`)."""
    module = _of(x)
    if module is None:
        raise TypeError(
            f"{names[0]}= writes into arrays of NumPy, CuPy and PyTorch; {names[1]} is a {type(x).__name__}: "
            f"pass no {names[0]}= and use the returned array"
        )
    module.check_out(out, x, others, names)


def prepare(x: Array, cos: Array, sin: Array, layout: str) -> object | None:
    """``cos``/``sin`` in the form the small-array path of ``x``'s library applies fastest, or None."""
    module = _of(x)
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
