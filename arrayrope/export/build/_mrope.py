"""M-RoPE in the graph: cos/sin of each rotary pair at the position of the axis that turns it.

Position ids have shape ``(axes, batch, seq)``; pair ``k`` is turned by axis ``axis_of[k]``, as
:func:`arrayrope.mrope_tables` assigns them (consecutive sections, or Qwen3-VL's interleaving).
Both selections below move values without arithmetic, so each pair's cos/sin are bit for bit those
of a plain token at that axis's position (text ids, equal on every axis, give the plain graph's
rotation), and an id outside the table on one axis gives NaN in the pairs that axis turns, and
only there.

* Consecutive sections with stored tables (Qwen2-VL, Qwen2.5-VL): the table is stored as one
  table per axis holding only the pairs of its section (together the size of one table); each
  axis's rows are gathered by its own ids and concatenated in pair order.
* Otherwise (interleaved sections, or cos/sin computed in the graph): the rows of every axis,
  ``(axes, ...)``, and one ``GatherElements`` along that axis by a constant index of each
  feature's axis, expanded to the rows' shape.

Selecting the ``(2048, 128)`` float32 rows of 3 axes on ONNX Runtime CPU (one thread) took
0.13 ms by concatenation and 0.36 ms by ``GatherElements``, where a chain of ``Where`` with
constant masks took 0.8 ms, tables zeroed outside their axis's pairs and summed 0.2 ms (with
``axes`` times the tables), and concatenation followed by a feature-axis ``Gather`` (to
reorder interleaved pairs) 2.2 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._builder import Builder
from ._spec import Spec, np_dtype
from ._tables import _in_layout, _rows_shape, computed_cos_sin, computed_rows, constant_rows, five_d, host_tables

#: ``Slice``'s end for "to the last element".
_END = int(np.iinfo(np.int64).max)


def consecutive(spec: Spec) -> bool:
    """Each axis's pairs are one run, in the order of the axes (the pairs can be concatenated)."""
    return bool(np.all(np.diff(spec.mrope_axis_of()) >= 0))


def _axes_used(spec: Spec) -> list[int]:
    axis_of = spec.mrope_axis_of()
    return [a for a in range(spec.mrope_axes or 0) if (axis_of == a).any()]


Partners = tuple[npt.NDArray[Any], npt.NDArray[Any]]
"""The first and second partner's values of one table, ``(rows, rotary_dim / 2)`` each."""


def _concatenated(
    spec: Spec, b: Builder, pairs: tuple[Partners, Partners], index: str, *, portable: bool
) -> tuple[str, str]:
    """Stored tables of consecutive sections: per axis, its pairs' columns gathered by its ids, concatenated.

    ``pairs``: the first and second partner's tables ``(rows, rotary_dim / 2)`` in the form stored (the
    portable form's cos/cos and -sin/sin, or the fused caches' cos and sin). ``index``: ids ``(axes, ...)``,
    each in ``[-1, rows)``.
    """
    axis_of = spec.mrope_axis_of()
    half = spec.options.layout == "half"
    pieces: tuple[list[str], list[str]] = ([], [])
    for a in _axes_used(spec):
        ids = b.op("Gather", [index, b.scalar(a, f"axis{a}")], axis=0)
        columns = axis_of == a
        for kind, (first, second) in enumerate(pairs):
            narrow = first[:, columns], second[:, columns]
            if not portable:
                table = narrow[0]
            elif half:  # (rows, 2, s): the pieces concatenate along the last axis of the (2, r/2) view
                table = np.stack(narrow, axis=1)
            else:  # (rows, 2 s): pairs of features in order
                table = _in_layout(spec, *narrow)
            if portable and spec.options.rank == 3:
                table = table[:, None]
            hint = ("cos", "sin")[kind]
            pieces[kind].append(b.op("Gather", [b.const(table, f"{hint}_table_axis{a}"), ids], axis=0))
    cos, sin = (b.op("Concat", list(p), axis=-1) for p in pieces)
    if portable and half and not five_d(spec):  # (..., 2, r/2) -> (..., r)
        shape = b.ints([0, 0, 0, spec.rotary_dim], "features")
        cos, sin = b.op("Reshape", [cos, shape]), b.op("Reshape", [sin, shape])
    return cos, sin


def _gathered(spec: Spec, b: Builder, rows: tuple[str, str], index_rank: int, *, portable: bool) -> tuple[str, str]:
    """Rows ``(axes, ...)`` of every axis -> each feature's from its axis, by ``GatherElements`` on axis 0."""
    axis_of = spec.mrope_axis_of()
    form = _rows_shape(spec, _in_layout(spec, axis_of[None], axis_of[None]))[0] if portable else axis_of
    feature_axes = form.reshape((1,) * index_rank + form.shape).astype(np.int64)
    shape = b.op("Shape", [rows[0]])
    rest = b.op("Slice", [shape, b.ints([1], "second"), b.ints([_END], "end"), b.ints([0], "first_axis")])
    one_axis = b.op("Concat", [b.ints([1], "one_axis"), rest], axis=0)
    index = b.op("Expand", [b.const(feature_axes, "mrope_feature_axes"), one_axis])
    first = b.ints([0], "axes_axis")
    cos, sin = (b.op("Squeeze", [b.op("GatherElements", [t, index], axis=0), first]) for t in rows)
    return cos, sin


def portable_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S of the portable form (see :mod:`._tables`) at the M-RoPE ids ``index`` ``(axes, ...)``."""
    index_rank = 4 if spec.options.rank == 4 else 3  # (A, B, 1, S) or (A, B, S)
    if spec.options.tables == "computed":
        return _gathered(spec, b, computed_rows(spec, b, index), index_rank, portable=True)
    if not consecutive(spec):
        return _gathered(spec, b, constant_rows(spec, b, index), index_rank, portable=True)
    cos, sin = host_tables(spec, spec.compute_dtype)
    np.negative(sin, out=sin)
    clipped = b.op("Clip", [index, b.scalar(-1, "below"), b.scalar(spec.options.rows, "beyond")])
    return _concatenated(spec, b, ((cos, cos), (sin, -sin)), clipped, portable=True)


def per_token(spec: Spec, b: Builder, ids: str) -> tuple[str, str]:
    """cos and sin ``(batch, seq, rotary_dim / 2)`` in the dtype of ``x`` at the M-RoPE ids ``(axes, batch, seq)``:
    the per-token caches of the fused ops."""
    if spec.options.tables == "computed":
        return _gathered(spec, b, computed_cos_sin(spec, b, ids), 3, portable=False)
    cos, sin = host_tables(spec, np_dtype(spec.options.dtype))
    clipped = b.op("Clip", [ids, b.scalar(-1, "below"), b.scalar(spec.options.rows, "beyond")])  # -1: the NaN row
    if consecutive(spec):
        return _concatenated(spec, b, ((cos, cos), (sin, sin)), clipped, portable=False)
    caches = b.const(cos, "cos_cache"), b.const(sin, "sin_cache")
    rows = b.op("Gather", [caches[0], clipped], axis=0), b.op("Gather", [caches[1], clipped], axis=0)
    return _gathered(spec, b, rows, 3, portable=False)
