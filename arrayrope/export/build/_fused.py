"""Fused targets: one ``RotaryEmbedding`` node per tensor, reading cos/sin caches.

``"onnx23"`` is the standard op (opset 23): inputs ``x, cos, sin, position_ids``,
position ids of shape ``(batch, seq)`` only. ``"ort"`` is ONNX Runtime's
``com.microsoft.RotaryEmbedding``: inputs ``x, position_ids, cos, sin``, where a
``(1,)`` tensor is the offset of positions ``0..seq-1``. Both take caches of
shape ``(max_positions, rotary_dim / 2)`` in the dtype of ``x``; here they have one more row, of
NaN, to which :func:`~._tables.guard` sends every position id outside the table (the fused
kernels of runtimes otherwise differ: ONNX Runtime rejects such ids, ONNX's reference
evaluator reads negative ones from the table end).

With computed tables (no bound on the positions) cos/sin are computed per token from
the position ids (:func:`~._tables.computed_cos_sin`): the standard op takes them as
``(batch, seq, rotary_dim / 2)`` caches without position ids; the contrib op, which
needs position ids and 2-D caches, reads the ``batch * seq`` rows of the flattened
caches by the ids ``0..batch*seq-1`` laid out as the positions.

M-RoPE takes the same per-token form, with stored tables too: each pair's cos/sin at
the position of its axis (:mod:`._mrope`), which the fused op applies as it would a
plain token's.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._builder import Builder
from ._lengths import ByLength, by_length_cos_sin
from ._mrope import per_token as mrope_per_token
from ._spec import MS_DOMAIN, Spec, np_dtype
from ._tables import computed_cos_sin, guard, host_tables


class FusedEmitter:
    """Emits the fused nodes of one spec; q and k share the caches and the positions."""

    def __init__(self, spec: Spec, b: Builder) -> None:
        self.spec = spec
        self.b = b
        self._caches: tuple[str, str] | None = None
        self._positions: str | None = None
        self._guarded: dict[str, str] = {}
        self._per_token: dict[str, tuple[str, ...]] = {}

    def caches(self) -> tuple[str, str]:
        """The cos and sin caches, stored once."""
        if self._caches is None:
            cos, sin = host_tables(self.spec, np_dtype(self.spec.options.dtype))
            self._caches = self.b.const(cos, "cos_cache"), self.b.const(sin, "sin_cache")
        return self._caches

    def _default_positions(self, x: str) -> str:
        """Positions 0..seq-1 in the form the op reads them, made once."""
        if self._positions is None:
            s = self.spec
            if s.target == "onnx23":  # the standard op takes (B, S) ids only
                self._positions = self.b.positions(x, 2 if s.options.rank == 4 else 1, batch=True)
            else:
                self._positions = self.b.ints([0], "offset")
        return self._positions

    def per_token(self, x: str, pos: str | None) -> tuple[str, ...]:
        """The inputs after ``x`` of a fused node with computed tables, made once per positions: cos and sin
        ``(B, S, r/2)`` for the standard op; flat ids, cos and sin ``(B*S, r/2)`` for the contrib op."""
        key = pos or ""
        if key not in self._per_token:
            s, b = self.spec, self.b
            ids = pos or b.positions(x, 2 if s.options.rank == 4 else 1, batch=True)
            if s.mrope_axes is None:
                cos, sin = computed_cos_sin(s, b, ids)
            else:  # (A, B, S) ids; the flat ids below take the shape of one axis's
                cos, sin = mrope_per_token(s, b, ids)
                ids = b.op("Gather", [ids, b.scalar(0, "axis0")], axis=0)
            if s.target == "onnx23":
                self._per_token[key] = (cos, sin)
            else:
                rows = b.ints([-1, s.rotary_dim // 2], "cache_rows")
                count = b.op("Size", [ids])
                flat = b.op("Range", [b.scalar(0, "zero"), count, b.scalar(1, "one")])
                self._per_token[key] = (
                    b.op("Reshape", [flat, b.op("Shape", [ids])]),
                    b.op("Reshape", [cos, rows]),
                    b.op("Reshape", [sin, rows]),
                )
        return self._per_token[key]

    def inputs(self, x: str, pos: str | None) -> tuple[str, ...]:
        """The inputs after ``x`` of the fused node rotating ``x`` at positions ``pos`` (None: 0..seq-1)."""
        s = self.spec
        if s.options.tables == "computed" or s.mrope_axes is not None:
            return self.per_token(x, pos)
        cos, sin = self.caches()
        if pos is None and s.target == "ort":  # an offset of 0: positions 0..seq-1, nothing to guard
            pos = self._default_positions(x)
        else:
            pos = self._default_positions(x) if pos is None else pos
            if pos not in self._guarded:
                self._guarded[pos] = guard(self.b, s, pos)
            pos = self._guarded[pos]
        return (cos, sin, pos) if s.target == "onnx23" else (pos, cos, sin)

    def node(self, x: str, inputs: Sequence[str], out: str, heads: int | None) -> str:
        """The fused node rotating ``x`` (``heads`` heads) with ``inputs`` (as :meth:`inputs` gives them)."""
        s = self.spec
        standard = s.target == "onnx23"
        return self.b.op(
            "RotaryEmbedding",
            [x, *inputs],
            out=out,
            domain="" if standard else MS_DOMAIN,
            interleaved=int(s.options.layout == "interleaved"),
            rotary_embedding_dim=s.rotary_dim if s.rotary_dim < s.head_dim else 0,
            num_heads=heads if heads is not None and (s.options.rank == 3 or not standard) else None,
            scale=None if standard else 1.0,
        )

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at positions ``pos`` (None: 0..seq-1) into ``out``."""
        return self.node(x, self.inputs(x, pos), out, heads)


class Switched:
    """One standard ``RotaryEmbedding`` node whose tables each run chooses: ``long``'s when the largest position
    id reaches ``changes``, ``short``'s below (LongRoPE's two regimes; dynamic NTK's frequencies of the call's
    length, :class:`~._lengths.ByLength`). Caches of both regimes are chosen whole; where one regime is per
    token, both are taken per token."""

    def __init__(self, short: FusedEmitter, long: FusedEmitter | ByLength, changes: int) -> None:
        assert short.spec.target == "onnx23" and short.spec.mrope_axes is None
        self.short, self.long, self.changes = short, long, changes

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at the int64 position ids ``pos`` ``(B, S)`` into ``out``."""
        assert pos is not None
        b, short, long = self.short.b, self.short, self.long
        reaches = b.op("GreaterOrEqual", [b.op("ReduceMax", [pos], keepdims=0), b.scalar(self.changes, "changes")])
        first = short.inputs(x, pos)
        if isinstance(long, FusedEmitter) and len(first) == 3:  # both stored: the same guarded ids
            second = long.inputs(x, pos)
            tables = [b.op("Where", [reaches, lo, sh]) for lo, sh in zip(second[:2], first[:2], strict=True)]
            return short.node(x, [*tables, first[2]], out, heads)
        if len(first) == 3:  # the short caches, read per token
            first = tuple(b.op("Gather", [t, first[2]], axis=0) for t in first[:2])
        if isinstance(long, FusedEmitter):
            second = long.per_token(x, pos)
        else:
            second = by_length_cos_sin(b, long, pos, short.spec.options.dtype)
        tables = [b.op("Where", [reaches, lo, sh]) for lo, sh in zip(second, first, strict=True)]
        return short.node(x, tables, out, heads)
