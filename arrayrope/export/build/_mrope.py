"""M-RoPE in the graph: cos/sin of each rotary pair at the position of the axis that turns it.

Position ids have shape ``(axes, batch, seq)``; pair ``k`` is turned by axis ``axis_of[k]``, as
:func:`arrayrope.mrope_tables` assigns them (consecutive sections, or Qwen3-VL's interleaving).
Each axis has tables of its own pairs only (stored: rows of the core's float64 tables, together
one table's size; computed: digit tables, composed as :mod:`._tables` composes them), read at
that axis's ids. The pieces are concatenated along the pairs, and for interleaved sections put
back in pair order by one ``GatherElements`` along the last axis. Every pair's value is computed
once, as for a plain token, and the selection moves values without arithmetic: text ids (equal on
every axis) give the plain graph's rotation bit for bit, and an id outside the table on one axis
gives NaN in the pairs that axis turns, and only there.

Selecting the ``(2048, 128)`` float32 rows of 3 axes from stored tables on ONNX Runtime CPU (one
thread) took 0.13 ms by concatenation (consecutive sections) and 0.27 ms with the reordering
(interleaved), where reading every axis's full rows and choosing took 0.36 ms by
``GatherElements`` on the axes, 0.8 ms by a chain of ``Where``, 0.2 ms by summing tables zeroed
outside their axis's pairs (``axes`` times the tables), and 2.2 ms by a feature-axis ``Gather``.
With computed tables, per-axis digit tables compute each pair once instead of at every axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from ._builder import Builder
from ._spec import Spec, np_dtype, onnx_dtype
from ._tables import clip_positions, composed, five_d, host_tables

Form: TypeAlias = Callable[[npt.NDArray[Any], npt.NDArray[Any]], npt.NDArray[Any]]
"""Makes a table of pairs from the first and second partners' values."""


def _axes_used(spec: Spec) -> list[int]:
    axis_of = spec.mrope_axis_of()
    return [a for a in range(spec.mrope_axes or 0) if (axis_of == a).any()]


