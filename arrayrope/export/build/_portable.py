"""The portable target: standard ops only (opset 13+), for any runtime.

With the sign of the rotation folded into the sin table (see :mod:`._tables`)::

    y = x * C + swap(x) * S

``swap`` exchanges partner features. Half-split: the head is viewed as
``(2, r/2)`` and one Slice with step -1 swaps the halves. Interleaved: the head is
viewed as blocks of 16 (or 8, 4, 2) features and multiplied by a constant
pair-swapping permutation matrix; a Slice reversing a size-2 axis is about three
times slower on ONNX Runtime CPU because its innermost copies are two elements
long. The tables are gathered by position ids (unsqueezed for 4-D input) and
broadcast directly; M-RoPE ids ``(axes, batch, seq)`` select each pair's rows from its
axis first (:mod:`._mrope`). Measured on ONNX Runtime CPU (bench/bench_onnx.py) these
forms run about twice as fast as a Split/Concat swap (one node smaller) and four
times as fast as a Gather on the feature axis. 3-D half-split input uses a
``(batch, seq, heads, 2, r/2)`` view throughout, which saves the two Reshapes
to and from 4-D. Float16 and bfloat16 are computed in float32 and rounded once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._builder import Builder
from ._mrope import portable_rows
from ._spec import Spec, onnx_dtype
from ._tables import computed_rows, constant_rows, five_d

INT64_MIN = int(np.iinfo(np.int64).min)


def _swap_block(r: int) -> int:
    return next(k for k in (16, 8, 4, 2) if r % k == 0)


class PortableEmitter:
    """Emits the portable nodes of one spec; q and k share the tables and the gathered rows."""

    def __init__(self, spec: Spec, b: Builder) -> None:
        self.spec = spec
        self.b = b
        self._index: str | None = None
        self._rows: tuple[str, str] | None = None

    def index(self, pos: str | None, x: str) -> str:
        """Position ids shaped so that gathered rows broadcast against the viewed input, made once."""
        if self._index is None:
            rank = self.spec.options.rank
            if pos is None:  # (S,) broadcasts as is
                self._index = self.b.positions(x, 2 if rank == 4 else 1, batch=False)
            elif rank == 4:  # (B, S) -> (B, 1, S) against (B, N, S, ...); M-RoPE: (A, B, S) -> (A, B, 1, S)
                heads_axis = 1 if self.spec.mrope_axes is None else 2
                self._index = self.b.op("Unsqueeze", [pos, self.b.ints([heads_axis], "heads_axis")])
            else:
                self._index = pos
        return self._index

    def rows(self, index: str) -> tuple[str, str]:
        """C and S at the positions, from stored or computed tables, made once."""
        if self._rows is None:
            make = computed_rows if self.spec.options.tables == "computed" else constant_rows
            self._rows = (portable_rows if self.spec.mrope_axes is not None else make)(self.spec, self.b, index)
        return self._rows

    def _reverse_pairs(self, view: str) -> str:
        """``view`` with its axis -2 (of size 2: the halves) reversed."""
        b = self.b
        return b.op(
            "Slice",
            [view, b.ints([-1], "start"), b.ints([INT64_MIN], "stop"), b.ints([-2], "axis"), b.ints([-1], "step")],
        )

    def _swap(self, x: str, r: int) -> str:
        """Exchange partner features of the 4-D ``x`` (..., r)."""
        b, s = self.b, self.spec
        if s.options.layout == "half":
            swapped = self._reverse_pairs(b.op("Reshape", [x, b.ints([0, 0, -1, 2, r // 2], "halves")]))
        else:
            k = _swap_block(r)
            view = b.op("Reshape", [x, b.ints([0, 0, -1, k], "blocks")])
            perm = np.zeros((k, k), dtype=s.compute_dtype)
            perm[np.arange(k), np.arange(k) ^ 1] = 1.0  # feature 2i <-> 2i+1, exact (one nonzero per column)
            swapped = b.op("MatMul", [view, b.const(perm, "pair_swap")])
        return b.op("Reshape", [swapped, b.ints([0, 0, -1, r], "features")])

    def _rotate(self, x: str, swap: Callable[[], str], rows: tuple[str, str], out: str | None) -> str:
        """``x * C + swap(x) * S``."""
        b = self.b
        cos, sin = rows
        return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [swap(), sin])], out=out)

    def _rotate_heads(self, x4: str, rows: tuple[str, str], out: str | None) -> str:
        """Rotate the 4-D ``x4`` (..., head_dim), its first ``rotary_dim`` features."""
        b, s = self.b, self.spec
        r, d = s.rotary_dim, s.head_dim
        xr, rest = x4, None
        if r < d:  # two Slices, not a Split: Split changed at opset 18 and converters cannot take it back to 17
            last, cut = b.ints([-1], "last_axis"), b.ints([r], "rotary_end")
            xr = b.op("Slice", [x4, b.ints([0], "start"), cut, last])
            rest = b.op("Slice", [x4, cut, b.ints([d], "head_end"), last])
        y = self._rotate(xr, lambda: self._swap(xr, r), rows, out if rest is None else None)
        if rest is not None:
            y = b.op("Concat", [y, rest], axis=-1, out=out)
        return y

    def _rotate_flat(self, x: str, rows: tuple[str, str], out: str) -> str:
        """Rotate the 3-D ``x`` (batch, seq, heads * head_dim) through a view with a head axis."""
        b, s = self.b, self.spec
        r, d = s.rotary_dim, s.head_dim
        if five_d(s):
            view = b.op("Reshape", [x, b.ints([0, 0, -1, 2, r // 2], "view")])
            swapped = self._reverse_pairs(view)
            y = self._rotate(view, lambda: swapped, rows, None)
        else:
            y = self._rotate_heads(b.op("Reshape", [x, b.ints([0, 0, -1, d], "heads")]), rows, None)
        return b.op("Reshape", [y, b.ints([0, 0, -1], "back")], out=out)

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at positions ``pos`` (None: 0..seq-1) into ``out``."""
        s, b = self.spec, self.b
        o = s.options
        rows = self.rows(self.index(pos, x))
        final = out
        if o.dtype in ("float16", "bfloat16"):  # compute in float32, round once at the end (as the core does)
            x = b.op("Cast", [x], to=onnx_dtype("float32"))
            out = b.name("rotated")
        y = self._rotate_heads(x, rows, out) if o.rank == 4 else self._rotate_flat(x, rows, out)
        if final != out:
            y = b.op("Cast", [y], to=onnx_dtype(o.dtype), out=final)
        return y
