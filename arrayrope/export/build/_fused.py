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

from ._builder import Builder
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

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at positions ``pos`` (None: 0..seq-1) into ``out``."""
        s, b = self.spec, self.b
        o = s.options
        with_heads = heads is not None and (o.rank == 3 or s.target == "ort")
        standard = s.target == "onnx23"
        if o.tables == "computed" or s.mrope_axes is not None:
            return b.op(
                "RotaryEmbedding",
                [x, *self.per_token(x, pos)],
                out=out,
                domain="" if standard else MS_DOMAIN,
                interleaved=int(o.layout == "interleaved"),
                rotary_embedding_dim=s.rotary_dim if s.rotary_dim < s.head_dim else 0,
                num_heads=heads if with_heads else None,
                scale=None if standard else 1.0,
            )
        cos, sin = self.caches()
        if pos is None and s.target == "ort":  # an offset of 0: positions 0..seq-1, nothing to guard
            pos = self._default_positions(x)
        else:
            pos = self._default_positions(x) if pos is None else pos
            if pos not in self._guarded:
                self._guarded[pos] = guard(b, s, pos)
            pos = self._guarded[pos]
        return b.op(
            "RotaryEmbedding",
            [x, cos, sin, pos] if standard else [x, pos, cos, sin],
            out=out,
            domain="" if standard else MS_DOMAIN,
            interleaved=int(o.layout == "interleaved"),
            rotary_embedding_dim=s.rotary_dim if s.rotary_dim < s.head_dim else 0,
            num_heads=heads if with_heads else None,
            scale=None if standard else 1.0,
        )
