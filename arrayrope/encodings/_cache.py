"""The tables a :class:`~arrayrope.RotaryEmbedding` keeps between calls.

cos/sin of positions ``0 .. N-1`` (N a power of two, grown as calls need it) per
namespace, device and dtype, and the rows of the last decode step. From the second
call with those rows on (every layer of a model sharing one instance applies them to
its q and k), they come with the form the fast path of their library applies fastest
(:func:`arrayrope.backends.prepare`).
Entries are replaced, never changed, so a reader needs no lock. Copies and pickles
hold the frequencies only: their tables are rebuilt where they are used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .. import backends
from .._lib.dtypes import host_dtype
from .._lib.types import Array, Namespace
from ..frequencies import RopeFrequencies
from ..tables import rope_tables

__all__ = ["MAX_CACHE", "TableCache"]

#: Smallest cache (positions); it doubles as calls need more.
MIN_CACHE = 256
#: Largest cache (positions): beyond it a call computes the tables of its own positions only, so that a far
#: position costs what it uses (the cache would hold every position up to it).
MAX_CACHE = 1 << 17

Rows = tuple[Array, Array, Any]
#: In place of the prepared form of rows used by one call so far (preparing costs more than one call saves).
_LATER = object()


class TableCache:
    """Host-computed tables of one set of frequencies, and the last step's rows."""

    def __init__(self, freqs: RopeFrequencies) -> None:
        self.freqs = freqs
        self._tables: dict[tuple[int, Any, Any], tuple[Array, Array]] = {}
        self._lock = threading.Lock()
        self._last: tuple[tuple[Any, ...], Rows] | None = None

    def __reduce__(self) -> tuple[type[TableCache], tuple[RopeFrequencies]]:
        # a copy (deepcopy, pickle, torch.save) starts empty, with its own lock, and fills on the arrays it meets
        return type(self), (self.freqs,)

    def rows(
        self,
        xp: Namespace,
        x: Array,
        device: Any,
        dtype: Any,
        start: int,
        seq: int,
        layout: str,
        shape: Callable[[Array, Array], tuple[Array, Array]],
    ) -> Rows:
        """cos/sin of positions ``start .. start + seq - 1`` (with ``start + seq <= MAX_CACHE``) put in
        ``shape``, and their prepared form for arrays like ``x`` (or None)."""
        step = (id(xp), backends.cache_key(device), backends.cache_key(dtype), start, seq)
        last = self._last
        if last is not None and last[0] == step:
            cos, sin, prepared = last[1]
            if prepared is _LATER:  # these rows serve a second call (another layer): worth preparing now
                prepared = backends.prepare(x, cos, sin, layout)
                self._last = (step, (cos, sin, prepared))
            return cos, sin, prepared
        cos, sin = self._arange(xp, device, dtype, start + seq)
        cos, sin = shape(cos[start : start + seq, :], sin[start : start + seq, :])
        if device is not None:  # a JAX tracer's device is None: never keep traced values
            self._last = (step, (cos, sin, _LATER))
        return cos, sin, None

    def _arange(self, xp: Namespace, device: Any, dtype: Any, needed: int) -> tuple[Array, Array]:
        key = (id(xp), backends.cache_key(device), backends.cache_key(dtype))
        entry = self._tables.get(key)
        if entry is not None and entry[0].shape[0] >= needed:
            return entry
        with self._lock:
            entry = self._tables.get(key)
            if entry is not None and entry[0].shape[0] >= needed:
                return entry
            size = max(MIN_CACHE, 1 << (needed - 1).bit_length())
            cos, sin = rope_tables(self.freqs, size, dtype=host_dtype(xp, dtype))
            entry = (xp.asarray(cos, device=device), xp.asarray(sin, device=device))
            if device is not None:
                self._tables[key] = entry
            return entry
