"""``RotaryEmbedding``: frequencies, cached tables and application in one callable."""

from __future__ import annotations

import numbers
import threading
import warnings
from typing import Any, Mapping

import numpy as np

from . import _checks, _xp
from .frequencies import RopeFrequencies, rope_frequencies
from .rotary import _NUMPY_NS, _rotate
from .scaling import SEQ_LEN_DEPENDENT
from .tables import rope_tables

__all__ = ["RotaryEmbedding"]

_AXES = ("bhsd", "bshd")
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
        layout: str = "half",
        axes: str = "bhsd",
    ) -> None:
        self.freqs: RopeFrequencies = rope_frequencies(
            head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling, max_position_embeddings=max_position_embeddings
        )
        self.layout = _checks.layout(layout)
        self.axes = _checks.choice(axes, "axes", _AXES)
        self._cache: dict[tuple, tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        # sequence-length-dependent types: the cache holds the starting frequencies only
        self._start_freqs = self.freqs
        self._resize = None
        if self.freqs.rope_type in SEQ_LEN_DEPENDENT:
            self._resize = _Resizer(self.freqs, scaling, max_position_embeddings)

    @classmethod
    def from_config(cls, config: Any, *, layer_type: str | None = None, layout: str = "half",
                    axes: str = "bhsd") -> "RotaryEmbedding":
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
        from .config import rope_config

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
        self, q: Any, k: Any = None, *, positions: Any = None, offset: Any = 0, seq_len: int | None = None
    ) -> Any:
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
        if type(q) is np.ndarray and (k is None or type(k) is np.ndarray):
            xp = _NUMPY_NS  # what namespace() returns for NumPy, without its per-array lookups
        else:
            xp = _xp.namespace(q, k, names=("q", "k"))
        self._check_input(q, "q")
        if k is not None:
            self._check_input(k, "k")
            _xp.same_device(q, k, "q", "k")
            b_ax, s_ax = 0, (2 if self.axes == "bhsd" else 1)
            if q.shape[b_ax] != k.shape[b_ax] or q.shape[s_ax] != k.shape[s_ax]:
                raise ValueError(
                    f"q and k must share batch and sequence sizes ({self.axes}); "
                    f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
                )
        # The tables are built here to broadcast against q and k: no need to check them again.
        cos, sin = self._tables_for(xp, q, positions, offset, seq_len)
        q_rot = _rotate(xp, q, cos, sin, self.layout)
        if k is None:
            return q_rot
        return q_rot, _rotate(xp, k, cos, sin, self.layout)

    def _check_input(self, x: Any, name: str) -> None:
        _xp.check_array(x, name)
        if x.ndim != 4:
            raise ValueError(f"{name} must be 4-D ({self.axes}), got shape {tuple(x.shape)}")
        if x.shape[-1] != self.freqs.head_dim:
            raise ValueError(f"{name}.shape[-1] must be head_dim={self.freqs.head_dim}, got {x.shape[-1]}")

    def _table_dtype(self, xp: Any, x: Any) -> Any:
        if not xp.isdtype(x.dtype, "real floating"):
            raise TypeError(f"q and k must have a real floating dtype, got {x.dtype}")
        return xp.float64 if x.dtype == xp.float64 else xp.float32

    def _tables_for(self, xp: Any, q: Any, positions: Any, offset: Any, seq_len: Any = None) -> tuple[Any, Any]:
        batch = q.shape[0]
        seq = q.shape[2] if self.axes == "bhsd" else q.shape[1]
        device = _xp.device_of(q)
        dtype = self._table_dtype(xp, q)
        freqs = self._start_freqs
        if self._resize is not None:
            freqs = self._select(xp, seq, positions, offset, seq_len)
        if positions is not None:
            if not (isinstance(offset, numbers.Integral) and offset == 0):
                raise ValueError("pass positions or offset, not both (positions already include any offset)")
            pos = self._positions_array(xp, positions, "positions", q)
            if pos.ndim not in (1, 2) or pos.shape[-1] != seq or (pos.ndim == 2 and pos.shape[0] not in (1, batch)):
                raise ValueError(
                    f"positions must have shape (S,) or (B, S) = ({seq},) or ({batch}, {seq}), got {tuple(pos.shape)}"
                )
            cos, sin = rope_tables(freqs, pos, dtype=dtype)
        elif isinstance(offset, numbers.Integral) and not isinstance(offset, bool):
            offset = int(offset)
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            if freqs is self._start_freqs:
                cos, sin = self._cached(xp, device, dtype, offset + seq)
                cos, sin = cos[offset : offset + seq, :], sin[offset : offset + seq, :]
            else:
                cos, sin = rope_tables(freqs, xp.arange(offset, offset + seq, device=device), dtype=dtype)
        else:
            off = self._positions_array(xp, offset, "offset", q)
            if off.ndim != 1 or off.shape[0] != batch:
                raise ValueError(f"offset must be an int or an array of shape (B,) = ({batch},), got {tuple(off.shape)}")
            steps = xp.arange(seq, dtype=off.dtype, device=device)
            cos, sin = rope_tables(freqs, off[:, None] + steps, dtype=dtype)
        if cos.ndim == 2:
            return (cos, sin) if self.axes == "bhsd" else (cos[:, None, :], sin[:, None, :])
        if self.axes == "bhsd":
            return cos[:, None, :, :], sin[:, None, :, :]
        return cos[:, :, None, :], sin[:, :, None, :]

    @staticmethod
    def _positions_array(xp: Any, value: Any, name: str, q: Any) -> Any:
        if isinstance(value, bool) or value is None:
            raise TypeError(f"{name} must be an integer array, got {value!r}")
        if not _xp.compat.is_array_api_obj(value):
            value = xp.asarray(np.asarray(value), device=_xp.device_of(q))
        _xp.namespace(value, xp=xp, names=(name,))
        _xp.same_device(q, value, "q", name)
        if not xp.isdtype(value.dtype, ("integral", "real floating")) or xp.isdtype(value.dtype, "bool"):
            raise TypeError(f"{name} must have an integer or real dtype, got {value.dtype}")
        return value

    def _cached(self, xp: Any, device: Any, dtype: Any, needed: int) -> tuple[Any, Any]:
        key = (id(xp), _xp._key(device), _xp._key(dtype))
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None and entry[0].shape[0] >= needed:
                return entry
            size = max(_MIN_CACHE, 1 << (needed - 1).bit_length())
            host_dtype = np.float64 if dtype == xp.float64 else np.float32
            cos, sin = rope_tables(self._start_freqs, size, dtype=host_dtype)
            entry = (xp.asarray(cos, device=device), xp.asarray(sin, device=device))
            if device is not None:  # a JAX tracer's device is None: never cache traced values
                self._cache[key] = entry
            return entry

    def _select(self, xp: Any, seq: int, positions: Any, offset: Any, seq_len: Any) -> RopeFrequencies:
        """The frequencies for this call's sequence length (dynamic, longrope); updates ``freqs``."""
        if positions is None and isinstance(offset, numbers.Integral) and not isinstance(offset, bool):
            length = int(offset) + seq
        elif seq_len is not None:
            length = _checks.positive_int(seq_len, "seq_len")
        else:
            src = positions if positions is not None else offset
            if not _xp.compat.is_array_api_obj(src):
                src = np.asarray(src)
            if _xp.is_lazy(src):
                raise ValueError(
                    f"rope_type {self.freqs.rope_type!r} picks its frequencies by sequence length; with "
                    "JAX or Dask position arrays pass seq_len= (max position + 1)"
                )
            ns = _xp.compat.array_namespace(src)
            length = int(ns.max(src)) + 1 + (seq - 1 if positions is None else 0)
        with self._lock:
            self.freqs = self._resize(self.freqs, length)
            return self.freqs