def _form(spec: Spec, *, portable: bool) -> Form:
    """``(first, second)`` partners' values ``(rows, n)`` of ``n`` pairs -> the table that pieces of pairs are
    concatenated from along its last axis: the fused caches' ``(rows, n)``; the portable half-split form
    ``(rows, 2, n)`` (the ``(2, r/2)`` view of ``[cos, cos]``), interleaved ``(rows, 2 n)``; rank 3 with an axis
    of 1 for the heads before the features."""

    def form(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if not portable:
            return first
        if spec.options.layout == "half":
            table = np.stack([first, second], axis=1)
        else:
            table = np.stack([first, second], axis=-1).reshape(first.shape[0], -1)
        return table[:, None] if spec.options.rank == 3 else table

    return form


def _order(spec: Spec, *, portable: bool) -> npt.NDArray[np.int64] | None:
    """Where each feature of the last axes is in the concatenated pieces (the index of a ``GatherElements``
    along the last axis, to broadcast); None when they are in order."""
    axis_of = spec.mrope_axis_of()
    grouped = np.concatenate([np.flatnonzero(axis_of == a) for a in _axes_used(spec)])
    if np.array_equal(grouped, np.arange(len(axis_of))):
        return None
    where = np.argsort(grouped).astype(np.int64)  # pair k is at where[k]
    if not portable:
        return where
    if spec.options.layout == "half":  # (2, r/2): the same order in both halves
        return np.stack([where, where])
    return (2 * where[:, None] + np.arange(2)).reshape(-1)  # features 2k, 2k + 1


def _assembled(spec: Spec, b: Builder, pieces: list[tuple[str, str]], *, portable: bool) -> tuple[str, str]:
    """The pieces of every axis concatenated, in pair order, in the form the emitter reads."""
    tables = [b.op("Concat", [piece[kind] for piece in pieces], axis=-1) for kind in (0, 1)]
    order = _order(spec, portable=portable)
    if order is not None:  # Expand broadcasts the order to the pieces' shape
        index = b.op("Expand", [b.const(order, "pair_order"), b.op("Shape", [tables[0]])])
        tables = [b.op("GatherElements", [t, index], axis=-1) for t in tables]
    if portable and spec.options.layout == "half" and not five_d(spec):  # (..., 2, r/2) -> (..., r)
        # -1 for the features: TorchScript's exporter fails shape inference of a Reshape copying dims (0) without one
        shape = b.ints([0, 0, 0, -1], "features")
        tables = [b.op("Reshape", [t, shape]) for t in tables]
    return tables[0], tables[1]


def _stored(spec: Spec, b: Builder, index: str, *, portable: bool) -> tuple[str, str]:
    """Each axis's rows of its pairs, by its ids (outside the table: the NaN row, which ``Gather`` reads at -1)."""
    axis_of = spec.mrope_axis_of()
    form = _form(spec, portable=portable)
    cos, sin = host_tables(spec, spec.compute_dtype if portable else np_dtype(spec.options.dtype))
    first_sin = -sin if portable else sin  # the portable form folds the sign into sin: [-sin, sin]
    clipped = b.op("Clip", [index, b.scalar(-1, "below"), b.scalar(spec.options.rows, "beyond")])
    pieces = []
    for a in _axes_used(spec):
        ids = b.op("Gather", [clipped, b.scalar(a, f"axis{a}")], axis=0)
        cols = axis_of == a
        c = b.const(form(cos[:, cols], cos[:, cols]), f"cos_table_axis{a}")
        s = b.const(form(first_sin[:, cols], sin[:, cols]), f"sin_table_axis{a}")
        pieces.append((b.op("Gather", [c, ids], axis=0), b.op("Gather", [s, ids], axis=0)))
    return _assembled(spec, b, pieces, portable=portable)


def _computed(spec: Spec, b: Builder, index: str, *, portable: bool) -> tuple[str, str]:
    """Each axis's cos/sin of its pairs, composed from digit tables of those pairs (see :mod:`._tables`)."""
    axis_of = spec.mrope_axis_of()
    form = _form(spec, portable=portable)
    dtype = spec.compute_dtype if portable else np.float32
    pieces = []
    for a in _axes_used(spec):
        cols = axis_of == a
        clipped = clip_positions(b, b.op("Gather", [index, b.scalar(a, f"axis{a}")], axis=0))

        def table(values: npt.NDArray[Any], hint: str, cols: npt.NDArray[np.bool_] = cols, a: int = a) -> str:
            return b.const(form(values[:, cols], values[:, cols]).astype(dtype), f"{hint}_axis{a}")

        cos, sin = composed(spec, b, clipped, table)
        sign = b.op("Sign", [clipped])
        if portable:  # the layout's sign of sin and the direction of the position: rows for sign(p) + 1
            ones = np.ones((1, int(cols.sum())))
            layout_sign = form(-ones, ones)[0]
            signs = b.const(np.stack([-layout_sign, layout_sign, layout_sign]).astype(dtype), "signs")
            sin = b.op("Mul", [sin, b.op("Gather", [signs, b.op("Add", [sign, b.scalar(1, "one")])], axis=0)])
        else:
            sign = b.op("Unsqueeze", [b.op("Cast", [sign], to=onnx_dtype("float32")), b.ints([-1], "last_axis")])
            sin = b.op("Mul", [sin, sign])
        pieces.append((cos, sin))
    cos, sin = _assembled(spec, b, pieces, portable=portable)
    if not portable and spec.options.dtype != "float32":
        cos, sin = (b.op("Cast", [t], to=onnx_dtype(spec.options.dtype)) for t in (cos, sin))
    return cos, sin


def portable_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S of the portable form (see :mod:`._tables`) at the M-RoPE ids ``index`` ``(axes, ...)``."""
    make = _computed if spec.options.tables == "computed" else _stored
    return make(spec, b, index, portable=True)


def per_token(spec: Spec, b: Builder, ids: str) -> tuple[str, str]:
    """cos and sin ``(batch, seq, rotary_dim / 2)`` in the dtype of ``x`` at the M-RoPE ids ``(axes, batch, seq)``:
    the per-token caches of the fused ops."""
    make = _computed if spec.options.tables == "computed" else _stored
    return make(spec, b, ids, portable=False)
