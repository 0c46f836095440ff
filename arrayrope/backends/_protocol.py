"""The backend contract: what each library module of this package provides, declared once.

Every array library arrayrope supports has one module here (``numpy``, ``torch``,
``jax``, ``dask``, ``cupy``, ``array_api_strict``), imported the first time an array
of that library is seen. Each module provides every function of :class:`Library`;
a module without a fast path for one of them imports the default of
:mod:`._defaults` under that name, so what a library does differently reads from
its import list. :func:`arrayrope.backends.dispatch.library` is the one lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from .._lib.types import Array, Device, DType, Namespace

if TYPE_CHECKING:
    from .registry import Backend

__all__ = ["Library", "Prepared"]

Prepared: TypeAlias = Any
"""Tables in a library's own prepared form (what its ``prepare`` returns, opaque to the core)."""


class Library(Protocol):
    """What a library module provides (a module satisfies this protocol; ``self`` is not passed)."""

    def probe(self) -> list[Backend]:
        """The backends of this library on this machine; raises where it cannot be used here."""
        ...

    def to_numpy(self, x: Array) -> np.ndarray:
        """A NumPy copy of ``x`` on the host (bfloat16 as float32)."""
        ...

    def concrete(self, x: Array) -> bool:
        """Whether the values of ``x`` exist and may be read now.

        False for a lazy array (Dask), a tracer's stand-in (``jax.jit``, ``torch.compile``,
        ``torch.export``, ONNX export) and a tensor without storage (PyTorch's ``meta``):
        their values are never inspected, and no cache keeps them.
        """
        ...

    def tracing(self) -> bool:
        """Whether a graph compiler or exporter of this library is tracing the running code.

        Tables computed then carry no float64 (the exact float32 method): the graph runs
        wherever it is deployed, and the export layer's graphs carry none either.
        """
        ...

    def constant(
        self, xp: Namespace, make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Device
    ) -> Array:
        """``make(*args)``, a NumPy array computed on the host from hashable arguments, as an array on ``device``.

        What the tables need from the host (digit rotations, turns, frequencies) comes through here: a
        graph compiler of the library takes the result as a constant of the graph, computed outside it
        and never from traced values (``torch.compile`` refuses host NumPy inside a trace).
        """
        ...

    def host(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``fn(*args)``, a value computed on the host from constant arguments (frequencies, index maps).

        A graph compiler of the library runs it while it traces, outside the graph, and keeps the result
        as a constant of the graph (``torch.compile`` refuses host NumPy inside a trace).
        """
        ...

    def rotate(self, xp: Namespace, x: Array, cos: Array, sin: Array, layout: str, out: Array | None) -> Array:
        """``x`` rotated as :func:`arrayrope._lib.rotation.rotate_reference` does, by this library's fast path.

        With ``out`` (checked by :func:`.dispatch.check_out`) the result is written there and ``out`` returned;
        ``out`` may be ``x`` itself.
        """
        ...

    #: Why ``out=`` cannot write into this library's arrays (the message after ``"out= "``), or None.
    OUT_REFUSED: str | None
    #: What the messages about ``out=`` call an array of this library: ``"a tensor"``, ``"an array"``.
    NOUN: str

    def memory_known(self, out: Array) -> bool:
        """Whether the memory of ``out`` can be inspected now (not while a graph is traced, nor without storage):
        where it cannot, :func:`.dispatch.check_out` checks its namespace, shape, dtype and device only."""
        ...

    def out_fault(self, out: Array) -> str | None:
        """Why ``out`` cannot be written (read-only, elements repeated), as the message after its name; else None."""
        ...

    def shares(self, a: Array, b: Array) -> bool:
        """Whether ``a`` and ``b`` may have an element in common (exactly, where that is cheap to tell)."""
        ...

    def same_view(self, a: Array, b: Array) -> bool:
        """Whether ``a`` and ``b`` view the same elements in the same order (``a`` is ``b``, or a view like it)."""
        ...

    def prepare(self, cos: Array, sin: Array, layout: str) -> Prepared | None:
        """Tables in the form :func:`rotate_prepared` applies fastest (for tables applied often), or None."""
        ...

    def rotate_prepared(self, x: Array, prepared: Prepared, layout: str, out: Array | None) -> Array | None:
        """``x`` rotated with what :func:`prepare` returned (into ``out`` if given), or None where that form
        does not apply."""
        ...

    def arange_tables(self, inv_freq: np.ndarray, n: int, dtype: DType, factor: float) -> tuple[Array, Array] | None:
        """cos/sin for positions ``0..n-1`` (times ``factor``) by this library's fast path, or None."""
        ...


if TYPE_CHECKING:  # every library module satisfies the contract (checked by mypy)
    from . import array_api_strict, cupy, dask, jax, numpy, torch

    _ARRAY_API_STRICT: Library = array_api_strict
    _CUPY: Library = cupy
    _DASK: Library = dask
    _JAX: Library = jax
    _NUMPY: Library = numpy
    _TORCH: Library = torch
