"""Rotary nodes for the three targets, emitted into a :class:`Builder`.

Tables come from the core: :func:`arrayrope.rope_tables` in float64 on the host,
then cast to the graph's dtype. Nothing here recomputes the math.

"portable" (standard ops, opset 13+) computes, with the sign of the rotation
folded into the sin table::

    y = x * C + swap(x) * S,   C = [cos, cos],  S = [-sin, sin]  (per layout)

``swap`` exchanges partner features. Half-split: the head is viewed as
``(2, r/2)`` and one Slice with step -1 swaps the halves. Interleaved: the head is
viewed as blocks of 16 (or 8, 4, 2) features and multiplied by a constant
pair-swapping permutation matrix; a Slice reversing a size-2 axis is about three
times slower on ONNX Runtime CPU because its innermost copies are two elements
long. The tables are gathered by position ids (unsqueezed for 4-D input) and
broadcast directly. Measured on ONNX Runtime CPU (bench/bench_onnx.py) these
forms run about twice as fast as a Split/Concat swap (one node smaller) and four
times as fast as a Gather on the feature axis. 3-D half-split input uses a
``(batch, seq, heads, 2, r/2)`` view throughout, which saves the two Reshapes
to and from 4-D.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper, numpy_helper

import arrayrope

from ._spec import DIGIT_BITS, DIGIT_LEVELS, MS_DOMAIN, Spec, np_dtype, onnx_dtype

INT64_MIN = int(np.iinfo(np.int64).min)


class Builder:
    """Collects nodes and constants under a name prefix (constants become Constant nodes in functions)."""

    def __init__(self, prefix: str = "", *, function: bool = False, taken: set[str] | None = None):
        self.prefix = prefix
        self.function = function
        self.nodes: list = []
        self.initializers: list = []
        self.taken = set(taken or ())
        self._count = 0

    def name(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"{self.prefix}{hint}_{self._count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def const(self, value: Any, hint: str = "c") -> str:
        name = self.name(hint)
        tensor = numpy_helper.from_array(np.asarray(value), name)
        if self.function:
            self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=tensor))
        else:
            self.initializers.append(tensor)
        return name

    def ints(self, values: list[int], hint: str = "i") -> str:
        return self.const(np.array(values, dtype=np.int64), hint)

    def scalar(self, value: int, hint: str = "s") -> str:
        return self.const(np.array(value, dtype=np.int64), hint)

    def op(self, op_type: str, inputs: list[str], *, outputs: int = 1, out: str | None = None,
           domain: str = "", **attrs: Any) -> Any:
        names = [out] if out is not None else [self.name(op_type.lower()) for _ in range(outputs)]
        node_name = self.name(op_type)
        self.nodes.append(helper.make_node(op_type, inputs, names, name=node_name, domain=domain or None, **attrs))
        return names[0] if outputs == 1 else names


def host_tables(spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of shape (max_positions, rotary_dim/2) in float64, from the core."""
    cos, sin = arrayrope.rope_tables(spec.freqs, spec.max_positions, xp=np, dtype=np.float64)
    return np.asarray(cos), np.asarray(sin)


def compute_dtype(spec: Spec) -> Any:
    """Portable graphs compute float16/bfloat16 in float32 and round once at the end."""
    return np.float64 if spec.dtype == "float64" else np.float32


def _layout(spec: Spec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., h) tables for the first and second partner -> (..., r) in the layout's feature order."""
    if spec.layout == "half":
        return np.concatenate([a, b], axis=-1)
    return np.stack([a, b], axis=-1).reshape(a.shape[:-1] + (2 * a.shape[-1],))


def _five_d(spec: Spec) -> bool:
    """3-D half-split input with full rotation works on a (B, S, N, 2, r/2) view."""
    return spec.rank == 3 and spec.layout == "half" and spec.rotary_dim == spec.head_dim


