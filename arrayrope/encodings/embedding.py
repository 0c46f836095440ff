"""``RotaryEmbedding``: frequencies, cached tables and application in one callable."""

from __future__ import annotations

import numbers
import threading
import warnings
from collections.abc import Mapping
from typing import Any

from .. import backends
from .._lib import checks
from .._lib.dtypes import host_dtype, table_dtype_for
from .._lib.positions import position_array
from .._lib.types import AXES, Array, Axes, Layout, Namespace
from ..apply import rotate
from ..frequencies import RopeFrequencies, rope_frequencies
from ..scaling import rope_type
from ..tables import rope_tables

__all__ = ["RotaryEmbedding"]

_MIN_CACHE = 256


class RotaryEmbedding:
    """Rotary position embedding for queries and keys, with cached tables.

    Parameters
    ----------
    head_dim : int
        Features per head.
    base : float
        Rotary base (``rope_theta``).
    rotary_dim : int, optional
        Leading features that rotate (partial rotary); default all.
    scaling : dict, optional
        Hugging Face scaling dict, as for :func:`rope_frequencies`.
    max_position_embeddings : int, optional
        The model's context length, which some rope types need (see Notes).
    layout : {"half", "interleaved"}
        Pair layout (see :func:`apply_rotary`).
    axes : {"bhsd", "bshd"}
        Where batch, heads, sequence and features sit in ``q`` and ``k``.

    Notes
    -----
    Tables for positions ``0..N-1`` are computed on the host in float64 and kept
    per (namespace, device, dtype); ``N`` doubles when a call needs more. The
    cache is guarded by a lock, so one instance serves several threads. Explicit
    ``positions`` and per-batch ``offset`` arrays compute their tables directly
    from the positions (no cache lookup, no data-dependent check), which also
    holds under ``jax.jit``. Tables are float32, or float64 for float64 inputs;
    float16 and bfloat16 inputs are rotated in float32 and rounded once.

    Rope types that depend on the sequence length change ``freqs`` during calls,
    as Hugging Face transformers does. The length ``L`` of a call is
    ``offset + S`` for an int ``offset``, else ``seq_len=`` if given, else
    ``max(positions) + 1`` (read from the array on eager backends; JAX and Dask
    need ``seq_len=``).

    * ``dynamic``: when ``L`` exceeds the longest length seen so far (at first
      ``max_position_embeddings``) the NTK frequencies for ``L`` are computed and
      kept; when ``L < max_position_embeddings`` after that, the original
      frequencies return. Lengths in between keep the frequencies of the longest.
    * ``longrope``: the long factors while ``L > original_max_position_embeddings``,
      the short ones otherwise (at the switch length exactly: short).

    Keys in a KV cache that were rotated before such a change no longer match the
    new frequencies; :func:`arrayrope.rerotate` moves them over.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> rope = arrayrope.RotaryEmbedding(64)
    >>> q = np.ones((1, 8, 16, 64), dtype=np.float32)   # (batch, heads, seq, head_dim)
    >>> k = np.ones((1, 2, 16, 64), dtype=np.float32)
    >>> q_rot, k_rot = rope(q, k, offset=100)           # positions 100..115
    >>> q_rot.shape, q_rot.dtype
    ((1, 8, 16, 64), dtype('float32'))
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: Mapping[str, Any] | None = None,
        max_position_embeddings: int | None = None,
        layout: Layout = "half",
        axes: Axes = "bhsd",
    ) -> None:
        self.freqs: RopeFrequencies = rope_frequencies(
            head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling, max_position_embeddings=max_position_embeddings
        )
        self.layout: Layout = checks.layout(layout)
        self.axes: Axes = checks.choice(axes, "axes", AXES)
        self._cache: dict[tuple[int, Any, Any], tuple[Array, Array]] = {}
        self._lock = threading.Lock()
        self._last: tuple[tuple[Any, ...], tuple[Array, Array, Any]] | None = None
        # sequence-length-dependent types: the cache holds the starting frequencies only
        self._start_freqs = self.freqs
        self._resize = None
        if scaling is not None and rope_type(scaling).length is not None:
            self._resize = _Resizer(self.freqs, scaling, max_position_embeddings)

    @classmethod
    def from_config(cls, config: Any, *, layer_type: str | None = None, layout: Layout = "half",
                    axes: Axes = "bhsd") -> RotaryEmbedding:
        """A rotary embedding from a Hugging Face config (dict or ``config.json`` path).

        See :func:`arrayrope.rope_frequencies_from_config` for the fields read.

        Examples
        --------
        >>> import arrayrope
        >>> cfg = {"head_dim": 64, "max_position_embeddings": 2048,
        ...        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
        >>> arrayrope.RotaryEmbedding.from_config(cfg).freqs.rope_type
        'dynamic'
        """
        from ..config import rope_config

        kw = rope_config(config, layer_type=layer_type)
        rotary = rope_frequencies(**kw).rotary_dim
        return cls(kw["head_dim"], base=kw["base"], rotary_dim=rotary, scaling=kw["scaling"],
                   max_position_embeddings=kw["max_position_embeddings"], layout=layout, axes=axes)

    @property
    def head_dim(self) -> int:
        return self.freqs.head_dim

    @property
    def rotary_dim(self) -> int:
        return self.freqs.rotary_dim

    def __repr__(self) -> str:
        f = self.freqs
        return (
            f"RotaryEmbedding(head_dim={f.head_dim}, base={f.base}, rotary_dim={f.rotary_dim}, "
            f"rope_type={f.rope_type!r}, layout={self.layout!r}, axes={self.axes!r})"
        )

    def __call__(
        self,
        q: Array,
        k: Array | None = None,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
    ) -> Array | tuple[Array, Array]:
        """Rotate ``q`` (and ``k``) by their positions.

        Parameters
        ----------
        q, k : array
            4-D, laid out as ``axes`` says; ``k`` may have fewer heads (GQA) but the
            same batch and sequence length.
        positions : array, optional
            Integer (or real) positions of shape ``(S,)`` or ``(B, S)``. Default:
            ``offset .. offset + S - 1``.
        offset : int or array
            Start position, one int or one per batch row (shape ``(B,)``), for
            decoding with a KV cache. Not combined with ``positions``.
        seq_len : int, optional
            Sequence length that selects the frequencies of the ``dynamic`` and
            ``longrope`` types (see Notes); ignored by the others.

        Returns
        -------
        array or tuple of arrays
            Rotated ``q``, or ``(q, k)`` when ``k`` is given.
        """
        xp = backends.namespace(q, k, names=("q", "k"))
        self._check_input(q, "q")
        if k is not None:
            self._check_input(k, "k")
            backends.same_device(q, k, "q", "k")
            b_ax, s_ax = 0, (2 if self.axes == "bhsd" else 1)
            if q.shape[b_ax] != k.shape[b_ax] or q.shape[s_ax] != k.shape[s_ax]:
                raise ValueError(
                    f"q and k must share batch and sequence sizes ({self.axes}); "
                    f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
                )
        # The tables are built here to broadcast against q and k: no need to check them again.
        cos, sin, prepared = self._tables_for(xp, q, positions, offset, seq_len)
        q_rot = rotate(xp, q, cos, sin, self.layout, prepared)
        if k is None:
            return q_rot
        return q_rot, rotate(xp, k, cos, sin, self.layout, prepared)

    def _check_input(self, x: Array, name: str) -> None:
        if x.ndim != 4:
            raise ValueError(f"{name} must be 4-D ({self.axes}), got shape {tuple(x.shape)}")
        if x.shape[-1] != self.freqs.head_dim:
            raise ValueError(f"{name}.shape[-1] must be head_dim={self.freqs.head_dim}, got {x.shape[-1]}")

    def _table_dtype(self, xp: Namespace, x: Array) -> Any:
        if not backends.is_real_floating(xp, x.dtype):
            raise TypeError(f"q and k must have a real floating dtype, got {x.dtype}")
        return table_dtype_for(xp, x.dtype)

    def _tables_for(
        self, xp: Namespace, q: Array, positions: Any, offset: Any, seq_len: int | None = None
    ) -> tuple[Array, Array, Any]:
        """cos, sin shaped to broadcast against q, and their prepared form where one was kept (else None)."""
        batch = q.shape[0]
        seq = q.shape[2] if self.axes == "bhsd" else q.shape[1]
        device = backends.device_of(q)
        dtype = self._table_dtype(xp, q)
        freqs = self._start_freqs
        if self._resize is not None:
            freqs = self._select(xp, seq, positions, offset, seq_len)
        if positions is not None:
            if not (isinstance(offset, numbers.Integral) and offset == 0):
                raise ValueError("pass positions or offset, not both (positions already include any offset)")
            _, pos, _ = position_array(positions, "positions", like=q)
            if pos.ndim not in (1, 2) or pos.shape[-1] != seq or (pos.ndim == 2 and pos.shape[0] not in (1, batch)):
                raise ValueError(
                    f"positions must have shape (S,) or (B, S) = ({seq},) or ({batch}, {seq}), got {tuple(pos.shape)}"
                )
            cos, sin = rope_tables(freqs, pos, dtype=dtype)
        elif type(offset) is int or (isinstance(offset, numbers.Integral) and not isinstance(offset, bool)):
            offset = int(offset)
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            if freqs is self._start_freqs:
                # the rows of the last step, kept with their prepared form: q and k, and every layer
                # sharing this instance in a decode step, apply them
                step = (id(xp), _hashable(device), _hashable(dtype), offset, seq)
                last = self._last
                if last is not None and last[0] == step:
                    return last[1]
                cos, sin = self._cached(xp, device, dtype, offset + seq)
                cos, sin = self._to_axes(cos[offset : offset + seq, :], sin[offset : offset + seq, :])
                found = (cos, sin, backends.prepare(q, cos, sin, self.layout))
                if device is not None:  # a JAX tracer's device is None: never keep traced values
                    self._last = (step, found)
                return found
            else:
                cos, sin = rope_tables(freqs, xp.arange(offset, offset + seq, device=device), dtype=dtype)
        else:
            _, off, _ = position_array(offset, "offset", like=q)
            if off.ndim != 1 or off.shape[0] != batch:
                raise ValueError(
                    f"offset must be an int or an array of shape (B,) = ({batch},), got {tuple(off.shape)}"
                )
            steps = xp.arange(seq, dtype=off.dtype, device=device)
            cos, sin = rope_tables(freqs, off[:, None] + steps, dtype=dtype)
        cos, sin = self._to_axes(cos, sin)
        return cos, sin, None

    def _to_axes(self, cos: Array, sin: Array) -> tuple[Array, Array]:
        """Tables (S, h) or (B, S, h) with the axes that broadcast them against q and k."""
        if cos.ndim == 2:
            return (cos, sin) if self.axes == "bhsd" else (cos[:, None, :], sin[:, None, :])
        if self.axes == "bhsd":
            return cos[:, None, :, :], sin[:, None, :, :]
        return cos[:, :, None, :], sin[:, :, None, :]

    def _cached(self, xp: Namespace, device: Any, dtype: Any, needed: int) -> tuple[Array, Array]:
        key = (id(xp), _hashable(device), _hashable(dtype))
        entry = self._cache.get(key)  # the common case, without the lock: entries are replaced, never changed
        if entry is not None and entry[0].shape[0] >= needed:
            return entry
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None and entry[0].shape[0] >= needed:
                return entry
            size = max(_MIN_CACHE, 1 << (needed - 1).bit_length())
            cos, sin = rope_tables(self._start_freqs, size, dtype=host_dtype(xp, dtype))
            entry = (xp.asarray(cos, device=device), xp.asarray(sin, device=device))
            if device is not None:  # a JAX tracer's device is None: never cache traced values
                self._cache[key] = entry
            return entry

    def _select(self, xp: Namespace, seq: int, positions: Any, offset: Any, seq_len: int | None) -> RopeFrequencies:
        """The frequencies for this call's sequence length (dynamic, longrope); updates ``freqs``."""
        if positions is None and isinstance(offset, numbers.Integral) and not isinstance(offset, bool):
            length = int(offset) + seq
        elif seq_len is not None:
            length = checks.positive_int(seq_len, "seq_len")
        else:
            _, src, _ = position_array(positions if positions is not None else offset, "positions", xp=xp)
            if backends.is_lazy(src):
                raise ValueError(
                    f"rope_type {self.freqs.rope_type!r} picks its frequencies by sequence length; with "
                    "JAX or Dask position arrays pass seq_len= (max position + 1)"
                )
            length = int(backends.namespace(src).max(src)) + 1 + (seq - 1 if positions is None else 0)
        assert self._resize is not None
        with self._lock:
            self.freqs = self._resize(length)
            return self.freqs


def _hashable(obj: Any) -> Any:
    """``obj`` itself as part of a cache key where it hashes (devices, dtypes), else its repr."""
    try:
        hash(obj)
    except TypeError:
        return repr(obj)
    return obj


class _Resizer:
    """The frequencies of a sequence-length-dependent rope type, as its registry entry's rule picks them."""

    def __init__(self, start: RopeFrequencies, scaling: Mapping[str, Any], max_len: int | None) -> None:
        entry = rope_type(scaling)
        assert entry.length is not None
        self.rule = entry.length
        self.start = start
        self.scaling = dict(scaling)
        self.original = int(self.scaling.get("original_max_position_embeddings") or max_len or 0)
        self.max_position_embeddings = max_len
        self.max_len = max_len if max_len is not None else self.original
        # the length the starting frequencies are for, and that of the current ones
        self.start_length = self.current = self.rule(1, self.max_len, self.max_len, self.original)
        self.last: tuple[int, RopeFrequencies] | None = None

    def __call__(self, length: int) -> RopeFrequencies:
        self.current = self.rule(length, self.current, self.max_len, self.original)
        if self.current == self.start_length:
            return self.start
        if self.last is None or self.last[0] != self.current:
            s = self.start
            with warnings.catch_warnings():  # reported once, when the instance was made
                warnings.simplefilter("ignore")
                freqs = rope_frequencies(s.head_dim, base=s.base, rotary_dim=s.rotary_dim, scaling=self.scaling,
                                         max_position_embeddings=self.max_position_embeddings, seq_len=self.current)
            self.last = (self.current, freqs)
        return self.last[1]
