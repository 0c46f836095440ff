"""Dask: the backend entry, and the fast path behind ``apply_rotary``.

One ``blockwise`` task per chunk of ``x``, which runs the fast path of the chunk's
own library; the small tables are rechunked to ``x``'s chunks, ``x`` never is.
A chunked feature axis, or chunks of unknown size, take the reference.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from .._lib.rotation import rotate_reference
from ._defaults import (
    NOUN,
    arange_tables,
    concrete,
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


def probe() -> list[Backend]:
    """Dask arrays of NumPy chunks."""
    import array_api_compat.dask.array as xp

    from .registry import Backend

    return [Backend("dask", xp, "cpu", ("float32", "float64"), lazy=True, native=da)]


def to_numpy(x: da.Array) -> np.ndarray:
    from .registry import to_numpy as convert

    return convert(x.compute())


#: Dask arrays are lazy graphs, with no memory to write into: ``out=`` is refused.
OUT_REFUSED: str | None = (
    "cannot write into a Dask array: a Dask array is a lazy graph, not memory. Use the returned "
    "array (its chunks are computed where they are needed); to write the values into storage, "
    "dask.array.store(y, target)"
)


def rotate(xp: Any, x: da.Array, cos: da.Array, sin: da.Array, layout: str, out: Any = None) -> da.Array:
    """One blockwise task per chunk of x; the tables are rechunked to x's chunks (they are small). ``out`` is
    refused before (:func:`.dispatch.check_out`)."""
    if len(x.chunks[-1]) != 1 or any(math.isnan(c) for cs in x.chunks for c in cs):
        ref: da.Array = rotate_reference(xp, x, cos, sin, layout)
        return ref
    nd, td = x.ndim, cos.ndim
    letters = "abcdefghijklmnopqrstuvwxy"[:nd]
    t_ind = letters[nd - td : nd - 1] + "z"
    chunks = []
    for i, n in enumerate(cos.shape[:-1]):
        axis = nd - td + i
        chunks.append(x.chunks[axis] if n == x.shape[axis] and n != 1 else (n,))
    chunks.append((cos.shape[-1],))
    cos, sin = cos.rechunk(tuple(chunks)), sin.rechunk(tuple(chunks))

    def rotary(xb: Any, cb: Any, sb: Any) -> Any:
        from . import namespace
        from .dispatch import module_of
        from .dispatch import rotate as chunk_rotate

        return chunk_rotate(module_of(xb), namespace(xb), xb, cb, sb, layout)

    result: da.Array = da.blockwise(
        rotary, letters, x, letters, cos, t_ind, sin, t_ind, dtype=x.dtype, meta=x._meta, concatenate=True
    )
    return result