def _rows_shape(spec: Spec, t: np.ndarray) -> np.ndarray:
    """Tables (P, r) shaped so that rows gathered by the position index broadcast against the input."""
    if _five_d(spec):
        return t.reshape(t.shape[0], 1, 2, spec.rotary_dim // 2)
    return t[:, None] if spec.rank == 3 else t


def _swap_block(r: int) -> int:
    return next(k for k in (16, 8, 4, 2) if r % k == 0)


class Rotary:
    """Emits the rotary nodes of one spec; q and k share tables and gathered rows."""

    def __init__(self, spec: Spec, b: Builder):
        self.spec = spec
        self.b = b
        self._tables: dict = {}
        self._gathered: dict = {}

    # ---- positions -------------------------------------------------------------------------
    def positions_from_shape(self, x: str) -> str:
        """Positions 0..S-1 when the graph has no position ids: (S,) int64 (or (B, S) for onnx23)."""
        b, s = self.b, self.spec
        seq_axis = 2 if s.rank == 4 else 1
        shape = b.op("Shape", [x])
        n = b.op("Gather", [shape, b.scalar(seq_axis, "seq_axis")], axis=0)
        pos = b.op("Range", [b.scalar(0, "zero"), n, b.scalar(1, "one")])
        if s.target == "onnx23":  # the standard op takes (B, S) ids only
            bs = b.op("Gather", [shape, b.ints([0, seq_axis], "bs_axes")], axis=0)
            pos = b.op("Expand", [pos, bs])
        return pos

    # ---- fused targets ---------------------------------------------------------------------
    def _fused_tables(self) -> tuple[str, str]:
        if "fused" not in self._tables:
            cos, sin = host_tables(self.spec)
            dt = np_dtype(self.spec.dtype)
            self._tables["fused"] = (self.b.const(cos.astype(dt), "cos_cache"), self.b.const(sin.astype(dt), "sin_cache"))
        return self._tables["fused"]

    def fused(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        s, b = self.spec, self.b
        cos, sin = self._fused_tables()
        rot = s.rotary_dim if s.rotary_dim < s.head_dim else 0
        attrs = {"interleaved": int(s.layout == "interleaved"), "rotary_embedding_dim": rot}
        if heads is not None and (s.rank == 3 or s.target == "ort"):
            attrs["num_heads"] = heads
        if s.target == "onnx23":
            if pos is None:
                pos = self._shared("pos", lambda: self.positions_from_shape(x))
            return b.op("RotaryEmbedding", [x, cos, sin, pos], out=out, **attrs)
        if pos is None:  # the contrib op reads a (1,) tensor as the offset of positions 0..S-1
            pos = self._shared("pos", lambda: b.ints([0], "offset"))
        return b.op("RotaryEmbedding", [x, pos, cos, sin], out=out, domain=MS_DOMAIN, scale=1.0, **attrs)

    # ---- portable --------------------------------------------------------------------------
    def _shared(self, key: str, make: Any) -> Any:
        if key not in self._gathered:
            self._gathered[key] = make()
        return self._gathered[key]

    def _index(self, pos: str | None, x: str) -> str:
        """Position ids shaped so that gathered rows broadcast against the viewed input."""
        if pos is None:
            return self._shared("pos", lambda: self.positions_from_shape(x))  # (S,) broadcasts as is
        if self.spec.rank == 4:  # (B, S) -> (B, 1, S) against (B, N, S, ...)
            return self._shared("index", lambda: self.b.op("Unsqueeze", [pos, self.b.ints([1], "axis1")]))
        return pos

    def _constant_rows(self, index: str) -> tuple[str, str]:
        s, b = self.spec, self.b
        cos, sin = host_tables(s)
        dt = compute_dtype(s)
        c = b.const(_rows_shape(s, _layout(s, cos, cos)).astype(dt), "cos_table")
        n = b.const(_rows_shape(s, _layout(s, -sin, sin)).astype(dt), "sin_table")
        return b.op("Gather", [c, index], axis=0), b.op("Gather", [n, index], axis=0)

    def _computed_rows(self, index: str) -> tuple[str, str]:
        """cos/sin from base-1024 digits of the positions, composed with the angle-addition formula.

        Each digit's rotation comes from a small float64 table made by the core and
        stored in the compute dtype (float32, or float64 for a float64 graph); composing
        them keeps the error near float32 rounding at any position below 1024**3.
        """
        s, b = self.spec, self.b
        work = compute_dtype(s)
        c = n = None
        for level in range(DIGIT_LEVELS):
            step = float(1 << (DIGIT_BITS * level))
            pos = np.arange(1 << DIGIT_BITS, dtype=np.float64) * step
            dc, ds = arrayrope.rope_tables(s.freqs, pos, xp=np, dtype=np.float64, apply_attention_factor=level == 0)
            dc, ds = np.asarray(dc), np.asarray(ds)
            ct = b.const(_rows_shape(s, _layout(s, dc, dc)).astype(work), f"digit{level}_cos")
            st = b.const(_rows_shape(s, _layout(s, ds, ds)).astype(work), f"digit{level}_sin")
            digit = index
            if level:
                digit = b.op("Div", [digit, b.const(np.array(1 << (DIGIT_BITS * level), np.int64), "radix")])
            if level < DIGIT_LEVELS - 1:  # the top digit is not reduced: Gather rejects positions past the range
                digit = b.op("Mod", [digit, b.const(np.array(1 << DIGIT_BITS, np.int64), "digit_mod")])
            dcos, dsin = b.op("Gather", [ct, digit], axis=0), b.op("Gather", [st, digit], axis=0)
            if c is None:
                c, n = dcos, dsin
            else:
                c, n = (
                    b.op("Sub", [b.op("Mul", [c, dcos]), b.op("Mul", [n, dsin])]),
                    b.op("Add", [b.op("Mul", [n, dcos]), b.op("Mul", [c, dsin])]),
                )
        ones = np.ones((1, s.rotary_dim // 2))
        sign = _rows_shape(s, _layout(s, -ones, ones))[0].astype(work)
        return c, b.op("Mul", [n, b.const(sign, "sign")])

    def _swap(self, x: str, r: int) -> str:
        """Exchange partner features of the 4-D ``x`` (..., r)."""
        b, s = self.b, self.spec
        if s.layout == "half":
            view = b.op("Reshape", [x, b.ints([0, 0, 0, 2, r // 2], "halves")])
            swapped = b.op("Slice", [view, b.ints([-1], "start"), b.ints([INT64_MIN], "stop"), b.ints([-2], "axis"),
                                     b.ints([-1], "step")])
        else:
            k = _swap_block(r)
            view = b.op("Reshape", [x, b.ints([0, 0, -1, k], "blocks")])
            perm = np.zeros((k, k), dtype=compute_dtype(s))
            perm[np.arange(k), np.arange(k) ^ 1] = 1.0  # feature 2i <-> 2i+1, exact (one nonzero per column)
            swapped = b.op("MatMul", [view, b.const(perm, "pair_swap")])
        return b.op("Reshape", [swapped, b.ints([0, 0, -1, r], "features")])

    def portable(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        s, b = self.spec, self.b
        index = self._index(pos, x)
        rows = self._computed_rows if s.tables == "computed" else self._constant_rows
        cos, sin = self._shared("rows", lambda: rows(index))
        r, d = s.rotary_dim, s.head_dim
        final = out
        if s.dtype in ("float16", "bfloat16"):  # compute in float32, round once at the end (as the core does)
            x = b.op("Cast", [x], to=onnx_dtype("float32"))
            out = b.name("rotated")
        if _five_d(s):
            view = b.op("Reshape", [x, b.ints([0, 0, heads, 2, r // 2], "view")])
            swapped = b.op("Slice", [view, b.ints([-1], "start"), b.ints([INT64_MIN], "stop"), b.ints([-2], "axis"),
                                     b.ints([-1], "step")])
            y = b.op("Add", [b.op("Mul", [view, cos]), b.op("Mul", [swapped, sin])])
            y = b.op("Reshape", [y, b.ints([0, 0, heads * d], "back")], out=out)
        else:
            x4 = b.op("Reshape", [x, b.ints([0, 0, heads, d], "heads")]) if s.rank == 3 else x
            if r < d:
                xr, rest = b.op("Split", [x4, b.ints([r, d - r], "split")], outputs=2, axis=-1)
            else:
                xr, rest = x4, None
            last = rest is None and s.rank == 4
            y = b.op("Add", [b.op("Mul", [xr, cos]), b.op("Mul", [self._swap(xr, r), sin])], out=out if last else None)
            if rest is not None:
                y = b.op("Concat", [y, rest], axis=-1, out=out if s.rank == 4 else None)
            if s.rank == 3:
                y = b.op("Reshape", [y, b.ints([0, 0, heads * d], "back")], out=out)
        if final != out:
            y = b.op("Cast", [y], to=onnx_dtype(s.dtype), out=final)
        return y

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        if self.spec.target == "portable":
            return self.portable(x, pos, out, heads)
        return self.fused(x, pos, out, heads)