class _Resizer:
    """Hugging Face's update rule for the sequence-length-dependent rope types."""

    def __init__(self, start: RopeFrequencies, scaling: Mapping[str, Any] | None, max_len: int | None) -> None:
        self.start = start
        self.scaling = dict(scaling or {})
        self.max_len = max_len
        self.longest = max_len  # dynamic: the length the current frequencies were made for
        self.original = self.scaling.get("original_max_position_embeddings") or max_len
        self.long: RopeFrequencies | None = None

    def __call__(self, current: RopeFrequencies, length: int) -> RopeFrequencies:
        if self.start.rope_type == "longrope":
            if length <= self.original:
                return self.start
            if self.long is None:
                self.long = self._frequencies(self.original + 1)
            return self.long
        if length > self.longest:  # dynamic: grow
            self.longest = length
            return self._frequencies(length)
        if length < self.max_len and self.longest > self.max_len:  # back within the original context
            self.longest = self.max_len
            return self.start
        return current

    def _frequencies(self, length: int) -> RopeFrequencies:
        s = self.start
        with warnings.catch_warnings():  # reported once, when the instance was made
            warnings.simplefilter("ignore")
            return rope_frequencies(s.head_dim, base=s.base, rotary_dim=s.rotary_dim, scaling=self.scaling,
                                    max_position_embeddings=self.max_len, seq_len=length)
